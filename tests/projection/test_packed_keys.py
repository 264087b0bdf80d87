"""packed_ids numbers distinct keys as np.unique over the stacked key parts does (first rows, key ids, order), on
both of its paths: the table over a small packed span and the sort over a wide one."""

from __future__ import annotations

import numpy as np
import pytest

from projection import packed_keys
from projection.packed_keys import packed_ids


def _reference(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    _, first, inverse = np.unique(np.stack(parts, axis=1), axis=0, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


@pytest.mark.parametrize("high", [3, 40, 5000])
@pytest.mark.parametrize("dense", [True, False])
def test_packed_ids_match_unique(high: int, dense: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not dense:      # force the sort path
        monkeypatch.setattr(packed_keys, "_DENSE_MIN_SPAN", 0)
        monkeypatch.setattr(packed_keys, "_DENSE_PER_ROW", 0)
    rng = np.random.default_rng(7)
    parts = [rng.integers(-2, high, 2000).astype(np.int32), rng.integers(0, 5, 2000).astype(np.int32),
             rng.integers(1, high, 2000).astype(np.int64)]
    first, inverse = packed_ids(parts)
    ref_first, ref_inverse = _reference(parts)
    assert first.tolist() == ref_first.tolist()
    assert inverse.tolist() == ref_inverse.tolist()


def test_packed_ids_empty_and_overflow() -> None:
    first, inverse = packed_ids([np.zeros(0, dtype=np.int32)])
    assert len(first) == 0 and len(inverse) == 0
    wide = np.array([0, 2**40], dtype=np.int64)
    with pytest.raises(OverflowError, match="64 bits"):
        packed_ids([wide, wide], ["a", "b"])
