"""One switch for the exact fast paths of the engine and the search (benchmarks turn them off to compare).

The fast paths give results identical to the paths they shortcut (tests/projection/test_pipeline_steady.py,
tests/tools/test_search_core_vector.py); the switch exists so that a benchmark can time both in one run:

    with fast_paths.disabled():
        ...  # the full pipeline simulation, no result memo, the scalar pruning bound

Covered: :func:`projection.pipeline.simulate_pipeline` (steady-state extrapolation, its result memo, and
the one-pass simulation of a shape's first run, with its own steady-state shortcut) and :mod:`tools.search_core`
(the vectorised throughput bound and the batch memory screen of :mod:`projection.memory_batch`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_state = {"enabled": True}


def enabled() -> bool:
    """Whether the exact fast paths are on (the default)."""
    return _state["enabled"]


@contextmanager
def disabled() -> Iterator[None]:
    """Turn the fast paths off inside a ``with`` block (not thread-safe: benchmarks and tests only)."""
    before = _state["enabled"]
    _state["enabled"] = False
    try:
        yield
    finally:
        _state["enabled"] = before
