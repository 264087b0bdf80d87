"""Simulate pipeline-parallel schedules op by op.

This is a schedule simulator, not a bubble formula. Each pipeline rank runs a
static list of ops (forward F, backward-input B, backward-weight W of one
microbatch on one of its virtual chunks), built per schedule the way Megatron-LM
(`megatron/core/pipeline_parallel/schedules.py`) and the Primus-Pipeline tables
do (`projection.pipeline_plan`). Times then follow a max-plus recurrence over one
topological order of the op graph: an op starts when its rank is free and its
input is ready, plus `p2p_s` when the input comes from another rank. Primus
Projection restores PP the same way (shared/notes/primus-projection.md, Sec. 2.2).
Long steps take an exact steady-state shortcut (`projection.pipeline_steady`).

Schedules (per-rank op orders):
    gpipe: all F, then all B+W.
    1f1b: Megatron non-interleaved 1F1B.
    interleaved: Megatron interleaved 1F1B (virtual chunks, microbatch groups).
    zero-bubble: ZB-H1, 1F1B with W split off and deferred.
    zbv: ZB-V, V-shaped two-chunk schedule built by a unit-time greedy.

Names: pp = number of pipeline ranks, vpp = number of virtual chunks per rank,
m = number of microbatches, vs = virtual stage (0 .. pp*vpp - 1, data order).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from projection.pipeline_plan import SCHEDULES, Schedule
from projection.pipeline_steady import _simulate


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

    @classmethod
    def trusted(cls, *, forward_s: tuple[float, ...], backward_input_s: tuple[float, ...],
                backward_weight_s: tuple[float, ...]) -> StageTimes:
        """Build without the per-instance checks: for a caller that checked every value (finite, >= 0) in bulk."""
        stage = object.__new__(cls)
        object.__setattr__(stage, "forward_s", forward_s)
        object.__setattr__(stage, "backward_input_s", backward_input_s)
        object.__setattr__(stage, "backward_weight_s", backward_weight_s)
        return stage


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
    denominator (`pipeline_plan._exact_ints`), so the makespan is the exact real-number one,
    rounded once. Cost: one pass over all m * pp * vpp * (2 or 3) ops (about
    0.07 us each) plus building the op graph once per (schedule, pp, vpp, m,
    group), cached; for 1f1b, zero-bubble and interleaved with many
    microbatches, a shorter step that reaches its steady state is simulated
    instead and extrapolated with the same bits (`pipeline_steady`; the
    repetition period and the transient are measured, and without a repetition
    the full pass runs). Results are memoised on their exact inputs.
    `projection.fast_paths.disabled()` turns the shortcut and the memo off.

    Args:
        stages: One StageTimes per pipeline rank, all with the same number of chunks.
        num_microbatches: Microbatches per step (per data-parallel replica).
        schedule: Which per-rank op order to run (see `pipeline_plan._rank_arrays`).
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
    return peak_in_flight_unchecked(schedule, pp, vpp, num_microbatches, rank, group)


def peak_in_flight_unchecked(schedule: str, pp: int, vpp: int, m: int, rank: int, group: int) -> int:
    """:func:`peak_in_flight_closed_form` without its argument checks (callers check once per layout):
    the micro-batch forwards rank ``rank`` holds at its peak, ``group`` the interleaved micro-batch group."""
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
