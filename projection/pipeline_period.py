"""The periodic middle of the pipeline schedules' orders and the exact test that finish times repeat.

Both steady-state shortcuts read these: the cold one-pass simulation (`projection.pipeline_direct`) and the
compiled-plan shortcut of a shape seen before (`projection.pipeline_steady`).  The argument that makes a
repetition extrapolate exactly is in pipeline_steady.py; here are its pieces: where the periods are
(`periodic_shape`), whether finish times repeat (`repetition`, `transient`) and how many periods the argument
needs (`room`, `needed_periods`): both shortcuts accept a repetition by the same test, `needed_periods` <= the
periods simulated.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

PeriodicShape = tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]

# Upper bounds of (lag, head_reach, tail_reach) of `pipeline_steady._reach` (read off the op graph) for the
# schedules the one-pass simulation extrapolates; larger values only ask for more periods (`needed_periods`
# grows with each), so bounds are safe.  tests/projection/test_pipeline_cold.py checks them on every shape
# with pp <= 12, m < 60 (all group sizes up to 3pp) and on deep pipelines.
REACH_BOUNDS: dict[str, tuple[int, int, int]] = {"1f1b": (1, 0, -1), "interleaved": (1, 0, 0)}


def periodic_shape(schedule: str, pp: int, vpp: int, m: int, group: int) -> PeriodicShape | None:
    """Return (shift, heads, lengths, counts) of the periodic middle of every rank's order, or None.

    shift: microbatches per period; heads[r]: ops of rank r before its first period;
    lengths[r]: ops per period; counts[r]: periods (all grow by 1 when m grows by shift).
    See `_rank_arrays` (projection/pipeline_plan.py) for the orders these read off.
    """
    if schedule == "1f1b" and m >= pp:
        # warm-up pp-r-1 F, then (F, B+W) pairs for m-(pp-r-1) microbatches, then the cool-down
        return (1, tuple(pp - r - 1 for r in range(pp)), (2,) * pp, tuple(m - (pp - r - 1) for r in range(pp)))
    if schedule == "zero-bubble" and m >= pp:
        # warm-up pp-r-1 F and r (F, B) pairs, then (F, B, W) for m-pp+1 microbatches, then (B, W) and W
        return (1, tuple(pp - r - 1 + 2 * r for r in range(pp)), (3,) * pp, (m - pp + 1,) * pp)
    if schedule == "interleaved":
        # warm-up w_r forwards, then steps of (F, B+W); a period is one full microbatch group
        # (group*vpp table entries) of the F stream; the last full group and the remainder are tail
        per = group * vpp
        full = (m // group) * per
        heads = tuple((pp - r - 1) * 2 + (vpp - 1) * group for r in range(pp))
        counts = tuple((full - w) // per if full >= w else 0 for w in heads)
        if min(counts) < 1:
            return None
        return (group, heads, (2 * per,) * pp, counts)
    return None


def repetition(sequences: Sequence[Sequence[int]], lengths: Sequence[int], cycles: Sequence[int],
               span: int = 3) -> tuple[int, int, int] | None:
    """Return (c, D, t): from period t on, every op finishes D after its twin c periods before; or None.

    sequences[r]: the finish times (exact integers) of rank r's periodic ops, lengths[r] ops per period,
    every rank the same number of periods.  The same D on every rank and slot; among the cycles c that
    repeat over the last span - 1 cycles, the one with the shortest transient t + c wins.
    """
    shortest = min(len(seq) // length for seq, length in zip(sequences, lengths, strict=True))
    best: tuple[int, int, int] | None = None
    for c in cycles:
        if span * c > shortest or (best is not None and c >= best[0] + best[2]):
            break    # a longer cycle cannot have a shorter t + c
        D = sequences[0][-1] - sequences[0][-1 - c * lengths[0]]
        # cheap test first: the last span - 1 cycles of every rank repeat with D
        if not all(all(map(D.__eq__, map(operator.sub, seq[-(span - 1) * c * length:],
                                          seq[-span * c * length:-c * length])))
                   for seq, length in zip(sequences, lengths, strict=True)):
            continue
        t = transient(sequences, lengths, c, D)
        if best is None or t + c < best[2] + best[0]:
            best = (c, D, t)
    return best


def transient(sequences: Sequence[Sequence[int]], lengths: Sequence[int], c: int, D: int) -> int:
    """The first period t from which every op, to the end of its rank's periods, finishes D after its twin c
    periods before (``sequences`` and ``lengths`` as for `repetition`); the number of periods when none does."""
    t = 0
    for seq, length in zip(sequences, lengths, strict=True):
        step = c * length
        unequal = list(map(D.__ne__, map(operator.sub, seq[step:], seq)))   # unequal[k]: op k + step vs op k
        if True in unequal:
            last_bad = len(unequal) - 1 - unequal[::-1].index(True)
            t = max(t, -(-(last_bad + 1) // length))   # first period whose ops all repeat, to the end
    return t


def room(lag: int, tail_reach: int, c: int) -> int:
    """Periods from the transient's end to the shortest rank's end that the argument needs.

    The small step is the long one with K*c periods fewer; its ops compute the same values as the
    long step's as far as their inputs are the same (inserting periods at a = t + lag changes
    no input of an op before a + c, and by the repetition, from a - lag on, none after it either
    but for the shift). That needs the repetition from a - lag, and a + c + lag before the last
    periods whose ops read tail ops.
    """
    return 2 * lag + c + max(0, tail_reach + 1) + 2


def needed_periods(reach: tuple[int, int, int], c: int, t: int) -> int:
    """Periods a step must have for a repetition (c, t) to extrapolate: the transient, at least past the
    periods whose ops read head ops (boundary, not pattern), plus the `room` the argument needs."""
    lag, head_reach, tail_reach = reach
    return max(t, head_reach + 1) + room(lag, tail_reach, c)
