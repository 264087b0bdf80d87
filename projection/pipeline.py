"""Simulate pipeline-parallel schedules op by op.

This is a schedule simulator, not a bubble formula. Each pipeline rank runs a
static list of ops (forward F, backward-input B, backward-weight W of one
microbatch on one of its virtual chunks), built per schedule the way Megatron-LM
(`megatron/core/pipeline_parallel/schedules.py`) and the Primus-Pipeline tables
do. Times then follow a max-plus recurrence over one topological order of the
op graph: an op starts when its rank is free and its input is ready (plus
`p2p_s` when the input comes from another rank).

Names: pp = number of pipeline ranks, vpp = number of virtual chunks per rank,
m = number of microbatches, vs = virtual stage (0 .. pp*vpp - 1, data order).

The module is over 300 lines because it holds five schedule builders, the
greedy ZB-V builder and the large-m extrapolation; they share one op encoding.
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
            if not all(math.isfinite(v) and v >= 0.0 for v in values):
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


def _virtual_stage(schedule: Schedule, pp: int, rank: int, chunk: int) -> int:
    """Return the virtual stage held by chunk `chunk` of `rank`."""
    if schedule == "zbv" and chunk == 1:
        return 2 * pp - 1 - rank
    return chunk * pp + rank


def _order_1f1b(pp: int, m: int, rank: int, zero_bubble: bool) -> RankOrder:
    """Build 1F1B (Megatron non-interleaved) or ZB-H1 for one rank.

    ZB-H1 (Qi et al. 2024, arXiv 2401.10241, Sec. 3.1) keeps the 1F1B order of F
    and B and lets rank r defer its first r W ops, so that the last rank chains
    its B ops and the deferred W ops fill the cool-down. F-done-W-not-done then
    peaks at pp on every rank, as in 1F1B rank 0.
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


def _interleaved_table(pp: int, vpp: int, m: int) -> list[tuple[int, int]]:
    """Return (microbatch, chunk) of the k-th forward, as Megatron's `get_schedule_table`.

    Microbatches go in groups of pp (`microbatch_group_size_per_vp_stage` = pp,
    Megatron core >= 0.9); each group runs through chunk 0, 1, ..., vpp-1. When
    m is not a multiple of pp the last group is the m % pp leftover ones.
    """
    table: list[tuple[int, int]] = []
    for first in range(0, m, pp):
        last = min(first + pp, m)
        table.extend((mb, c) for c in range(vpp) for mb in range(first, last))
    return table


def _order_interleaved(pp: int, vpp: int, m: int, rank: int) -> RankOrder:
    """Build Megatron's interleaved 1F1B for one rank.

    `forward_backward_pipelining_with_interleaving`: warm-up
    (pp - rank - 1) * 2 + (vpp - 1) * pp forwards (all of them when m == pp),
    then one forward and one backward per step, then the remaining backwards.
    The k-th backward runs the k-th table entry with its chunk reversed.
    """
    table = _interleaved_table(pp, vpp, m)
    total = len(table)
    if m == pp:
        num_warmup = total
    else:
        num_warmup = min((pp - rank - 1) * 2 + (vpp - 1) * pp, total)
    order: RankOrder = [(_F, mb, c) for mb, c in table[:num_warmup]]
    for k in range(total):
        if num_warmup + k < total:
            mb, c = table[num_warmup + k]
            order.append((_F, mb, c))
        mb, c = table[k]
        order.append((_BW, mb, vpp - 1 - c))
    return order
