"""One-pass pipeline simulation of a shape's first run (a cold projection), with its own steady-state shortcut.

`simulate_direct` times each op as the drain of `pipeline_plan._compile_plan` places it (the max-plus
recurrence of `_run_plan` on the same exact integers), without building a plan: cheaper for a shape seen
once; a shape seen again compiles its plan, which later runs reuse (`pipeline_steady._simulate`).  Same
results as the compiled plan (tests/projection/test_pipeline_direct.py).

1f1b and interleaved run as one generator per rank and take a steady-state shortcut that costs no more
than the plain pass: the step itself is simulated in rounds (every rank stops at a horizon period), and at
each pause the finish times so far are tested for a repetition (`pipeline_period.repetition`: every op D
after its twin c periods before).  Once one holds over two cycles and a step K*c periods shorter still
has the periods the extrapolation argument needs (`pipeline_period.needed_periods`, argument in
pipeline_steady.py), the ranks finish that shorter step instead (its orders are the long step's up to
where every rank stands), and the makespan is its own plus K*D.  The finished shorter step is then checked
as the compiled-plan shortcut checks its small step (repetition from t to the end of its periodic middle,
with the room); should that fail, the long step runs again without the shortcut.  A step without such a
repetition runs to its end with a few pauses: the shortcut never simulates an op the plain pass would
not, and it pays only the tests at the pauses (at 8 periods, then every 1.5 times as many).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter

import numpy as np

from projection.pipeline_period import REACH_BOUNDS, needed_periods, periodic_shape, room
from projection.pipeline_plan import _BW, _F, _NUM_KINDS, Schedule, _one_f_one_b_table, _op_keys, _peaks_arrays

_PAUSE = -1                 # what a rank yields at the horizon (done keys are >= 0)
_NO_HORIZON = 1 << 62
_FIRST_CHECK = 8            # periods simulated before the first repetition test
_GROWTH = 1.5               # each further test after this many times the periods of the last one
_WINDOW = 8                 # periods a cycle must repeat over (at least one cycle) before the shortcut is taken


class _Step:
    """The forward table of the step being simulated, per rank its op times; the shortcut swaps in a shorter
    step's at a pause (every rank's generator reads it again after each pause)."""

    __slots__ = ("keys_b", "keys_f", "times_b", "times_f", "total")

    def __init__(self, schedule: Schedule, pp: int, vpp: int, m: int, group: int, durations: list[int]) -> None:
        """Done keys (mb*(pp*vpp + 2) + vs + 1)*3 + slot (F 0, B+W 1) of each table entry on rank 0 (rank r:
        + 3r), and each rank's F and B+W times per entry."""
        table_mb, table_c, total, _ = _one_f_one_b_table(schedule, pp, vpp, m, group)
        back_c = vpp - 1 - table_c
        stride = pp * vpp + 2
        self.total = total
        self.keys_f = ((table_mb * stride + table_c * pp + 1) * 3).tolist()
        self.keys_b = ((table_mb * stride + back_c * pp + 1) * 3 + 1).tolist()
        pick_f, pick_b = _picker(table_c.tolist()), _picker(back_c.tolist())   # a rank's chunk times -> per entry
        rows = [durations[r * vpp * _NUM_KINDS:(r + 1) * vpp * _NUM_KINDS] for r in range(pp)]
        self.times_f = [pick_f(row[_F::_NUM_KINDS]) for row in rows]
        self.times_b = [pick_b(row[_BW::_NUM_KINDS]) for row in rows]


def _one_f_one_b_rank(done: list[int | None], step: _Step, r: int, warmup: int, p2p: int, fins: list[int],
                      horizon: list[int]) -> Iterator[int]:
    """Run rank r of 1f1b / interleaved: its warm-up forwards, then F and B+W pairs, then the cool-down B+W.

    Yields the done key it waits for whenever its next input is not done (and resumes when it is), and
    `_PAUSE` when its F and B+W pairs reach ``horizon[0]``; appends each op's end to ``fins``.  Keys (see
    `_Step`): its F of table entry e is ``keys_f[e] + 3r`` and reads the key 3 below, its B+W
    ``keys_b[e] + 3r`` and reads the key 3 above.
    """
    t = 0
    off = 3 * r
    record = fins.append
    keys_f, times_f = step.keys_f, step.times_f[r]
    for e in range(warmup):
        key = keys_f[e] + off
        f = done[key - 3]
        while f is None:
            yield key - 3
            f = done[key - 3]
        t = (t if t > f else f) + times_f[e]
        done[key] = t + p2p
        record(t)
    pairs = 0                                   # F and B+W pairs run so far
    while True:
        keys_f, keys_b, times_f, times_b = step.keys_f, step.keys_b, step.times_f[r], step.times_b[r]
        last = step.total - warmup
        stop = min(last, horizon[0])
        for e in range(pairs, stop):
            key = keys_f[warmup + e] + off
            f = done[key - 3]
            while f is None:
                yield key - 3
                f = done[key - 3]
            t = (t if t > f else f) + times_f[warmup + e]
            done[key] = t + p2p
            record(t)
            key = keys_b[e] + off
            f = done[key + 3]
            while f is None:
                yield key + 3
                f = done[key + 3]
            t = (t if t > f else f) + times_b[e]
            done[key] = t + p2p
            record(t)
        pairs = max(pairs, stop)
        if pairs >= last:
            break
        yield _PAUSE
    for e in range(step.total - warmup, step.total):
        key = keys_b[e] + off
        f = done[key + 3]
        while f is None:
            yield key + 3
            f = done[key + 3]
        t = (t if t > f else f) + times_b[e]
        done[key] = t + p2p
        record(t)


def _picker(indices: list[int]) -> Callable[[Sequence[int]], tuple[int, ...]]:
    """``seq -> tuple(seq[i] for i in indices)``, in C (itemgetter returns a bare item for one index)."""
    if len(indices) == 1:
        only = indices[0]
        return lambda seq: (seq[only],)
    return itemgetter(*indices)


def _recent_cycle(fins: list[list[int]], ends: list[int], lengths: Sequence[int], periods: int
                  ) -> tuple[int, int] | None:
    """(c, D) of the shortest cycle c over which the last max(c, 8) periods seen repeat, on every rank, the
    periods c before them plus D; or None.  ``fins[r][:ends[r]]``: rank r's finish times up to the end of its
    last whole period seen.  Cheap filters first: the last op of the first and last rank and the op half a
    period before the first's, then the last op of every rank."""
    first, last = fins[0], fins[-1]
    end0, end1, half = ends[0] - 1, ends[-1] - 1, lengths[0] // 2
    for c in range(1, periods // 2 + 1):
        window = max(c, _WINDOW)
        if c + window > periods:
            break
        back0, back1 = end0 - c * lengths[0], end1 - c * lengths[-1]
        D = first[end0] - first[back0]
        if last[end1] - last[back1] != D or first[end0 - half] - first[back0 - half] != D:
            continue
        if not all(fin[end - 1] - fin[end - 1 - c * length] == D
                   for fin, end, length in zip(fins, ends, lengths, strict=True)):
            continue
        if all(all(map(D.__eq__, map(operator.sub, fin[end - window * length:end],
                                     fin[end - (window + c) * length:end - c * length])))
               for fin, end, length in zip(fins, ends, lengths, strict=True)):
            return c, D
    return None


class _Shortcut:
    """The shortcut's state over one run: the next horizon, and once taken, the shorter step (K, c, D)."""

    def __init__(self, schedule: Schedule, pp: int, vpp: int, m: int, group: int, durations: list[int]) -> None:
        self.args = (schedule, pp, vpp, m, group, durations)
        shape = periodic_shape(schedule, pp, vpp, m, group)
        self.shape = shape
        self.taken: tuple[int, int, int, tuple[int, ...]] | None = None   # K, c, D, counts of the shorter step
        self.periods = _NO_HORIZON
        if shape is not None and min(shape[3]) >= 2 * _FIRST_CHECK:
            self.periods = _FIRST_CHECK

    def horizon(self) -> int:
        """The pairs (F and B+W) every rank may run before the next pause."""
        if self.periods >= _NO_HORIZON:
            return _NO_HORIZON
        assert self.shape is not None
        return self.periods * (self.shape[2][0] // 2)

    def pause(self, fins: list[list[int]], step: _Step) -> None:
        """Test the finish times so far; take the shortcut (swap ``step``'s tables) or set the next horizon."""
        assert self.shape is not None
        schedule, pp, vpp, m, group, durations = self.args
        shift, heads, lengths, counts = self.shape
        seen = [max(0, len(fin) - head) for fin, head in zip(fins, heads, strict=True)]   # periodic ops run
        periods = min(min(s // length, n) for s, length, n in zip(seen, lengths, counts, strict=True))
        found = _recent_cycle(fins, [h + periods * length for h, length in zip(heads, lengths, strict=True)],
                              lengths, periods)
        after = max(self.periods + 4, int(self.periods * _GROWTH))
        if found is not None:
            c, D = found
            # if the repetition lasts, the transient ended at most c periods before the last seen
            need = needed_periods(REACH_BOUNDS[schedule], c, periods - c)
            started = [-(-s // length) for s, length in zip(seen, lengths, strict=True)]
            K = min((n - max(s, need)) // c for n, s in zip(counts, started, strict=True))
            if K >= 1:
                shorter_m = m - K * c * shift
                if schedule == "1f1b" or m % group == 0:   # the shorter table is a prefix of this one
                    step.total = step.total * shorter_m // m
                else:
                    shorter = _Step(schedule, pp, vpp, shorter_m, group, durations)
                    for name in _Step.__slots__:
                        setattr(step, name, getattr(shorter, name))
                self.taken = (K, c, D, tuple(n - K * c for n in counts))
            after = _NO_HORIZON                # taken, or no shorter step has the room: no more tests
        self.periods = after if after < min(counts) - 1 else _NO_HORIZON

    def extrapolate(self, fins: list[list[int]], makespan: int) -> int | None:
        """The long step's makespan from the finished shorter one, or None when its check fails.

        The check of the compiled-plan shortcut (`pipeline_steady._attempt`): the repetition holds from a
        period t with ``needed_periods(reach, c, t)`` <= the shorter step's periods, i.e. from the period
        ``last = periods - room`` on (t is at most ``last`` exactly when every op from there to the end of
        the periodic middle repeats), and the periods that read head ops end before ``last``.
        """
        assert self.taken is not None and self.shape is not None
        K, c, D, counts = self.taken
        _, heads, lengths, _ = self.shape
        lag, head_reach, tail_reach = REACH_BOUNDS[self.args[0]]
        last = min(counts) - room(lag, tail_reach, c)
        if head_reach + 1 > last or last < 0:
            return None
        for fin, head, n, length in zip(fins, heads, counts, lengths, strict=True):
            start, end, step = head + last * length, head + n * length, c * length
            if list(map(D.__add__, fin[start - step:end - step])) != fin[start:end]:
                return None
        return makespan + K * D


def _direct_one_f_one_b(schedule: Schedule, pp: int, vpp: int, m: int, group: int, durations: list[int], p2p: int,
                        shortcut: bool = True) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """`simulate_direct` of 1f1b and interleaved, without per-op arrays: each rank runs as a generator.

    Done keys pad each microbatch with a virtual stage -1 and pp*vpp that are never written and hold 0:
    then every F reads the key 3 below its own (the F one virtual stage before, or nothing on stage 0)
    and every B+W the key 3 above (the B one stage after, or on the last stage nothing: its input is its
    own F on the same rank, earlier).  With pp > 1 every other input is on the next or previous rank, so
    a blocked rank is resumed after one of its two neighbours ran.  Peaks: w warm-up forwards, then one F
    and one B+W per step, so min(w + 1, table length) in flight; no W waits.
    """
    step = _Step(schedule, pp, vpp, m, group, durations)
    _, _, total, warmups = _one_f_one_b_table(schedule, pp, vpp, m, group)
    stride = pp * vpp + 2
    done: list[int | None] = [None] * (m * stride * 3)
    for mb in range(m):                    # the padding stages: F and B slots of vs -1 and pp*vpp
        low, high = mb * stride * 3, (mb * stride + stride - 1) * 3
        done[low] = done[low + 1] = done[high] = done[high + 1] = 0
    latency = p2p if pp > 1 else 0         # pp = 1: every input on the same rank
    plan = _Shortcut(schedule, pp, vpp, m, group, durations) if shortcut else None
    horizon = [plan.horizon() if plan is not None else _NO_HORIZON]
    fins: list[list[int]] = [[] for _ in range(pp)]
    runs = [_one_f_one_b_rank(done, step, r, warmups[r], latency, fins[r], horizon) for r in range(pp)]
    waits: list[int | None] = [None] * pp        # the key a rank waits for, or _PAUSE
    finished = [False] * pp
    # the next rank is pushed last, so it runs first: it takes the forwards just made (fewer resumes)
    neighbours = [((r - 1) % pp, (r + 1) % pp) for r in range(pp)]
    ready = list(range(pp - 1, -1, -1))
    while True:
        while ready:
            r = ready.pop()
            k = waits[r]
            if finished[r] or (k is not None and (k < 0 or done[k] is None)):
                continue
            waits[r] = next(runs[r], None)
            finished[r] = waits[r] is None
            for other in neighbours[r]:
                k = waits[other]
                if k is not None and k >= 0 and done[k] is not None:
                    ready.append(other)
        paused = [r for r in range(pp) if waits[r] == _PAUSE]
        if not paused:
            break
        assert plan is not None
        plan.pause(fins, step)
        horizon[0] = plan.horizon()
        for r in paused:
            waits[r] = None
        ready = paused[::-1]
    assert all(finished), f"{schedule} order deadlocks (pp={pp}, vpp={vpp}, m={m})"
    makespan = max(fin[-1] for fin in fins)
    if plan is not None and plan.taken is not None:
        extrapolated = plan.extrapolate(fins, makespan)
        if extrapolated is None:           # the shorter step did not repeat to its end: the long step in full
            return _direct_one_f_one_b(schedule, pp, vpp, m, group, durations, p2p, shortcut=False)
        makespan = extrapolated
    return makespan, tuple(min(w + 1, total) for w in warmups), (0,) * pp


def simulate_direct(schedule: Schedule, pp: int, vpp: int, m: int, group: int, durations: list[int], p2p: int,
                    shortcut: bool = True) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """Return (makespan, peak in flight, peak pending W) in one drain that times each op as it is placed.

    The drain of `pipeline_plan._compile_plan` with `_run_plan`'s recurrence folded in (an op ends at
    max(its rank's previous op, its input + p2p when that ran on another rank) + its time, on the same
    exact integers).  Two rewrites of that recurrence, both exact: an input on the same rank ran earlier
    on it, so it never ends after the rank's previous op and is dropped (read as the key -1); every other
    input is on another rank, so each op stores its end + p2p, the time its output reaches a reader.
    ``shortcut``: 1f1b and interleaved take the steady-state shortcut of the module docstring.
    """
    if schedule in ("1f1b", "interleaved"):
        return _direct_one_f_one_b(schedule, pp, vpp, m, group, durations, p2p, shortcut)
    kind, own_keys, dep_keys, crosses, dur_keys = _op_keys(schedule, pp, vpp, m, group)
    dep_keys = np.where(crosses, dep_keys, -1)
    in_flight, pending_w = _peaks_arrays(kind)
    # when each done key's output reaches another rank (its end + p2p; None: not done yet); the extra
    # last slot, read by the key -1 (no input from another rank), holds 0
    done: list[int | None] = [None] * (m * pp * vpp * 3) + [0]
    times = np.asarray(durations, dtype=object)[dur_keys].tolist()       # exact Python ints
    # each rank resumes its own iterator over (input key, time, own key); a blocked op waits in `held`
    ops = [zip(d, t, o, strict=True) for d, t, o in zip(dep_keys.tolist(), times, own_keys.tolist(), strict=True)]
    held: list[tuple[int, int, int] | None] = [None] * pp
    last = [0] * pp
    # the rank blocked on each done key, -1: none (a key is the input of at most one op on another rank)
    waiting = [-1] * len(done)
    ready = list(range(pp - 1, -1, -1))
    wake = ready.append
    while ready:
        r = ready.pop()
        t = last[r]
        op = held[r]
        if op is not None:                    # woken: its input is done now
            k, d, own = op
            f = done[k]
            t = (t if t > f else f) + d       # type: ignore[operator]
            done[own] = t + p2p
            if waiting[own] >= 0:
                wake(waiting[own])
        for k, d, own in ops[r]:
            f = done[k]
            if f is None:
                waiting[k] = r
                held[r] = (k, d, own)
                break
            t = (t if t > f else f) + d
            done[own] = t + p2p
            if waiting[own] >= 0:
                wake(waiting[own])
        else:
            held[r] = None
        last[r] = t
    assert all(op is None for op in held), f"{schedule} order deadlocks (pp={pp}, vpp={vpp}, m={m})"
    return max(last), in_flight, pending_w
