"""Progress events from inside the graph to whoever runs it (the CLI's status line), without threads.

Nodes run policies inside :func:`reporting`; anything below (a policy's layout search, the
evaluate loop) calls :func:`emit`.  With no reporter set, :func:`emit` does nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

Reporter = Callable[[str, dict[str, Any]], None]
_current: ContextVar[Reporter | None] = ContextVar("projtune_agent_reporter", default=None)


def emit(event: str, **data: Any) -> None:
    """Send one progress event (e.g. ``emit("search", done=10, total=300)``) to the current reporter."""
    reporter = _current.get()
    if reporter is not None:
        reporter(event, data)


@contextmanager
def reporting(reporter: Reporter | None) -> Iterator[None]:
    """Make ``reporter`` receive :func:`emit` events inside the ``with`` block."""
    token = _current.set(reporter)
    try:
        yield
    finally:
        _current.reset(token)
