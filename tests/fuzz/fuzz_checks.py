"""Shared checks of the fuzz suite: a per-example time bound, non-finite values, strict JSON."""

from __future__ import annotations

import json
import math
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

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


def non_finite(value: Any) -> list[str]:
    """Paths of NaN/infinite floats inside ``value``."""
    found, stack = [], [(value, "")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            found.append(where or "value")
        elif isinstance(item, dict):
            stack.extend((v, f"{where}.{k}") for k, v in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
    return found


def strict_json(text: str) -> Any:
    """Parse JSON, refusing NaN and Infinity."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)
