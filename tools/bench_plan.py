"""The cheapest measurement that settles a ranking: one-node runs of the top layouts, ready to launch.

When the best layouts are a near-tie (their 80% intervals overlap) or the best's interval is wide, a
projection cannot tell them apart, but one node can: each contender is reduced to one node so that the
per-GPU work matches the target (:func:`one_node_layout`):

- **reduced DP**: when ``tp * pp * cp`` fits in a node, only DP shrinks (to fill the node) and the global
  batch shrinks with it, so every GPU runs the same micro-batches of the same shapes as at the target;
- **reduced layers**: when the model-parallel group spans more than a node, the pipeline keeps its
  layers per stage but loses stages (a reduced-layer proxy of the model, ``num_layers * pp' / pp``).

Each run comes with its launch config (:func:`tools.exports.export_launch_config`, whose framework checks
it passes), its projected step time, and the wall time of :data:`PLAN_ITERATIONS` steps.  Its log, given
back with ``--anchor`` (``projtune tune ... --anchor runs/``), anchors the projection
(:mod:`tools.anchoring`) and re-ranks every layout at the target scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from projection.engine import project
from projection.errors import ProjtuneError
from projection.job import Job
from projection.legality import layout_violations
from projection.model_spec import ModelSpec
from projection.training_config import TrainingConfig
from tools.exports import FrameworkRuleError, export_launch_config

PLAN_ITERATIONS = 30
"""Steps a plan run takes: 10 of warm-up (the log importers skip at least 10%, evals/log_import.py) and 20 timed."""
WIDE_BAND = 0.5
"""Relative width (high - low) / point of the best's 80% interval above which a measurement is proposed."""
MAX_PLAN_RUNS = 2


class PlanRun(BaseModel):
    """One 1-node run of the plan."""

    model_config = ConfigDict(extra="forbid")

    target_layout: str = Field(description="The target-scale layout this run stands for.")
    layout: str = Field(description="The 1-node layout to launch.")
    config: dict[str, Any]
    num_gpus: int
    reduction: str = Field(description="How it was reduced (DP, layers) and why per-GPU work matches.")
    num_layers: int = Field(description="Layers of the launched model (fewer for a reduced-layer proxy).")
    projected_step_s: float
    expected_minutes: float = Field(description=f"Wall time of {PLAN_ITERATIONS} steps, projected, minutes.")
    framework: str
    launch_config: dict[str, Any] = Field(description="tools.exports.export_launch_config of the 1-node layout.")


class BenchmarkPlan(BaseModel):
    """What to measure, why, and how to give it back."""

    model_config = ConfigDict(extra="forbid")

    reason: str
    runs: list[PlanRun]
    decides: str = Field(description="What the measurements decide.")
    then: str = Field(description="How to feed the logs back.")
    skipped: list[str] = Field(default_factory=list, description="Contenders with no launchable 1-node run, and why.")


def _proxy(model: ModelSpec, layers: int) -> ModelSpec:
    """The model with its first ``layers`` layers (a reduced-layer proxy)."""
    if layers == model.num_layers:
        return model
    update: dict[str, Any] = {"num_layers": layers, "name": f"{model.name}-{layers}l"}
    if model.moe_layers:
        update["moe_layers"] = model.moe_layers[:layers]
    if model.attention_windows:
        update["attention_windows"] = model.attention_windows[:layers]
    return model.model_copy(update=update)


def one_node_layout(job: Job, config: TrainingConfig) -> tuple[ModelSpec, TrainingConfig, int, str]:
    """(model, config, GPUs, how) of a one-node run whose per-GPU work matches ``config`` at the job's scale.

    Raises:
        ProjtuneError: no one-node reduction keeps the per-GPU work (e.g. TP*CP or EP beyond a node).
    """
    node = job.cluster.gpus_per_node
    dp = config.data_parallel(job.cluster.num_gpus)
    group = config.tp * config.cp
    if group > node:
        raise ProjtuneError(f"TP*CP = {group} spans more than one {node}-GPU node")
    pp = config.pp
    layers = job.model.num_layers
    how = []
    if group * pp > node:
        pp = max(1, node // group)
        while pp > 1 and (layers * pp) % config.pp:
            pp -= 1
        layers = layers * pp // config.pp
        how.append(f"layers {job.model.num_layers} -> {layers} (PP {config.pp} -> {pp}, same layers per stage)")
    dp_node = max(1, node // (group * pp))
    while dp_node > 1 and dp % dp_node:   # the largest divisor of the target's DP that fills the node
        dp_node -= 1
    if (group * dp_node) % (config.ep * config.etp):
        raise ProjtuneError(f"EP {config.ep} x ETP {config.etp} does not divide the {group * dp_node} GPUs of one "
                            "node's TP x CP x DP group (the experts need more than a node)")
    micro = config.gbs // (config.mbs * dp)
    gbs = micro * config.mbs * dp_node
    if dp_node != dp:
        how.append(f"DP {dp} -> {dp_node}, gbs {config.gbs} -> {gbs} (same {micro} micro-batches of {config.mbs} "
                   "per GPU)")
    reduced = config.model_copy(update={"pp": pp, "vpp": config.vpp if pp > 1 else 1, "gbs": gbs, "dp": None,
                                        "fsdp_size": None,
                                        "pp_schedule": config.pp_schedule if pp > 1 else None})
    gpus = group * pp * dp_node
    return _proxy(job.model, layers), reduced, gpus, "; ".join(how) or "already one node"


def plan_run(job: Job, config: TrainingConfig, framework: str, target_layout: str) -> PlanRun:
    """The launchable one-node run of one contender.

    Raises:
        ProjtuneError: no legal one-node reduction, or the framework cannot launch it.
    """
    from tools.formatting import layout_text

    model, reduced, gpus, how = one_node_layout(job, config)
    cluster = job.cluster.model_copy(update={"num_gpus": gpus})
    reasons = layout_violations(model, job.hardware, cluster, reduced)
    if reasons:
        raise ProjtuneError(f"the one-node layout is illegal: {'; '.join(reasons)}")
    projection = project(model, cluster, reduced, hardware=job.hardware, profile=job.profile, check=False)
    chunks = reduced.pp * reduced.vpp
    while projection.memory.verdict == "out of memory" and model.num_layers // 2 >= chunks \
            and (model.num_layers // 2) % chunks == 0:
        # fewer DP ranks shard the optimizer less: halve the layers (an anchor's factors are ratios, so a shorter
        # proxy still measures this job's kernels), and say so
        model = _proxy(job.model, model.num_layers // 2)
        how += f"; layers halved to {model.num_layers} to fit one node's memory (optimizer states shard over fewer DP)"
        projection = project(model, cluster, reduced, hardware=job.hardware, profile=job.profile, check=False)
    if projection.memory.verdict == "out of memory":
        raise ProjtuneError(f"no one-node reduction fits in memory ({projection.memory.peak_bytes / 2**30:.0f} GiB "
                            "projected per GPU)")
    try:
        launch = export_launch_config(model, cluster, reduced, framework)
    except FrameworkRuleError as err:
        raise ProjtuneError(str(err)) from err
    step = projection.iteration_time_s
    return PlanRun(target_layout=target_layout, layout=layout_text(reduced.model_dump(exclude_none=True)
                                                                   | {"dp": reduced.data_parallel(gpus)}),
                   config=reduced.model_dump(mode="json", exclude_none=True), num_gpus=gpus, reduction=how,
                   num_layers=model.num_layers, projected_step_s=step,
                   expected_minutes=step * PLAN_ITERATIONS / 60.0, framework=framework,
                   launch_config=launch.model_dump(mode="json"))


def benchmark_plan(job: Job, contenders: Sequence[tuple[str, dict[str, Any]]], *, reason: str,
                   framework: str, anchored: bool = False) -> BenchmarkPlan | None:
    """A plan of at most :data:`MAX_PLAN_RUNS` one-node runs for the contenders ``(layout text, config)``.

    None when no contender has a launchable one-node run (the reasons are lost only then; callers say so).
    """
    runs: list[PlanRun] = []
    skipped: list[str] = []
    for layout, values in contenders[:MAX_PLAN_RUNS]:
        try:
            runs.append(plan_run(job, TrainingConfig(**values), framework, layout))
        except (ProjtuneError, ValueError) as err:
            skipped.append(f"{layout}: {err}")
    if not runs:
        return None
    names = " and ".join(f"'{r.target_layout}'" for r in runs)
    decides = (f"which of {names} is faster on this cluster's kernels: their measured step times anchor the "
               "projection (a compute factor from each, a communication factor when they differ in communication), "
               "and every layout is re-ranked at the target scale" if len(runs) > 1 else
               f"how fast this job's kernels really run: the measured step time of {names} anchors the projection "
               "and narrows its band, which says whether the ranking holds")
    then = ("run each, save the logs into one folder (e.g. runs/), then `projtune tune ... --anchor runs/` "
            "(or the tune tool with `anchors`); `projtune project ... --anchor runs/` shows one layout")
    if anchored:
        then += "; these add to the anchors already given"
    return BenchmarkPlan(reason=reason, runs=runs, decides=decides, then=then, skipped=skipped)
