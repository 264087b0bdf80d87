"""Distinct keys of integer columns: the first row of each distinct key and every row's key id, in O(rows).

One implementation, read by the batch memory screen (:mod:`projection.memory_batch`) and the search
(:mod:`tools.candidate_columns`, :mod:`tools.search_core`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_DENSE_MIN_SPAN = 1 << 16   # packed key spans up to max(this, _DENSE_PER_ROW * rows) are counted in a table
_DENSE_PER_ROW = 8          # (a bool and an int64 per packed value: at most ~72 bytes a row), wider ones sorted


def packed_ids(values: Sequence[np.ndarray], names: Sequence[str] = ()) -> tuple[np.ndarray, np.ndarray]:
    """(position of the first row of each distinct key, key id of every row) of equally long integer arrays, one per
    key part (``names``: theirs, for the error); distinct keys in ascending packed order (lexicographic over the
    parts, the first part most significant): what ``np.unique(..., return_index=True, return_inverse=True)`` of
    the stacked parts gives.  The parts are packed into one int64 (mixed radix); where its span is small, the
    distinct values are marked in a table and numbered by a running count (no sort)."""
    count = len(values[0]) if len(values) else 0
    key = np.zeros(count, dtype=np.int64)
    span = 1
    for col in values:
        if not count:
            break
        low, high = int(col.min()), int(col.max())
        radix = high - low + 1
        span *= radix
        if span >= 2**62:
            raise OverflowError(f"packed key of {list(names)} does not fit in 64 bits")
        key = key * radix + (col - low)
    if not count or span > max(_DENSE_MIN_SPAN, _DENSE_PER_ROW * count):
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        return first, inverse.reshape(-1)
    seen = np.zeros(span, dtype=bool)
    seen[key] = True
    slot = np.cumsum(seen, dtype=np.int64) - 1      # a packed value's key id: distinct values below it
    inverse = slot[key]
    first = np.full(int(slot[-1]) + 1, count, dtype=np.int64)
    np.minimum.at(first, inverse, np.arange(count, dtype=np.int64))
    return first, inverse
