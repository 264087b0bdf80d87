"""Modules loaded for good: the cyclic garbage collector pauses while they load, and what they built is frozen.

The objects a module builds when it loads (functions, classes, pydantic schemas, catalogs) live as long
as the process.  Loading the tuning agent's stack (LangGraph, LangChain, LangSmith: ~130,000 objects)
with the collector on runs full collections that scan that heap again and again, and every later full
collection (the search's, the one at exit) scans it once more: about 1 CPU-s of an offline
``projtune tune`` went to the collector (issue 31, ``gc.callbacks`` timings).

:func:`loading_modules` pauses the collector for a block of imports; when the block loaded new modules
it moves every object alive then to the collector's permanent generation (:func:`gc.freeze`), where no
collection scans it again (objects are still freed when their last reference goes).  A block that loads
nothing new (a second tune in one process) freezes nothing, so a long-running process does not freeze
each run's leftovers.  Nested blocks act once, at the outermost.

:func:`collect_rarely` sets the collector's thresholds for one command of the console script: a young
collection after :data:`YOUNG_COLLECTION_ALLOCATIONS` net allocations of container objects instead of
CPython's 700.  Nearly everything a command allocates is freed by reference counting (configs,
projections, arrays); the cyclic collector only finds cycles, which a command makes few of, so scanning the
young objects every 700 allocations is spent for nothing: an offline ``projtune tune`` ran 726 collections
(0.39 CPU-s, 7% of the command) with the default thresholds, 2 (0.07 CPU-s) with these, at the same peak RSS
(242 MiB; ``gc.callbacks`` timings, issue 31).  Cyclic garbage waits for at most that many allocations.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_depth = 0
_frozen = False       # whether freeze_heap has frozen the heap (gc.get_freeze_count walks every frozen object)
YOUNG_COLLECTION_ALLOCATIONS = 100_000
"""Net container allocations between young collections in a command (CPython's default: 700)."""
OLDER_COLLECTION_EVERY = 10
"""Collections of one generation between collections of the next older one (CPython's default: 10)."""


def collect_rarely() -> None:
    """Collector thresholds for one command of the console script (see the module docstring)."""
    gc.set_threshold(YOUNG_COLLECTION_ALLOCATIONS, OLDER_COLLECTION_EVERY, OLDER_COLLECTION_EVERY)


@contextmanager
def collecting_rarely() -> Iterator[None]:
    """Run a block with :func:`collect_rarely`'s thresholds (where the process collects more often), then restore the
    process's own: for a call that allocates millions of short-lived containers freed by reference counts (a search
    of a million layouts: its default-threshold collections took ~1.1 of its ~8.5 CPU-s, 8 of them full collections
    of the whole heap; ``gc.callbacks`` timings, issue 31)."""
    before = gc.get_threshold()
    if before[0] >= YOUNG_COLLECTION_ALLOCATIONS or not before[0]:
        yield
        return
    collect_rarely()
    try:
        yield
    finally:
        gc.set_threshold(*before)


def heap_frozen() -> bool:
    """Whether :func:`freeze_heap` (:func:`loading_modules`) has frozen the heap in this process (O(1):
    ``gc.get_freeze_count`` counts the permanent generation object by object, 26-45 ms after a tune's imports)."""
    return _frozen


def freeze_heap() -> None:
    """Move every object alive now to the collector's permanent generation (:func:`gc.freeze`), and remember that
    the heap is frozen (:func:`heap_frozen`: a search then leaves it frozen)."""
    global _frozen
    gc.freeze()
    _frozen = True


@contextmanager
def loading_modules() -> Iterator[None]:
    """Run a block of imports with the collector paused; freeze the heap after it if it loaded modules."""
    global _depth
    if _depth:
        yield
        return
    was_enabled = gc.isenabled()
    loaded = len(sys.modules)
    _depth += 1
    gc.disable()
    try:
        yield
    finally:
        _depth -= 1
        if len(sys.modules) > loaded:
            freeze_heap()
        if was_enabled:
            gc.enable()
