"""One-pass pipeline simulation of a shape's first run (a cold projection), with its own steady-state shortcut.

`simulate_direct` times each op as the drain of `pipeline_plan._compile_plan` places it (the max-plus
recurrence of `_run_plan` on the same exact integers), without building a plan: cheaper for a shape seen
once; a shape seen again compiles its plan, which later runs reuse (`pipeline_steady._simulate`).  Same
results as the compiled plan (tests/projection/test_pipeline_direct.py).

Every rank runs as a generator that yields the done key it waits for, and one drain, `_drive`, resumes them
(every schedule's inputs from another rank come from a neighbour): the ops of a rank's order as done keys
(`_op_rank`, any schedule), or for 1f1b and interleaved their forward table read with a rank offset
(`_one_f_one_b_rank`: no per-op arrays to build, 20-40% cheaper on deep pipelines), which can pause.

1f1b and interleaved take a steady-state shortcut that costs no more
than the plain pass: the step itself is simulated in rounds (every rank stops at a horizon period), and at
each pause the finish times so far are tested for a repetition (`_recent_cycle`: every op of the last
max(c, 8) periods ends D after its twin c periods before, on every rank).  Once one holds and a step K*c
periods shorter still has the periods the extrapolation argument needs (`pipeline_period.needed_periods`,
argument in pipeline_steady.py), the ranks finish that shorter step instead (its orders are the long
step's up to where every rank stands), and the makespan is its own plus K*D.  The finished shorter step is then checked
as the compiled-plan shortcut checks its small step (repetition from t to the end of its periodic middle,
with the room); should that fail, the long step runs again without the shortcut.  A step without such a
repetition runs to its end with a few pauses: the shortcut never simulates an op the plain pass would
not, and it pays only the tests at the pauses (at 12 periods, then every 1.5 times as many, up to half the
step's periods), and steps under 16,384 ops take none.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter

import numpy as np

from projection.pipeline_period import REACH_BOUNDS, PeriodicShape, needed_periods, periodic_shape, transient
from projection.pipeline_plan import _BW, _F, _NUM_KINDS, Schedule, _one_f_one_b_table, _op_keys, _peaks_arrays

_PAUSE = -1                 # what a rank yields at the horizon (done keys are >= 0)
_NO_HORIZON = 1 << 62
_FIRST_CHECK = 12           # periods simulated before the first repetition test (a cycle needs 8 + c)
_MIN_OPS = 1 << 14          # shorter steps take no shortcut (plain pass ~5 ms: tests could cost more than saved)
_GROWTH = 1.5               # each further test after this many times the periods of the last one
_WINDOW = 8                 # periods a cycle must repeat over (at least one cycle) before the shortcut is taken


class _Step:
    """The forward table of the step being simulated, per rank its op times; the shortcut swaps in a shorter
    step's at a pause (every rank's generator reads it again after each pause)."""

    __slots__ = ("key_array_b", "key_array_f", "keys_b", "keys_f", "times_b", "times_f", "total")

    def __init__(self, schedule: Schedule, pp: int, vpp: int, m: int, group: int, durations: list[int]) -> None:
        """Done keys (mb*(pp*vpp + 2) + vs + 1)*3 + slot (F 0, B+W 1) of each table entry on rank 0 (rank r:
        + 3r), and each rank's F and B+W times per entry."""
        table_mb, table_c, total, _ = _one_f_one_b_table(schedule, pp, vpp, m, group)
        back_c = vpp - 1 - table_c
        stride = pp * vpp + 2
        self.total = total
        self.key_array_f = (table_mb * stride + table_c * pp + 1) * 3
        self.key_array_b = (table_mb * stride + back_c * pp + 1) * 3 + 1
        self.keys_f, self.keys_b = self.key_array_f.tolist(), self.key_array_b.tolist()
        pick_f, pick_b = _picker(table_c.tolist()), _picker(back_c.tolist())   # a rank's chunk times -> per entry
        rows = [durations[r * vpp * _NUM_KINDS:(r + 1) * vpp * _NUM_KINDS] for r in range(pp)]
        self.times_f = [pick_f(row[_F::_NUM_KINDS]) for row in rows]
        self.times_b = [pick_b(row[_BW::_NUM_KINDS]) for row in rows]


def _one_f_one_b_rank(done: list[int | None], step: _Step, r: int, warmup: int, p2p: int, ends: list[int],
                      progress: list[int], horizon: list[int]) -> Iterator[int]:
    """Run rank r of 1f1b / interleaved: its warm-up forwards, then F and B+W pairs, then the cool-down B+W.

    Yields the done key it waits for whenever its next input is not done (and resumes when it is), and
    `_PAUSE` when its F and B+W pairs reach ``horizon[0]``; ``progress[r]``: its pairs done at each yield;
    ``ends[r]``: its last op's end.  Keys (see `_Step`): its F of table entry e is ``keys_f[e] + 3r`` and
    reads the key 3 below, its B+W ``keys_b[e] + 3r`` and reads the key 3 above; each op stores its end + p2p.
    """
    t = 0
    off = 3 * r
    keys_f, times_f = step.keys_f, step.times_f[r]
    for e in range(warmup):
        key = keys_f[e] + off
        f = done[key - 3]
        while f is None:
            yield key - 3
            f = done[key - 3]
        t = (t if t > f else f) + times_f[e]
        done[key] = t + p2p
    pairs = 0                                   # F and B+W pairs run so far
    while True:
        keys_f, keys_b, times_f, times_b = step.keys_f, step.keys_b, step.times_f[r], step.times_b[r]
        last = step.total - warmup
        stop = min(last, horizon[0])
        for e in range(pairs, stop):
            key = keys_f[warmup + e] + off
            f = done[key - 3]
            while f is None:
                progress[r] = e
                yield key - 3
                f = done[key - 3]
            t = (t if t > f else f) + times_f[warmup + e]
            done[key] = t + p2p
            key = keys_b[e] + off
            f = done[key + 3]
            while f is None:
                progress[r] = e
                yield key + 3
                f = done[key + 3]
            t = (t if t > f else f) + times_b[e]
            done[key] = t + p2p
        pairs = max(pairs, stop)
        progress[r] = pairs
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
    ends[r] = t


def _picker(indices: list[int]) -> Callable[[Sequence[int]], tuple[int, ...]]:
    """``seq -> tuple(seq[i] for i in indices)``, in C (itemgetter returns a bare item for one index)."""
    if len(indices) == 1:
        only = indices[0]
        return lambda seq: (seq[only],)
    return itemgetter(*indices)


def _op_rank(done: list[int | None], deps: list[int], times: list[int], owns: list[int], p2p: int, ends: list[int],
             r: int) -> Iterator[int]:
    """Run rank r's ops in its order (`pipeline_plan._rank_arrays`, as done keys from `_op_keys`): each op ends
    at max(the rank's previous op, its input's done value) + its time and stores its end + p2p; an input on the
    same rank, or none, reads the key -1 (0).  Yields the done key it waits for; ``ends[r]``: its last op's end."""
    t = 0
    for k, d, own in zip(deps, times, owns, strict=True):
        f = done[k]
        while f is None:
            yield k
            f = done[k]
        t = (t if t > f else f) + d
        done[own] = t + p2p
    ends[r] = t


def _drive(runs: list[Iterator[int]], done: list[int | None], pause: Callable[[], None] | None = None) -> bool:
    """Run every rank's generator (one per rank, in rank order) to its end; return whether all ended (False: the
    orders deadlock).

    A generator yields the done key it waits for, or `_PAUSE` at the shortcut's horizon.  Every input from
    another rank comes from a neighbour (rank r - 1 or r + 1, mod pp: the virtual stages before and after a
    chunk's sit there, the V of zbv and the wrap of interleaved included), so a blocked rank is resumed after
    one of its two neighbours ran and its key is done.  When every rank is finished or paused, ``pause()`` runs
    (the shortcut's test) and the paused ranks resume.
    """
    pp = len(runs)
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
            return all(finished)
        assert pause is not None
        pause()
        for r in paused:
            waits[r] = None
        ready = paused[::-1]


def _periodic_ends(done: list[int | None], step: _Step, r: int, warmup: int, per: int, first: int, last: int
                   ) -> list[int]:
    """Ends (+ p2p: a constant, so differences are the ends') of rank r's ops in periods [first, last) of its
    periodic middle, in order: per pairs (F, B+W) a period, read from the done keys."""
    keys = np.empty(2 * per * (last - first), dtype=np.int64)
    keys[0::2] = step.key_array_f[warmup + first * per:warmup + last * per]
    keys[1::2] = step.key_array_b[first * per:last * per]
    return list(itemgetter(*(keys + 3 * r).tolist())(done))   # type: ignore[arg-type]


def _recent_cycle(done: list[int | None], step: _Step, warmups: list[int], per: int, periods: int
                  ) -> tuple[int, int] | None:
    """(c, D) of the shortest cycle c over which the last max(c, 8) of the first ``periods`` periods repeat, on
    every rank, the periods c before them plus D; or None.  A cheap filter first: on every rank, the F and
    the B+W of the window's first and last pair; each rank's ends are read once, when a cycle first needs
    them."""
    keys_f, keys_b, ranks = step.keys_f, step.keys_b, range(len(warmups))
    order = (len(warmups) - 1, len(warmups) // 2, *ranks)    # the last and middle rank first: most cycles fail there
    read: dict[int, list[int]] = {}

    def ends_of(r: int) -> list[int]:
        if r not in read:
            read[r] = _periodic_ends(done, step, r, warmups[r], per, 0, periods)
        return read[r]

    def repeats(r: int, e: int, back: int, D: int) -> bool:
        """Whether the F and the B+W of pair e on rank r end D after those of pair e - back."""
        f, b, off = keys_f[warmups[r] + e] + 3 * r, keys_b[e] + 3 * r, 3 * r
        return (done[f] - done[keys_f[warmups[r] + e - back] + off] == D   # type: ignore[operator]
                and done[b] - done[keys_b[e - back] + off] == D)          # type: ignore[operator]

    last = periods * per - 1
    for c in range(1, periods // 2 + 1):
        window = max(c, _WINDOW)
        if c + window > periods:
            break
        back, first = c * per, (periods - window) * per
        D = done[keys_b[last]] - done[keys_b[last - back]]    # type: ignore[operator]
        if not all(repeats(r, last, back, D) and repeats(r, first, back, D) for r in order):
            continue
        start, shift = 2 * per * (periods - window - c), 2 * per * c
        if all(all(map(D.__eq__, map(operator.sub, ends[start + shift:], ends[start:-shift])))
               for ends in map(ends_of, order)):
            return c, D
    return None


def shortcut_applies(schedule: Schedule, pp: int, vpp: int, m: int, group: int) -> bool:
    """Whether `simulate_direct` tests a step of this shape for a repetition: 1f1b and interleaved with a
    periodic middle of at least twice the first test's periods, and at least `_MIN_OPS` ops."""
    if schedule not in REACH_BOUNDS or 2 * pp * vpp * m < _MIN_OPS:
        return False
    shape = periodic_shape(schedule, pp, vpp, m, group)
    return shape is not None and min(shape[3]) >= 2 * _FIRST_CHECK


class _Shortcut:
    """The shortcut's state over one run: the next horizon, and once taken, the shorter step (K, c, D).  Built only
    for a shape the run tests for a repetition (`shortcut_applies`), so its periodic shape exists."""

    def __init__(self, schedule: Schedule, pp: int, vpp: int, m: int, group: int, durations: list[int]) -> None:
        self.args = (schedule, pp, vpp, m, group, durations)
        shape = periodic_shape(schedule, pp, vpp, m, group)
        assert shape is not None, "built only where shortcut_applies"
        self.shape: PeriodicShape = shape
        self.taken: tuple[int, int, int, tuple[int, ...]] | None = None   # K, c, D, counts of the shorter step
        self.periods = _FIRST_CHECK

    def horizon(self) -> int:
        """The pairs (F and B+W) every rank may run before the next pause."""
        if self.periods >= _NO_HORIZON:
            return _NO_HORIZON
        return self.periods * (self.shape[2][0] // 2)

    def pause(self, done: list[int | None], step: _Step, warmups: list[int], progress: list[int]) -> None:
        """Test the ends so far; take the shortcut (swap ``step``'s tables) or set the next horizon."""
        schedule, pp, vpp, m, group, durations = self.args
        shift, _, lengths, counts = self.shape
        per = lengths[0] // 2
        periods = min(min(done_pairs // per, n) for done_pairs, n in zip(progress, counts, strict=True))
        found = _recent_cycle(done, step, warmups, per, periods)
        after = max(self.periods + 4, int(self.periods * _GROWTH))
        if found is not None:
            c, D = found
            # if the repetition lasts, the transient ended at most c periods before the last seen
            need = needed_periods(REACH_BOUNDS[schedule], c, periods - c)
            started = [-(-done_pairs // per) for done_pairs in progress]
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
        # a test past half the periods could save less than the half simulated: the last one is before
        self.periods = after if after <= min(counts) // 2 else _NO_HORIZON

    def extrapolate(self, done: list[int | None], step: _Step, warmups: list[int], makespan: int) -> int | None:
        """The long step's makespan from the finished shorter one, or None when its check fails.

        The check of the compiled-plan shortcut (`pipeline_steady._attempt`): from the repetition's transient
        t over the shorter step's periodic middle (`pipeline_period.transient`: every op of period i + c ends D
        after its twin in period i, for i >= t), the periods it needs (`needed_periods`) are at most the
        shorter step's.
        """
        assert self.taken is not None
        K, c, D, counts = self.taken
        lengths = self.shape[2]
        per = lengths[0] // 2
        sequences = [_periodic_ends(done, step, r, warmup, per, 0, n)
                     for r, (n, warmup) in enumerate(zip(counts, warmups, strict=True))]
        t = transient(sequences, lengths, c, D)
        if needed_periods(REACH_BOUNDS[self.args[0]], c, t) > min(counts):
            return None
        return makespan + K * D


def _direct_one_f_one_b(schedule: Schedule, pp: int, vpp: int, m: int, group: int, durations: list[int], p2p: int,
                        shortcut: bool = True, repeated: list[bool] | None = None
                        ) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
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
    # a shape the shortcut never tests runs exactly the plain pass (no shortcut state: the cold path is never
    # slower than the plain simulator)
    plan = (_Shortcut(schedule, pp, vpp, m, group, durations)
            if shortcut and shortcut_applies(schedule, pp, vpp, m, group) else None)
    horizon = [plan.horizon() if plan is not None else _NO_HORIZON]
    ends, progress = [0] * pp, [0] * pp
    runs = [_one_f_one_b_rank(done, step, r, warmups[r], latency, ends, progress, horizon) for r in range(pp)]

    def pause() -> None:
        assert plan is not None
        plan.pause(done, step, warmups, progress)
        horizon[0] = plan.horizon()

    ended = _drive(runs, done, pause)
    assert ended, f"{schedule} order deadlocks (pp={pp}, vpp={vpp}, m={m})"
    makespan = max(ends)
    taken = plan is not None and plan.taken is not None
    extrapolated = plan.extrapolate(done, step, warmups, makespan) if taken else None
    if repeated is not None and plan is not None:     # the run tested for a repetition
        repeated.append(extrapolated is not None)
    if taken:
        if extrapolated is None:           # the shorter step did not repeat to its end: the long step in full
            return _direct_one_f_one_b(schedule, pp, vpp, m, group, durations, p2p, shortcut=False)
        makespan = extrapolated
    return makespan, tuple(min(w + 1, total) for w in warmups), (0,) * pp


def simulate_direct(schedule: Schedule, pp: int, vpp: int, m: int, group: int, durations: list[int], p2p: int,
                    shortcut: bool = True, repeated: list[bool] | None = None
                    ) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """Return (makespan, peak in flight, peak pending W) in one drain that times each op as it is placed.

    The drain of `pipeline_plan._compile_plan` with `_run_plan`'s recurrence folded in (an op ends at
    max(its rank's previous op, its input + p2p when that ran on another rank) + its time, on the same
    exact integers).  Two rewrites of that recurrence, both exact: an input on the same rank ran earlier
    on it, so it never ends after the rank's previous op and is dropped (read as the key -1); every other
    input is on another rank, so each op stores its end + p2p, the time its output reaches a reader.
    ``shortcut``: 1f1b and interleaved take the steady-state shortcut of the module docstring.
    ``repeated``: when given and the run tested for a repetition (`shortcut_applies`), it gets True when the
    shortcut was taken and held, False when no repetition extrapolated (the caller's evidence for whether
    the compiled-plan shortcut, `pipeline_steady`, is worth trying on later runs of the shape).
    """
    if schedule in ("1f1b", "interleaved"):
        return _direct_one_f_one_b(schedule, pp, vpp, m, group, durations, p2p, shortcut, repeated)
    kind, own_keys, dep_keys, crosses, dur_keys = _op_keys(schedule, pp, vpp, m, group)
    dep_keys = np.where(crosses, dep_keys, -1)
    in_flight, pending_w = _peaks_arrays(kind)
    # when each done key's output reaches another rank (its end + p2p; None: not done yet); the extra
    # last slot, read by the key -1 (no input from another rank), holds 0
    done: list[int | None] = [None] * (m * pp * vpp * 3) + [0]
    times = np.asarray(durations, dtype=object)[dur_keys].tolist()       # exact Python ints
    ends = [0] * pp
    runs = [_op_rank(done, deps, rank_times, owns, p2p, ends, r)
            for r, (deps, rank_times, owns) in enumerate(zip(dep_keys.tolist(), times, own_keys.tolist(), strict=True))]
    ended = _drive(runs, done)
    assert ended, f"{schedule} order deadlocks (pp={pp}, vpp={vpp}, m={m})"
    return max(ends), in_flight, pending_w
