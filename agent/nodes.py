"""The graph's nodes, one function per node: ``(state, runtime) -> partial state``.

parse -> seed -> propose -> evaluate -> rank -> reflect -> (propose | report); report lives in
:mod:`agent.report`.  Nodes that need the policy get it bound by :func:`agent.graph.build_graph`;
run options (launch framework, benchmark permission, progress reporter) arrive as the runtime
context (:class:`RunOptions`), and :func:`agent.progress.emit` reaches the reporter.
"""

from __future__ import annotations

import math
import time
import uuid
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from agent.decide import near_ties
from agent.policies import Policy
from agent.progress import emit
from agent.text.request import Clarification, TuneRequest, size_when_planned
from agent.search_step import measured_summary, request_search, search_top_k
from agent.seeds import seed_proposals
from agent.sizing import size_request
from agent.space import LayoutSpace
from agent.state import DEFAULT_BUDGET, RunOptions, State
from agent.toolbox import Toolbox, ToolFailed
from agent.trials import Trial, trial_score
from projection.errors import ProjtuneError
from projection.framework import record_of_launch
from projection.memory_verdict import passes_screen
from projection.training_config import TrainingConfig
from tools.candidates import break_ties
from tools.framework_rules import launch_framework_of

if TYPE_CHECKING:   # annotations only: langgraph loads when a graph is built (agent.graph)
    from langgraph.runtime import Runtime

MAX_BENCHMARKED = 5    # best + near-ties measured per round (each takes tens of seconds on a GPU)
NO_GAIN = 1e-3          # a round gains when the best improves by more than 0.1%


def options_of(runtime: Runtime[RunOptions] | None) -> RunOptions:
    """The run options of this invocation (defaults when none were passed)."""
    context = getattr(runtime, "context", None)
    return context if isinstance(context, RunOptions) else RunOptions()


def _spend(state: State, **spent: float) -> dict[str, float]:
    usage = dict(state.get("usage") or {})
    for name, amount in spent.items():
        usage[name] = usage.get(name, 0) + amount
    return usage


def parse(state: State, runtime: Runtime[RunOptions], *, policy: Policy) -> dict[str, Any]:
    """Read the request (typed dict, or text through the policy); a question back when it cannot."""
    result: TuneRequest | Clarification
    degraded_reason: str | None = None
    if state.get("request"):
        try:
            result = TuneRequest.model_validate(state["request"])
        except ValidationError as err:
            result = Clarification(question=f"invalid request: {err.errors()[0]['msg']}")
    else:
        parsed = policy.read(state.get("text", ""), state=dict(state))
        result, degraded_reason = parsed.result, parsed.degraded_reason
        options = options_of(runtime)
        result = size_when_planned(result, state.get("text", ""), options.tokens, options.deadline_s)
    start: dict[str, Any] = {"run_id": uuid.uuid4().hex, "budget": {**DEFAULT_BUDGET, **(state.get("budget") or {})},
                             "round": 0, "pending": [],
                             "usage": {"proposals": 0, "tool_calls": 0, "benchmark_minutes": 0.0}, "ranking": [],
                             "best_history": [], "search": None, "stop_reason": None, "policy_done": False,
                             "degraded": bool(degraded_reason), "degraded_reason": degraded_reason,
                             "conversation": [], "report": None}
    if isinstance(result, Clarification):
        return {**start, "clarification": result.model_dump()}
    if result.framework is None and not result.candidates:
        # The layouts run on the launch framework (--framework, default megatron): its record prices them and the
        # search keeps to what it can launch.
        result = result.model_copy(update={"framework": record_of_launch(options_of(runtime).framework).name})
    try:
        LayoutSpace(result)
        if result.size_cluster and result.sizing is None:   # no GPU count, a budget and a deadline: size it first
            result = size_request(result, launch_framework_of(result.framework))
    except ProjtuneError as err:
        return {**start, "clarification": Clarification(question=str(err), partial=result.model_dump()).model_dump()}
    return {**start, "clarification": None, "request": result.model_dump(), "notes": list(result.notes)}


def search(state: State) -> dict[str, Any]:
    """Run the layout search for the request through the Toolbox (:mod:`agent.search_step`): its summary goes into
    ``search`` for the policy's first round; an eval's measured candidates are not searched (they ran)."""
    request = state["request"]
    if state.get("candidates_ran") and request.get("candidates"):
        return {"search": measured_summary(request)}
    summary, failed = request_search(request, search_top_k(request))
    if failed is None:
        return {"search": summary, "usage": _spend(state, tool_calls=1)}
    failure, error = failed
    return {"search": {"enumerated": 0, "projected": 0, "ranked": [], "message": error},
            "usage": _spend(state, tool_calls=1), "notes": [error], "tool_errors": [failure.model_dump()]}


def seed(state: State, runtime: Runtime[RunOptions]) -> dict[str, Any]:
    """Queue the deterministic seed trials: recipe baseline plus single-axis moves."""
    job, tools = LayoutSpace(state["request"]), Toolbox.for_request(state["request"])
    seeds = [{**s, "round": 0} for s in seed_proposals(job, tools)]
    emit("seed", count=len(seeds))
    return {"pending": seeds, "usage": _spend(state, tool_calls=tools.calls), "tool_errors": tools.failures_dump()}


def propose(state: State, runtime: Runtime[RunOptions], *, policy: Policy) -> dict[str, Any]:
    """Ask the policy for the next round of proposals (within the proposal budget)."""
    number = state.get("round", 0) + 1
    emit("round", round=number)
    step = policy.propose({**state, "round": number})
    proposals = list(step.proposals)
    pending = list(state.get("pending") or [])
    room = int(state["budget"]["max_proposals"] - state["usage"].get("proposals", 0)) - len(pending)
    notes = list(step.notes)
    if len(proposals) > max(room, 0):
        notes.append(f"proposal budget: kept {max(room, 0)} of {len(proposals)} proposals in round {number}")
        proposals = proposals[:max(room, 0)]
    update: dict[str, Any] = {
        "round": number, "pending": pending + [{**p, "round": number} for p in proposals],
        "usage": _spend(state, tool_calls=step.tool_calls), "policy_done": not proposals,
        "notes": notes, "tool_errors": list(step.tool_errors),
    }
    if step.search is not None:
        update["search"] = step.search
    if step.conversation is not None:
        update["conversation"] = step.conversation
    if step.degraded_reason and not state.get("degraded"):
        update["degraded"], update["degraded_reason"] = True, step.degraded_reason
    return update


def _trial(tid: int, proposal: dict[str, Any], status: str, **fields: Any) -> dict[str, Any]:
    return {"id": tid, "round": proposal.get("round", 0), "source": proposal.get("source", "?"),
            "reason": proposal.get("reason", ""), "search_rank": proposal.get("search_rank"),
            "baseline": bool(proposal.get("baseline")), "status": status, "config": proposal.get("config"),
            "key": None, "violations": [], **fields}


def evaluate(state: State, runtime: Runtime[RunOptions]) -> dict[str, Any]:
    """Validate every pending proposal, screen its memory, project what fits (search results come scored)."""
    job, tools = LayoutSpace(state["request"]), Toolbox.for_request(state["request"])
    seen = {t["key"] for t in state.get("trials", []) if t.get("key")}
    next_id = len(state.get("trials", []))
    left = state["budget"]["max_tool_calls"] - state["usage"].get("tool_calls", 0)
    trials, notes, duplicates = [], [], 0
    for proposal in state.get("pending") or []:
        checked = job.check(proposal.get("config") or {})
        if checked.config is None:
            trials.append(Trial(**_trial(next_id + len(trials), proposal, "invalid",
                                         violations=checked.reasons)).state())
            continue
        key = job.key(checked.config)
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        trial = _trial(next_id + len(trials), proposal, checked.status, config=job.plain(checked.config), key=key,
                       violations=checked.reasons, in_space=job.in_space(checked.config))
        if checked.status == "ok":
            if proposal.get("source") == "search" and proposal.get("scores"):
                trial.update(status="scored", scored_by="search", **proposal["scores"])
            elif tools.calls + 2 > left:
                trial["status"] = "skipped"
                notes.append("tool-call budget spent: some proposals were not evaluated")
            else:
                trial.update(_score(job, tools, trial["config"], ran=bool(state.get("candidates_ran"))))
        trials.append(Trial(**trial).state())
        emit("trial", status=trial["status"], layout=trial.get("layout"),
             tokens_per_sec_per_gpu=trial.get("tokens_per_sec_per_gpu"), trial=trial)   # trial: for `tune --log`
    if duplicates:
        notes.append(f"round {state.get('round', 0)}: {duplicates} proposals repeated earlier trials and were skipped")
    update: dict[str, Any] = {"trials": trials, "pending": [], "notes": sorted(set(notes), key=notes.index)}
    bench = _benchmark(state, runtime, tools, [*state.get("trials", []), *trials])
    update["notes"] += bench.pop("notes", [])
    update.update(bench)
    update["tool_errors"] = tools.failures_dump()
    update["usage"] = _spend(state, tool_calls=tools.calls, benchmark_minutes=update.pop("_minutes", 0.0),
                             proposals=len(state.get("pending") or []))
    return update


def _score(job: LayoutSpace, tools: Toolbox, config: dict[str, Any], *, ran: bool = False) -> dict[str, Any]:
    """Memory screen, then projection; the trial fields that result.

    ``ran``: the layout was measured to run (an eval's candidate), so the memory verdict does not
    screen it out; a projected misfit is kept as ``memory_warning`` next to the score instead.
    A tool that fails on a typed error makes an ``error`` trial (the failure is in the toolbox's
    ``failures``, which evaluate puts in the state's ``tool_errors``); any other exception propagates.
    """
    try:
        m = tools.check_memory(config)
    except ToolFailed as err:
        return {"status": "error", "violations": [err.failure.message]}
    misfit = not passes_screen(m.peak_gib, m.capacity_gib, job.constraints.min_headroom)  # as the search
    if misfit and not ran:
        return {"status": "screened_out", "verdict": m.verdict, "peak_memory_gib": m.peak_gib,
                "headroom_fraction": m.headroom_fraction, "layout": m.layout}
    try:
        p = tools.project(config)
    except ToolFailed as err:
        return {"status": "error", "violations": [err.failure.message]}
    warning = None
    if misfit or m.verdict != "fits":
        warning = (f"projected {m.verdict}: peak {m.peak_gib:.1f} of {m.capacity_gib:.1f} GiB"
                   + ("; ranked anyway because it was measured to run" if misfit else ""))
    return {"status": "scored", "scored_by": "project", **trial_score(p), "memory_warning": warning}


def _benchmark(state: State, runtime: Runtime[RunOptions], tools: Toolbox, trials: list[dict[str, Any]]
               ) -> dict[str, Any]:
    """Measure the top few scored layouts with run_benchmark, when allowed and a GPU answers."""
    options = options_of(runtime)
    spent = state["usage"].get("benchmark_minutes", 0.0)
    if not options.allow_benchmark or spent >= state["budget"]["max_benchmark_minutes"]:
        return {}
    done = {b["trial"] for b in state.get("benchmarks", [])}
    if any(b.get("available") is False for b in state.get("benchmarks", [])):
        return {}
    best_first = break_ties(sorted(fitting(trials), key=lambda t: rank_key(t, search_ranks(state))),
                            lambda t: t["tokens_per_sec_per_gpu"], _config_of)
    # the best and the layouts near-tied with it (80% intervals overlap): what a measurement can settle
    tied = {n["trial"] for n in near_ties(best_first)}
    wanted = best_first[:1] + [t for t in best_first[1:] if t["id"] in tied]
    if len(wanted) < options.benchmark_top:
        wanted = best_first[:options.benchmark_top]
    top = [t for t in wanted[:max(options.benchmark_top, MAX_BENCHMARKED)] if t["id"] not in done]
    results, start = [], time.perf_counter()
    for t in top:
        try:
            body = tools.run_benchmark(t["config"]).model_dump(mode="json")
        except ToolFailed as err:
            body = {"available": False, "message": err.failure.message}
        results.append({"trial": t["id"], **body})
        if not body.get("available"):
            break
    notes = [f"benchmark: {r['message']}" for r in results if not r.get("available")]
    return {"benchmarks": results, "notes": notes, "_minutes": (time.perf_counter() - start) / 60}


def fitting(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Trials the tools scored (projected, memory passed)."""
    return [t for t in trials if t.get("status") == "scored"]


def rank_key(trial: dict[str, Any], search_ranks: dict[str, int] | None = None) -> tuple[float, float, float, int]:
    """Best first: throughput, then memory headroom, then the search's own order, then trial order.

    ``search_ranks`` (layout key -> rank in the search) covers trials that duplicate a search
    result but were proposed first by someone else (a seed), so exact ties still follow the search.
    """
    rank = (search_ranks or {}).get(trial.get("key") or "", trial.get("search_rank"))
    return (-trial["tokens_per_sec_per_gpu"], -trial["headroom_fraction"],
            rank if rank is not None else math.inf, trial["id"])


def search_ranks(state: State) -> dict[str, int]:
    """Layout key -> rank of every layout the policy's search ranked."""
    ranked = (state.get("search") or {}).get("ranked") or []
    if not ranked:
        return {}
    job = LayoutSpace(state["request"])
    out: dict[str, int] = {}
    for c in ranked:
        checked = job.check(c["config"])
        if checked.config is not None:
            out.setdefault(job.key(checked.config), c["rank"])
    return out


def ordered(state: State) -> list[dict[str, Any]]:
    """The scored trials, best first; equally fast ones (within 0.1%) simplest first (:func:`simplicity`)."""
    ranks = search_ranks(state)
    best_first = sorted(fitting(state.get("trials", [])), key=lambda t: rank_key(t, ranks))
    return break_ties(best_first, lambda t: t["tokens_per_sec_per_gpu"], _config_of)


def _config_of(trial: dict[str, Any]) -> TrainingConfig:
    return TrainingConfig(**{k: v for k, v in trial["config"].items() if v is not None})


def rank(state: State) -> dict[str, Any]:
    """Order the scored trials; record the best throughput of this round."""
    best_first = ordered(state)
    best = best_first[0]["tokens_per_sec_per_gpu"] if best_first else 0.0
    return {"ranking": [t["id"] for t in best_first], "best_history": [*state.get("best_history", []), best]}


def reflect(state: State) -> dict[str, Any]:
    """Decide whether another round is worth it: budgets, the policy's word, and the gain of this round."""
    budget, usage, number = state["budget"], state["usage"], state.get("round", 0)
    history = state.get("best_history", [])
    reason = None
    if state.get("policy_done"):
        reason = "the policy has nothing new to propose"
    elif number >= budget["max_rounds"]:
        reason = f"round budget spent ({number} of {int(budget['max_rounds'])})"
    elif usage.get("proposals", 0) >= budget["max_proposals"]:
        reason = "proposal budget spent"
    elif usage.get("tool_calls", 0) >= budget["max_tool_calls"]:
        reason = "tool-call budget spent"
    elif number >= 2 and len(history) >= 2 and history[-1] <= history[-2] * (1 + NO_GAIN):
        reason = f"round {number} brought no gain (best {history[-1]:,.0f} tokens/s/GPU)"
    emit("reflect", round=number, stop=reason)
    return {"stop_reason": reason}
