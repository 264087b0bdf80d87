"""Per-rank op orders of the pipeline schedules and their compiled op graph (projection/pipeline.py runs them).

Each pipeline rank runs a static list of ops (forward F, backward-input B, backward-weight W of
one microbatch on one of its virtual chunks), built per schedule the way Megatron-LM
(`megatron/core/pipeline_parallel/schedules.py`) and the Primus-Pipeline tables do: the
orders of every rank at once in numpy (`_rank_arrays`; ZB-V from the greedy `_order_zbv`). The
compiler turns them into flat arrays in one topological order; `_run_plan` is the max-plus
pass over it, on exact integers (`_exact_ints`): the exact simulator the tests compare every
fast path against.

Names: pp = number of pipeline ranks, vpp = number of virtual chunks per rank,
m = number of microbatches, vs = virtual stage (0 .. pp*vpp - 1, data order).

The module is near 400 lines because the orders, the ZB-V greedy and the graph compiler share one
op encoding.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from projection.vocabulary import PIPELINE_SCHEDULES, PipelineSchedule

Schedule = PipelineSchedule                      # the closed set lives in projection/vocabulary.py
SCHEDULES: tuple[Schedule, ...] = PIPELINE_SCHEDULES

# Op kinds. BW is B and W run back to back (every schedule but the zero-bubble ones).
_F, _B, _W, _BW = 0, 1, 2, 3
_NUM_KINDS = 4


@dataclass(frozen=True, slots=True)
class _Plan:
    """Compiled op graph of one (schedule, pp, vpp, m), in topological order.

    Op i (1-based; index 0 is a zero-time sentinel) waits for op prev[i-1] (the
    previous op on its rank) and op dep[i-1] (its data input); dur_key[i-1]
    indexes the per-call duration table; cross_dep[i-1] is dep[i-1] when the input
    comes from another rank, else 0 (what `_run_plan` reads: an input on the same
    rank ran earlier on it, so it never ends after the rank's previous op).
    """

    prev: tuple[int, ...]
    dep: tuple[int, ...]
    cross_dep: tuple[int, ...]
    dur_key: tuple[int, ...]
    last_op: tuple[int, ...]
    peak_in_flight: tuple[int, ...]
    peak_pending_weight_grad: tuple[int, ...]
    rank_ops: tuple[tuple[int, ...], ...]
    """Per rank, the global (1-based) index of each op in the rank's execution order."""


RankOrder = list[tuple[int, int, int]]  # (kind, microbatch, chunk) in execution order (zbv's greedy builds these)
_Fifo = list[tuple[int, int]]  # (ready time, microbatch), read from a head index


def _virtual_stage(schedule: Schedule, pp: int, rank: int, chunk: int) -> int:
    """Return the virtual stage held by chunk `chunk` of `rank`."""
    if schedule == "zbv" and chunk == 1:
        return 2 * pp - 1 - rank
    return chunk * pp + rank


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


def _place(order: np.ndarray, rows: np.ndarray, positions: np.ndarray, kind: int | np.ndarray, mb: np.ndarray,
           chunk: np.ndarray | int) -> None:
    """Write ops (kind, microbatch, chunk) at their per-rank positions of a (pp, ops, 3) order."""
    order[rows, positions, 0] = kind
    order[rows, positions, 1] = mb
    order[rows, positions, 2] = chunk


def _rank_arrays(schedule: Schedule, pp: int, vpp: int, m: int, group: int) -> np.ndarray:
    """Return the static op order of every rank: one (pp, ops, 3) int array of (kind, microbatch, chunk).

    Every rank runs the same number of ops, so each op's position in its rank's order has a closed
    form, written below per schedule without op loops:

    - gpipe: all forwards, then all backwards (B+W).
    - 1f1b (Megatron non-interleaved 1F1B): min(pp - rank - 1, m) warm-up forwards, then F and B+W
      alternating, then the cool-down backwards.
    - interleaved (Megatron's `forward_backward_pipelining_with_interleaving`, releases with
      `microbatch_group_size_per_vp_stage`): the forwards follow `_one_f_one_b_table` (Megatron's
      `get_schedule_table`: microbatches in groups of `group`, each group through chunk 0 .. vpp-1);
      warm-up (pp - rank - 1) * 2 + (vpp - 1) * group forwards, capped at m * vpp; then one forward and
      one backward per step; then the remaining backwards.  The k-th backward runs the k-th table entry
      with its chunk reversed.  (Older releases also ran every forward first when m == pp; not modelled.)
    - zero-bubble (ZB-H1, Qi et al. 2024, arXiv 2401.10241, Sec. 3.1): the 1F1B order of F and B, and
      rank r runs each W r microbatches late (the last r W ops at the end), so B ops chain through the
      pipeline and deferred W ops fill the cool-down.  F-done-W-not-done then peaks at pp on every rank,
      as on 1F1B rank 0.  On uniform stages with T_W <= min(T_F, T_B) and m >= pp it idles
      (p-1)(T_F + T_B - T_W), the paper's ZB-H1 bubble (tested); with T_W > T_F a W no longer fits the
      gap before the next B and it idles (p-1) * T_B.
    - zbv: built by the greedy `_order_zbv`.

    tests/projection/test_pipeline_orders.py pins small orders op for op and checks the rules above on
    every small shape.
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
    table_mb, table_c, total, warm = _one_f_one_b_table(schedule, pp, vpp, m, group)
    w = np.asarray(warm, dtype=np.int64)[:, None]
    k = np.arange(total, dtype=np.int64)[None, :]
    forward_at = np.where(k < w, k, 2 * k - w)                      # F of table entry k
    backward_at = np.where(k < total - w, w + 2 * k + 1, total + k)  # B+W of table entry k
    # the F ops then the B+W ops of every rank, written to their positions in one scatter
    ops = np.empty((2 * total, 3), dtype=np.int64)
    ops[:total, 0], ops[:total, 1], ops[:total, 2] = _F, table_mb, table_c
    ops[total:, 0], ops[total:, 1], ops[total:, 2] = _BW, table_mb, vpp - 1 - table_c
    order = np.empty((pp, 2 * total, 3), dtype=np.int64)
    order[rank, np.concatenate([forward_at, backward_at], axis=1)] = ops
    return order


def _op_keys(schedule: Schedule, pp: int, vpp: int, m: int, group: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per rank and op, (pp, ops) arrays: kind, own done key, input done key (-1: none), input from another
    rank, duration key."""
    kind, mb, c = _rank_arrays(schedule, pp, vpp, m, group).transpose(2, 0, 1).copy()   # contiguous (pp, ops)
    num_vs = pp * vpp
    rank = np.arange(pp, dtype=np.int64)[:, None]
    # vs_of[r, c] == _virtual_stage(schedule, pp, r, c), in numpy
    vs_of = np.arange(vpp, dtype=np.int64)[None, :] * pp + rank
    if schedule == "zbv" and vpp > 1:
        vs_of[:, 1] = 2 * pp - 1 - rank[:, 0]
    rank_of_vs = np.zeros(num_vs, dtype=np.int64)
    rank_of_vs[vs_of.ravel()] = np.repeat(np.arange(pp), vpp)
    vs = vs_of[rank, c]
    is_f, is_w = kind == _F, kind == _W
    base = mb * num_vs
    # done slot: F=0, B or BW=1, W=2; input: F <- F(vs-1), W <- B(vs), B <- B(vs+1) or F(last vs)
    own_keys = (base + vs) * 3 + np.where(is_w, 2, np.minimum(kind, 1))
    last_vs = vs == num_vs - 1
    dep_vs = np.where(is_f, vs - 1, np.where(is_w | last_vs, vs, vs + 1))
    dep_slot = np.where(is_f | (~is_w & last_vs), 0, 1)
    dep_keys = np.where(is_f & (vs == 0), -1, (base + dep_vs) * 3 + dep_slot)
    crosses = (dep_keys >= 0) & (rank_of_vs[np.clip(dep_vs, 0, num_vs - 1)] != rank)
    dur_keys = (rank * vpp + c) * _NUM_KINDS + kind
    return kind, own_keys, dep_keys, crosses, dur_keys


# A plan holds about 90 bytes per op: 1.5 MB for pp=16, vpp=4, m=128; 24 MB at m=2048.
@functools.lru_cache(maxsize=256)
def _compile_plan(schedule: Schedule, pp: int, vpp: int, m: int, group: int) -> _Plan:
    """Turn the per-rank orders into flat arrays in one topological order.

    The order drains each rank as far as its inputs allow; a blocked rank waits
    on its missing input and resumes when that op is placed. Ops left unplaced
    mean the orders deadlock, a bug in a builder (the validation rules exclude
    Megatron's deadlocking shapes).
    Keys, dependencies and peaks are numpy over all ops; only the drain, which
    needs each op's input to be placed first, loops (over ready checks alone).
    """
    kind, own_keys, dep_keys, crosses, dur_keys = _op_keys(schedule, pp, vpp, m, group)
    # Global index (1-based) of the finished op of each done key; 0 = not yet.  The extra last slot, read by
    # the key -1 (no input), counts as done.
    done = [0] * (m * pp * vpp * 3) + [-1]
    n = kind.shape[1]
    placed = 0
    # A rank drains until an input is missing, then waits on that key; finishing the key wakes it.
    # Each op is placed once and each wait is registered once (no rounds over idle ranks).  Any
    # topological order gives the same finish times (exact integers, max-plus), hence the same results.
    # A key is waited on by at most one rank (an input on the same rank is placed before its reader):
    # waiting[key] is that rank, -1 none; held[r] is the own key of rank r's blocked op.
    waiting = [-1] * len(done)
    held: list[int | None] = [None] * pp
    runs = [zip(deps, owns) for deps, owns in zip(dep_keys.tolist(), own_keys.tolist(), strict=True)]
    ready = list(range(pp - 1, -1, -1))
    wake = ready.append
    while ready:
        r = ready.pop()
        own = held[r]
        if own is not None:                # woken: its input is done now
            placed += 1
            done[own] = placed
            if waiting[own] >= 0:
                wake(waiting[own])
            held[r] = None
        for k, own in runs[r]:
            if not done[k]:
                waiting[k] = r
                held[r] = own
                break
            placed += 1
            done[own] = placed
            if waiting[own] >= 0:
                wake(waiting[own])
    assert placed == pp * n, f"{schedule} order deadlocks (pp={pp}, vpp={vpp}, m={m})"
    # rank-major arrays -> topological order
    done_arr = np.asarray(done, dtype=np.int64)
    global_index = done_arr[own_keys]
    order_of = np.empty(pp * n, dtype=np.int64)
    order_of[global_index.ravel() - 1] = np.arange(pp * n)
    prev_rm = np.concatenate([np.zeros((pp, 1), dtype=np.int64), global_index[:, :-1]], axis=1).ravel()
    dep_rm = np.where(dep_keys >= 0, done_arr[np.maximum(dep_keys, 0)], 0).ravel()
    in_flight, pending_w = _peaks_arrays(kind)
    shared = _shared_ints(max(pp * n + 1, pp * vpp * _NUM_KINDS))

    def ints(values: np.ndarray) -> tuple[int, ...]:
        return tuple(map(shared.__getitem__, values.tolist()))

    dep = ints(dep_rm[order_of])
    return _Plan(
        prev=ints(prev_rm[order_of]),
        dep=dep,
        cross_dep=tuple(d if x else 0 for d, x in zip(dep, crosses.ravel()[order_of].tolist(), strict=True)),
        dur_key=ints(dur_keys.ravel()[order_of]),
        last_op=ints(global_index[:, -1]),
        peak_in_flight=in_flight,
        peak_pending_weight_grad=pending_w,
        rank_ops=tuple(map(ints, global_index)),
    )


_SHARED_INTS: list[int] = []


def _shared_ints(count: int) -> list[int]:
    """The ints 0 .. count - 1 as one object each, shared by every plan: a plan's tuples hold pointers to them
    (8 bytes an entry) instead of an int object of their own (another 28-32 bytes) each; a search keeps a few
    hundred plans of up to ~10^5 ops."""
    if len(_SHARED_INTS) < count:
        _SHARED_INTS.extend(range(len(_SHARED_INTS), count))
    return _SHARED_INTS


def _one_f_one_b_table(schedule: Schedule, pp: int, vpp: int, m: int, group: int
                       ) -> tuple[np.ndarray, np.ndarray, int, list[int]]:
    """(microbatch, chunk) of each forward-table entry, the table's length and each rank's warm-up forwards.

    The forward order of interleaved (Megatron's `get_schedule_table`: microbatches in groups of ``group``,
    each group through chunk 0 .. vpp-1, the last group holding the m % group leftovers) and of 1f1b
    (chunk 0 only), read by :func:`_rank_arrays` and the one-pass simulation (projection/pipeline_direct.py).
    """
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
        return table_mb, table_c, total, [min((pp - r - 1) * 2 + (vpp - 1) * group, total) for r in range(pp)]
    return np.arange(m, dtype=np.int64), np.zeros(m, dtype=np.int64), m, [min(pp - r - 1, m) for r in range(pp)]


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
    # stages mostly share their times: convert each distinct value once (0.0 and -0.0 both give 0)
    ratios = {d: d.as_integer_ratio() for d in set(durations)}
    p2p_num, p2p_den = p2p_s.as_integer_ratio()
    den = max(p2p_den, max(d for _, d in ratios.values()))
    scaled = {value: n * (den // d) for value, (n, d) in ratios.items()}
    return list(map(scaled.__getitem__, durations)), p2p_num * (den // p2p_den), den


def _run_plan(plan: _Plan, durations: list[int], p2p: int) -> list[int]:
    """Return every op's finish time (index 0: the sentinel, 0) by one max-plus pass in topological order.

    An op ends at max(its rank's previous op, its input + p2p when that ran on another rank) + its time.
    Inputs on the same rank are dropped (``cross_dep`` reads the sentinel: they never end after the
    rank's previous op), so every input read adds p2p.  The sentinel holds -p2p during the pass: a
    first op of a rank then reads -p2p as its previous op's end, and an op without an input reads
    -p2p + p2p = 0; since an input's end + p2p is >= 0, max(-p2p, b) = max(0, b) = b: the same
    values as a sentinel of 0 that adds no p2p (exact integers).
    """
    dur = itemgetter(*plan.dur_key)(durations)
    fin = [-p2p]
    append = fin.append
    if p2p == 0:
        for p, d, t in zip(plan.prev, plan.cross_dep, dur):
            a = fin[p]
            b = fin[d]
            append((a if a > b else b) + t)
    else:
        for p, d, t in zip(plan.prev, plan.cross_dep, dur):
            a = fin[p]
            b = fin[d] + p2p
            append((a if a > b else b) + t)
    fin[0] = 0
    return fin
