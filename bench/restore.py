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

Compute is anchored on the analytic view of the layout whose shapes were TIMED, at the
precision the GEMMs really RAN in: for a ``compute_slice="target"`` measurement that is the
target layout itself on the measuring GPU (ratio 1 on the same GPU type), for ``"bench"`` the
reduced layout. An FP8 target measured in bf16 is thus carried to FP8 by the engine's
analytic ratio, and the restore says so. The measured embedding and LM head + loss replace
the engine's by their difference, added to the layers that share their pipeline chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from bench.analytic import AnalyticLayout, LayerKind, analytic_layout, layer_kind, layer_kinds
from bench.measurement import CollectiveTiming, HeadTiming, LayerTiming, Measurement
from bench.reduction import Reduction
from projection.anchor import AnchorRun
from projection.device_profile import DeviceProfile
from projection.engine import Projection, project
from projection.errors import ProjtuneError
from projection.flops import FlopsFormula
from projection.framework_profile import FrameworkProfile
from projection.hardware import HardwareSpec
from projection.job import hardware_of
from projection.layout import effective_schedule
from projection.model_spec import ModelSpec
from projection.training_config import Cluster, TrainingConfig
from projection.workload import DEEPEP_A2A_FACTOR, LayerCost, embedding_cost, head_cost

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
                  comm: tuple[float | None, float | None], tp_scaling: TpScaling,
                  timed: AnalyticLayout | None = None, timed_experts: AnalyticLayout | None = None) -> LayerCost:
    """``bench``: comm anchors (the reduced layout); ``timed``/``timed_experts``: compute anchors (the layout
    whose shapes ran, at the precision its dense / expert GEMMs ran in); both default to ``bench``."""
    timed = timed or bench
    timed_experts = timed_experts or timed
    b, t = bench.costs[kind], target.costs[kind]
    c = timed.costs[kind]
    bx, tx = timed_experts.experts[kind], target.experts[kind]
    tp_factor = timed.dims.tp / target.dims.tp if tp_scaling == "linear" else None
    tp_m = b.tp_comm_s if comm[0] is None else comm[0]
    ep_m = b.ep_comm_s if comm[1] is None or not kind[0] else comm[1]
    return LayerCost(
        fwd_s=_compute(m.forward_ms * _MS, m.expert_forward_ms * _MS, c.fwd_s, bx.fwd_s, t.fwd_s, tx.fwd_s,
                       tp_factor),
        bwd_input_s=_compute(m.backward_input_ms * _MS, m.expert_backward_input_ms * _MS, c.bwd_input_s,
                             bx.bwd_input_s, t.bwd_input_s, tx.bwd_input_s, tp_factor),
        bwd_weight_s=_compute(m.backward_weight_ms * _MS, m.expert_backward_weight_ms * _MS, c.bwd_weight_s,
                              bx.bwd_weight_s, t.bwd_weight_s, tx.bwd_weight_s, tp_factor),
        attention_fwd_s=(m.attention_forward_ms * _MS * tp_factor if tp_factor is not None
                         else _scaled(m.attention_forward_ms * _MS, c.attention_fwd_s, t.attention_fwd_s)),
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
    bench = red.target_config if measurement.compute_slice == "target" else red.bench_config
    fields = ("seq_len", "mbs", "cp") + (("tp", "ep", "etp", "sequence_parallel", "finetune")
                                         if measurement.compute_slice == "target" else ())
    for field in fields:
        if getattr(bench, field) != getattr(config, field):
            warnings.append(f"{field} differs (timed {getattr(bench, field)}, target {getattr(config, field)}): "
                            "restored by the analytic ratio")
    ran = ran_precision(measurement, bench.precision)
    if ran != config.precision:
        warnings.append(f"target precision {config.precision}, GEMMs measured in "
                        f"{measurement.measured_precision or measurement.dtype}: carried to {config.precision} by "
                        f"the analytic ratio ({ran} -> {config.precision})")
    experts = {t.expert_precision for t in measurement.layers if t.expert_precision}
    if config.is_low_precision and experts and experts != {"fp8"}:
        warnings.append(f"routed experts measured in {', '.join(sorted(experts))}, target {config.precision}: "
                        "carried by the analytic ratio")
    loops = sorted({t.expert_gemm for t in measurement.layers if t.expert_gemm.startswith("per-expert loop")})
    warnings += [f"routed experts timed as a {loop}, not a grouped GEMM: slower than the target's kernels"
                 for loop in loops]
    if measurement.head is None and measurement.source != "analytic":
        warnings.append("embedding and LM head not measured: the engine's analytic head is used")
    return warnings


def _as_precision(measured: str, fallback: str, fp8_name: str) -> str:
    """The engine precision a measured GEMM precision stands for."""
    if not measured:
        return fallback
    if measured == "fp8":
        return fp8_name
    if measured == "mixed":
        return fallback
    return "fp16" if measured == "float16" else "bf16"   # bf16; fp32 (CPU plumbing) is costed as 16-bit


def ran_precision(measurement: Measurement, fallback: str) -> str:
    """Engine precision of the dense GEMMs as measured ('' in old files: ``fallback``, the bench config's)."""
    fp8_name = fallback if fallback.startswith(("fp8", "mxfp8")) else "fp8"
    return _as_precision(measurement.measured_precision, fallback, fp8_name)


def _timed_views(measurement: Measurement, model: ModelSpec, cluster: Cluster, config: TrainingConfig,
                 bench: AnalyticLayout, target: AnalyticLayout) -> tuple[AnalyticLayout, AnalyticLayout]:
    """Compute anchors: the layout whose shapes ran, at the dense and the expert GEMM precision it ran in."""
    red = measurement.reduction
    if measurement.compute_slice == "target":
        base_model, base_cluster, base_config = model, cluster.model_copy(update={"gpu": red.bench_cluster.gpu}), config
    else:
        base_model, base_cluster, base_config = red.model, red.bench_cluster, red.bench_config
    dense = ran_precision(measurement, base_config.precision)
    experts = {t.expert_precision for t in measurement.layers if t.expert_precision}
    fp8_name = base_config.precision if base_config.is_low_precision else "fp8"
    expert = _as_precision(experts.pop(), base_config.precision, fp8_name) if len(experts) == 1 else dense

    def view(precision: str) -> AnalyticLayout:
        if (precision == bench.config.precision and base_config is red.bench_config):
            return bench
        cfg = base_config.model_copy(update={"precision": precision})
        return analytic_layout(base_model, base_cluster, cfg, hardware=bench.hardware, profile=bench.profile,
                               framework=target.framework)

    timed = view(dense)
    return timed, (timed if expert == dense else view(expert))


def _head_deltas(head: HeadTiming, timed: AnalyticLayout, target: AnalyticLayout) -> tuple[float, float, float, float]:
    """(head fwd, head bwd, embedding fwd, embedding bwd) restored minus the target's analytic, seconds."""
    def analytic(view: AnalyticLayout) -> tuple[tuple[float, float, float], tuple[float, float]]:
        return (head_cost(view.model, view.config, view.dims, view.rates),
                embedding_cost(view.model, view.config, view.dims, view.rates))

    (bh, be), (th, te) = analytic(timed), analytic(target)
    hf = _scaled(head.head_forward_ms * _MS, bh[0], th[0])
    hb = _scaled(head.head_backward_ms * _MS, bh[1] + bh[2], th[1] + th[2])
    ef = _scaled(head.embedding_forward_ms * _MS, be[0], te[0])
    eb = _scaled(head.embedding_backward_ms * _MS, be[1], te[1])
    return hf - th[0], hb - th[1] - th[2], ef - te[0], eb - te[1]


def _add(cost: LayerCost, fwd: float, bwd: float) -> LayerCost:
    return replace(cost, fwd_s=max(0.0, cost.fwd_s + fwd), bwd_input_s=max(0.0, cost.bwd_input_s + bwd))


def restore_layer_costs(measurement: Measurement, model: ModelSpec, cluster: Cluster, config: TrainingConfig, *,
                        hardware: HardwareSpec | None = None, profile: DeviceProfile | None = None,
                        framework: FrameworkProfile | None = None, tp_scaling: TpScaling = "ratio",
                        bench_profile: DeviceProfile | None = None
                        ) -> tuple[dict[int, LayerCost], AnalyticLayout, AnalyticLayout]:
    """Target-layout cost of every layer from a measurement; also the bench and target analytic views.

    ``bench_profile``: the measuring GPU's profile when it is not the target's (e.g. a profile fitted
    on it); by default the target's profile on the same GPU type, else the shipped one.
    """
    red = measurement.reduction
    target = analytic_layout(model, cluster, config, hardware=hardware, profile=profile, framework=framework)
    bench_hw = hardware_of(red.bench_cluster)
    if bench_profile is None and bench_hw.id == target.hardware.id:
        bench_profile = target.profile
    # Both sides take the target's framework multipliers: they (nearly) cancel in every ratio, and an
    # analytic measurement made with them restores exactly.
    bench = analytic_layout(red.model, red.bench_cluster, red.bench_config, hardware=bench_hw,
                            profile=bench_profile, framework=target.framework)
    comm = _measured_comm(measurement, bench)
    timed, timed_experts = _timed_views(measurement, model, cluster, config, bench, target)
    by_kind = {kind: _restore_kind(measurement.layer(kind), kind, bench, target, comm, tp_scaling, timed,
                                   timed_experts)
               for kind in layer_kinds(model)}
    costs = {layer: by_kind[layer_kind(model, layer)] for layer in range(model.num_layers)}
    if measurement.head is not None:
        hf, hb, ef, eb = _head_deltas(measurement.head, timed, target)
        # The engine adds the embedding to rank 0's first chunk and the head to the last rank's last chunk
        # (rank 0's first chunk under ZB-V): fold the differences into a layer of that chunk.
        head_layer = 0 if effective_schedule(config) == "zbv" else model.num_layers - 1
        costs[0] = _add(costs[0], ef, eb)
        costs[head_layer] = _add(costs[head_layer], hf, hb)
    return costs, bench, target


def _with_optimizer(p: Projection, optimizer_s: float) -> Projection:
    """The projection with its optimizer step replaced (iteration time and rates follow)."""
    iteration = p.iteration_time_s - p.breakdown.optimizer_s + optimizer_s
    factor = p.iteration_time_s / iteration
    return replace(p, iteration_time_s=iteration, tokens_per_s_per_gpu=p.tokens_per_s_per_gpu * factor,
                   model_tflops_per_gpu=p.model_tflops_per_gpu * factor, mfu=p.mfu * factor,
                   tokens_per_sec_per_gpu_low=p.tokens_per_sec_per_gpu_low * factor,
                   tokens_per_sec_per_gpu_high=p.tokens_per_sec_per_gpu_high * factor,
                   iteration_time_s_low=p.iteration_time_s_low / factor,
                   iteration_time_s_high=p.iteration_time_s_high / factor,
                   breakdown=replace(p.breakdown, optimizer_s=optimizer_s))


def project_measured(measurement: Measurement, model: ModelSpec, cluster: Cluster, config: TrainingConfig, *,
                     hardware: HardwareSpec | None = None, profile: DeviceProfile | None = None,
                     framework: FrameworkProfile | None = None, flops_formula: FlopsFormula = "6nd",
                     tp_scaling: TpScaling = "ratio", check: bool = True,
                     bench_profile: DeviceProfile | None = None) -> RestoredProjection:
    """Project the target layout from measured per-layer costs (measured mode).

    Raises:
        ProjtuneError: the measurement is of another model or lacks a layer kind of the target.
        IllegalLayoutError: the target layout is illegal (when ``check``).
    """
    hardware = hardware_of(cluster, hardware)
    warnings = _check(measurement, model, config, hardware)
    costs, bench, target = restore_layer_costs(measurement, model, cluster, config, hardware=hardware,
                                               profile=profile, framework=framework, tp_scaling=tp_scaling,
                                               bench_profile=bench_profile)
    result = project(model, cluster, config, hardware=hardware, profile=target.profile, framework=target.framework,
                     flops_formula=flops_formula, check=check, layer_costs=costs)
    anchor = bench   # the optimizer was timed over the parameters of the layout whose shapes ran
    if measurement.compute_slice == "target":
        anchor = analytic_layout(model, cluster.model_copy(update={"gpu": bench.hardware.id}), config,
                                 hardware=bench.hardware, profile=bench.profile, framework=target.framework)
    analytic_opt = sum(anchor.optimizer_s(m.key) for m in measurement.layers if m.key in anchor.costs)
    measured_opt = sum(m.optimizer_ms * _MS for m in measurement.layers if m.key in anchor.costs)
    ratio = measured_opt / analytic_opt if analytic_opt > 0 and measured_opt > 0 else 1.0
    if ratio != 1.0:
        result = _with_optimizer(result, result.breakdown.optimizer_s * ratio)
    return RestoredProjection(projection=result, layer_costs=costs, optimizer_ratio=ratio,
                              warnings=tuple(warnings))


def analytic_measurement(reduction: Reduction, *, hardware: HardwareSpec | None = None,
                         profile: DeviceProfile | None = None, framework: FrameworkProfile | None = None,
                         compute_slice: Literal["bench", "target"] = "bench") -> Measurement:
    """A measurement filled with the engine's own costs (consistency checks): layer compute of the bench
    layout, or of the target's per-GPU slice on the bench GPU (``compute_slice="target"``); collectives
    always of the bench layout.

    Restoring it must reproduce the direct analytic projection of the target exactly.
    """
    bench = analytic_layout(reduction.model, reduction.bench_cluster, reduction.bench_config,
                            hardware=hardware, profile=profile, framework=framework)
    timed = bench if compute_slice == "bench" else analytic_layout(
        reduction.target_model, reduction.target_cluster.model_copy(update={"gpu": reduction.bench_cluster.gpu}),
        reduction.target_config, hardware=hardware, profile=profile, framework=framework)
    layers = []
    for kind, cost in timed.costs.items():
        x = timed.experts[kind]
        layers.append(LayerTiming(
            kind="moe" if kind[0] else "dense", window=kind[1], forward_ms=cost.fwd_s / _MS,
            backward_input_ms=cost.bwd_input_s / _MS, backward_weight_ms=cost.bwd_weight_s / _MS,
            attention_forward_ms=cost.attention_fwd_s / _MS, expert_forward_ms=x.fwd_s / _MS,
            expert_backward_input_ms=x.bwd_input_s / _MS, expert_backward_weight_ms=x.bwd_weight_s / _MS,
            optimizer_ms=timed.optimizer_s(kind) / _MS, num_params=int(timed.layer_params_on_gpu(kind)),
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
        model=reduction.target_model.name, reduction=reduction, layers=tuple(layers), compute_slice=compute_slice,
        tp_all_reduce=tp,
        ep_all_to_all=ep, notes="engine costs of the bench layout (consistency check, not a benchmark)",
    )


def measured_anchor(measurement: Measurement, *, label: str, profile: DeviceProfile | None = None) -> AnchorRun:
    """A measured-mode result as an anchor of its job (:mod:`projection.anchor`): the measurement restored to the
    target layout it was reduced from, by :func:`project_measured` (measured mode's restore).

    Every other layout of the job is then corrected from this one run like from a training log, so measured mode
    and ``--anchor`` share one restore and one correction.  The label carries the restore's warnings.
    """
    red = measurement.reduction
    restored = project_measured(measurement, red.target_model, red.target_cluster, red.target_config,
                                profile=profile)
    notes = "; ".join(restored.warnings)
    return AnchorRun(
        label=f"{label} (measured mode on {measurement.device_name}, restored to the target layout"
              + (f"; {notes})" if notes else ")"),
        model=red.target_model.name, gpu=red.target_cluster.gpu, num_gpus=red.target_cluster.num_gpus,
        gpus_per_node=red.target_cluster.gpus_per_node,
        config=red.target_config.model_dump(exclude_none=True), iteration_time_s=restored.projection.iteration_time_s)
