"""Exact steady-state fast path of the pipeline simulator on compiled plans, and its result memo.

For schedules whose per-rank orders repeat every few microbatches, a shorter step that
reaches its steady state is simulated and extrapolated with the same bits as the full
simulation (the argument is below); `_simulate` is what `projection.pipeline.simulate_pipeline`
calls. A shape's first run in a process that has run few shapes (a cold projection) takes the
one-pass simulation, with its own shortcut on a long step (`projection.pipeline_direct`:
no plan compiled, never more ops than the plain pass); other runs try the compiled-plan shortcut
here (its small plans are compiled once per shape and reused, as a search does).  Whether a run tries
it is chosen by what the shape and its family (same schedule, pp, vpp, group; other m) showed before:
two misses, a one pass that found no repetition, or a longer step of the family that gave up, and
the run simulates at once (the same bits: the shortcut is exact when it applies).
`projection.fast_paths.disabled()` turns both shortcuts and the memo off.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from projection import fast_paths
from projection.pipeline_direct import shortcut_applies as _direct_tests
from projection.pipeline_direct import simulate_direct as _simulate_direct
from projection.pipeline_period import PeriodicShape, needed_periods, periodic_shape, repetition, room
from projection.pipeline_plan import Schedule, _compile_plan, _exact_ints, _Plan, _run_plan

# --- Steady-state fast path ------------------------------------------------------------
#
# For 1f1b, zero-bubble and interleaved, each rank's order is a head, then `count` periods
# (the same ops, shifted by `shift` microbatches per period), then a tail; a step with
# `shift` more microbatches has one more period on every rank and the same head and tail.
# The dependency pattern is shift invariant, so the recurrence inside the periods is the
# same max-plus map every period. Such a map is homogeneous (adding c to its inputs adds c
# to its outputs); once the finish times repeat up to a shift, x(i + c) = x(i) + D for every
# op of period i >= t on every rank (checked on the integers, so exactly), every further
# period repeats the pattern, and the tail is the same function of the last periods shifted
# by D per c periods. So a step with K*c more periods has makespan(small) + K*D. The
# transient t can be long (near-equal stage times) and the period c above 1 (several
# critical cycles); both are measured, not assumed, and when the small step shows no
# repetition with room to spare the full simulation runs.

_MAX_CYCLE = 16           # longest repetition period searched, in periods
_PROBE_PERIODS = 8        # periods of the small plan that measures the dependency reach
_RESULT_CACHE: dict[tuple[object, ...], tuple[float, tuple[int, ...], tuple[int, ...]]] = {}
_RESULT_CACHE_SIZE = 1 << 14
# Shapes (schedule, pp, vpp, m, group) run before.  A shape's first run takes the one-pass simulation
# (projection.pipeline_direct): at once when the process has run at most _ONE_PASS_SHAPES shapes (a cold
# projection, a compare: no plan compiled; its own shortcut on a long step), else after the compiled-plan
# shortcut here missed.  Later runs compile the shape's plan
# and reuse it.  Compiling costs a few one-pass runs and pays off over many runs of a shape, as in a search,
# which runs many shapes: past its first few it compiles at once (a one-pass run first would be extra work).
_SHAPES_SEEN_CACHE: dict[tuple[object, ...], bool] = {}
_ONE_PASS_SHAPES = 4
# Shapes whose compiled-plan shortcut has missed, and how often; a shape that missed _GIVE_UP_MISSES times and
# never hit skips it (the full simulation runs at once: same bits, as the shortcut is exact when it applies).
# A search runs a shape with many stage times; where the repetition does not show in the small steps (deep
# pipelines with unequal first and last stages: 405B at PP 64 missed on every one of about 1,000 tries in
# bench_search_space case e, 1.1 CPU-s of 6.1) each miss costs up to 3/4 of a full run on top of it.
_STEADY_MISSES_CACHE: dict[tuple[object, ...], int] = {}
_GIVE_UP_MISSES = 2
# Per family (schedule, pp, vpp, group: the shapes that differ only in m), the m of its shapes that hit and of
# those that gave up after trying (a step too short for the shortcut tries nothing and counts for neither).  A
# new shape starts given up when a shape of its family with at least its m gave up and none with at most its m
# hit: a longer step has more room for the repetition, so in a search, which runs each family at several m with
# stage times of the same make, where a long step of a family shows no repetition (near-equal stage times whose
# ties break in the last bits: transients longer than any step) a shorter one does not either (405B at PP 32
# and 64 in bench_search_space case e: every shape gave up, each after two misses that compiled and ran small
# plans for nothing).  Exact either way: a shape not tried runs the full simulation.
_STEADY_FAMILY_CACHE: dict[tuple[object, ...], tuple[list[int], list[int]]] = {}


@functools.lru_cache(maxsize=256)
def _reach(schedule: Schedule, pp: int, vpp: int, m: int, group: int) -> tuple[int, int, int]:
    """Return (lag, head_reach, tail_reach) of the plan's periodic ops, in periods.

    lag: the largest period distance between a periodic op and a periodic op it depends on;
    head_reach: the last period (on any rank) with an op that depends on a head op;
    tail_reach: the most periods before its rank's end of an op that depends on a tail op.
    """
    plan = _compile_plan(schedule, pp, vpp, m, group)
    shape = periodic_shape(schedule, pp, vpp, m, group)
    assert shape is not None
    _, heads, lengths, counts = shape
    # per op (global index, 0 = sentinel): its period (< 0 head, >= its rank's count: tail)
    period = np.full(len(plan.prev) + 1, -1, dtype=np.int64)
    count = np.zeros(len(plan.prev) + 1, dtype=np.int64)
    for r, ops in enumerate(plan.rank_ops):
        index = np.asarray(ops, dtype=np.int64)
        count[index] = counts[r]
        offset = np.arange(len(ops), dtype=np.int64) - heads[r]
        period[index] = np.where(offset >= 0, offset // lengths[r], -1)
    own = period[1:]
    periodic = (own >= 0) & (own < count[1:])
    lag, head_reach, tail_reach = 1, -1, -1
    for sources in (np.asarray(plan.dep, dtype=np.int64), np.asarray(plan.prev, dtype=np.int64)):
        live = periodic & (sources > 0)
        mine, other, other_count = own[live], period[sources[live]], count[sources[live]]
        in_head, in_tail = other < 0, other >= other_count
        body = ~(in_head | in_tail)
        if in_head.any():
            head_reach = max(head_reach, int(mine[in_head].max()))
        if in_tail.any():
            tail_reach = max(tail_reach, int((count[1:][live][in_tail] - 1 - mine[in_tail]).max()))
        if body.any():
            lag = max(lag, int(np.abs(mine[body] - other[body]).max()))
    return lag, head_reach, tail_reach


def _repetition(plan: _Plan, fin: list[int], shape: PeriodicShape, cycles: Sequence[int]
                ) -> tuple[int, int, int] | None:
    """`pipeline_period.repetition` of a compiled plan's finish times: (c, D, t) or None."""
    _, heads, lengths, counts = shape
    sequences = [[fin[op] for op in ops[h:h + n * length]]
                 for ops, h, n, length in zip(plan.rank_ops, heads, counts, lengths, strict=True)]
    return repetition(sequences, lengths, cycles)


def _attempt(schedule: Schedule, pp: int, vpp: int, m: int, group: int, durations: list[int], p2p: int,
             small_m: int, cycles: Sequence[int]) -> tuple[int, _Plan, int, int, int]:
    """Simulate small_m microbatches; return (makespan, plan, c, D, periods needed), c = 0 without repetition.

    Periods needed: the transient plus the room the repetition needs; when the small step has
    that many it extrapolates, else a step with that many would.
    """
    lag, head_reach, tail_reach = _reach(schedule, pp, vpp, small_m, group)
    plan = _compile_plan(schedule, pp, vpp, small_m, group)
    shape = periodic_shape(schedule, pp, vpp, small_m, group)
    assert shape is not None
    fin = _run_plan(plan, durations, p2p)
    makespan = max(fin[i] for i in plan.last_op)
    found = _repetition(plan, fin, shape, cycles)
    if found is None:
        return makespan, plan, 0, 0, 0
    c, D, t = found
    # periods whose ops read head ops are boundary, not pattern: the transient lasts at least past them
    return makespan, plan, c, D, needed_periods((lag, head_reach, tail_reach), c, t)


def _steady_shape(schedule: Schedule, pp: int, vpp: int, m: int, group: int) -> PeriodicShape | None:
    """The periodic shape `_steady_makespan` simulates from, None when it simulates nothing for this shape (no
    periodic middle of at least 2 * _PROBE_PERIODS periods on every rank)."""
    shape = periodic_shape(schedule, pp, vpp, m, group)
    return shape if shape is not None and min(shape[3]) >= 2 * _PROBE_PERIODS else None


def _steady_makespan(schedule: Schedule, pp: int, vpp: int, m: int, group: int, durations: list[int],
                     p2p: int) -> tuple[int, _Plan] | None:
    """Return the exact makespan of m microbatches from a shorter step that reaches its steady state.

    Returns the small step's plan too (its memory peaks equal the long step's: the in-flight
    counts repeat every period). None when no shortcut applies or pays: the first small step
    has at most a third of the periods, all attempts together at most 3/4 (so a miss costs at
    most a third more than the full simulation); attempts grow from the dependency reach to
    what the measured transient needs, or double.
    """
    periodic = _steady_shape(schedule, pp, vpp, m, group)
    if periodic is None:
        return None
    shift, _, _, counts = periodic
    shortest = min(counts)
    lag, _, tail_reach = _reach(schedule, pp, vpp, m - (shortest - _PROBE_PERIODS) * shift, group)
    keep = max(_PROBE_PERIODS, room(lag, tail_reach, 1) + 4)
    spent = 0                                          # periods simulated so far: at most 3/4 of a full step
    while 4 * (spent + keep) <= 3 * shortest and (spent or 3 * keep <= shortest):
        spent += keep
        makespan, plan, c, D, needed = _attempt(schedule, pp, vpp, m, group, durations, p2p,
                                                m - (shortest - keep) * shift, range(1, _MAX_CYCLE + 1))
        if c and needed <= keep:
            extra = shortest - keep                    # periods the small step lacks
            if extra % c == 0:
                return makespan + extra // c * D, plan
            # only whole cycles extrapolate: a small step longer by extra % c periods, checked again
            longer = keep + extra % c
            again = _attempt(schedule, pp, vpp, m, group, durations, p2p, m - (shortest - longer) * shift, (c,))
            if again[2] == c and again[3] == D and again[4] <= longer:
                return again[0] + (shortest - longer) // c * D, again[1]
            return None
        keep = needed + 2 if c and needed > keep else 2 * keep
    return None


def _family(shape: tuple[Schedule, int, int, int, int]) -> tuple[Schedule, int, int, int]:
    """(schedule, pp, vpp, group): what a shape's family shares (its shapes differ only in m)."""
    schedule, pp, vpp, _, group = shape
    return schedule, pp, vpp, group


def _steady_worth_trying(shape: tuple[Schedule, int, int, int, int]) -> bool:
    """Whether to try the compiled-plan shortcut on a run of this shape: fewer than _GIVE_UP_MISSES misses or a
    hit; a shape not tried before, unless its family tells it would miss (`_STEADY_FAMILY_CACHE`)."""
    misses = _STEADY_MISSES_CACHE.get(shape)
    if misses is not None:
        return misses < _GIVE_UP_MISSES
    hit, gave_up = _STEADY_FAMILY_CACHE.get(_family(shape), ((), ()))
    m = shape[3]
    return not any(g >= m for g in gave_up) or any(h <= m for h in hit)


def _steady_attempt(shape: tuple[Schedule, int, int, int, int], durations: list[int], p2p: int
                    ) -> tuple[int, _Plan] | None:
    """`_steady_makespan` of a shape, counting its misses until its first hit (-1: it hit, keep trying), and
    recording in its family a hit, or the shape giving up after trying (a step too short tries nothing)."""
    steady = _steady_makespan(*shape, durations, p2p)
    misses = _STEADY_MISSES_CACHE.get(shape, 0)
    hit, gave_up = _STEADY_FAMILY_CACHE.setdefault(_family(shape), ([], []))
    if steady is not None:
        _STEADY_MISSES_CACHE[shape] = -1
        hit.append(shape[3])
    elif misses >= 0:
        _STEADY_MISSES_CACHE[shape] = misses + 1
        if misses + 1 == _GIVE_UP_MISSES and _steady_shape(*shape) is not None:
            gave_up.append(shape[3])
    return steady


def _one_pass_first(shape: tuple[Schedule, int, int, int, int]) -> bool:
    """Whether a search's first run of a shape takes the one pass that tests its step for a repetition (rather
    than the compiled-plan shortcut): when the one pass tests (`shortcut_applies`) and no shape of its family
    hit (once one hit, the compiled plans of the small steps, reused by later runs, pay off at once)."""
    return _direct_tests(*shape) and not _STEADY_FAMILY_CACHE.get(_family(shape), ((),))[0]


def _note_direct(shape: tuple[Schedule, int, int, int, int], repeated: list[bool]) -> None:
    """Record what a one-pass run that tested the whole step for a repetition found: a hit (later runs try the
    compiled-plan shortcut), or none up to half its periods (the compiled-plan shortcut, which simulates at most
    3/4 of them, would likely miss too: later runs simulate at once, as after _GIVE_UP_MISSES misses)."""
    if not repeated:
        return
    hit, gave_up = _STEADY_FAMILY_CACHE.setdefault(_family(shape), ([], []))
    if repeated[0]:
        _STEADY_MISSES_CACHE[shape] = -1
        hit.append(shape[3])
    else:
        _STEADY_MISSES_CACHE[shape] = _GIVE_UP_MISSES
        gave_up.append(shape[3])


def _simulate(schedule: Schedule, pp: int, vpp: int, m: int, group: int, durations: list[float], p2p_s: float
              ) -> tuple[float, tuple[int, ...], tuple[int, ...]]:
    """Return (makespan s, peak in flight, peak pending W); the fast paths give the same bits."""
    fast = fast_paths.enabled()
    if fast:
        key = (schedule, pp, vpp, m, group, p2p_s, *durations)
        cached = _RESULT_CACHE.get(key)
        if cached is not None:
            return cached
    ints, p2p, den = _exact_ints(durations, p2p_s)
    shape = (schedule, pp, vpp, m, group)
    first = fast and shape not in _SHAPES_SEEN_CACHE
    if first:
        _SHAPES_SEEN_CACHE[shape] = True
    if first and (len(_SHAPES_SEEN_CACHE) <= _ONE_PASS_SHAPES or _one_pass_first(shape)):
        # a shape's first run in a process that has run few (a cold projection), or one whose one pass tests the
        # step for a repetition (its own shortcut on a long step, `shortcut_applies`: never more ops than the
        # plain pass): one pass, no plan to build; what its test found decides whether later runs try the
        # compiled-plan shortcut
        repeated: list[bool] = []
        makespan, in_flight, pending = _simulate_direct(schedule, pp, vpp, m, group, ints, p2p, repeated=repeated)
        _note_direct(shape, repeated)
        result = (makespan / den, in_flight, pending)
    elif fast and _steady_worth_trying(shape) and (
            steady := _steady_attempt(shape, ints, p2p)) is not None:
        makespan, plan = steady
        result = (makespan / den, plan.peak_in_flight, plan.peak_pending_weight_grad)
    elif first:
        # first full run of this shape: one timed drain, no plan to build
        makespan, in_flight, pending = _simulate_direct(schedule, pp, vpp, m, group, ints, p2p)
        result = (makespan / den, in_flight, pending)
    else:
        plan = _compile_plan(schedule, pp, vpp, m, group)
        fin = _run_plan(plan, ints, p2p)
        makespan = max(fin[i] for i in plan.last_op)
        result = (makespan / den, plan.peak_in_flight, plan.peak_pending_weight_grad)
    if fast:
        if len(_RESULT_CACHE) >= _RESULT_CACHE_SIZE:
            _RESULT_CACHE.clear()
        _RESULT_CACHE[key] = result
    return result
