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

The module is over 500 lines because the five order builders (with their
numpy twins), the ZB-V greedy, the graph compiler, the steady-state fast path
and the closed forms share one op encoding; split them and that encoding would
have to be exported.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Literal

import numpy as np

from projection import fast_paths

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
    rank_ops: tuple[tuple[int, ...], ...]
    """Per rank, the global (1-based) index of each op in the rank's execution order."""


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


def _place(order: np.ndarray, rows: np.ndarray, positions: np.ndarray, kind: int | np.ndarray, mb: np.ndarray,
           chunk: np.ndarray | int) -> None:
    """Write ops (kind, microbatch, chunk) at their per-rank positions of a (pp, ops, 3) order."""
    order[rows, positions, 0] = kind
    order[rows, positions, 1] = mb
    order[rows, positions, 2] = chunk


def _rank_arrays(schedule: Schedule, pp: int, vpp: int, m: int, group: int) -> np.ndarray:
    """Return `_rank_orders` as one (pp, ops, 3) int array of (kind, microbatch, chunk), without op loops.

    Every rank runs the same number of ops, so each op's position in its rank's order has a
    closed form (below, per schedule); tests/projection/test_pipeline_steady.py checks the
    result equal to the builders above. zbv, built by a greedy, is converted from `_order_zbv`.
    """
    if schedule == "zbv":
        return np.array(_order_zbv(pp, m), dtype=np.int64).reshape(pp, 6 * m, 3)
    rank = np.arange(pp, dtype=np.int64)[:, None]
    if schedule == "gpipe":
        mb = np.arange(m, dtype=np.int64)
        row = np.concatenate([np.stack([np.full(m, _F), mb, 0 * mb], 1), np.stack([np.full(m, _BW), mb, 0 * mb], 1)])
        return np.broadcast_to(row, (pp, 2 * m, 3)).copy()
    if schedule == "zero-bubble":
        # warm-up w F; step j: F(w+j) if w+j < m, B(j), W(j-r) if j >= r; then the last min(r, m) W
        order = np.zeros((pp, 3 * m, 3), dtype=np.int64)
        w = np.minimum(pp - rank - 1, m)
        j = np.arange(m, dtype=np.int64)[None, :]
        rows = np.broadcast_to(rank, (pp, m))
        has_f = w + j < m
        before = np.minimum(j, m - w) + j + np.maximum(0, j - rank)     # ops of the steps before j
        start = w + before
        f_mb = np.broadcast_to(np.minimum(w + j, m - 1), (pp, m))
        _place(order, rows[has_f], start[has_f], _F, f_mb[has_f], 0)
        warm = j < w
        _place(order, rows[warm], np.broadcast_to(j, (pp, m))[warm], _F, np.broadcast_to(j, (pp, m))[warm], 0)
        _place(order, rows, start + has_f, _B, np.broadcast_to(j, (pp, m)), 0)
        has_w = j >= rank
        _place(order, rows[has_w], (start + has_f + 1)[has_w], _W, (j - rank)[has_w], 0)
        steps = (m - w) + m + np.maximum(0, m - rank)                     # ops of all steps
        trailing = j >= np.maximum(0, m - rank)
        _place(order, rows[trailing], (w + steps + j - np.maximum(0, m - rank))[trailing], _W,
               np.broadcast_to(j, (pp, m))[trailing], 0)
        return order
    # 1f1b and interleaved: table of forwards, warm-up w, then steps (F of entry w+k if any, B+W of entry k)
    if schedule == "interleaved":
        full, per = m // group, group * vpp
        e = np.arange(full * per, dtype=np.int64)
        table_mb, table_c = (e // per) * group + e % group, (e % per) // group
        rest = m - full * group
        if rest:
            e = np.arange(rest * vpp, dtype=np.int64)
            table_mb = np.concatenate([table_mb, full * group + e % rest])
            table_c = np.concatenate([table_c, e // rest])
        total = m * vpp
        w = np.minimum((pp - rank - 1) * 2 + (vpp - 1) * group, total)
    else:
        total = m
        table_mb, table_c = np.arange(m, dtype=np.int64), np.zeros(m, dtype=np.int64)
        w = np.minimum(pp - rank - 1, m)
    order = np.zeros((pp, 2 * total, 3), dtype=np.int64)
    k = np.arange(total, dtype=np.int64)[None, :]
    rows = np.broadcast_to(rank, (pp, total))
    forward_at = np.where(k < w, k, 2 * k - w)                      # F of table entry k
    backward_at = np.where(k < total - w, w + 2 * k + 1, total + k)  # B+W of table entry k
    _place(order, rows, forward_at, _F, np.broadcast_to(table_mb, (pp, total)), np.broadcast_to(table_c, (pp, total)))
    _place(order, rows, backward_at, _BW, np.broadcast_to(table_mb, (pp, total)),
           np.broadcast_to(vpp - 1 - table_c, (pp, total)))
    return order


# A plan holds about 90 bytes per op: 1.5 MB for pp=16, vpp=4, m=128; 24 MB at m=2048.
@functools.lru_cache(maxsize=256)
def _compile_plan(schedule: Schedule, pp: int, vpp: int, m: int, group: int) -> _Plan:
    """Turn the per-rank orders into flat arrays in one topological order.

    The order drains each rank as far as its inputs allow, round-robin over
    ranks. A round with no progress means the orders deadlock, a bug in a
    builder (the validation rules exclude Megatron's deadlocking shapes).
    Keys, dependencies and peaks are numpy over all ops; only the drain, which
    needs each op's input to be placed first, loops (over ready checks alone).
    """
    orders = _rank_arrays(schedule, pp, vpp, m, group)
    num_vs = pp * vpp
    vs_of = np.array([[_virtual_stage(schedule, pp, r, c) for c in range(vpp)] for r in range(pp)], dtype=np.int64)
    rank_of_vs = np.zeros(num_vs, dtype=np.int64)
    rank_of_vs[vs_of.ravel()] = np.repeat(np.arange(pp), vpp)
    kind, mb, c = orders[:, :, 0], orders[:, :, 1], orders[:, :, 2]
    rank = np.arange(pp, dtype=np.int64)[:, None]
    vs = vs_of[rank, c]
    # done slot: F=0, B or BW=1, W=2; input: F <- F(vs-1), W <- B(vs), B <- B(vs+1) or F(last vs)
    own_keys = (mb * num_vs + vs) * 3 + np.where(kind == _W, 2, np.minimum(kind, 1))
    last_vs = vs == num_vs - 1
    dep_vs = np.where(kind == _F, vs - 1, np.where((kind == _W) | last_vs, vs, vs + 1))
    dep_slot = np.where((kind == _F) | ((kind != _W) & last_vs), 0, 1)
    dep_keys = np.where((kind == _F) & (vs == 0), -1, (mb * num_vs + dep_vs) * 3 + dep_slot)
    crosses = (dep_keys >= 0) & (rank_of_vs[np.clip(dep_vs, 0, num_vs - 1)] != rank)
    dur_keys = (rank * vpp + c) * _NUM_KINDS + kind
    # Global index (1-based) of the finished op of each done key; 0 = not yet.
    done = [0] * (m * num_vs * 3)
    rank_ops: list[list[int]] = [[] for _ in range(pp)]
    pos = [0] * pp
    dep_lists = dep_keys.tolist()
    own_lists = own_keys.tolist()
    n = orders.shape[1]
    placed = 0
    remaining = pp * n
    while remaining:
        progressed = False
        for r in range(pp):
            i, deps, owns, ops = pos[r], dep_lists[r], own_lists[r], rank_ops[r]
            start = i
            while i < n:
                k = deps[i]
                if k >= 0 and done[k] == 0:
                    break
                placed += 1
                done[owns[i]] = placed
                ops.append(placed)
                i += 1
            if i > start:
                progressed = True
                remaining -= i - start
                pos[r] = i
        assert progressed, f"{schedule} order deadlocks (pp={pp}, vpp={vpp}, m={m})"
    # rank-major arrays -> topological order
    global_index = np.array(rank_ops, dtype=np.int64)
    order_of = np.empty(pp * n, dtype=np.int64)
    order_of[global_index.ravel() - 1] = np.arange(pp * n)
    prev_rm = np.concatenate([np.zeros((pp, 1), dtype=np.int64), global_index[:, :-1]], axis=1).ravel()
    done_arr = np.asarray(done, dtype=np.int64)
    dep_rm = np.where(dep_keys >= 0, done_arr[np.maximum(dep_keys, 0)], 0).ravel()
    in_flight, pending_w = _peaks_arrays(kind)
    return _Plan(
        prev=tuple(prev_rm[order_of].tolist()),
        dep=tuple(dep_rm[order_of].tolist()),
        cross=tuple(crosses.ravel()[order_of].astype(np.int64).tolist()),
        dur_key=tuple(dur_keys.ravel()[order_of].tolist()),
        last_op=tuple(global_index[:, -1].tolist()),
        peak_in_flight=in_flight,
        peak_pending_weight_grad=pending_w,
        rank_ops=tuple(map(tuple, rank_ops)),
    )


def _peaks_arrays(kind: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Return per-rank peaks of F-done-B-not-done and B-done-W-not-done counts from (pp, ops) op kinds."""
    in_flight_step = np.array([1, -1, 0, -1], dtype=np.int64)   # by kind F, B, W, BW
    pending_step = np.array([0, 1, -1, 0], dtype=np.int64)
    in_flight = np.maximum(0, np.cumsum(in_flight_step[kind], axis=1).max(axis=1))
    pending = np.maximum(0, np.cumsum(pending_step[kind], axis=1).max(axis=1))
    return tuple(in_flight.tolist()), tuple(pending.tolist())


def _exact_ints(durations: Sequence[float], p2p_s: float) -> tuple[list[int], int, int]:
    """Return the op times and the latency as integers over one power-of-two denominator, exactly.

    Every finite float is n / 2**k; over the largest 2**k all of them are integers, and the
    max-plus recurrence on integers is exact. The makespan is then the exact real-number
    makespan of the given times, rounded once (one int / int division), and it does not
    depend on the order of additions, so the steady-state extrapolation below gives the
    same bits as the full simulation.
    """
    ratios = [d.as_integer_ratio() for d in durations]
    p2p_num, p2p_den = p2p_s.as_integer_ratio()
    den = max(p2p_den, max(d for _, d in ratios))
    return [n * (den // d) for n, d in ratios], p2p_num * (den // p2p_den), den


def _run_plan(plan: _Plan, durations: list[int], p2p: int) -> list[int]:
    """Return every op's finish time (index 0: the sentinel) by one max-plus pass in topological order."""
    dur = itemgetter(*plan.dur_key)(durations)
    fin = [0]  # fin[0] is the sentinel "nothing to wait for"
    append = fin.append
    if p2p == 0:
        for p, d, t in zip(plan.prev, plan.dep, dur):
            a = fin[p]
            b = fin[d]
            append((a if a > b else b) + t)
    else:
        extra = itemgetter(*plan.cross)((0, p2p))
        for p, d, x, t in zip(plan.prev, plan.dep, extra, dur):
            a = fin[p]
            b = fin[d] + x
            append((a if a > b else b) + t)
    return fin


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

_PeriodicShape = tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]
_MAX_CYCLE = 16           # longest repetition period searched, in periods
_PROBE_PERIODS = 8        # periods of the small plan that measures the dependency reach
_RESULT_CACHE: dict[tuple[object, ...], tuple[float, tuple[int, ...], tuple[int, ...]]] = {}
_RESULT_CACHE_SIZE = 1 << 14


def _periodic_shape(schedule: Schedule, pp: int, vpp: int, m: int, group: int) -> _PeriodicShape | None:
    """Return (shift, heads, lengths, counts) of the periodic middle of every rank's order, or None.

    shift: microbatches per period; heads[r]: ops of rank r before its first period;
    lengths[r]: ops per period; counts[r]: periods (all grow by 1 when m grows by shift).
    See `_order_1f1b` and `_order_interleaved` for the orders these read off.
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


@functools.lru_cache(maxsize=256)
def _reach(schedule: Schedule, pp: int, vpp: int, m: int, group: int) -> tuple[int, int, int]:
    """Return (lag, head_reach, tail_reach) of the plan's periodic ops, in periods.

    lag: the largest period distance between a periodic op and a periodic op it depends on;
    head_reach: the last period (on any rank) with an op that depends on a head op;
    tail_reach: the most periods before its rank's end of an op that depends on a tail op.
    """
    plan = _compile_plan(schedule, pp, vpp, m, group)
    shape = _periodic_shape(schedule, pp, vpp, m, group)
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


def _repetition(plan: _Plan, fin: list[int], shape: _PeriodicShape, cycles: Sequence[int]
                ) -> tuple[int, int, int] | None:
    """Return (c, D, t): from period t on, every op finishes D after its twin c periods before; or None.

    The same D on every rank and slot, exact (integers); among the cycles c that repeat at the
    end, the one with the shortest transient t + c wins.
    """
    _, heads, lengths, counts = shape
    sequences = [[fin[op] for op in ops[h:h + n * length]]
                 for ops, h, n, length in zip(plan.rank_ops, heads, counts, lengths, strict=True)]
    shortest = min(counts)
    best: tuple[int, int, int] | None = None
    for c in cycles:
        if 3 * c > shortest or (best is not None and c >= best[0] + best[2]):
            break    # a longer cycle cannot have a shorter t + c
        D = sequences[0][-1] - sequences[0][-1 - c * lengths[0]]
        # cheap test first: the last two cycles of every rank repeat with D
        if not all(all(map(D.__eq__, map(operator.sub, seq[-2 * c * length:], seq[-3 * c * length:-c * length])))
                   for seq, length in zip(sequences, lengths, strict=True)):
            continue
        t = 0
        for seq, length in zip(sequences, lengths, strict=True):
            step = c * length
            unequal = list(map(D.__ne__, map(operator.sub, seq[step:], seq)))   # unequal[k]: op k + step vs op k
            if True in unequal:
                last_bad = len(unequal) - 1 - unequal[::-1].index(True)
                t = max(t, -(-(last_bad + 1) // length))   # first period whose ops all repeat, to the end
        if best is None or t + c < best[2] + best[0]:
            best = (c, D, t)
    return best


def _room(lag: int, tail_reach: int, c: int) -> int:
    """Periods from the transient's end to the shortest rank's end that the argument above needs.

    The insertion point a = t + lag needs the repetition from a - lag, and a + c + lag must come
    before the last periods whose ops read tail ops.
    """
    return 2 * lag + c + max(0, tail_reach + 1) + 2


def _attempt(schedule: Schedule, pp: int, vpp: int, m: int, group: int, durations: list[int], p2p: int,
             small_m: int, cycles: Sequence[int]) -> tuple[int, _Plan, int, int, int]:
    """Simulate small_m microbatches; return (makespan, plan, c, D, periods needed), c = 0 without repetition.

    Periods needed: the transient plus the room the repetition needs; when the small step has
    that many it extrapolates, else a step with that many would.
    """
    lag, _, tail_reach = _reach(schedule, pp, vpp, small_m, group)
    plan = _compile_plan(schedule, pp, vpp, small_m, group)
    shape = _periodic_shape(schedule, pp, vpp, small_m, group)
    assert shape is not None
    fin = _run_plan(plan, durations, p2p)
    makespan = max(fin[i] for i in plan.last_op)
    found = _repetition(plan, fin, shape, cycles)
    if found is None:
        return makespan, plan, 0, 0, 0
    c, D, t = found
    return makespan, plan, c, D, t + _room(lag, tail_reach, c)


def _steady_makespan(schedule: Schedule, pp: int, vpp: int, m: int, group: int, durations: list[int],
                     p2p: int) -> tuple[int, _Plan] | None:
    """Return the exact makespan of m microbatches from a shorter step that reaches its steady state.

    Returns the small step's plan too (its memory peaks equal the long step's: the in-flight
    counts repeat every period). None when no shortcut applies or pays: the first small step
    has at most a third of the periods, all attempts together at most 3/4 (so a miss costs at
    most a third more than the full simulation); attempts grow from the dependency reach to
    what the measured transient needs, or double.
    """
    shape = _periodic_shape(schedule, pp, vpp, m, group)
    if shape is None:
        return None
    shift, _, _, counts = shape
    shortest = min(counts)
    if shortest < 2 * _PROBE_PERIODS:
        return None
    lag, _, tail_reach = _reach(schedule, pp, vpp, m - (shortest - _PROBE_PERIODS) * shift, group)
    keep = max(_PROBE_PERIODS, _room(lag, tail_reach, 1) + 4)
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
    steady = _steady_makespan(schedule, pp, vpp, m, group, ints, p2p) if fast else None
    if steady is not None:
        makespan, plan = steady
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

    Times are exact: op times are turned into integers over one power-of-two
    denominator (`_exact_ints`), so the makespan is the exact real-number one,
    rounded once. Cost: one pass over all m * pp * vpp * (2 or 3) ops (about
    0.07 us each) plus building the op graph once per (schedule, pp, vpp, m,
    group), cached; for 1f1b, zero-bubble and interleaved with many
    microbatches, a shorter step that reaches its steady state is simulated
    instead and extrapolated with the same bits (`_steady_makespan`; the
    repetition period and the transient are measured, and without a repetition
    the full pass runs). Results are memoised on their exact inputs.
    `projection.fast_paths.disabled()` turns the shortcut and the memo off.

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
    makespan_s, peak_in_flight, peak_pending = _simulate(schedule, pp, vpp, m, group, durations, p2p_s)
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
        peak_in_flight=peak_in_flight,
        peak_pending_weight_grad=peak_pending,
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
