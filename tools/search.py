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
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from projection import fast_paths, module_heap
from projection.engine import Projection, project
from projection.framework import FrameworkRecord, resolve_framework
from projection.job import Job, resolve_job
from projection.legality import layout_violations
from projection.memory import MemoryResult
from projection.memory_batch import batcher_for
from projection.memory_verdict import passes_screen
from projection.training_config import TrainingConfig
from tools import search_core
from tools.anchoring import Anchoring, anchored, anchoring_for
from tools.candidate_columns import CandidateColumns, enumerate_candidates, enumerate_columns
from tools.candidates import SearchSpace, break_ties, job_template, switch_pins, with_job_fields
from tools.constraints import SWITCH_PINS, Constraints
from tools.layout_score import ProjectedLayout, projected_layout
from tools.switch_rules import ep_overlap_hides, switch_choices, switch_variants
from tools.search_core import Evaluator, Outcome, Tally, default_workers, evaluate, group_by_recompute
from tools.search_explain import explain_empty
from tools.search_request import SearchRequest

Progress = Callable[[int, int], None]


class Candidate(ProjectedLayout):
    """One ranked layout with its projected numbers (a :class:`tools.layout_score.LayoutScore`, frozen)."""

    rank: int = Field(description="1 = best.")
    reason: str = Field(default="", description="Why it ranks here, in numbers.")
    unanchored_tokens_per_sec_per_gpu: float | None = Field(
        default=None, description="Throughput before the anchors' corrections (None: no anchors).")


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
    framework: str = Field(default="megatron", description="The recipe framework whose profile and memory traits "
                           "priced the layouts (projection/framework.py): the request's, else megatron, the default. "
                           "Explicit candidates that name their own framework are priced with theirs.")
    framework_default: bool = Field(default=True, description="True when the request named no framework and the "
                                                              "default (megatron) priced the layouts.")
    elapsed_s: float
    message: str | None = Field(default=None, description="Why nothing was found, or notes on the result.")
    complete: bool = Field(default=True, description="False when the search stopped at its deadline: the counts "
                                                     "and the layouts cover only the layouts searched so far.")
    anchoring: Anchoring | None = Field(default=None, description="Corrections from the request's anchors and the "
                                                                  "anchors they came from (None: unanchored).")


def resolve_request(request: SearchRequest) -> Job:
    """The resolved specs of a request, loaded once per search (:func:`projection.job.resolve_job`).

    ``request.framework`` names the framework the layouts run on (a launch name such as ``maxtext``, a recipe
    name such as ``jax``, or an alias): its record prices every layout (each carries its recipe name) and its
    launch rules filter them (:mod:`tools.framework_rules`); None prices with megatron's and filters nothing.
    """
    return resolve_job(request.model, request.gpu, request.num_gpus, gpus_per_node=request.gpus_per_node,
                       nics_per_node=request.nics_per_node, nic_gbps=request.nic_gbps,
                       nvlink_domain=request.nvlink_domain, profile_path=request.profile_path,
                       framework=resolve_framework(request.framework).name, host_op_s=request.host_op_s)


def request_framework(request: SearchRequest) -> FrameworkRecord | None:
    """The framework record the request names (None when it names none: the layouts keep their own, megatron).

    Raises:
        UnknownNameError: an unknown framework word; the message names the nearest.
    """
    return None if request.framework is None else resolve_framework(request.framework)


def screen_memory(job: Job, config: TrainingConfig) -> MemoryResult:
    """The memory of one layout on the job's cluster (the cheap screen; :func:`tools.search_core.screen_memory`)."""
    return search_core.screen_memory(job, config)


def passes(memory: MemoryResult, min_headroom: float) -> bool:
    """Whether a memory result passes the screen (:func:`projection.memory_verdict.passes_screen`, as the agent)."""
    return passes_screen(memory.peak_bytes, memory.capacity_bytes, min_headroom, memory.margins)


def _explicit(request: SearchRequest, job: Job, framework: str | None
              ) -> tuple[list[TrainingConfig], list[dict[str, Any]]]:
    configs: list[TrainingConfig] = []
    rejected: list[dict[str, Any]] = []
    for raw in request.candidates or []:
        values = with_job_fields(raw, gbs=request.gbs, seq_len=request.seq_len, finetune=request.finetune,
                                 packed_document_tokens=request.packed_document_tokens, framework=framework,
                                 **switch_pins(request.constraints))
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


def candidate(p: Projection, rank: int, reason: str = "", unanchored: Projection | None = None) -> Candidate:
    """The ranked view of one projection (``unanchored``: the same layout before the anchors' corrections)."""
    return Candidate(**projected_layout(p), rank=rank, reason=reason,
                     unanchored_tokens_per_sec_per_gpu=None if unanchored is None else unanchored.tokens_per_s_per_gpu)


def _differences(a: dict[str, Any], b: dict[str, Any]) -> str:
    keys = ("tp", "pp", "vpp", "pp_first_stage_layers", "pp_last_stage_layers", "pp_layout", "cp", "ep", "etp", "dp",
            "mbs", "precision", "recompute", "recompute_num_layers", "recompute_modules", "zero", "fsdp_size",
            "moe_dispatcher", "pp_schedule", "comm_overlap", "cuda_graphs")
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


def run_search(request: SearchRequest, progress: Progress | None = None, *, workers: int | None = None,
               deadline_s: float | None = None) -> SearchResult:
    """Search the legal layouts of a job (or rank an explicit candidate set) and rank them.

    ``progress(done, total)`` is called as candidates are visited.  ``workers`` is the number of
    processes (None: 2 for large searches when forking is safe, see :mod:`tools.search_core`).
    ``deadline_s``: wall seconds from the call after which the search stops and returns what it has
    found, with ``complete=False`` and a message saying how many layouts it searched (None: no limit).

    Raises:
        ProjtuneError: unknown model or GPU, or an unreadable profile.
    """
    with module_heap.collecting_rarely():
        return _run_search(request, progress, workers, deadline_s)


def _run_search(request: SearchRequest, progress: Progress | None, workers: int | None, deadline_s: float | None
                ) -> SearchResult:
    start = time.perf_counter()
    record = request_framework(request)
    framework = None if record is None else record.name
    job = resolve_request(request)
    anchoring = anchoring_for(job, request.anchors) if request.anchors else None
    corrections = anchoring.corrections if anchoring is not None else None
    constraints = request.constraints
    hides = ep_overlap_hides(job.profile)
    rejected: list[dict[str, Any]] = []
    if request.candidates is not None:
        legal, rejected = _explicit(request, job, framework)
        configs = [switch_variants(framework, job.model, c, ep_overlap_hides=hides)[0]
                   for c in legal if _within(constraints, c)]
        rejected += [{"config": c.model_dump(mode="json", exclude_defaults=True),
                      "reasons": ["outside the constraints"]} for c in legal if not _within(constraints, c)]
        groups = [[i] for i in range(len(configs))]
    elif fast_paths.enabled() and (record is None or record.launch is None):
        # the space as columns: typed configs only for the layouts that are read (tools/candidate_columns.py)
        space = SearchSpace(model=job.model, hardware=job.hardware, cluster=job.cluster, constraints=constraints,
                            gbs=request.gbs, seq_len=request.seq_len, framework=framework, ep_overlap_hides=hides)
        columns = enumerate_columns(space, job_template(space, request.finetune, request.packed_document_tokens))
        configs, groups = columns, columns.group_arrays()
    else:
        configs = list(enumerate_candidates(job.model, job.hardware, job.cluster, constraints, request.gbs,
                                            request.seq_len, request.finetune,
                                            packed_document_tokens=request.packed_document_tokens,
                                            framework=framework, ep_overlap_hides=hides))
        groups = group_by_recompute(configs)
    if record is not None and record.launch is not None:  # only what it can launch (tools/framework_rules.py)
        from tools.framework_rules import framework_violations

        configs = [c for c in configs if not framework_violations(record.launch, job.model, job.cluster, c)]
        groups = group_by_recompute(configs) if request.candidates is None else [[i] for i in range(len(configs))]
    total = len(configs)
    count = workers if workers is not None else default_workers(total)
    deadline = None if deadline_s is None else start + deadline_s
    evaluator = Evaluator(job, configs, groups, constraints.min_headroom, keep_projections=count <= 1,
                          deadline=deadline, corrections=corrections,
                          columns=configs if isinstance(configs, CandidateColumns) else None)
    tally = evaluate(evaluator, request.top_k, None if progress is None else lambda done: progress(done, total),
                     count)
    if tally.complete:
        configs = _search_fallbacks(job, framework, evaluator, tally, request.top_k, deadline, corrections,
                                    switch_pins(constraints), hides)
    if progress is not None:
        progress(total if tally.complete else tally.visited, total)
    ranked, pareto = _finish(job, configs, tally, request.top_k, corrections)
    message = None
    if not tally.complete:
        message = (f"partial result: stopped at the {deadline_s:g} s deadline after searching {tally.visited:,} of "
                   f"{total:,} layouts ({len(tally.outcomes):,} projected); the best layout may be among the "
                   f"{total - tally.visited:,} not searched (allow more time or narrow the space with constraints)")
    elif not ranked:
        roomiest = None if tally.roomiest is None else (tally.roomiest[0], configs[tally.roomiest[1]])
        message = explain_empty(request, job, enumerated=total + len(rejected), roomiest=roomiest)
    elif rejected:
        message = f"{len(rejected)} of the given candidates are illegal and were skipped (see rejected)"
    return SearchResult(
        request=request, ranked=ranked, enumerated=total + len(rejected), screened_out=tally.screened_out,
        projected=len(tally.outcomes), pruned=tally.pruned, pareto=pareto, rejected=rejected,
        framework=job.framework.name, framework_default=record is None, elapsed_s=time.perf_counter() - start,
        message=message, complete=tally.complete, anchoring=anchoring,
    )


class _Joined(Sequence[TrainingConfig]):
    """The searched layouts followed by the switch fallbacks (one index space for the outcomes)."""

    def __init__(self, first: Sequence[TrainingConfig], second: list[TrainingConfig]) -> None:
        self.first, self.second, self.split = first, second, len(first)

    def __len__(self) -> int:
        return self.split + len(self.second)

    def __getitem__(self, i: Any) -> Any:
        return self.first[i] if i < self.split else self.second[i - self.split]


def _search_fallbacks(job: Job, framework: str | None, evaluator: Evaluator, tally: Tally, top_k: int,
                      deadline: float | None, corrections: Any, pins: dict[str, Any], hides: bool
                      ) -> Sequence[TrainingConfig]:
    """Search, as layouts of their own, the switch fallbacks of the layouts whose best switches do not fit memory
    (:func:`tools.switch_rules.switch_choices`: a layout with CUDA graphs or the expert overlap that fits only
    without it), and add their outcomes to ``tally`` (indices after the searched layouts').  The rest keep their
    best setting, so each layout is ranked with the first setting that fits: an exhaustive search over the
    switches, per layout (tests/tools/test_switch_search.py).  ``pins``: the switches the constraints pin (the
    searched layouts carry their best setting over them); ``hides``: :func:`tools.switch_rules.ep_overlap_hides` of
    the job's profile.  The joined layouts are returned."""
    configs = evaluator.configs
    columns = evaluator.columns
    if columns is not None:
        # rows the search screened (the rest were skipped because their static memory alone misfits, which no
        # switch changes, or pruned by bounds their fallback, as slow or slower with the same static headroom,
        # also fails)
        costly = np.flatnonzero(np.asarray([len(c) > 1 for c in columns.switch_choices])[columns.columns["switches"]]
                                & evaluator.screened())
        peaks = evaluator.peaks_of(costly)
        rescued = _fallbacks_that_fit(job, evaluator, columns, costly[~evaluator.passes(peaks[:, 0], peaks[:, 2])])
        fallbacks = [configs[i].model_copy(update=columns.switch_choices[columns.columns["switches"][i]][1])
                     for i in rescued]
        return _search_more(job, evaluator, tally, top_k, deadline, corrections, configs, fallbacks)
    second = {}
    unset = {k: pins.get(k) for k in ("comm_overlap", "cuda_graphs")}
    for i, config in enumerate(configs):
        choices = switch_choices(framework, job.model, config.model_copy(update=unset), ep_overlap_hides=hides)
        if len(choices) > 1:
            second[i] = choices[1]
    costly = np.fromiter(second, dtype=np.int64, count=len(second))
    peaks = evaluator.peaks_of(costly)
    fallbacks = [configs[i].model_copy(update=second[i])
                 for i in costly[~evaluator.passes(peaks[:, 0], peaks[:, 2])].tolist()]
    return _search_more(job, evaluator, tally, top_k, deadline, corrections, configs, fallbacks)


def _fallbacks_that_fit(job: Job, evaluator: Evaluator, columns: CandidateColumns, rows: np.ndarray) -> list[int]:
    """The ``rows`` whose fallback switch setting passes the memory screen (batch peaks of the columns with each
    row's fallback in place of its best setting)."""
    if not len(rows):
        return []
    fallback = replace(columns, switch_choices=[choices[1:] or choices for choices in columns.switch_choices],
                       _configs={})
    peaks = batcher_for(job.model, job.hardware, job.profile).peaks_of_rows(fallback, rows)
    return rows[evaluator.passes(peaks.peak_bytes, peaks.capacity_bytes)].tolist()


def _search_more(job: Job, evaluator: Evaluator, tally: Tally, top_k: int, deadline: float | None, corrections: Any,
                 configs: Sequence[TrainingConfig], fallbacks: list[TrainingConfig]) -> Sequence[TrainingConfig]:
    """Search ``fallbacks`` as layouts of their own and add their outcomes to ``tally`` (see
    :func:`_search_fallbacks`); the joined layouts."""
    if not fallbacks:
        return configs
    extra = Evaluator(job, fallbacks, [[k] for k in range(len(fallbacks))], evaluator.min_headroom,
                      keep_projections=True, deadline=deadline, corrections=corrections)
    more = evaluate(extra, top_k, None, 1)
    offset = len(configs)
    tally.outcomes += [replace(o, index=o.index + offset) for o in more.outcomes]
    tally.projections.update({k + offset: p for k, p in more.projections.items()})
    tally.screened_out -= len(fallbacks) - more.screened_out     # those layouts fit after all (without the switch)
    tally.pruned += more.pruned
    tally.complete = tally.complete and more.complete
    return _Joined(configs, fallbacks)


def _finish(job: Job, configs: Sequence[TrainingConfig], tally: Tally, top_k: int, corrections: Any = None
            ) -> tuple[list[Candidate], list[Candidate]]:
    """Top-k and Pareto candidates from the outcomes (re-projecting the few chosen when workers ran; outcomes and
    kept projections are anchored already when ``corrections`` are given).  Every layout carries the run-time
    switches it was searched with (:func:`_search_fallbacks`), so the answer and its export carry them."""
    ordered = sorted(tally.outcomes, key=lambda o: (-o.tokens_per_s_per_gpu, -o.headroom_fraction, o.index))
    front = front_of(ordered)
    ordered = break_ties(ordered, lambda o: o.tokens_per_s_per_gpu, lambda o: configs[o.index])  # simpler first
    best = ordered[:top_k]

    def unanchored(index: int) -> Projection:
        return project(job.model, job.cluster, configs[index], hardware=job.hardware, profile=job.profile,
                       check=False)

    def projection(index: int) -> Projection:
        if index not in tally.projections:
            p = unanchored(index)
            tally.projections[index] = p if corrections is None else anchored(p, corrections)
        return tally.projections[index]

    def row(index: int, rank: int) -> Candidate:
        return candidate(projection(index), rank, unanchored=None if corrections is None else unanchored(index))

    ranked = [row(o.index, i + 1) for i, o in enumerate(best)]
    ranked = [c.model_copy(update={"reason": _reason(c, None if c.rank == 1 else ranked[0])}) for c in ranked]
    return ranked, [row(o.index, 0) for o in front]


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
               if axis in values and values[axis] is not None and axis not in SWITCH_PINS)


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
