"""Shared checks of the fuzz suite: a per-example time bound, non-finite values, strict JSON."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tools.json_out import non_finite_paths, strict_loads

EXAMPLE_LIMIT_S = 10.0


class Hang(BaseException):
    """One example ran past its time bound (a BaseException, so no broad ``except Exception`` hides it)."""


@contextmanager
def bounded(seconds: float = EXAMPLE_LIMIT_S) -> Iterator[None]:
    """Fail the example with :class:`Hang` if the block runs longer than ``seconds`` (SIGALRM, main thread)."""

    def stop(_signum: int, _frame: Any) -> None:
        raise Hang(f"example ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


non_finite = non_finite_paths       # tools/json_out.py: one definition for the tests, the fuzz script and the CLI
strict_json = strict_loads
