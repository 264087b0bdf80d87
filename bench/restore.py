"""Restore a measurement of the benchmark layout to the target layout, through the projection engine.

Per removed axis (Primus Projection, shared/notes/primus-projection.md 2.2):

- PP: the engine's schedule simulator runs over per-stage sums of the restored layer times.
- EP: per MoE layer, ``A2A_target = A2A_measured - A2A_analytic(bench) + A2A_analytic(target)``;
  the routed-expert compute is scaled by ``analytic(target) / analytic(bench)`` of the expert
  part, which is 1 when experts per GPU and tokens per GPU are kept.
- TP: the non-expert compute (attention, dense MLP, router, shared experts, norms) is scaled by
  ``analytic(target) / analytic(bench)`` (``tp_scaling="ratio"``, exact when the measurement
  equals the engine's numbers, and it keeps the engine's tile quantisation), or by
  ``bench_tp / target_tp`` (``"linear"``, Primus's rule); TP all-reduce time is
  ``measured * analytic(target) / analytic(bench)``.
- DP: the engine's weak scaling (micro-batches per step) and its gradient-reduction model.

Anything not measured (CP ring exchange, a collective that was skipped) takes the target's
analytic value. The optimizer step is restored by the measured/analytic ratio of the
per-layer AdamW step applied to the engine's optimizer time of the target.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from bench.analytic import AnalyticLayout, LayerKind, analytic_layout, layer_kind, layer_kinds
from bench.measurement import CollectiveTiming, LayerTiming, Measurement
from bench.reduction import Reduction
from projection.device_profile import DeviceProfile
from projection.engine import Projection, project
from projection.errors import ProjtuneError
from projection.flops import FlopsFormula
from projection.framework_profile import FrameworkProfile
from projection.hardware import HardwareSpec, load_hardware
from projection.model_spec import ModelSpec
from projection.training_config import Cluster, TrainingConfig
from projection.workload import DEEPEP_A2A_FACTOR, LayerCost

TpScaling = Literal["ratio", "linear"]
_MS = 1e-3


@dataclass(frozen=True, slots=True, kw_only=True)
class RestoredProjection:
    """A target projection driven by measured layer costs, and how it was restored."""

    projection: Projection
    layer_costs: dict[int, LayerCost]
    optimizer_ratio: float          # measured / analytic AdamW step of the benchmark layout
    warnings: tuple[str, ...]


def _scaled(measured: float, bench: float, target: float) -> float:
    """``measured * target / bench``; the target's analytic value when the bench has none."""
    return target if bench == 0 else measured * (target / bench)


def _compute(total: float, expert: float, bench_total: float, bench_expert: float, target_total: float,
             target_expert: float, tp_factor: float | None) -> float:
    """Restore one compute time (fwd, B or W) from its expert and non-expert parts."""
    rest = max(0.0, total - expert)   # the expert part is timed on its own; noise may exceed the total
    if tp_factor is not None:         # Primus linear rule: non-expert part by bench_tp/target_tp, experts kept
        return rest * tp_factor + expert
    return (_scaled(rest, bench_total - bench_expert, target_total - target_expert)
            + _scaled(expert, bench_expert, target_expert))


def _measured_comm(measurement: Measurement, bench: AnalyticLayout) -> tuple[float | None, float | None]:
    """Per-layer forward TP and EP communication measured on the bench layout, seconds (None: not measured)."""
    tp = ep = None
    if measurement.tp_all_reduce is not None and bench.dims.tp > 1:
        tp = 2.0 * measurement.tp_all_reduce.time_ms * _MS   # 2 all-reduces per layer forward
    if (measurement.ep_all_to_all is not None and bench.dims.ep > 1
            and bench.config.moe_dispatcher != "allgather"):
        one = measurement.ep_all_to_all.time_ms * _MS
        ep = 2.0 * one * (DEEPEP_A2A_FACTOR if bench.config.moe_dispatcher == "deepep" else 1.0)
    return tp, ep


def _restore_kind(m: LayerTiming, kind: LayerKind, bench: AnalyticLayout, target: AnalyticLayout,
                  comm: tuple[float | None, float | None], tp_scaling: TpScaling) -> LayerCost:
    b, t = bench.costs[kind], target.costs[kind]
    bx, tx = bench.experts[kind], target.experts[kind]
    tp_factor = bench.dims.tp / target.dims.tp if tp_scaling == "linear" else None
    tp_m = b.tp_comm_s if comm[0] is None else comm[0]
    ep_m = b.ep_comm_s if comm[1] is None or not kind[0] else comm[1]
    return LayerCost(
        fwd_s=_compute(m.forward_ms * _MS, m.expert_forward_ms * _MS, b.fwd_s, bx.fwd_s, t.fwd_s, tx.fwd_s,
                       tp_factor),
        bwd_input_s=_compute(m.backward_input_ms * _MS, m.expert_backward_input_ms * _MS, b.bwd_input_s,
                             bx.bwd_input_s, t.bwd_input_s, tx.bwd_input_s, tp_factor),
        bwd_weight_s=_compute(m.backward_weight_ms * _MS, m.expert_backward_weight_ms * _MS, b.bwd_weight_s,
                              bx.bwd_weight_s, t.bwd_weight_s, tx.bwd_weight_s, tp_factor),
        attention_fwd_s=(m.attention_forward_ms * _MS * tp_factor if tp_factor is not None
                         else _scaled(m.attention_forward_ms * _MS, b.attention_fwd_s, t.attention_fwd_s)),
        tp_comm_s=_scaled(tp_m, b.tp_comm_s, t.tp_comm_s),
        cp_comm_s=t.cp_comm_s,
        ep_comm_s=max(0.0, ep_m - b.ep_comm_s + t.ep_comm_s),
        flops_fwd=t.flops_fwd,
    )


def _check(measurement: Measurement, model: ModelSpec, config: TrainingConfig, target_hw: HardwareSpec
           ) -> list[str]:
    red = measurement.reduction
    if red.target_model.name != model.name:
        raise ProjtuneError(f"measurement is of model '{red.target_model.name}', not '{model.name}'")
    warnings = []
    if not measurement.representative and measurement.source != "analytic":
        warnings.append(f"measurement source={measurement.source} is not representative (plumbing check only)")
    if red.bench_cluster.gpu != target_hw.id:
        warnings.append(f"measured on {red.bench_cluster.gpu}, target is {target_hw.id}: "
                        "compute is carried across devices by the analytic ratio")
    bench = red.bench_config
    for field in ("seq_len", "mbs", "precision", "cp"):
        if getattr(bench, field) != getattr(config, field):
            warnings.append(f"{field} differs (bench {getattr(bench, field)}, target {getattr(config, field)}): "
                            "restored by the analytic ratio")
    return warnings


def restore_layer_costs(measurement: Measurement, model: ModelSpec, cluster: Cluster, config: TrainingConfig, *,
                        hardware: HardwareSpec | None = None, profile: DeviceProfile | None = None,
                        framework: FrameworkProfile | None = None, tp_scaling: TpScaling = "ratio"
                        ) -> tuple[dict[int, LayerCost], AnalyticLayout, AnalyticLayout]:
    """Target-layout cost of every layer from a measurement; also the bench and target analytic views."""
    red = measurement.reduction
    target = analytic_layout(model, cluster, config, hardware=hardware, profile=profile, framework=framework)
    bench_hw = load_hardware(red.bench_cluster.gpu)
    bench_profile = target.profile if bench_hw.id == target.hardware.id else None
    # Both sides take the target's framework multipliers: they (nearly) cancel in every ratio, and an
    # analytic measurement made with them restores exactly.
    bench = analytic_layout(red.model, red.bench_cluster, red.bench_config, hardware=bench_hw,
                            profile=bench_profile, framework=target.framework)
    comm = _measured_comm(measurement, bench)
    by_kind = {kind: _restore_kind(measurement.layer(kind), kind, bench, target, comm, tp_scaling)
               for kind in layer_kinds(model)}
    return {layer: by_kind[layer_kind(model, layer)] for layer in range(model.num_layers)}, bench, target


def _with_optimizer(p: Projection, optimizer_s: float) -> Projection:
    """The projection with its optimizer step replaced (iteration time and rates follow)."""
    iteration = p.iteration_time_s - p.breakdown.optimizer_s + optimizer_s
    factor = p.iteration_time_s / iteration
    return replace(p, iteration_time_s=iteration, tokens_per_s_per_gpu=p.tokens_per_s_per_gpu * factor,
                   model_tflops_per_gpu=p.model_tflops_per_gpu * factor, mfu=p.mfu * factor,
                   breakdown=replace(p.breakdown, optimizer_s=optimizer_s))


def project_measured(measurement: Measurement, model: ModelSpec, cluster: Cluster, config: TrainingConfig, *,
                     hardware: HardwareSpec | None = None, profile: DeviceProfile | None = None,
                     framework: FrameworkProfile | None = None, flops_formula: FlopsFormula = "6nd",
                     tp_scaling: TpScaling = "ratio", check: bool = True) -> RestoredProjection:
    """Project the target layout from measured per-layer costs (measured mode).

    Raises:
        ProjtuneError: the measurement is of another model or lacks a layer kind of the target.
        IllegalLayoutError: the target layout is illegal (when ``check``).
    """
    hardware = hardware or load_hardware(cluster.gpu)
    warnings = _check(measurement, model, config, hardware)
    costs, bench, target = restore_layer_costs(measurement, model, cluster, config, hardware=hardware,
                                               profile=profile, framework=framework, tp_scaling=tp_scaling)
    result = project(model, cluster, config, hardware=hardware, profile=target.profile, framework=target.framework,
                     flops_formula=flops_formula, check=check, layer_costs=costs)
    analytic_opt = sum(bench.optimizer_s(m.key) for m in measurement.layers if m.key in bench.costs)
    measured_opt = sum(m.optimizer_ms * _MS for m in measurement.layers if m.key in bench.costs)
    ratio = measured_opt / analytic_opt if analytic_opt > 0 and measured_opt > 0 else 1.0
    if ratio != 1.0:
        result = _with_optimizer(result, result.breakdown.optimizer_s * ratio)
    return RestoredProjection(projection=result, layer_costs=costs, optimizer_ratio=ratio,
                              warnings=tuple(warnings))


def analytic_measurement(reduction: Reduction, *, hardware: HardwareSpec | None = None,
                         profile: DeviceProfile | None = None, framework: FrameworkProfile | None = None
                         ) -> Measurement:
    """A measurement filled with the engine's own costs of the bench layout (consistency checks).

    Restoring it must reproduce the direct analytic projection of the target exactly.
    """
    bench = analytic_layout(reduction.model, reduction.bench_cluster, reduction.bench_config,
                            hardware=hardware, profile=profile, framework=framework)
    layers = []
    for kind, cost in bench.costs.items():
        x = bench.experts[kind]
        layers.append(LayerTiming(
            kind="moe" if kind[0] else "dense", window=kind[1], forward_ms=cost.fwd_s / _MS,
            backward_input_ms=cost.bwd_input_s / _MS, backward_weight_ms=cost.bwd_weight_s / _MS,
            attention_forward_ms=cost.attention_fwd_s / _MS, expert_forward_ms=x.fwd_s / _MS,
            expert_backward_input_ms=x.bwd_input_s / _MS, expert_backward_weight_ms=x.bwd_weight_s / _MS,
            optimizer_ms=bench.optimizer_s(kind) / _MS, num_params=int(bench.layer_params_on_gpu(kind)),
        ))
    tp = ep = None
    any_cost = next(iter(bench.costs.values()))
    if bench.dims.tp > 1:
        tp = CollectiveTiming(op="all_reduce", group_size=bench.dims.tp, message_bytes=bench.all_reduce_bytes,
                              time_ms=any_cost.tp_comm_s / 2.0 / _MS, backend="analytic")
    moe = [c for k, c in bench.costs.items() if k[0]]
    if bench.dims.ep > 1 and moe:
        factor = DEEPEP_A2A_FACTOR if bench.config.moe_dispatcher == "deepep" else 1.0
        ep = CollectiveTiming(op="all_to_all", group_size=bench.dims.ep, message_bytes=bench.dispatch_bytes,
                              time_ms=moe[0].ep_comm_s / 2.0 / factor / _MS, backend="analytic")
    return Measurement(
        source="analytic", representative=False, device_name=f"analytic:{bench.hardware.id}",
        hardware_id=bench.hardware.id, torch_version="none", dtype=bench.config.precision,
        model=reduction.target_model.name, reduction=reduction, layers=tuple(layers), tp_all_reduce=tp,
        ep_all_to_all=ep, notes="engine costs of the bench layout (consistency check, not a benchmark)",
    )
