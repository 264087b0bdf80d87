"""The final answer: :class:`TuneReport`, and the report node that builds it from scored trials only.

Best and top-k come from the trials the tools scored (``status == "scored"``), ranked by
:func:`agent.nodes.rank_key`; the policy's text (the LLM's, when healthy) is attached as the
explanation and never decides the layout.  "Why the winner wins" quotes the ``explain`` tool
(best vs #2, best vs the recipe baseline); the launch config comes from
``export_launch_config``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from agent.decide import benchmark_choice, decision_text, mfu_labels, near_ties
from agent.nodes import options_of, ordered
from agent.planning import job_plan
from agent.space import LayoutSpace
from agent.policies import Policy
from agent.state import RunOptions, State
from agent.toolbox import Toolbox, ToolFailed, ToolFailure
from projection.vocabulary import DEFAULT_RECOMPUTE_MODULES
from tools.framework_rules import launch_framework_of
from tools.layout_score import LayoutScore, score_of
from tools.schemas import TuneStatus

if TYPE_CHECKING:   # annotations only: langgraph loads when a graph is built (agent.graph)
    from langgraph.runtime import Runtime

REPORT_SCHEMA_VERSION = 1


class RankedLayout(LayoutScore):
    """One scored layout of the report: its :class:`tools.layout_score.LayoutScore` and the report's fields."""

    rank: int = Field(description="1 = best.")
    config: dict[str, Any] = Field(description="The layout in sweep-format keys, as the agent checked it.")
    source: str = Field(description="Who proposed it: search, seed, candidates, offline or llm.")
    scored_by: str = Field(description="The tool that scored it: search or project.")
    reason: str = ""
    trial: int = Field(description="Trial id in the history.")
    mfu_gemm: float | None = Field(default=None, description="Model-FLOP utilisation against the peak of the GEMM "
                                                              "precision used (gemm_precision), 0..1.")
    gemm_precision: str | None = Field(default=None, description="The GEMM precision mfu_gemm is measured against.")
    mfu_bf16: float | None = Field(default=None, description="Model-FLOP utilisation against the BF16 peak "
                                                              "(the same as mfu), 0..1.")
    recompute_modules: list[str] = Field(default_factory=list,
                                         description="Modules selective recompute re-runs (empty: none or full).")
    memory_warning: str | None = Field(default=None, description="Projected memory is tight or over.")


class TuneReport(BaseModel):
    """What `projtune tune` answers (one JSON object with --json)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = REPORT_SCHEMA_VERSION
    status: TuneStatus
    request: dict[str, Any] | None = None
    assumptions: list[str] = Field(default_factory=list, description="Defaults assumed and how names were read.")
    best: RankedLayout | None = None
    top5: list[RankedLayout] = Field(default_factory=list, description="The ranked top layouts (top_k of them).")
    why: list[str] = Field(default_factory=list, description="Why the winner wins, from the explain tool.")
    why_terms: list[dict[str, Any]] = Field(default_factory=list, description="Largest step-time gaps vs #2.")
    launch_config: dict[str, Any] | None = Field(default=None, description="export_launch_config of the best.")
    explanation: str = Field(default="", description="The policy's explanation (the LLM's text when healthy).")
    policy: str = "offline"
    llm_endpoint: str | None = Field(default=None, description="'MODEL at URL' of the LLM the policy used (None: "
                                                               "offline, no LLM configured).")
    degraded: bool = False
    degraded_reason: str | None = None
    trials: int = Field(default=0, description="Trials in the history.")
    trials_scored: int = 0
    rounds: int = 0
    stop_reason: str | None = None
    search: dict[str, Any] | None = Field(default=None, description="The layout search the policy ran (counts).")
    message: str | None = Field(default=None, description="Why nothing fits, or the question back.")
    clarification: dict[str, Any] | None = None
    benchmarks: list[dict[str, Any]] = Field(default_factory=list)
    near_ties: list[dict[str, Any]] = Field(default_factory=list,
                                            description="Layouts whose 80% interval overlaps the best's, with what "
                                                        "separates them.")
    decision: str = Field(default="", description="How sure the pick is: clear, near-tie (and what would settle it).")
    plan: dict[str, Any] = Field(default_factory=dict, description="Job planning: hours per billion tokens, days and "
                                                                   "GPU-hours of --tokens, smallest count for "
                                                                   "--deadline (agent/planning.py).")
    benchmark_plan: dict[str, Any] | None = Field(
        default=None, description="With a near-tie or a wide band: the cheapest measurement that settles it, one or "
                                  "two 1-node runs with launch configs, expected time and what they decide "
                                  "(tools/bench_plan.py); their logs come back as anchors.")
    anchoring: dict[str, Any] | None = Field(
        default=None, description="Corrections from the request's anchors and the anchors they came from "
                                  "(tools/anchoring.py); every projected number of the report is anchored.")
    notes: list[str] = Field(default_factory=list)
    recompute: dict[str, Any] = Field(default_factory=dict, description="What the winner recomputes (modules "
                                                                        "named), the recompute variants the search "
                                                                        "enumerated, and the best selective one "
                                                                        "scored (agent/report.py recompute_summary).")
    tool_errors: list[ToolFailure] = Field(default_factory=list,
                                           description="Tool calls that failed on a typed error (bad input, an "
                                                       "illegal layout), in order; present only when one did.")

    @model_serializer(mode="wrap")
    def _without_empty_tool_errors(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A run without tool failures dumps as before (no ``tool_errors`` key)."""
        out = handler(self)
        if not out.get("tool_errors"):
            out.pop("tool_errors", None)
        return out


def tool_error_lines(report: TuneReport) -> list[str]:
    """The text report's line about failed tool calls (none when every call succeeded)."""
    if not report.tool_errors:
        return []
    first = report.tool_errors[0]
    more = f" (+{len(report.tool_errors) - 1} more)" if len(report.tool_errors) > 1 else ""
    return [f"tool errors: {len(report.tool_errors)}; {first.tool} ({first.kind}): {first.message}{more}"]


def ranked_layout(rank: int, trial: dict[str, Any], gpu: str) -> RankedLayout:
    """A scored trial as a report row (MFU labelled against the GEMM precision's peak and BF16's)."""
    config = trial["config"]
    mfu = mfu_labels(gpu, config.get("precision", "bf16"), trial["mfu"])
    modules = (list(config.get("recompute_modules") or DEFAULT_RECOMPUTE_MODULES)
               if config.get("recompute") == "selective" else [])
    return RankedLayout(
        **score_of(trial).model_dump(), rank=rank, config=config, source=trial["source"],
        scored_by=trial.get("scored_by", "project"), reason=trial.get("reason", ""), trial=trial["id"],
        recompute_modules=modules, memory_warning=trial.get("memory_warning"), **mfu)


def _why(tools: Toolbox, best: dict[str, Any], other: dict[str, Any], label: str
         ) -> tuple[str | None, list[dict[str, Any]]]:
    try:
        out = tools.explain(best["config"], other["config"])
    except ToolFailed:   # recorded in tools.failures: the report lists it under tool_errors
        return None, []
    return f"vs {label}: {out.summary}", [t.model_dump(mode="json") for t in out.time_terms_s[:3]]


def _facts(state: State, best_first: list[dict[str, Any]], tools: Toolbox) -> dict[str, Any]:
    why: list[str] = []
    terms: list[dict[str, Any]] = []
    if len(best_first) > 1:
        line, terms = _why(tools, best_first[0], best_first[1], "#2")
        why += [line] if line else []
    baseline = next((t for t in state.get("trials", []) if t.get("baseline")), None)
    if best_first and baseline and baseline["id"] != best_first[0]["id"]:
        if baseline.get("status") == "scored":
            line, _ = _why(tools, best_first[0], baseline, "the recipe baseline")
            why += [line] if line else []
        elif baseline.get("status") == "screened_out":
            why.append(f"vs the recipe baseline: {baseline.get('layout', '')} does not fit "
                       f"({baseline.get('peak_memory_gib', 0):.1f} GiB, {baseline.get('verdict')})")
    return {"best": best_first[0] if best_first else None, "runner_up": best_first[1] if len(best_first) > 1 else None,
            "why": why, "why_terms": terms, "search": state.get("search"), "request": state.get("request"),
            "trials_scored": len(best_first), "rounds": state.get("round", 0), "top": best_first[:5],
            "message": (state.get("search") or {}).get("message")}


def network_text(request: dict[str, Any]) -> str:
    """The network the projection assumed: NICs x rate per node, the per-GPU share, the NVLink domain, and whence."""
    from agent.text.request import network_fields
    from projection.job import resolve_job

    given = network_fields(request)
    # A request that reached the report was resolved already; a failure here is a bug and propagates.
    job = resolve_job(request["model"], request["gpu"], request["num_gpus"],
                      gpus_per_node=request["gpus_per_node"], **given)
    hardware, cluster = job.hardware, job.cluster
    nics, gbit, domain = cluster.network_of(hardware)
    source = {k: "as said" if k in given else f"{hardware.id} catalog" for k in ("nics_per_node", "nic_gbps",
                                                                                 "nvlink_domain")}
    return (f"scale-out network: {nics:g} NICs x {gbit:g} Gbit/s per node ({source['nics_per_node']}"
            + ("" if source["nic_gbps"] == source["nics_per_node"] else f"; rate {source['nic_gbps']}")
            + f") = {cluster.scale_out_gbit_per_gpu(hardware):g} Gbit/s per GPU; "
            f"{'xGMI' if hardware.scale_up_fabric.startswith('xgmi') else 'NVLink'} domain {domain} GPUs "
            f"({source['nvlink_domain']})")


def assumptions(request: dict[str, Any], framework: str = "megatron") -> list[str]:
    """Every value the answer rests on that the user may not have given: the parser's notes, then the job's
    precision policy, batch, sequence length, GPUs per node and framework, each said once."""
    notes = list(request.get("notes", []))
    said = " ".join(notes).lower()
    rules = request.get("constraints") or []
    precision = next((r for r in rules if r.replace(" ", "").startswith(("precision", "fp8"))), None)
    extra = [
        ("precision", f"precision: {precision}" if precision else
         "precision: bf16 and the FP8 recipes the GPU supports were both searched (say 'bf16 only' to pin bf16)"),
        ("gbs", f"global batch: {request['gbs']} sequences ({request['gbs'] * request['seq_len']:,} tokens per step)"),
        ("seq", f"sequence length: {request['seq_len']} tokens"),
        ("per node", f"GPUs per node: {request['gpus_per_node']}"),
        ("scale-out", network_text(request)),
        ("framework", f"framework: {request.get('framework') or framework} (launch config and recipe semantics)"),
    ]
    return notes + [line for key, line in extra if key not in said]


def report(state: State, runtime: Runtime[RunOptions], *, policy: Policy) -> dict[str, Any]:
    """Build the TuneReport from the scored trials (or the clarification)."""
    base = {"policy": policy.name, "llm_endpoint": getattr(policy, "endpoint", None),
            "degraded": bool(state.get("degraded")), "degraded_reason": state.get("degraded_reason"),
            "notes": list(dict.fromkeys(state.get("notes", [])))}
    clarification = state.get("clarification")
    if clarification:
        out = TuneReport(status="clarification", clarification=clarification, message=clarification["question"],
                         tool_errors=[ToolFailure.model_validate(e) for e in state.get("tool_errors", [])], **base)
        return {"report": out.model_dump(mode="json")}
    request = state["request"]
    base["notes"] = [n for n in base["notes"] if n not in request.get("notes", [])]
    tools = Toolbox.for_request(request)
    best_first = ordered(state)
    ties = near_ties(best_first)
    best_first, settled = benchmark_choice(best_first, ties, list(state.get("benchmarks", [])))
    if settled:
        ties = near_ties(best_first)
    decision = decision_text(best_first, ties, settled)
    if ties and not settled and not options_of(runtime).allow_benchmark:
        base["notes"].append("offline: no benchmark ran; measured mode on the near-tied layouts would settle it")
    facts = _facts(state, best_first, tools)
    facts["decision"], facts["near_ties"] = decision, ties
    explained = policy.explain({**state, "facts": facts})
    explanation = explained.text
    if explained.degraded_reason and not base["degraded"]:
        base["degraded"], base["degraded_reason"] = True, explained.degraded_reason
    base["notes"] += [n for n in explained.notes if n not in base["notes"]]
    launch = None
    if best_first:
        framework = launch_framework_of(request.get("framework")) or options_of(runtime).framework
        try:
            launch = tools.export_launch_config(best_first[0]["config"], framework).model_dump(mode="json")
        except ToolFailed as err:
            launch = {"error": err.failure.message}
    search = {k: v for k, v in (state.get("search") or {}).items() if k != "ranked"} or None
    message = None if best_first else ((state.get("search") or {}).get("message")
                                    or "no scored layout fits in memory within the constraints")
    options = options_of(runtime)
    # --tokens / --deadline win; else what the request said ('train on 15T tokens in 30 days')
    tokens = options.tokens or request.get("train_tokens")
    deadline_s = options.deadline_s or (request["deadline_days"] * 86400.0 if request.get("deadline_days") else None)
    plan = job_plan(best_first[0], request, tokens=tokens, deadline_s=deadline_s) if best_first else {}
    framework = launch_framework_of(request.get("framework")) or options.framework
    bench_plan = measurement_plan(best_first, ties, tools, framework)
    if request.get("sizing"):
        plan["sizing"] = request["sizing"]      # the GPU counts searched to size the cluster (agent/sizing.py)
    gpu = request["gpu"]
    out = TuneReport(
        status="ok" if best_first else "no_fit", request=request, assumptions=assumptions(request, options.framework),
        best=ranked_layout(1, best_first[0], gpu) if best_first else None,
        top5=[ranked_layout(i + 1, t, gpu) for i, t in enumerate(best_first[:request.get("top_k", 5)])],
        near_ties=ties, decision=decision, plan=plan,
        recompute=recompute_summary(best_first, LayoutSpace(request), tools),
        why=facts["why"], why_terms=facts["why_terms"], launch_config=launch, explanation=explanation,
        trials=len(state.get("trials", [])), trials_scored=len(best_first), rounds=state.get("round", 0),
        stop_reason=state.get("stop_reason"), search=search, message=message,
        benchmarks=list(state.get("benchmarks", [])), tool_errors=_tool_errors(state, tools),
        benchmark_plan=bench_plan, anchoring=(state.get("search") or {}).get("anchoring"), **base)
    return {"report": out.model_dump(mode="json"), "tool_errors": tools.failures_dump()}


def measurement_plan(best_first: list[dict[str, Any]], ties: list[dict[str, Any]], tools: Toolbox,
                     framework: str) -> dict[str, Any] | None:
    """The benchmark plan of a near-tie (#1 and the closest tie) or of a wide band (#1 alone); None otherwise."""
    from tools.bench_plan import WIDE_BAND

    if not best_first:
        return None
    best = best_first[0]
    width = (best.get("tokens_per_sec_per_gpu_high", 0.0) - best.get("tokens_per_sec_per_gpu_low", 0.0)) / max(
        best["tokens_per_sec_per_gpu"], 1e-12)
    if ties:
        reason = (f"near-tie: #1 and #{ties[0]['rank']} are {abs(ties[0]['gap']):.1%} apart with overlapping 80% "
                  f"intervals (they differ in {ties[0]['differs']})")
        contenders = [(best["layout"], best["config"]), (ties[0]["layout"], ties[0]["config"])]
    elif width > WIDE_BAND:
        reason = f"wide band: the 80% interval of #1 spans {width:.0%} of its throughput"
        contenders = [(best["layout"], best["config"])]
    else:
        return None
    return tools.benchmark_plan(contenders, reason=reason, framework=framework)


def _recompute_text(config: dict[str, Any], num_layers: int, pp: int) -> str:
    """What one layout re-runs in the backward pass, modules named."""
    kind = config.get("recompute", "none")
    if kind == "selective":
        return "selective: " + " + ".join(config.get("recompute_modules") or DEFAULT_RECOMPUTE_MODULES)
    if kind == "full":
        stage = -(-num_layers // pp)
        n = config.get("recompute_num_layers")
        layers = f"{n} of {stage} layers per stage" if n is not None else f"all {stage} layers per stage"
        return f"full: every module of {layers} (the whole layer re-runs)"
    return "none"


def recompute_summary(best_first: list[dict[str, Any]], job: Any, tools: Toolbox) -> dict[str, Any]:
    """The winner's recomputed modules, the recompute variants the search enumerated at its PP, and the best
    scored selective-recompute layout; when none was scored, the memory of the winner's layout with the widest
    selective module set (check_memory), which says why."""
    from tools.candidates import recompute_variants

    if not best_first:
        return {}
    best = best_first[0]["config"]
    pp, layers = int(best.get("pp", 1)), job.model.num_layers
    variants = recompute_variants(job.space, pp)
    considered = [_recompute_text({"recompute": r, "recompute_num_layers": n, "recompute_modules": list(m)},
                                  layers, pp) for r, n, m in variants]
    selective = next((t for t in best_first if t["config"].get("recompute") == "selective"), None)
    out: dict[str, Any] = {"best": _recompute_text(best, layers, pp), "considered": considered}
    if selective is None:
        out["best_selective"] = None
        sets = [m for r, _, m in variants if r == "selective"]
        note = "no selective-recompute layout was among the scored trials"
        if sets and best.get("recompute") != "selective":
            probe = {**best, "recompute": "selective", "recompute_num_layers": None, "recompute_modules": list(sets[-1])}
            try:
                memory = tools.check_memory(probe)
                note += (f"; the winner's layout with selective {' + '.join(sets[-1])} needs {memory.peak_gib:.1f} "
                         f"GiB per GPU of {memory.capacity_gib:.1f} ({memory.verdict})")
            except ToolFailed as err:
                note += f"; the winner's layout with selective recompute is not a legal layout ({err.failure.message})"
        out["best_selective_note"] = note
    else:
        out["best_selective"] = {"rank": best_first.index(selective) + 1,
                                 "recompute": _recompute_text(selective["config"], layers, pp),
                                 "tokens_per_sec_per_gpu": selective["tokens_per_sec_per_gpu"],
                                 "verdict": selective.get("verdict")}
    return out


def _tool_errors(state: State, tools: Toolbox) -> list[ToolFailure]:
    """The run's typed tool failures (the state's and the report node's own), each said once, in order."""
    failures = [ToolFailure.model_validate(e) for e in state.get("tool_errors", [])] + list(tools.failures)
    return list(dict.fromkeys(failures))
