"""Anchors of a job: project each measured run, solve the job's corrections, apply them to any layout.

The one code path from measured runs (:class:`projection.anchor.AnchorRun`, read from training logs, sweep files
or measured-mode results by ``evals/anchor_read.py``, or given inline to the tools) to an anchored projection:
every anchor must be of the target's GPU type and of the target's model or a reduced-layer proxy of it; it is
projected with the target's device profile, and :func:`projection.anchor.solve_corrections` turns the gaps into
the corrections.  Anchored bands come from :func:`projection.uncertainty.anchored_band`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from projection.anchor import (
    AnchorRun,
    Corrections,
    anchor_point,
    alike_in_communication,
    anchored_projection,
    band_uninformed,
    solve_corrections,
    step_parts,
    with_shared_weight,
)
from projection.evidence import Novelty
from projection.hardware import HardwareSpec
from projection.engine import Projection, project
from projection.errors import IllegalLayoutError, ProjtuneError
from projection.job import Job, job_on, resolve_device
from projection.model_spec import ModelSpec
from projection.training_config import TrainingConfig
from projection.uncertainty import anchor_class, anchored_band, shared_weight

_PROXY_FREE = frozenset({"name", "num_layers", "moe_layers", "attention_windows", "source", "published_params"})
"""ModelSpec fields a reduced-layer proxy may change: its name and how many layers (and which are MoE/windowed)."""


class AnchorRow(BaseModel):
    """One anchor as the answer shows it."""

    model_config = ConfigDict(extra="forbid")

    label: str
    num_gpus: int
    layout: str
    proxy_layers: int | None = Field(None, description="Layers of a reduced-layer proxy (None: the full model).")
    measured_s: float = Field(description="Measured step time, seconds.")
    projected_s: float = Field(description="Unanchored projected step time, seconds.")
    anchored_s: float = Field(description="Step time with the corrections, seconds.")


class Anchoring(BaseModel):
    """The corrections of a job and the anchors they came from."""

    model_config = ConfigDict(extra="forbid")

    corrections: Corrections
    anchors: list[AnchorRow]
    summary: str = Field(description="One line: the factors, and which anchors they came from.")


def proxy_reason(anchor: ModelSpec, target: ModelSpec) -> str | None:
    """Why an anchor's model is neither the target's nor a reduced-layer proxy of it (None: it is)."""
    a, t = anchor.model_dump(), target.model_dump()
    differ = sorted(k for k in t if k not in _PROXY_FREE and a.get(k) != t[k])
    if not differ:
        if anchor.num_layers > target.num_layers:
            return f"it has more layers ({anchor.num_layers}) than the target ({target.num_layers})"
        return None
    shown = ", ".join(f"{k} {a.get(k)} vs {t[k]}" for k in differ[:3])
    return f"its architecture differs from {target.name} ({shown})"


def check_anchor_gpu(anchor: AnchorRun, target_gpu: str) -> HardwareSpec:
    """The anchor's GPU, when it is the target's type (``target_gpu``: a catalog id or alias).

    Raises:
        ProjtuneError: the anchor ran on another GPU type (or names an unknown one).
    """
    hardware, _ = resolve_device(anchor.gpu)
    target, _ = resolve_device(target_gpu)
    if hardware.id != target.id:
        raise ProjtuneError(f"anchor {anchor.label}: measured on {hardware.id}, the target is {target.id}; "
                            "an anchor must be a run on the target's GPU type")
    return hardware


def _anchor_projection(job: Job, anchor: AnchorRun) -> tuple[Projection, ModelSpec]:
    hardware = check_anchor_gpu(anchor, job.hardware.id)
    cluster = job.cluster.model_copy(update={"num_gpus": anchor.num_gpus, "gpus_per_node": anchor.gpus_per_node})
    model = job_on(anchor.model, cluster, hardware=job.hardware, profile=job.profile).model
    reason = proxy_reason(model, job.model)
    if reason is not None:
        raise ProjtuneError(f"anchor {anchor.label}: not a run of {job.model.name} or a reduced-layer proxy of it: "
                            f"{reason}")
    try:
        config = TrainingConfig(**anchor.config)
    except ValidationError as err:
        first = err.errors()[0]
        raise ProjtuneError(f"anchor {anchor.label}: layout not projectable: {'.'.join(map(str, first['loc']))}: "
                            f"{first['msg']}") from err
    try:
        projection = project(model, cluster, config, hardware=job.hardware, profile=job.profile)
    except IllegalLayoutError as err:
        raise ProjtuneError(f"anchor {anchor.label}: its layout is illegal on {anchor.num_gpus} x {hardware.id}: "
                            f"{err}") from err
    return projection, model


def anchoring_for(job: Job, anchors: Sequence[AnchorRun]) -> Anchoring:
    """Project every anchor on the job's GPU with the job's profile and solve the corrections.

    Raises:
        ProjtuneError: an anchor of another GPU type or model, or with an illegal or unprojectable layout.
    """
    from tools.formatting import layout_text

    if not anchors:
        raise ProjtuneError("no anchor given: an anchored projection needs at least one measured run")
    projected = [(a, *_anchor_projection(job, a)) for a in anchors]
    weight = shared_weight(anchor_class(job.cluster.num_gpus, [a.num_gpus for a in anchors]))
    corrections = solve_corrections([anchor_point(a.label, p, a.iteration_time_s, measured_peak_gib=a.peak_memory_gib)
                                     for a, p, _ in projected], weight)
    rows = []
    for anchor, p, model in projected:
        parts = anchored_projection(p, corrections).iteration_time_s
        rows.append(AnchorRow(label=anchor.label, num_gpus=anchor.num_gpus,
                              layout=layout_text(p.config.model_dump(exclude_none=True) | {"dp": p.dims.dp}),
                              proxy_layers=model.num_layers if model.num_layers < job.model.num_layers else None,
                              measured_s=anchor.iteration_time_s, projected_s=p.iteration_time_s, anchored_s=parts))
    return Anchoring(corrections=corrections, anchors=rows, summary=summary_line(corrections))


def summary_line(corrections: Corrections) -> str:
    """One line: the factors and where they came from."""
    comm = (f"communication x{corrections.comm_factor:.3f}" if corrections.comm_solved
            else "communication x1 (one anchor, or anchors alike in communication: not solved)")
    memory = f", memory {corrections.memory_offset_gib:+.1f} GiB" if corrections.memory_offset_gib else ""
    shrunk = (f" (measured x{corrections.raw_compute_factor:.3f}, shrunk by the cross-validated share of an "
              f"anchor's error a job's other layouts share, weighed by the anchors' compute share of their steps: "
              f"{corrections.shared_weight:.2f})"
              if corrections.shared_weight < 1.0 and corrections.raw_compute_factor != corrections.compute_factor else "")
    return (f"anchored on {len(corrections.anchors)} measured run(s) ({', '.join(corrections.anchors)}): compute "
            f"x{corrections.compute_factor:.3f}{shrunk}, {comm}{memory}")


def unanchored_band(p: Projection) -> tuple[float, float]:
    """(low, high) throughput multipliers of a projection's own (unanchored) 80% interval."""
    return p.tokens_per_sec_per_gpu_low / p.tokens_per_s_per_gpu, p.tokens_per_sec_per_gpu_high / p.tokens_per_s_per_gpu


def anchored(p: Projection, corrections: Corrections) -> Projection:
    """The projection corrected, with the shared-error weight and the anchored band of its anchor class (its GPU
    count against the anchors')."""
    if corrections.identity and corrections.raw_compute_factor == 1.0 and corrections.raw_comm_factor == 1.0:
        return p
    cls = anchor_class(p.num_gpus, corrections.anchor_gpus)
    parts = step_parts(p.breakdown)
    weighted = with_shared_weight(corrections, shared_weight(cls, alike_in_communication(parts, corrections)))
    uninformed = band_uninformed(cls, parts, corrections)
    out = anchored_projection(p, weighted, anchored_band(cls, unanchored_band(p), uninformed=uninformed))
    if uninformed >= UNINFORMED_NOTE_SHARE:
        reason = Novelty(key="scale", text=uninformed_text(uninformed, p.num_gpus, corrections.anchor_gpus))
        out = replace(out, band_novelty=(*out.band_novelty, reason))
    return out


UNINFORMED_NOTE_SHARE = 0.01
"""Smallest uninformed share of a step (1%) an anchored answer names among its band's reasons."""


def uninformed_text(share: float, target_gpus: int, anchor_gpus: Sequence[int]) -> str:
    """The band reason of a target its anchors cannot fully inform."""
    return (f"the anchors ({', '.join(map(str, sorted(set(anchor_gpus))))} GPUs) did not exercise {share:.0%} of this "
            f"step: communication at {target_gpus} GPUs beyond theirs (scale-out); the band keeps the unanchored "
            "uncertainty for that share")


def slowest_factor(corrections: Corrections) -> float:
    """The smallest multiplier the corrections apply to any part of a step (<= 1): an anchored step is at least
    this times the unanchored one, so throughput bounds divide by it (the raw factors bound the shrunk ones of every
    anchor class)."""
    return min(1.0, corrections.compute_factor, corrections.comm_factor, corrections.raw_compute_factor,
               corrections.raw_comm_factor)


