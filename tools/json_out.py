"""Strict JSON for every ``--json`` output, MCP result and JSONL log: never ``NaN`` or ``Infinity`` (not JSON).

A non-finite float (an undefined ratio, say a MAPE over no runs) is written as ``null``, the
JSON value for "no number"; the producers reject non-finite inputs, so this is the last guard.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every NaN/infinite float replaced by None (dicts, lists and tuples walked)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def json_text(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` that never writes NaN/Infinity (``allow_nan=False`` after :func:`finite`)."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)


def non_finite_paths(value: Any) -> list[str]:
    """Paths (``.key[0]...``) of the NaN/infinite floats inside ``value`` (iterative: deep values are fine)."""
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


def strict_loads(text: str) -> Any:
    """Parse JSON, refusing ``NaN`` and ``Infinity`` (which ``json.loads`` accepts by default)."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)
