"""Shrink a target layout to a benchmark layout that fits the local GPUs, and record what was removed.

Order (Primus Projection, shared/notes/primus-projection.md 2.1-2.2, "order of reduction =
order of restoration fidelity"): PP goes to 1 first (a layer benchmark never needs it; the
schedule simulator restores it exactly), then EP shrinks with the number of experts shrunk
in proportion so that each GPU keeps its target experts (at least ``top_k`` experts remain),
then TP, then CP only when CP alone needs more GPUs than are local (the layer compute of one
CP rank is still timed at the target's slice, ``bench.runner``; the ring exchange comes from
the engine). DP always goes to the smallest degree the bench layout needs (weak scaling
restores it). The benchmark layout has one micro-batch per step.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from projection.errors import IllegalLayoutError, ProjtuneError
from projection.hardware import load_hardware
from projection.job import hardware_of
from projection.layout import parallel_dims
from projection.legality import divisors, layout_violations
from projection.model_spec import ModelSpec
from projection.training_config import Cluster, TrainingConfig

Axis = Literal["pp", "vpp", "ep", "etp", "tp", "cp", "dp"]
MAX_LOCAL_GPUS = 8   # one host (Primus --benchmark-gpus 1..GPUS_PER_NODE)


class RemovedFactor(BaseModel):
    """One parallel axis the benchmark layout runs smaller than the target."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    axis: Axis
    target: int = Field(description="Degree in the target layout.")
    bench: int = Field(description="Degree in the benchmark layout.")
    note: str = ""


class Reduction(BaseModel):
    """A target layout, the benchmark layout derived from it, and the factors removed in between."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target_model: ModelSpec
    target_cluster: Cluster
    target_config: TrainingConfig
    bench_model: ModelSpec | None = Field(
        default=None, description="The model with fewer routed experts (EP reduced); None = unchanged.")
    bench_cluster: Cluster = Field(description="The local GPUs the benchmark layout spans (same GPU type).")
    bench_config: TrainingConfig
    local_gpus: int = Field(ge=1, description="GPUs available for the benchmark.")
    removed: tuple[RemovedFactor, ...] = ()

    @property
    def model(self) -> ModelSpec:
        """The model the benchmark runs (the reduced one when experts were shrunk)."""
        return self.bench_model or self.target_model

    def removed_axes(self) -> tuple[Axis, ...]:
        """Names of the reduced axes, in reduction order."""
        return tuple(r.axis for r in self.removed)


def min_dp(tp: int, cp: int, ep: int, etp: int) -> int:
    """Smallest DP whose tp*cp*dp ranks hold whole EP x ETP groups (MoE parallel folding)."""
    return math.lcm(tp * cp, ep * etp) // (tp * cp)


def gpus_needed(tp: int, cp: int, ep: int, etp: int) -> int:
    """GPUs of a one-stage layout with the smallest legal DP."""
    return tp * cp * min_dp(tp, cp, ep, etp)


def bench_num_experts(model: ModelSpec, target_ep: int, bench_ep: int) -> int:
    """Experts of the benchmark model: target experts per GPU times ``bench_ep``, at least ``top_k``."""
    per_gpu = model.num_experts // target_ep
    experts = max(model.top_k, per_gpu * bench_ep)
    return -(-experts // bench_ep) * bench_ep


def reduce_layout(model: ModelSpec, cluster: Cluster, config: TrainingConfig, local_gpus: int, *,
                  local_gpu: str | None = None) -> Reduction:
    """Derive the benchmark layout of ``config`` on ``local_gpus`` GPUs.

    ``local_gpu`` is the hardware id of the local GPUs when it differs from the target's; the
    benchmark layout then names it (restoration carries compute across by the analytic ratio).

    Raises:
        IllegalLayoutError: the target layout itself is illegal.
        ProjtuneError: ``local_gpus`` is outside 1..8, or the benchmark layout is illegal.
    """
    if not 1 <= local_gpus <= MAX_LOCAL_GPUS:
        raise ProjtuneError(f"local_gpus={local_gpus} must be in 1..{MAX_LOCAL_GPUS} (one host)")
    hardware = hardware_of(cluster)
    reasons = layout_violations(model, hardware, cluster, config)
    if reasons:
        raise IllegalLayoutError(reasons)
    cp = max(d for d in divisors(config.cp) if d <= local_gpus)
    dims = parallel_dims(config, cluster)
    removed: list[RemovedFactor] = []
    if config.pp > 1:
        removed.append(RemovedFactor(axis="pp", target=config.pp, bench=1, note="restored by schedule simulation"))
    if config.vpp > 1:
        removed.append(RemovedFactor(axis="vpp", target=config.vpp, bench=1))

    # TP shrinks only when the layout does not fit even without EP.
    tp = max(d for d in divisors(config.tp) if gpus_needed(d, cp, 1, math.gcd(config.etp, d)) <= local_gpus)
    etp = math.gcd(config.etp, tp)
    ep = max(d for d in divisors(config.ep) if gpus_needed(tp, cp, d, etp) <= local_gpus)

    bench_model = None
    if ep < config.ep:
        experts = bench_num_experts(model, config.ep, ep)
        kept = experts // ep == model.num_experts // config.ep
        note = (f"experts {model.num_experts} -> {experts}, "
                + (f"{experts // ep} per GPU kept" if kept else f"at least top_k={model.top_k} kept"))
        removed.append(RemovedFactor(axis="ep", target=config.ep, bench=ep, note=note))
        if experts != model.num_experts:
            bench_model = model.model_copy(update={"num_experts": experts, "name": f"{model.name}[e{experts}]"})
    if etp < config.etp:
        removed.append(RemovedFactor(axis="etp", target=config.etp, bench=etp))
    if tp < config.tp:
        removed.append(RemovedFactor(axis="tp", target=config.tp, bench=tp,
                                     note="compute scaled by the analytic ratio, all-reduce anchored"))
    if cp < config.cp:
        removed.append(RemovedFactor(axis="cp", target=config.cp, bench=cp,
                                     note="CP rank's attention timed at the target slice; ring exchange analytic"))
    dp = min_dp(tp, cp, ep, etp)
    if dp < dims.dp:
        removed.append(RemovedFactor(axis="dp", target=dims.dp, bench=dp, note="weak scaling + gradient reduction"))

    fsdp_size = config.fsdp_size if config.fsdp_size and (dp * cp) % config.fsdp_size == 0 else None
    bench_config = TrainingConfig.model_validate(config.model_dump() | {
        "pp": 1, "vpp": 1, "pp_schedule": None, "tp": tp, "cp": cp, "ep": ep, "etp": etp, "dp": dp,
        "gbs": config.mbs * dp, "fsdp_size": fsdp_size,
    })
    bench_hardware = load_hardware(local_gpu) if local_gpu else hardware
    bench_cluster = cluster.model_copy(update={"num_gpus": tp * cp * dp, "gpu": bench_hardware.id})
    bench_spec = bench_model or model
    reasons = layout_violations(bench_spec, bench_hardware, bench_cluster, bench_config)
    if reasons:
        raise ProjtuneError(f"benchmark layout of {local_gpus} GPU(s) is illegal: {'; '.join(reasons)}")
    return Reduction(
        target_model=model, target_cluster=cluster, target_config=config, bench_model=bench_model,
        bench_cluster=bench_cluster, bench_config=bench_config, local_gpus=local_gpus, removed=tuple(removed),
    )
