"""The schedules' per-rank op orders (`pipeline_plan._rank_arrays`, the one production form): small orders pinned
op for op (read off Megatron-LM's schedules.py and the ZB-H1 paper), and the rules of its docstring checked on
every small shape.  The simulator's tests (test_pipeline.py: bubbles and peaks against closed forms) check the
orders' timing on top of this."""

from __future__ import annotations

import pytest

from projection.pipeline import _validate_shape
from projection.pipeline_plan import _B, _BW, _F, _W, _rank_arrays

# op: kind letter (F, B, W, X = B+W) + microbatch (+ "." chunk when vpp > 1)
PINNED = {
    ("1f1b", 3, 1, 5, 3): (
        "F0 F1 F2 X0 F3 X1 F4 X2 X3 X4",
        "F0 F1 X0 F2 X1 F3 X2 F4 X3 X4",
        "F0 X0 F1 X1 F2 X2 F3 X3 F4 X4",
    ),
    ("zero-bubble", 3, 1, 5, 3): (
        "F0 F1 F2 B0 W0 F3 B1 W1 F4 B2 W2 B3 W3 B4 W4",
        "F0 F1 B0 F2 B1 W0 F3 B2 W1 F4 B3 W2 B4 W3 W4",
        "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 F4 B4 W2 W3 W4",
    ),
    ("gpipe", 2, 1, 3, 2): (
        "F0 F1 F2 X0 X1 X2",
        "F0 F1 F2 X0 X1 X2",
    ),
    ("interleaved", 2, 2, 4, 2): (
        "F0.0 F1.0 F0.1 F1.1 F2.0 X0.1 F3.0 X1.1 F2.1 X0.0 F3.1 X1.0 X2.1 X3.1 X2.0 X3.0",
        "F0.0 F1.0 F0.1 X0.1 F1.1 X1.1 F2.0 X0.0 F3.0 X1.0 F2.1 X2.1 F3.1 X3.1 X2.0 X3.0",
    ),
    ("interleaved", 2, 3, 5, 3): (   # a last group of 2 (m % group, >= pp)
        "F0.0 F1.0 F2.0 F0.1 F1.1 F2.1 F0.2 F1.2 F2.2 X0.2 F3.0 X1.2 F4.0 X2.2 F3.1 X0.1 F4.1 X1.1 F3.2 X2.1 "
        "F4.2 X0.0 X1.0 X2.0 X3.2 X4.2 X3.1 X4.1 X3.0 X4.0",
        "F0.0 F1.0 F2.0 F0.1 F1.1 F2.1 F0.2 X0.2 F1.2 X1.2 F2.2 X2.2 F3.0 X0.1 F4.0 X1.1 F3.1 X2.1 F4.1 X0.0 "
        "F3.2 X1.0 F4.2 X2.0 X3.2 X4.2 X3.1 X4.1 X3.0 X4.0",
    ),
}
LETTER = {_F: "F", _B: "B", _W: "W", _BW: "X"}


def _text(schedule: str, pp: int, vpp: int, m: int, group: int) -> tuple[str, ...]:
    return tuple(" ".join(f"{LETTER[k]}{mb}" + (f".{c}" if vpp > 1 else "") for k, mb, c in rank)
                 for rank in _rank_arrays(schedule, pp, vpp, m, group).tolist())  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", list(PINNED))
def test_pinned_orders(shape: tuple[str, int, int, int, int]) -> None:
    assert _text(*shape) == PINNED[shape]


def _table(vpp: int, m: int, group: int) -> list[tuple[int, int]]:
    """Megatron's forward table: microbatches in groups of ``group``, each group through chunk 0 .. vpp-1."""
    return [(mb, c) for first in range(0, m, group) for c in range(vpp) for mb in range(first, min(first + group, m))]


def _shapes() -> list[tuple[str, int, int, int, int]]:
    shapes = []
    for schedule in ("1f1b", "zero-bubble", "gpipe", "interleaved"):
        for pp in (1, 2, 3, 5, 8):
            for m in range(1, 26):
                for vpp in (2, 3, 4) if schedule == "interleaved" else (1,):
                    for group in range(pp, m + 1) if schedule == "interleaved" else (pp,):
                        try:
                            _validate_shape(schedule, pp, vpp, m, None if schedule != "interleaved" else group)
                        except ValueError:
                            continue
                        shapes.append((schedule, pp, vpp, m, group))
    return shapes


def test_orders_follow_their_rules_on_every_small_shape() -> None:
    shapes = _shapes()
    assert len(shapes) > 1000
    for schedule, pp, vpp, m, group in shapes:
        for r, rank in enumerate(_rank_arrays(schedule, pp, vpp, m, group).tolist()):  # type: ignore[arg-type]
            ops = [tuple(op) for op in rank]
            forwards = [(mb, c) for k, mb, c in ops if k == _F]
            backs = [(mb, c) for k, mb, c in ops if k in (_B, _BW)]
            weights = [(mb, c) for k, mb, c in ops if k == _W]
            where = {op: i for i, op in enumerate(ops)}
            assert len(where) == len(ops), (schedule, pp, vpp, m, group, r)            # each op once
            table = _table(vpp, m, group) if schedule == "interleaved" else [(mb, 0) for mb in range(m)]
            assert forwards == table                                                    # forwards in table order
            if schedule == "gpipe":
                assert ops[:m] == [(_F, mb, 0) for mb in range(m)] and backs == table
                continue
            assert backs == [(mb, vpp - 1 - c) for mb, c in table]                      # k-th back: entry k reversed
            warmup = min((pp - r - 1) * 2 + (vpp - 1) * group if schedule == "interleaved" else pp - r - 1,
                         len(table))
            kinds = [k for k, _, _ in ops if k != _W]
            # warm-up forwards, then F and B alternating while forwards remain, then the cool-down backwards
            steady = len(table) - warmup
            back = _B if schedule == "zero-bubble" else _BW
            assert kinds == [_F] * warmup + [_F, back] * steady + [back] * warmup
            if schedule == "zero-bubble":
                assert weights == [(mb, 0) for mb in range(m)]
                for mb in range(m - r):                  # W(mb) right after B(mb + r); the last r W at the end
                    assert where[(_W, mb, 0)] == where[(_B, mb + r, 0)] + 1
                assert [op for op in ops[len(ops) - min(r, m):]] == [(_W, mb, 0) for mb in range(max(0, m - r), m)]
            else:
                assert not weights
