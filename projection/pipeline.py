"""Simulate pipeline-parallel schedules op by op.

This is a schedule simulator, not a bubble formula. Each pipeline rank runs a
static list of ops (forward F, backward-input B, backward-weight W of one
microbatch on one of its virtual chunks), built per schedule the way Megatron-LM
(`megatron/core/pipeline_parallel/schedules.py`) and the Primus-Pipeline tables
do. Times then follow a max-plus recurrence over one topological order of the
op graph: an op starts when its rank is free and its input is ready, plus
`p2p_s` when the input comes from another rank. Primus Projection restores PP
the same way (shared/notes/primus-projection.md, Sec. 2.2).

Schedules (per-rank op orders):
    gpipe: all F, then all B+W.
    1f1b: Megatron non-interleaved 1F1B.
    interleaved: Megatron interleaved 1F1B (virtual chunks, microbatch groups).
    zero-bubble: ZB-H1, 1F1B with W split off and deferred.
    zbv: ZB-V, V-shaped two-chunk schedule built by a unit-time greedy.

Names: pp = number of pipeline ranks, vpp = number of virtual chunks per rank,
m = number of microbatches, vs = virtual stage (0 .. pp*vpp - 1, data order).

The module is over 500 lines because the five order builders, the ZB-V
greedy, the graph compiler and the closed forms share one op encoding; split
them and that encoding would have to be exported.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Literal

Schedule = Literal["1f1b", "interleaved", "zero-bubble", "zbv", "gpipe"]
SCHEDULES: tuple[Schedule, ...] = ("1f1b", "interleaved", "zero-bubble", "zbv", "gpipe")

# Op kinds. BW is B and W run back to back (every schedule but the zero-bubble ones).
_F, _B, _W, _BW = 0, 1, 2, 3
_NUM_KINDS = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class StageTimes:
    """Per-microbatch compute times of one pipeline rank, one entry per virtual chunk.

    Chunk c of rank r is virtual stage c*pp + r (Megatron order); for `zbv`
    chunk 1 is virtual stage 2*pp - 1 - r (V shape).
    """

    forward_s: tuple[float, ...]
    """Forward time of one microbatch on each chunk, s."""
    backward_input_s: tuple[float, ...]
    """Activation-gradient part of the backward (B) on each chunk, s."""
    backward_weight_s: tuple[float, ...]
    """Weight-gradient part of the backward (W) on each chunk, s. Schedules other
    than `zero-bubble` and `zbv` run B and W back to back as one op."""

    def __post_init__(self) -> None:
        """Check that the three tuples have one finite, non-negative time per chunk."""
        num_chunks = len(self.forward_s)
        if num_chunks == 0:
            raise ValueError("forward_s must have one entry per virtual chunk, got none")
        for name in ("forward_s", "backward_input_s", "backward_weight_s"):
            values = getattr(self, name)
            if len(values) != num_chunks:
                raise ValueError(
                    f"{name} has {len(values)} entries, forward_s has {num_chunks}; "
                    "need one per virtual chunk"
                )
            # min() and sum() run in C: all >= 0 and a finite sum <=> every value finite and >= 0 (NaN fails both)
            if not (min(values) >= 0.0 and math.isfinite(sum(values))):
                raise ValueError(f"{name} must be finite and >= 0, got {values}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineResult:
    """Outcome of one simulated training step of the pipeline (no optimizer step)."""

    makespan_s: float
    """Time from the first forward starting to the last op finishing, over all ranks, s."""
    busy_s: tuple[float, ...]
    """Per rank: the sum of its op times (m * sum over chunks of F+B+W), s."""
    bubble_fraction: float
    """Idle share averaged over ranks: 1 - mean(busy_s) / makespan_s, in [0, 1)."""
    peak_in_flight: tuple[int, ...]
    """Per rank: peak number of (microbatch, chunk) activation sets alive, counted
    from the end of F to the end of B (for merged B+W ops: to the end of B+W).
    This is the number Megatron's activation memory scales with."""
    peak_pending_weight_grad: tuple[int, ...]
    """Per rank: peak number of (microbatch, chunk) whose B is done but W is not
    (zero-bubble schedules only, 0 otherwise). Such a set keeps only what W needs
    (layer inputs and output gradients), a part of the activation set."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """Compiled op graph of one (schedule, pp, vpp, m), in topological order.

    Op i (1-based; index 0 is a zero-time sentinel) waits for op prev[i-1] (the
    previous op on its rank) and op dep[i-1] (its data input); dur_key[i-1]
    indexes the per-call duration table; cross[i-1] is 1 when the input comes
    from another rank.
    """

    prev: tuple[int, ...]
    dep: tuple[int, ...]
    cross: tuple[int, ...]
    dur_key: tuple[int, ...]
    last_op: tuple[int, ...]
    peak_in_flight: tuple[int, ...]
    peak_pending_weight_grad: tuple[int, ...]


RankOrder = list[tuple[int, int, int]]  # (kind, microbatch, chunk) in execution order
_Fifo = list[tuple[int, int]]  # (ready time, microbatch), read from a head index


def _virtual_stage(schedule: Schedule, pp: int, rank: int, chunk: int) -> int:
    """Return the virtual stage held by chunk `chunk` of `rank`."""
    if schedule == "zbv" and chunk == 1:
        return 2 * pp - 1 - rank
    return chunk * pp + rank


def _order_1f1b(pp: int, m: int, rank: int, zero_bubble: bool) -> RankOrder:
    """Build 1F1B (Megatron non-interleaved) or ZB-H1 for one rank.

    1F1B: min(pp - rank - 1, m) warm-up forwards, then F and B+W alternating,
    then the cool-down backwards.

    ZB-H1 (Qi et al. 2024, arXiv 2401.10241, Sec. 3.1) keeps the 1F1B order of F
    and B and lets rank r run each W r microbatches late (the last r W ops at the
    end), so B ops chain through the pipeline and deferred W ops fill the
    cool-down. F-done-W-not-done then peaks at pp on every rank, as on 1F1B
    rank 0. On uniform stages with T_W <= min(T_F, T_B) and m >= pp it idles
    (p-1)(T_F + T_B - T_W), the paper's ZB-H1 bubble (tested); with T_W > T_F a
    W no longer fits the gap before the next B and it idles (p-1) * T_B.
    """
    num_warmup = min(pp - rank - 1, m)
    order: RankOrder = [(_F, mb, 0) for mb in range(num_warmup)]
    back_kind = _B if zero_bubble else _BW
    next_w = 0
    for mb_b in range(m):
        if num_warmup + mb_b < m:
            order.append((_F, num_warmup + mb_b, 0))
        order.append((back_kind, mb_b, 0))
        # Defer W by `rank` microbatches; in the cool-down keep one W per B.
        if zero_bubble and mb_b - next_w >= rank:
            order.append((_W, next_w, 0))
            next_w += 1
    if zero_bubble:
        order.extend((_W, mb, 0) for mb in range(next_w, m))
    return order


def _order_gpipe(m: int) -> RankOrder:
    """Build GPipe for one rank: all forwards, then all backwards."""
    return [(_F, mb, 0) for mb in range(m)] + [(_BW, mb, 0) for mb in range(m)]


def _interleaved_table(vpp: int, m: int, group: int) -> list[tuple[int, int]]:
    """Return (microbatch, chunk) of the k-th forward, as Megatron's `get_schedule_table`.

    Microbatches go in groups of `group` (`microbatch_group_size_per_vp_stage`,
    default pp); each group runs through chunk 0, 1, ..., vpp-1. The last group
    holds the m % group leftover microbatches when m is not a multiple of group.
    """
    table: list[tuple[int, int]] = []
    for first in range(0, m, group):
        last = min(first + group, m)
        table.extend((mb, c) for c in range(vpp) for mb in range(first, last))
    return table


def _order_interleaved(pp: int, vpp: int, m: int, group: int, rank: int) -> RankOrder:
    """Build Megatron's interleaved 1F1B for one rank.

    As `forward_backward_pipelining_with_interleaving` in Megatron core
    releases with `microbatch_group_size_per_vp_stage`: warm-up
    (pp - rank - 1) * 2 + (vpp - 1) * group forwards, capped at m * vpp; then
    one forward and one backward per step; then the remaining backwards. The
    k-th backward runs the k-th table entry with its chunk reversed. (Older
    releases also ran every forward first when m == pp; not modelled.)
    """
    table = _interleaved_table(vpp, m, group)
    total = len(table)
    num_warmup = min((pp - rank - 1) * 2 + (vpp - 1) * group, total)
    order: RankOrder = [(_F, mb, c) for mb, c in table[:num_warmup]]
    for k in range(total):
        if num_warmup + k < total:
            mb, c = table[num_warmup + k]
            order.append((_F, mb, c))
        mb, c = table[k]
        order.append((_BW, mb, vpp - 1 - c))
    return order


def _order_zbv(pp: int, m: int) -> list[RankOrder]:
    """Build ZB-V for all ranks by a greedy list schedule on unit op times.

    ZB-V (Qi et al. 2024, arXiv 2401.10241, Sec. 6) puts virtual stages r and
    2*pp-1-r on rank r and assumes T_F = T_B = T_W. Like the greedy ZB-V builders
    of the paper's code and Primus (`zbv-greedy`), the order is built once from
    estimated times, here all 1, and then replayed with the real times. Every
    free rank takes, at each integer time: an F if its memory allows (chunk 1
    first, then the oldest microbatch), else a ready B (oldest microbatch,
    chunk 1 first), else the oldest pending W. Memory is counted in half
    activation sets: F adds 2, B frees 1, W frees 1, and F needs the total to stay
    <= 4*pp, i.e. pp full-stage activation sets as in 1F1B (pp * M_B in the
    paper). With unit times this reaches the ideal makespan 6m + pp - 1 for every
    m >= pp (checked in the tests); for m < pp it is not optimal.
    """
    # Per rank, per chunk: FIFO of (ready time, microbatch); *_head is its front.
    f_ready: list[tuple[_Fifo, _Fifo]] = [([], []) for _ in range(pp)]
    b_ready: list[tuple[_Fifo, _Fifo]] = [([], []) for _ in range(pp)]
    f_head = [[0, 0] for _ in range(pp)]
    b_head = [[0, 0] for _ in range(pp)]
    f_ready[0][0].extend((0, mb) for mb in range(m))
    w_pending: list[list[tuple[int, int]]] = [[] for _ in range(pp)]
    w_head = [0] * pp
    mem_half_sets = [0] * pp
    orders: list[RankOrder] = [[] for _ in range(pp)]
    remaining = 6 * m * pp
    t = 0
    while remaining:
        num_done = 0
        for r in range(pp):
            op = _zbv_pick(r, t, pp, f_ready, f_head, b_ready, b_head, w_pending, w_head,
                           mem_half_sets)
            if op is None:
                continue
            num_done += 1
            orders[r].append(op)
            kind, mb, c = op
            vs = c * (2 * pp - 1 - 2 * r) + r  # r for chunk 0, 2*pp-1-r for chunk 1
            if kind == _F:
                mem_half_sets[r] += 2
                if vs == 2 * pp - 1:
                    b_ready[r][c].append((t + 1, mb))
                elif vs < pp - 1:
                    f_ready[r + 1][0].append((t + 1, mb))
                elif vs == pp - 1:
                    f_ready[r][1].append((t + 1, mb))
                else:
                    f_ready[r - 1][1].append((t + 1, mb))
            elif kind == _B:
                mem_half_sets[r] -= 1
                w_pending[r].append((mb, c))
                if vs > pp:
                    b_ready[r + 1][1].append((t + 1, mb))
                elif vs == pp:
                    b_ready[r][0].append((t + 1, mb))
                elif vs > 0:
                    b_ready[r - 1][0].append((t + 1, mb))
            else:
                mem_half_sets[r] -= 1
        # Ops take one time unit, so a step with no op means nothing will ever be ready.
        assert num_done, f"zbv greedy stalled at t={t} (pp={pp}, m={m})"
        remaining -= num_done
        t += 1
    return orders


def _zbv_pick(
    r: int,
    t: int,
    pp: int,
    f_ready: list[tuple[_Fifo, _Fifo]],
    f_head: list[list[int]],
    b_ready: list[tuple[_Fifo, _Fifo]],
    b_head: list[list[int]],
    w_pending: list[list[tuple[int, int]]],
    w_head: list[int],
    mem_half_sets: list[int],
) -> tuple[int, int, int] | None:
    """Pop and return the op rank r starts at time t in the ZB-V greedy, if any."""
    if mem_half_sets[r] + 2 <= 4 * pp:
        for c in (1, 0):
            queue, head = f_ready[r][c], f_head[r][c]
            if head < len(queue) and queue[head][0] <= t:
                f_head[r][c] += 1
                return (_F, queue[head][1], c)
    best_c = -1
    best_mb = 0
    for c in (1, 0):
        queue, head = b_ready[r][c], b_head[r][c]
        if head < len(queue) and queue[head][0] <= t and (best_c < 0 or queue[head][1] < best_mb):
            best_c, best_mb = c, queue[head][1]
    if best_c >= 0:
        b_head[r][best_c] += 1
        return (_B, best_mb, best_c)
    if w_head[r] < len(w_pending[r]):
        mb, c = w_pending[r][w_head[r]]
        w_head[r] += 1
        return (_W, mb, c)
    return None


def _rank_orders(schedule: Schedule, pp: int, vpp: int, m: int, group: int) -> list[RankOrder]:
    """Return the static op order of every rank."""
    if schedule == "zbv":
        return _order_zbv(pp, m)
    if schedule == "interleaved":
        return [_order_interleaved(pp, vpp, m, group, r) for r in range(pp)]
    if schedule == "gpipe":
        return [_order_gpipe(m) for _ in range(pp)]
    return [_order_1f1b(pp, m, r, schedule == "zero-bubble") for r in range(pp)]


# A plan holds about 90 bytes per op: 1.5 MB for pp=16, vpp=4, m=128; 24 MB at m=2048.
@functools.lru_cache(maxsize=256)
def _compile_plan(schedule: Schedule, pp: int, vpp: int, m: int, group: int) -> _Plan:
    """Turn the per-rank orders into flat arrays in one topological order.

    The order drains each rank as far as its inputs allow, round-robin over
    ranks. A round with no progress means the orders deadlock, a bug in a
    builder (the validation rules exclude Megatron's deadlocking shapes).
    """
    orders = _rank_orders(schedule, pp, vpp, m, group)
    num_vs = pp * vpp
    vs_of = [[_virtual_stage(schedule, pp, r, c) for c in range(vpp)] for r in range(pp)]
    rank_of_vs = [0] * num_vs
    for r in range(pp):
        for c in range(vpp):
            rank_of_vs[vs_of[r][c]] = r
    # Global index of the finished op (F=0, B or BW=1, W=2) of (mb, vs); 0 = not yet.
    done = [0] * (m * num_vs * 3)
    prev: list[int] = []
    dep: list[int] = []
    cross: list[int] = []
    dur_key: list[int] = []
    last = [0] * pp
    pos = [0] * pp
    # Reuse one int object per key: ints above 256 are not shared by CPython.
    key_objs = list(range(pp * vpp * _NUM_KINDS))
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r, order in enumerate(orders):
            i = pos[r]
            while i < len(order):
                kind, mb, c = order[i]
                vs = vs_of[r][c]
                if kind == _F:
                    dep_key = (mb * num_vs + vs - 1) * 3 if vs > 0 else -1
                elif kind == _W:
                    dep_key = (mb * num_vs + vs) * 3 + 1
                elif vs == num_vs - 1:
                    dep_key = (mb * num_vs + vs) * 3
                else:
                    dep_key = (mb * num_vs + vs + 1) * 3 + 1
                d = done[dep_key] if dep_key >= 0 else 0
                if dep_key >= 0 and d == 0:
                    break
                prev.append(last[r])
                dep.append(d)
                cross.append(int(dep_key >= 0 and rank_of_vs[dep_key // 3 % num_vs] != r))
                dur_key.append(key_objs[(r * vpp + c) * _NUM_KINDS + kind])
                last[r] = len(prev)
                done[(mb * num_vs + vs) * 3 + (_W if kind == _W else min(kind, 1))] = len(prev)
                i += 1
            progressed = progressed or i > pos[r]
            remaining -= i - pos[r]
            pos[r] = i
        assert progressed, f"{schedule} order deadlocks (pp={pp}, vpp={vpp}, m={m})"
    in_flight, pending_w = _peaks(orders)
    return _Plan(
        prev=tuple(prev),
        dep=tuple(dep),
        cross=tuple(cross),
        dur_key=tuple(dur_key),
        last_op=tuple(last),
        peak_in_flight=in_flight,
        peak_pending_weight_grad=pending_w,
    )


def _peaks(orders: list[RankOrder]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Return per-rank peaks of F-done-B-not-done and B-done-W-not-done counts."""
    in_flight_peaks = []
    pending_w_peaks = []
    for order in orders:
        in_flight = pending_w = in_flight_peak = pending_w_peak = 0
        for kind, _, _ in order:
            if kind == _F:
                in_flight += 1
                in_flight_peak = max(in_flight_peak, in_flight)
            elif kind == _B:
                in_flight -= 1
                pending_w += 1
                pending_w_peak = max(pending_w_peak, pending_w)
            elif kind == _W:
                pending_w -= 1
            else:
                in_flight -= 1
        in_flight_peaks.append(in_flight_peak)
        pending_w_peaks.append(pending_w_peak)
    return tuple(in_flight_peaks), tuple(pending_w_peaks)


def _run_plan(plan: _Plan, durations: list[float], p2p_s: float) -> float:
    """Return the makespan of a compiled plan: one max-plus pass in topological order."""
    dur = itemgetter(*plan.dur_key)(durations)
    fin = [0.0]  # fin[0] is the sentinel "nothing to wait for"
    append = fin.append
    if p2p_s == 0.0:
        for p, d, t in zip(plan.prev, plan.dep, dur):
            a = fin[p]
            b = fin[d]
            append((a if a > b else b) + t)
    else:
        extra = itemgetter(*plan.cross)((0.0, p2p_s))
        for p, d, x, t in zip(plan.prev, plan.dep, extra, dur):
            a = fin[p]
            b = fin[d] + x
            append((a if a > b else b) + t)
    return max(fin[i] for i in plan.last_op)


def _validate(
    stages: Sequence[StageTimes],
    num_microbatches: int,
    schedule: str,
    p2p_s: float,
    microbatch_group_size: int | None,
) -> tuple[int, int, int]:
    """Check the arguments of `simulate_pipeline`; return (pp, vpp, group size)."""
    _check_schedule(schedule)
    if len(stages) == 0:
        raise ValueError("stages must have one StageTimes per pipeline rank, got none")
    pp = len(stages)
    vpp = len(stages[0].forward_s)
    for r, stage in enumerate(stages):
        if len(stage.forward_s) != vpp:
            raise ValueError(
                f"stages[{r}] has {len(stage.forward_s)} chunks, stages[0] has {vpp}; "
                "every rank needs the same vpp"
            )
    if not (math.isfinite(p2p_s) and p2p_s >= 0.0):
        raise ValueError(f"p2p_s must be finite and >= 0, got {p2p_s}")
    group = _validate_shape(schedule, pp, vpp, num_microbatches, microbatch_group_size)
    return pp, vpp, group


def _validate_shape(
    schedule: str, pp: int, vpp: int, num_microbatches: int, microbatch_group_size: int | None
) -> int:
    """Check the schedule rules on pp, vpp and microbatches; return the group size.

    The group size only matters for `interleaved`; other schedules get pp.
    """
    if isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int):
        raise ValueError(f"num_microbatches must be an int, got {num_microbatches!r}")
    if num_microbatches < 1:
        raise ValueError(f"num_microbatches must be >= 1, got {num_microbatches}")
    if pp < 1:
        raise ValueError(f"pp must be >= 1, got pp={pp}")
    if schedule in ("1f1b", "zero-bubble", "gpipe") and vpp != 1:
        raise ValueError(f"{schedule} needs vpp=1, got vpp={vpp}")
    if schedule == "zbv" and vpp != 2:
        raise ValueError(f"zbv needs vpp=2, got vpp={vpp}")
    if schedule != "interleaved":
        if microbatch_group_size is not None:
            raise ValueError(
                f"microbatch_group_size applies to interleaved only, got schedule={schedule!r}"
            )
        return pp
    if vpp < 2:
        raise ValueError(f"interleaved needs vpp >= 2, got vpp={vpp} (use 1f1b)")
    group = pp if microbatch_group_size is None else microbatch_group_size
    if num_microbatches < pp:
        raise ValueError(
            f"interleaved needs num_microbatches >= pp, got num_microbatches="
            f"{num_microbatches}, pp={pp}"
        )
    if not pp <= group <= num_microbatches:
        raise ValueError(
            f"interleaved needs pp <= microbatch_group_size <= num_microbatches, got "
            f"microbatch_group_size={group}, pp={pp}, num_microbatches={num_microbatches}"
        )
    remainder = num_microbatches % group
    if 0 < remainder < pp:
        # Megatron raises a RuntimeError here too; in this model the short group deadlocks.
        raise ValueError(
            f"interleaved needs num_microbatches % microbatch_group_size == 0 or >= pp, "
            f"got num_microbatches={num_microbatches}, microbatch_group_size={group} "
            f"(default pp), pp={pp}: remainder {remainder}"
        )
    return group


def _duration_table(stages: Sequence[StageTimes]) -> list[float]:
    """Return op times indexed by (rank * vpp + chunk) * 4 + kind."""
    table: list[float] = []
    for stage in stages:
        for f, b, w in zip(stage.forward_s, stage.backward_input_s, stage.backward_weight_s):
            table.extend((f, b, w, b + w))
    return table


def simulate_pipeline(
    stages: Sequence[StageTimes],
    *,
    num_microbatches: int,
    schedule: Schedule,
    p2p_s: float = 0.0,
    microbatch_group_size: int | None = None,
) -> PipelineResult:
    """Simulate one step of a pipeline schedule and return its makespan and bubbles.

    Each rank runs its ops one at a time in the schedule's static order; an op
    starts when its rank is free and its input op is done, plus `p2p_s` when
    that input ran on another rank. Inputs: F(mb, vs) needs F(mb, vs-1);
    B(mb, vs) needs B(mb, vs+1), or F(mb, vs) on the last virtual stage;
    W(mb, vs) needs B(mb, vs).

    Cost is one pass over all m * pp * vpp * (2 or 3) ops (about 0.15 us each),
    plus building the op graph once per (schedule, pp, vpp, m, group), cached.
    There is no large-m extrapolation: the max-plus steady state can repeat
    only every several microbatches (up to about pp) and near-tied stage times
    give long transients, so a short simulation does not give the exact period.

    Args:
        stages: One StageTimes per pipeline rank, all with the same number of chunks.
        num_microbatches: Microbatches per step (per data-parallel replica).
        schedule: Which per-rank op order to run (see the `_order_*` builders).
        p2p_s: Latency of one activation or gradient send between ranks, s.
        microbatch_group_size: Interleaved only: Megatron's
            `microbatch_group_size_per_vp_stage`, consecutive microbatches run on
            one chunk before moving to the next. None means pp, Megatron's default.

    Returns:
        The makespan, per-rank busy time, mean bubble fraction and memory peaks.

    Raises:
        ValueError: On an unknown schedule, mismatched chunk counts, or a broken
            schedule rule, e.g. "zbv needs vpp=2, got vpp=3".
    """
    pp, vpp, group = _validate(stages, num_microbatches, schedule, p2p_s,
                               microbatch_group_size)
    durations = _duration_table(stages)
    m = num_microbatches
    plan = _compile_plan(schedule, pp, vpp, m, group)
    makespan_s = _run_plan(plan, durations, p2p_s)
    busy_s = tuple(
        m * (sum(s.forward_s) + sum(s.backward_input_s) + sum(s.backward_weight_s))
        for s in stages
    )
    mean_busy_s = sum(busy_s) / pp
    # Float sums can put a pipeline without bubbles a few ulps below zero.
    bubble_fraction = max(0.0, 1.0 - mean_busy_s / makespan_s) if makespan_s > 0.0 else 0.0
    return PipelineResult(
        makespan_s=makespan_s,
        busy_s=busy_s,
        bubble_fraction=bubble_fraction,
        peak_in_flight=plan.peak_in_flight,
        peak_pending_weight_grad=plan.peak_pending_weight_grad,
    )


def closed_form_bubble_fraction(
    schedule: Schedule, pp: int, vpp: int, num_microbatches: int
) -> float:
    """Return the textbook bubble fraction (idle share of the makespan) of a schedule.

    Assumes uniform stages, p2p_s = 0 and, for the zero-bubble schedules,
    T_F = T_B = T_W per chunk (B and W split the backward 50/50, as Primus
    assumes). With p = pp, m = num_microbatches, v = vpp:

    - 1f1b, gpipe: (p-1) / (m + p - 1)  (Narayanan et al. 2021, arXiv 2104.04473, Sec. 2.2)
    - interleaved: (p-1) / (m*v + p - 1)  (same paper, Sec. 2.2.2)
    - zero-bubble (ZB-H1): (p-1) / (3m + p - 1), from the bubble (p-1) * T_F of
      Qi et al. 2024 (arXiv 2401.10241, Sec. 3.1) over the makespan. The
      Primus-Pipeline blog prints (p-1) / (3(m+p-1)), a third of 1F1B's, which
      differs at small m.
    - zbv: (p-1) / (6m + p - 1)  (Primus-Pipeline blog; 6m chunk ops per rank).

    The papers quote bubble time over ideal time, (p-1)/m for 1F1B; here it is
    idle time over the makespan. The simulator equals these exactly on uniform
    stages, for zero-bubble and zbv when m >= pp (below that our orders leave
    extra bubbles).

    Raises:
        ValueError: When the schedule rules of `simulate_pipeline` are broken.
    """
    _check_schedule(schedule)
    _validate_shape(schedule, pp, vpp, num_microbatches, None)
    p, m, v = pp, num_microbatches, vpp
    if schedule == "interleaved":
        return (p - 1) / (m * v + p - 1)
    if schedule == "zero-bubble":
        return (p - 1) / (3 * m + p - 1)
    if schedule == "zbv":
        return (p - 1) / (6 * m + p - 1)
    return (p - 1) / (m + p - 1)


def peak_in_flight_closed_form(
    schedule: Schedule,
    pp: int,
    vpp: int,
    num_microbatches: int,
    rank: int,
    *,
    microbatch_group_size: int | None = None,
) -> int:
    """Return the peak number of activation sets alive on `rank` (F done, B not done).

    - 1f1b, zero-bubble: min(pp - rank, m), Megatron's warm-up plus one.
    - gpipe: m.
    - interleaved: warm-up + 1 with warm-up = (pp - rank - 1) * 2 + (vpp - 1) * group,
      or m * vpp when the warm-up covers every forward (Megatron's
      `all_warmup_microbatches`).
    - zbv: min(m + 1 + rank, 2m, 2pp), what our greedy ZB-V order holds (read off
      the order and checked against the simulator in the tests); the 2pp cap is
      the memory limit of `_order_zbv`.

    Raises:
        ValueError: When the schedule rules of `simulate_pipeline` are broken or
            rank is not in [0, pp).
    """
    _check_schedule(schedule)
    group = _validate_shape(schedule, pp, vpp, num_microbatches, microbatch_group_size)
    if not 0 <= rank < pp:
        raise ValueError(f"rank must be in [0, pp={pp}), got rank={rank}")
    m = num_microbatches
    if schedule in ("1f1b", "zero-bubble"):
        return min(pp - rank, m)
    if schedule == "gpipe":
        return m
    if schedule == "zbv":
        return min(m + 1 + rank, 2 * m, 2 * pp)
    total = m * vpp
    num_warmup = (pp - rank - 1) * 2 + (vpp - 1) * group
    return total if num_warmup >= total else num_warmup + 1


def _check_schedule(schedule: str) -> None:
    """Raise ValueError for an unknown schedule name."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
