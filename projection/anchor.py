"""Anchored projection: job-specific corrections solved from measured runs of the job, applied to every layout.

Systematic errors of a job (its framework build, kernels, cluster) are largely shared by every layout of
that job.  A measured run of it (an *anchor*: a training log, a sweep run, a measured-mode result) is
projected like any layout; the gap between its measured and projected step time is explained by two
factors with physical meaning, and the memory gap by one offset:

- ``compute_factor`` c: measured / projected time of the compute the step waits on (GEMMs, attention,
  element-wise kernels, and the pipeline bubble in proportion to them).  c < 1: the job's kernels run
  faster than the device and framework profiles say.
- ``comm_factor`` k: the same for the exposed communication (TP, CP, EP, DP and the bubble's share of
  them).  Solved only when two or more anchors differ in their communication share of the step by at
  least :data:`COMM_SHARE_SPREAD`; otherwise k stays at its prior, 1.
- ``memory_offset_gib``: measured - projected peak memory per GPU, the mean over anchors that logged a
  peak (allocator pools, framework buffers the memory model does not hold).

Both factors are then shrunk towards 1 by how much of an anchor's error the job's other layouts share
(:func:`shrink`): with a weight ``w`` (0..1) estimated from cross-validated residual covariance within
series (``evals/anchor_eval.py``, shipped in ``catalog/uncertainty/anchored_bands.yaml``),
``log c = w_n log c_raw`` where ``w_n`` is the empirical-Bayes posterior weight of the job's shared compute
error seen through its anchors (:func:`posterior_weight`).  ``w`` is the weight of an anchor whose step is all
compute; an anchor whose step is partly communication, pipeline bubble or optimizer says less about the
compute error (its residual may come from any of its terms), so it weighs by its compute share ``s``:
``w_n = lam S / (1 + lam S)``, ``lam = w / (1 - w)``, ``S`` the sum of the anchors' ``s^2`` (``n`` all-compute
anchors: ``n w / (1 + (n - 1) w)``, Spearman-Brown).  ``w = 1`` trusts the anchors fully (their own steps are
reproduced); ``w = 0`` is the unanchored projection.

The optimizer step and the fixed step overhead are not scaled (neither is the job's kernels or links).
A projected step ``t = C + K + F`` (:func:`step_parts`) becomes ``c C + k K + F``.  The factors are
bounded by the priors :data:`COMPUTE_FACTOR_BOUNDS` and :data:`COMM_FACTOR_BOUNDS`; an anchor the
bounded factors cannot reach keeps the rest as its residual, reported with the corrections.

Pure functions over the engine's :class:`~projection.engine.Projection`; who reads the anchors (logs,
sweep files, measurement files) lives above: ``evals/anchor_read.py`` and ``bench/restore.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from projection.engine import Projection, StepBreakdown
from projection.memory import GIB, MemoryResult, memory_verdict

COMPUTE_FACTOR_BOUNDS = (1 / 1.6, 1.6)
"""Prior range of the compute factor: the unanchored projection's measured/projected throughput on the
development set spans 0.48-1.9 at its extremes and 0.75-1.19 between its 5th and 95th percentiles
(projection/catalog/uncertainty/bands.yaml, ``default``); a job-specific factor beyond 1.6x either way is
more likely a wrong anchor (another model, GPU or precision) than a slow kernel."""
COMM_FACTOR_BOUNDS = (1 / 3, 3.0)
"""Prior range of the communication factor: collective bus bandwidth reached in practice ranges from about a
third of the profile's (small messages, congested fabrics) to three times it (overlap the model does not
credit); wider than compute because the profiles' scale-out efficiencies rest on fewer runs."""
MEMORY_OFFSET_BOUND_GIB = 12.0
"""Largest |measured - projected| peak memory, GiB, taken as a job's offset (the memory model's 90th-percentile
error on the development set is below 10 GiB; a larger gap means another layout or a logging difference)."""
COMM_SHARE_SPREAD = 0.05
"""Two anchors must differ by this much in their communication share of the step to solve a comm factor."""
_COMM_PRIOR_WEIGHT = 0.002   # ridge pulling k to 1 (relative-error units): keeps a near-singular 2-anchor solve finite


class AnchorRun(BaseModel):
    """One measured run of a job, as data (what ``--anchor FILE`` reads and what the tools take inline).

    ``model`` is the model of the run: the target's, or a reduced-layer proxy of it (the same architecture
    with fewer layers).  ``config`` holds the layout's TrainingConfig fields (sweep-format keys).
    """

    model_config = ConfigDict(extra="forbid")

    label: str = Field(min_length=1, description="Where the run comes from (file, run), shown with the corrections.")
    model: str | dict[str, Any] = Field(description="Catalog model id or Hugging Face config.json fields.")
    gpu: str = Field(description="Hardware id the run was measured on (must be the target's GPU type).")
    num_gpus: int = Field(ge=1, description="GPUs of the run.")
    gpus_per_node: int = Field(8, ge=1, description="GPUs per node of the run.")
    config: dict[str, Any] = Field(description="Layout of the run (TrainingConfig fields: tp, pp, mbs, gbs, ...).")
    iteration_time_s: float = Field(gt=0, allow_inf_nan=False, description="Measured seconds per global step.")
    peak_memory_gib: float | None = Field(None, gt=0, allow_inf_nan=False,
                                          description="Measured peak memory per GPU, GiB (None: not logged).")


@dataclass(frozen=True, slots=True)
class StepParts:
    """A projected step split by what a correction scales, seconds."""

    compute_s: float
    comm_s: float
    fixed_s: float

    @property
    def total_s(self) -> float:
        """The projected step, seconds."""
        return self.compute_s + self.comm_s + self.fixed_s

    @property
    def compute_share(self) -> float:
        """Compute share of the step (0..1)."""
        return self.compute_s / self.total_s if self.total_s > 0 else 0.0

    @property
    def comm_share(self) -> float:
        """Communication share of the step (0..1)."""
        return self.comm_s / self.total_s if self.total_s > 0 else 0.0


def step_parts(breakdown: StepBreakdown) -> StepParts:
    """Split a breakdown: compute (+ its share of the bubble), exposed comm (+ its share), fixed (optimizer, overhead).

    The bubble is idle time of the pipeline's stages, whose length is their compute and exposed comm;
    it scales with both in proportion.
    """
    b = breakdown
    stage_comm = b.tp_comm_s + b.cp_comm_s + b.ep_comm_s
    busy = b.compute_s + stage_comm
    bubble_compute = b.pp_bubble_s * (b.compute_s / busy if busy > 0 else 1.0)
    return StepParts(compute_s=b.compute_s + bubble_compute,
                     comm_s=stage_comm + b.dp_comm_s + (b.pp_bubble_s - bubble_compute),
                     fixed_s=b.optimizer_s + b.overhead_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class AnchorPoint:
    """One measured run of the job, projected: what the solve compares."""

    label: str
    """Where it came from (file and run), shown with the corrections."""
    parts: StepParts
    measured_time_s: float
    num_gpus: int
    projected_peak_gib: float | None = None
    measured_peak_gib: float | None = None


class Corrections(BaseModel):
    """Job-specific corrections and the anchors they were solved from (dimensionless unless a unit is named)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    compute_factor: float = Field(1.0, description="Measured / projected compute time of the job.")
    comm_factor: float = Field(1.0, description="Measured / projected exposed communication time of the job.")
    comm_solved: bool = Field(False, description="True when the anchors differ enough in communication to solve "
                                                 "comm_factor; else it is the prior, 1.")
    memory_offset_gib: float = Field(0.0, description="Measured - projected peak memory per GPU, GiB.")
    anchors: tuple[str, ...] = Field((), description="Labels of the anchors the corrections come from.")
    anchor_gpus: tuple[int, ...] = Field((), description="GPU count of each anchor.")
    residuals: tuple[float, ...] = Field((), description="Per anchor, corrected projected / measured step time - 1.")
    shared_weight: float = Field(1.0, ge=0.0, le=1.0, description="Weight w_n the raw factors were shrunk by "
                                 "(log factor = w_n log raw factor): how much of the anchors' error the job's other "
                                 "layouts share (1: none shrunk).")
    raw_compute_factor: float = Field(1.0, description="Compute factor before shrinking (after the prior bounds).")
    raw_comm_factor: float = Field(1.0, description="Communication factor before shrinking (after the prior bounds).")
    anchor_comm_shares: tuple[float, ...] = Field((), description="Projected communication share of each anchor's "
                                                                  "step (what the anchors exercised).")
    anchor_compute_shares: tuple[float, ...] = Field((), description="Projected compute share of each anchor's step "
                                                                     "(how much it says about the compute factor).")
    notes: tuple[str, ...] = Field((), description="Bounds hit, anchors left out of a factor, and why.")

    @property
    def identity(self) -> bool:
        """True when nothing is corrected."""
        return self.compute_factor == 1.0 and self.comm_factor == 1.0 and self.memory_offset_gib == 0.0


def _clip(value: float, bounds: tuple[float, float]) -> float:
    return min(max(value, bounds[0]), bounds[1])


def corrected_time(parts: StepParts, compute_factor: float, comm_factor: float) -> float:
    """``c C + k K + F``, seconds."""
    return compute_factor * parts.compute_s + comm_factor * parts.comm_s + parts.fixed_s


def _solve_compute(points: Sequence[AnchorPoint], comm_factor: float) -> float:
    """Least-squares c on relative errors with k fixed (unbounded)."""
    rows = [(p.parts.compute_s / p.measured_time_s,
             1.0 - (comm_factor * p.parts.comm_s + p.parts.fixed_s) / p.measured_time_s) for p in points]
    den = sum(a * a for a, _ in rows)
    return sum(a * b for a, b in rows) / den if den > 0 else 1.0


def _solve_both(points: Sequence[AnchorPoint]) -> tuple[float, float]:
    """Least-squares (c, k) on relative errors with a weak ridge pulling k to 1 (unbounded)."""
    saa = sab = sbb = sa1 = sb1 = 0.0
    for p in points:
        a, b = p.parts.compute_s / p.measured_time_s, p.parts.comm_s / p.measured_time_s
        y = 1.0 - p.parts.fixed_s / p.measured_time_s
        saa, sab, sbb, sa1, sb1 = saa + a * a, sab + a * b, sbb + b * b, sa1 + a * y, sb1 + b * y
    sbb, sb1 = sbb + _COMM_PRIOR_WEIGHT, sb1 + _COMM_PRIOR_WEIGHT
    det = saa * sbb - sab * sab
    if det <= 0:
        return _solve_compute(points, 1.0), 1.0
    return (sa1 * sbb - sab * sb1) / det, (saa * sb1 - sab * sa1) / det


def pooled_weight(weight: float, anchors: int) -> float:
    """Spearman-Brown: the weight of the mean of ``anchors`` runs that each share ``weight`` of their error with
    the target (``n w / (1 + (n - 1) w)``; 1 anchor: ``weight``); :func:`posterior_weight` of all-compute anchors."""
    if anchors <= 1 or weight <= 0.0:
        return max(0.0, min(1.0, weight))
    return posterior_weight(weight, (1.0,) * anchors)


def posterior_weight(weight: float, compute_shares: Sequence[float]) -> float:
    """The weight a job's compute factor takes from anchors with these compute shares of their projected steps (0..1).

    Each anchor's log error is ``r = s e + u``: its compute share ``s`` times the job's shared compute error ``e``
    (prior variance ``tau^2``) plus what it does not share with the job's other layouts (its communication,
    bubble and run-to-run error, variance ``sigma^2``).  The posterior mean of ``e`` is
    ``lam sum(s r) / (1 + lam sum(s^2))`` with ``lam = tau^2 / sigma^2 = w / (1 - w)``, ``w`` the shared-error
    weight of an all-compute anchor; as a power of the raw factor (``log c_raw = r / s``) that is
    ``lam S / (1 + lam S)``, ``S = sum(s^2)``.  ``weight`` 1 (or more): 1; 0: 0."""
    if weight >= 1.0:
        return 1.0
    if weight <= 0.0 or not compute_shares:
        return 0.0
    lam = weight / (1.0 - weight)
    total = lam * sum(min(1.0, max(0.0, s)) ** 2 for s in compute_shares)
    return total / (1.0 + total)


def shrink(factor: float, weight: float) -> float:
    """``factor ** weight``: a factor pulled towards 1 in log space."""
    return factor ** weight if factor > 0 else factor


def solve_corrections(points: Sequence[AnchorPoint], shared_weight: float = 1.0) -> Corrections:
    """Corrections of a job from its anchors (none: the identity).

    One anchor, or anchors alike in communication share: the compute factor alone (comm at its prior).
    Anchors that differ in communication share by :data:`COMM_SHARE_SPREAD` or more: both factors, by least
    squares on relative step-time errors.  Each factor is then clipped to its prior bounds (the compute factor
    is re-solved with the clipped comm factor), and both are shrunk towards 1 by
    :func:`posterior_weight` of ``shared_weight`` (the share of an all-compute anchor's error a target of the job
    shares) over the anchors' compute shares.
    """
    if not points:
        return Corrections()
    notes: list[str] = []
    shares = [p.parts.comm_share for p in points]
    comm_solved = len(points) >= 2 and max(shares) - min(shares) >= COMM_SHARE_SPREAD
    k = 1.0
    if comm_solved:
        _, raw_k = _solve_both(points)
        k = _clip(raw_k, COMM_FACTOR_BOUNDS)
        if k != raw_k:
            notes.append(f"communication factor {raw_k:.3g} clipped to its prior bound {k:.3g}")
    elif len(points) >= 2:
        notes.append(f"anchors differ by less than {COMM_SHARE_SPREAD:.0%} in communication share "
                     f"({min(shares):.0%}-{max(shares):.0%}): communication factor kept at 1")
    raw_c = _solve_compute(points, k)
    c = _clip(raw_c, COMPUTE_FACTOR_BOUNDS)
    if c != raw_c:
        notes.append(f"compute factor {raw_c:.3g} clipped to its prior bound {c:.3g}: the anchors are further "
                     "from the projection than one job's kernels explain (another model, GPU or precision?)")
    peaks = [(p.measured_peak_gib - p.projected_peak_gib) for p in points
             if p.measured_peak_gib is not None and p.projected_peak_gib is not None]
    offset = 0.0
    if peaks:
        raw = sum(peaks) / len(peaks)
        offset = _clip(raw, (-MEMORY_OFFSET_BOUND_GIB, MEMORY_OFFSET_BOUND_GIB))
        if offset != raw:
            notes.append(f"memory offset {raw:+.1f} GiB clipped to {offset:+.1f} GiB")
    raw = Corrections(compute_factor=c, comm_factor=k, comm_solved=comm_solved, memory_offset_gib=offset,
                      anchors=tuple(p.label for p in points), anchor_gpus=tuple(p.num_gpus for p in points),
                      raw_compute_factor=c, raw_comm_factor=k, notes=tuple(notes),
                      anchor_comm_shares=tuple(p.parts.comm_share for p in points),
                      anchor_compute_shares=tuple(p.parts.compute_share for p in points))
    return with_shared_weight(raw, shared_weight, points)


def with_shared_weight(corrections: Corrections, shared_weight: float,
                       points: Sequence[AnchorPoint] = ()) -> Corrections:
    """The corrections with their raw factors shrunk by :func:`posterior_weight` of ``shared_weight`` over their
    anchors' compute shares (none recorded: all-compute anchors; ``points``, when given, get their residuals
    re-taken)."""
    shares = corrections.anchor_compute_shares or (1.0,) * len(corrections.anchors)
    weight = posterior_weight(shared_weight, shares) if corrections.anchors else min(1.0, max(0.0, shared_weight))
    c, k = shrink(corrections.raw_compute_factor, weight), shrink(corrections.raw_comm_factor, weight)
    notes = tuple(n for n in corrections.notes if not n.startswith("factors shrunk"))
    if weight < 1.0:
        notes += (f"factors shrunk towards 1 with weight {weight:.2f} (compute x{corrections.raw_compute_factor:.3f} "
                  f"-> x{c:.3f}): the share of an anchor's error the job's other layouts share (cross-validated)",)
    if points:
        residuals = tuple(corrected_time(p.parts, c, k) / p.measured_time_s - 1.0 for p in points)
    else:    # residuals of other factors would be stale: kept only when the weight is unchanged
        residuals = corrections.residuals if weight == corrections.shared_weight else ()
    return corrections.model_copy(update={"compute_factor": c, "comm_factor": k, "shared_weight": weight,
                                          "residuals": residuals, "notes": notes})


def uninformed_share(target: StepParts, corrections: Corrections) -> float:
    """Share of a target's projected step its anchors cannot inform (0..1): its communication share beyond the
    largest the anchors exercised.  A one-node anchor measures its kernels and its scale-up links; a target on
    1,024 GPUs adds scale-out (NIC) collectives and pipeline sends the anchor never ran, whose error the anchor
    says nothing about.  0 with no anchors recorded."""
    if not corrections.anchor_comm_shares:
        return 0.0
    return max(0.0, target.comm_share - max(corrections.anchor_comm_shares))


def alike_in_communication(target: StepParts, corrections: Corrections) -> bool:
    """Whether a target's communication share of the step is within :data:`COMM_SHARE_SPREAD` of its nearest
    anchor's: then an anchor's error is mostly of the kinds the target has, and transfers as the shared-error weight
    of such pairs says (no anchors recorded: alike)."""
    if not corrections.anchor_comm_shares:
        return True
    return min(abs(target.comm_share - s) for s in corrections.anchor_comm_shares) < COMM_SHARE_SPREAD


def band_uninformed(cls: str, target: StepParts, corrections: Corrections) -> float:
    """The uninformed share an anchored band widens for (:func:`projection.uncertainty.anchored_band`):
    :func:`uninformed_share` for a target beyond its anchors' scale; 0 at it (the same links at the same scale:
    the anchors measured that kind of communication)."""
    from projection.uncertainty import ANCHOR_CLASSES

    return 0.0 if cls == ANCHOR_CLASSES[0] else uninformed_share(target, corrections)


def offset_memory(memory: MemoryResult, offset_gib: float) -> MemoryResult:
    """Memory with ``offset_gib`` added to every rank's workspace term (negative when the memory model overestimates
    this job: the term then holds the correction, and every total moves by exactly the offset), verdict re-taken."""
    if offset_gib == 0.0:
        return memory
    stages = tuple(replace(s, workspace_bytes=s.workspace_bytes + offset_gib * GIB) for s in memory.stages)
    peak = max(s.total_bytes for s in stages)
    return replace(memory, stages=stages, verdict=memory_verdict(peak, memory.capacity_bytes, memory.margins))


def anchored_projection(p: Projection, corrections: Corrections,
                        band: tuple[float, float] | None = None) -> Projection:
    """The projection with the corrections applied (step time, rates, breakdown, memory).

    ``band``: (low, high) throughput multipliers of the anchored projection's 80% interval
    (:func:`projection.uncertainty.anchored_band`); None keeps the projection's own relative band.
    """
    if corrections.identity:
        return p
    c, k = corrections.compute_factor, corrections.comm_factor
    parts = step_parts(p.breakdown)
    iteration = corrected_time(parts, c, k)
    scale = p.iteration_time_s / iteration
    b = p.breakdown
    stage_comm = b.tp_comm_s + b.cp_comm_s + b.ep_comm_s
    busy = b.compute_s + stage_comm
    bubble_compute = b.pp_bubble_s * (b.compute_s / busy if busy > 0 else 1.0)
    breakdown = replace(b, compute_s=b.compute_s * c, tp_comm_s=b.tp_comm_s * k, cp_comm_s=b.cp_comm_s * k,
                        ep_comm_s=b.ep_comm_s * k, dp_comm_s=b.dp_comm_s * k,
                        pp_bubble_s=bubble_compute * c + (b.pp_bubble_s - bubble_compute) * k)
    tokens = p.tokens_per_s_per_gpu * scale
    low, high = band if band is not None else (p.tokens_per_sec_per_gpu_low / p.tokens_per_s_per_gpu,
                                               p.tokens_per_sec_per_gpu_high / p.tokens_per_s_per_gpu)
    return replace(p, iteration_time_s=iteration, tokens_per_s_per_gpu=tokens,
                   model_tflops_per_gpu=p.model_tflops_per_gpu * scale, mfu=p.mfu * scale,
                   tokens_per_sec_per_gpu_low=tokens * low, tokens_per_sec_per_gpu_high=tokens * high,
                   iteration_time_s_low=iteration / high, iteration_time_s_high=iteration / low,
                   breakdown=breakdown, memory=offset_memory(p.memory, corrections.memory_offset_gib))


def anchor_point(label: str, projection: Projection, measured_time_s: float, *,
                 measured_peak_gib: float | None = None) -> AnchorPoint:
    """An anchor from a measured run and the projection of its layout."""
    if not measured_time_s > 0:
        raise ValueError(f"anchor {label}: measured step time must be > 0 s (got {measured_time_s})")
    return AnchorPoint(label=label, parts=step_parts(projection.breakdown), measured_time_s=measured_time_s,
                       num_gpus=projection.num_gpus, projected_peak_gib=projection.memory.peak_bytes / GIB,
                       measured_peak_gib=measured_peak_gib)
