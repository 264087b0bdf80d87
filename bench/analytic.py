"""The engine's analytic view of one layout, per layer kind: the values measurements are anchored to.

A layer kind is (MoE MLP?, attention window), the key the engine uses to cost each distinct
layer once (``projection.engine._layer_costs``). Restoration scales a measured value by
``analytic(target) / analytic(bench)``, so both sides must come from the engine's own
formulas and network model; this module builds them the way ``projection.engine.project``
does and exposes the split the engine does not: the routed-expert part of a MoE layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from projection.collectives import NetworkParams
from projection.compute import DeviceRates, device_rates, gemm_fwd_bwd_s, streaming_s
from projection.device_profile import DeviceProfile
from projection.engine import ADAM_BYTES_PER_PARAM, ResolvedSpecs, _comm_groups, _layer_costs, network_for
from projection.framework_profile import FrameworkProfile
from projection.hardware import HardwareSpec
from projection.job import job_on
from projection.layout import ParallelDims, parallel_dims
from projection.model_spec import ModelSpec
from projection.params import layer_params
from projection.training_config import Cluster, TrainingConfig
from projection.workload import ACT_BYTES, LayerCost, grouped_gemm_kernels, routed_expert_efficiency

LayerKind = tuple[bool, int]   # (routed-expert MLP, attention window in tokens; 0 = full causal)


def layer_kind(model: ModelSpec, layer: int) -> LayerKind:
    """The kind of ``layer``, as the engine groups layers."""
    moe = bool(model.moe_layers and model.moe_layers[layer])
    return moe, model.attention_windows[layer] if model.attention_windows else 0


def layer_kinds(model: ModelSpec) -> dict[LayerKind, int]:
    """Each distinct kind of the model and the first layer of that kind."""
    first: dict[LayerKind, int] = {}
    for layer in range(model.num_layers):
        first.setdefault(layer_kind(model, layer), layer)
    return first


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpertCost:
    """Routed-expert part of one MoE layer: permute, grouped GEMMs, unpermute; seconds."""

    fwd_s: float
    bwd_input_s: float
    bwd_weight_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class AnalyticLayout(ResolvedSpecs):
    """Engine inputs and per-kind analytic costs of one layout."""

    model: ModelSpec
    cluster: Cluster
    config: TrainingConfig
    costs: dict[LayerKind, LayerCost]
    experts: dict[LayerKind, ExpertCost]

    @property
    def tokens(self) -> float:
        """Tokens of one micro-batch on one GPU before TP splitting."""
        return self.config.mbs * self.config.seq_len / self.dims.cp

    @property
    def all_reduce_bytes(self) -> float:
        """Message of one TP all-reduce of the layer output (the engine issues 2 per layer forward)."""
        return ACT_BYTES * self.tokens * self.model.hidden_size

    @property
    def dispatch_bytes(self) -> float:
        """Bytes one GPU sends in one EP all-to-all (dispatch; combine is the same)."""
        return ACT_BYTES * self.tokens * self.model.top_k / self.dims.tp * self.model.hidden_size

    def layer_params_on_gpu(self, kind: LayerKind) -> float:
        """Parameters of one layer of ``kind`` held by one GPU (no ZeRO sharding)."""
        p = layer_params(self.model, layer_kinds(self.model)[kind])
        d = self.dims
        return (p.attention + p.mlp + p.shared_experts) / d.tp + p.replicated + p.experts / (d.ep * d.etp)

    def optimizer_s(self, kind: LayerKind) -> float:
        """Adam step over one layer's parameters at the profile's optimizer HBM efficiency."""
        bandwidth = self.hardware.hbm_bandwidth_bytes_per_s * self.profile.optimizer_memory_efficiency
        return ADAM_BYTES_PER_PARAM * self.layer_params_on_gpu(kind) / bandwidth


def network_params(hardware: HardwareSpec, cluster: Cluster, profile: DeviceProfile) -> NetworkParams:
    """The network model exactly as ``projection.engine.project`` builds it."""
    return network_for(hardware, cluster, profile)


def expert_cost(model: ModelSpec, config: TrainingConfig, dims: ParallelDims, rates: DeviceRates) -> ExpertCost:
    """The routed-expert terms of ``projection.workload.layer_cost`` for one MoE layer."""
    t, h = dims.tp, model.hidden_size
    tokens = config.mbs * config.seq_len / dims.cp
    mats = 2 if model.gated_mlp else 1
    routed = tokens * model.top_k / t * dims.etp
    local_experts = max(1, model.num_experts // dims.ep)
    per_expert = routed / local_experts
    ffn_local = model.moe_ffn_hidden_size / dims.etp
    eff = routed_expert_efficiency(config, rates, per_expert, local_experts)   # as the layer's (a part of it)
    f1, i1, w1 = gemm_fwd_bwd_s(per_expert, mats * ffn_local, h, rates, groups=local_experts, efficiency=eff)
    f2, i2, w2 = gemm_fwd_bwd_s(per_expert, h, ffn_local, rates, groups=local_experts, efficiency=eff)
    stream = streaming_s(4 * ACT_BYTES * routed * h + 3 * ACT_BYTES * routed * ffn_local, 0, rates)
    per_expert_s = 2 * grouped_gemm_kernels(config.framework, local_experts)[0] * rates.kernel_overhead_s
    return ExpertCost(fwd_s=f1 + f2 + stream + per_expert_s, bwd_input_s=i1 + i2 + 2 * stream + per_expert_s,
                      bwd_weight_s=w1 + w2 + per_expert_s)


def analytic_layout(model: ModelSpec, cluster: Cluster, config: TrainingConfig, *,
                    hardware: HardwareSpec | None = None, profile: DeviceProfile | None = None,
                    framework: FrameworkProfile | None = None) -> AnalyticLayout:
    """Per-kind engine costs of a layout (the layout is assumed legal), with the engine's defaults."""
    job = job_on(model, cluster, config, hardware=hardware, profile=profile, framework=framework)
    hardware, profile, framework = job.hardware, job.profile, job.framework
    dims = parallel_dims(config, cluster)
    rates = device_rates(hardware, profile, config.precision, framework.compute_efficiency,
                         attention_multiplier=framework.attention_speed(hardware.family),
                         eager_elementwise=framework.eager_elementwise)
    net = network_params(hardware, cluster, profile)
    by_layer = _layer_costs(model, config, dims, rates, net, _comm_groups(dims, net))
    kinds = layer_kinds(model)
    zero = ExpertCost(fwd_s=0.0, bwd_input_s=0.0, bwd_weight_s=0.0)
    return AnalyticLayout(
        model=model, cluster=cluster, config=config, hardware=hardware, profile=profile, framework=framework,
        dims=dims, rates=rates, net=net, costs={kind: by_layer[layer] for kind, layer in kinds.items()},
        experts={kind: expert_cost(model, config, dims, rates) if kind[0] else zero for kind in kinds},
    )
