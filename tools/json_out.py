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
