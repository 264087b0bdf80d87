"""Layout search: enumerate legal layouts, screen memory, project the survivors, rank by tokens/s/GPU.

``run_search`` is the entry point: a typed :class:`SearchRequest` in, a :class:`SearchResult`
out.  The memory screen runs :func:`projection.memory.project_memory` only; survivors get the
full :func:`projection.engine.project` (``check=False``: candidates are legal by construction),
except those :mod:`tools.search_core` proves can be neither in the top-k nor on the Pareto
front.  Ranking is by tokens/s/GPU, ties broken by memory headroom.  When nothing survives, the
result's ``message`` says why (:mod:`tools.search_explain`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from projection.device_profile import DeviceProfile, default_profile, load_profile
from projection.engine import Projection, project
from projection.hardware import HardwareSpec, load_hardware
from projection.legality import layout_violations
from projection.memory import GIB, MemoryResult
from projection.memory_verdict import passes_screen
from projection.model_spec import ModelSpec, load_model
from projection.summary import config_dict
from projection.training_config import MAX_GPUS_PER_NODE, Cluster, TrainingConfig
from tools import search_core
from tools.candidates import break_ties, enumerate_candidates
from tools.constraints import Constraints
from tools.search_core import Evaluator, Outcome, Tally, default_workers, evaluate, group_by_recompute

Progress = Callable[[int, int], None]


class SearchRequest(BaseModel):
    """A layout search: which model on which GPUs, the batch, constraints, and how many results."""

    model_config = ConfigDict(extra="forbid")

    model: str | dict[str, Any] = Field(
        description="Catalog model id (e.g. 'llama3-70b') or Hugging Face config.json fields.")
    gpu: str = Field(description="Hardware catalog id, e.g. 'h100-sxm', 'mi300x'.")
    num_gpus: int = Field(ge=1, description="GPUs in the job.")
    gpus_per_node: int = Field(default=8, ge=1, description="GPUs per node.")
    nics_per_node: int | None = Field(default=None, ge=1, le=64,
                                      description="Scale-out NICs per node; None = the GPU's catalog node.")
    nic_gbps: float | None = Field(default=None, gt=0, le=1e5, allow_inf_nan=False,
                                   description="Line rate of one NIC, Gbit/s; None = the catalog's.")
    nvlink_domain: int | None = Field(default=None, ge=1, le=MAX_GPUS_PER_NODE,
                                      description="GPUs in one NVLink domain (72 for NVL72); None = the catalog's.")
    gbs: int = Field(ge=1, description="Global batch size, sequences per step.")
    seq_len: int = Field(ge=1, description="Sequence length, tokens.")
    constraints: Constraints = Field(default_factory=Constraints,
                                     description="Pins/bounds per axis, min_headroom, allow_fp8.")
    top_k: int = Field(default=5, ge=1, le=100, description="How many ranked layouts to return.")
    candidates: list[dict[str, Any]] | None = Field(
        default=None, description="Explicit candidate set (sweep-format config dicts): when given, only these "
                                  "are checked, screened and ranked; gbs and seq_len fill missing keys.")
    profile_path: str | None = Field(default=None, description="Device profile file; default: the shipped one.")
    finetune: Literal["sft", "lora"] | None = Field(
        default=None, description="Fine-tuning job ('lora': frozen base weights; 'sft'); None = pre-training.")
    framework: str | None = Field(default=None, description="Only layouts this framework can launch "
                                  "(megatron, megatron-bridge, primus, torchtitan, maxtext; tools/framework_rules.py).")


class Candidate(BaseModel):
    """One ranked layout with its projected numbers."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(description="1 = best.")
    config: dict[str, Any] = Field(description="Sweep-format config keys, with derived dp and pp_schedule.")
    layout: str = Field(description="One-line layout, e.g. 'TP2 PP4 DP8 mbs1 gbs256 s8192 bf16 rc=none'.")
    tokens_per_sec_per_gpu: float
    mfu: float = Field(description="Model FLOP utilisation, 0..1.")
    iteration_time_s: float
    tokens_per_sec_per_gpu_low: float = Field(description="80% interval, low end (projection/uncertainty.py).")
    tokens_per_sec_per_gpu_high: float = Field(description="80% interval, high end.")
    iteration_time_s_low: float = Field(description="80% interval on iteration time, low end, seconds.")
    iteration_time_s_high: float = Field(description="80% interval on iteration time, high end, seconds.")
    peak_memory_gib: float
    headroom_fraction: float = Field(description="1 - peak / HBM capacity.")
    verdict: str = Field(description="fits / at risk / out of memory.")
    bottleneck: str = Field(description="Largest non-compute step-time term when above 15% of the step, else compute.")
    breakdown_s: dict[str, float] = Field(default_factory=dict, description="Step-time terms, seconds.")
    reason: str = Field(default="", description="Why it ranks here, in numbers.")


class SearchResult(BaseModel):
    """Ranked layouts, the Pareto front (throughput vs headroom), counts, and why when nothing fits."""

    model_config = ConfigDict(extra="forbid")

    request: SearchRequest
    ranked: list[Candidate] = Field(description="The top_k layouts, best first.")
    enumerated: int = Field(description="Legal layouts generated (or explicit candidates given).")
    screened_out: int = Field(description="Layouts dropped by the memory screen.")
    projected: int = Field(description="Layouts fully projected.")
    pruned: int = Field(default=0, description="Layouts skipped unprojected: a sibling with less recompute bounds "
                                                "them below the top-k and off the Pareto front.")
    pareto: list[Candidate] = Field(default_factory=list, description="Non-dominated in (tokens/s/GPU, headroom).")
    rejected: list[dict[str, Any]] = Field(default_factory=list,
                                           description="Explicit candidates that are illegal, with reasons.")
    elapsed_s: float
    message: str | None = Field(default=None, description="Why nothing was found, or notes on the result.")


class _Job:
    """The resolved specs of a request (loaded once per search)."""

    def __init__(self, request: SearchRequest) -> None:
        self.model: ModelSpec = load_model(request.model)
        self.hardware: HardwareSpec = load_hardware(request.gpu)
        self.cluster = Cluster(gpu=self.hardware.id, num_gpus=request.num_gpus, gpus_per_node=request.gpus_per_node,
                               nics_per_node=request.nics_per_node, nic_gbps=request.nic_gbps,
                               nvlink_domain=request.nvlink_domain)
        self.profile: DeviceProfile = (load_profile(request.profile_path) if request.profile_path
                                       else default_profile(self.hardware))

    def resized(self, num_gpus: int) -> _Job:
        """The same job on another number of GPUs."""
        copy = object.__new__(_Job)
        copy.__dict__.update(self.__dict__)
        copy.cluster = self.cluster.model_copy(update={"num_gpus": num_gpus})
        return copy


def screen_memory(job: _Job, config: TrainingConfig) -> MemoryResult:
    """The memory of one layout on the job's cluster (the cheap screen; :func:`tools.search_core.screen_memory`)."""
    return search_core.screen_memory(job, config)


def passes(memory: MemoryResult, min_headroom: float) -> bool:
    """Whether a memory result passes the screen (:func:`projection.memory_verdict.passes_screen`, as the agent)."""
    return passes_screen(memory.peak_bytes, memory.capacity_bytes, min_headroom, memory.margins)


def _explicit(request: SearchRequest, job: _Job) -> tuple[list[TrainingConfig], list[dict[str, Any]]]:
    configs: list[TrainingConfig] = []
    rejected: list[dict[str, Any]] = []
    for raw in request.candidates or []:
        values = {"gbs": request.gbs, "seq_len": request.seq_len, **raw}
        if values.get("pp_schedule") is None:
            values.pop("pp_schedule", None)
        try:
            config = TrainingConfig(**values)
        except ValidationError as err:
            rejected.append({"config": raw, "reasons": [e["msg"] + f" ({'.'.join(map(str, e['loc']))})"
                                                        for e in err.errors()]})
            continue
        reasons = layout_violations(job.model, job.hardware, job.cluster, config)
        if reasons:
            rejected.append({"config": raw, "reasons": reasons})
        else:
            configs.append(config)
    return configs, rejected


def candidate(p: Projection, rank: int) -> Candidate:
    """The ranked view of one projection."""
    from tools.formatting import layout_text

    config = config_dict(p)
    return Candidate(
        rank=rank, config=config, layout=layout_text(config), tokens_per_sec_per_gpu=p.tokens_per_s_per_gpu,
        mfu=p.mfu, iteration_time_s=p.iteration_time_s, peak_memory_gib=p.memory.peak_bytes / GIB,
        headroom_fraction=p.memory.headroom_fraction, verdict=p.memory.verdict, bottleneck=p.breakdown.bottleneck,
        tokens_per_sec_per_gpu_low=p.tokens_per_sec_per_gpu_low,
        tokens_per_sec_per_gpu_high=p.tokens_per_sec_per_gpu_high, iteration_time_s_low=p.iteration_time_s_low,
        iteration_time_s_high=p.iteration_time_s_high,
        breakdown_s=p.breakdown.as_dict(),
    )


def _differences(a: dict[str, Any], b: dict[str, Any]) -> str:
    keys = ("tp", "pp", "vpp", "cp", "ep", "etp", "dp", "mbs", "precision", "recompute", "recompute_num_layers",
            "zero", "pp_schedule")
    diffs = [f"{k} {b.get(k)}->{a.get(k)}" for k in keys if a.get(k) != b.get(k)]
    return ", ".join(diffs) if diffs else "nothing"


def _reason(c: Candidate, best: Candidate | None) -> str:
    share = c.breakdown_s.get(f"{c.bottleneck}_s", 0.0) / max(sum(c.breakdown_s.values()), 1e-12)
    head = (f"{c.tokens_per_sec_per_gpu:,.0f} tok/s/GPU, MFU {c.mfu:.1%}, bottleneck {c.bottleneck} "
            f"({share:.0%} of the step), {c.headroom_fraction:.0%} HBM headroom ({c.verdict})")
    if best is None:
        return "fastest: " + head
    slower = 1.0 - c.tokens_per_sec_per_gpu / best.tokens_per_sec_per_gpu
    return f"{slower:.1%} slower than #1 ({head}); differs from #1 in {_differences(c.config, best.config)}"


def run_search(request: SearchRequest, progress: Progress | None = None, *, workers: int | None = None
               ) -> SearchResult:
    """Search the legal layouts of a job (or rank an explicit candidate set) and rank them.

    ``progress(done, total)`` is called as candidates are visited.  ``workers`` is the number of
    processes (None: 2 for large searches when forking is safe, see :mod:`tools.search_core`).

    Raises:
        ProjtuneError: unknown model or GPU, or an unreadable profile.
    """
    start = time.perf_counter()
    job = _Job(request)
    constraints = request.constraints
    rejected: list[dict[str, Any]] = []
    if request.candidates is not None:
        legal, rejected = _explicit(request, job)
        configs = [c for c in legal if _within(constraints, c)]
        rejected += [{"config": c.model_dump(mode="json", exclude_defaults=True),
                      "reasons": ["outside the constraints"]} for c in legal if not _within(constraints, c)]
        groups = [[i] for i in range(len(configs))]
    else:
        configs = list(enumerate_candidates(job.model, job.hardware, job.cluster, constraints, request.gbs,
                                            request.seq_len, request.finetune))
        groups = group_by_recompute(configs)
    if request.framework is not None:  # keep only what the framework can launch (tools/framework_rules.py)
        from tools.framework_rules import check_framework, framework_violations

        name = check_framework(request.framework)
        configs = [c for c in configs if not framework_violations(name, job.model, job.cluster, c)]
        groups = group_by_recompute(configs) if request.candidates is None else [[i] for i in range(len(configs))]
    total = len(configs)
    count = workers if workers is not None else default_workers(total)
    evaluator = Evaluator(job, configs, groups, constraints.min_headroom, keep_projections=count <= 1)
    tally = evaluate(evaluator, request.top_k, None if progress is None else lambda done: progress(done, total),
                     count)
    if progress is not None:
        progress(total, total)
    ranked, pareto = _finish(job, configs, tally, request.top_k)
    message = None
    if not ranked:
        from tools.search_explain import explain_empty

        roomiest = None if tally.roomiest is None else (tally.roomiest[0], configs[tally.roomiest[1]])
        message = explain_empty(request, job, enumerated=total + len(rejected), roomiest=roomiest)
    elif rejected:
        message = f"{len(rejected)} of the given candidates are illegal and were skipped (see rejected)"
    return SearchResult(
        request=request, ranked=ranked, enumerated=total + len(rejected), screened_out=tally.screened_out,
        projected=len(tally.outcomes), pruned=tally.pruned, pareto=pareto, rejected=rejected,
        elapsed_s=time.perf_counter() - start, message=message,
    )


def _finish(job: _Job, configs: list[TrainingConfig], tally: Tally, top_k: int
            ) -> tuple[list[Candidate], list[Candidate]]:
    """Top-k and Pareto candidates from the outcomes (re-projecting the few chosen when workers ran)."""
    ordered = sorted(tally.outcomes, key=lambda o: (-o.tokens_per_s_per_gpu, -o.headroom_fraction, o.index))
    front = front_of(ordered)
    ordered = break_ties(ordered, lambda o: o.tokens_per_s_per_gpu, lambda o: configs[o.index])  # simpler first
    best = ordered[:top_k]

    def projection(index: int) -> Projection:
        if index not in tally.projections:
            tally.projections[index] = project(job.model, job.cluster, configs[index], hardware=job.hardware,
                                               profile=job.profile, check=False)
        return tally.projections[index]

    ranked = [candidate(projection(o.index), i + 1) for i, o in enumerate(best)]
    for c in ranked:
        c.reason = _reason(c, None if c.rank == 1 else ranked[0])
    return ranked, [candidate(projection(o.index), 0) for o in front]


def front_of(ordered: list[Outcome]) -> list[Outcome]:
    """The Pareto front (throughput vs headroom) of outcomes sorted by throughput, then headroom, descending."""
    front: list[Outcome] = []
    for o in ordered:
        if not front or o.headroom_fraction > front[-1].headroom_fraction:
            front.append(o)
    return front


def _within(constraints: Constraints, config: TrainingConfig) -> bool:
    values = config.model_dump()
    values["pp_schedule"] = config.schedule
    return all(constraints.allows(axis, values[axis]) for axis in constraints.active()
               if axis in values and values[axis] is not None)


def what_if(request: SearchRequest, **changes: Any) -> SearchResult:
    """Re-run a search with some request fields changed (e.g. ``num_gpus=8`` or ``gpu='mi300x'``)."""
    return run_search(SearchRequest.model_validate(request.model_dump() | changes))


def what_if_gpus(request: SearchRequest, num_gpus: int) -> SearchResult:
    """The same search on a different number of GPUs."""
    return what_if(request, num_gpus=num_gpus)


def what_if_gpu(request: SearchRequest, gpu: str) -> SearchResult:
    """The same search on a different GPU type."""
    return what_if(request, gpu=gpu)


def what_if_summary(base: SearchResult, other: SearchResult) -> str:
    """One line comparing the best layouts of two searches (per GPU and for the whole job)."""
    if not base.ranked or not other.ranked:
        return "no comparison: one of the searches found no layout that fits"
    b, o = base.ranked[0], other.ranked[0]
    per_gpu = o.tokens_per_sec_per_gpu / b.tokens_per_sec_per_gpu - 1.0
    job = (o.tokens_per_sec_per_gpu * other.request.num_gpus) / (b.tokens_per_sec_per_gpu * base.request.num_gpus) - 1
    return (f"{other.request.num_gpus} x {other.request.gpu} vs {base.request.num_gpus} x {base.request.gpu}: "
            f"best {o.tokens_per_sec_per_gpu:,.0f} vs {b.tokens_per_sec_per_gpu:,.0f} tok/s/GPU ({per_gpu:+.1%}), "
            f"job throughput {job:+.1%}; best layout {o.layout}")
