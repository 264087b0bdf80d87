"""The offline policy: deterministic, no network, and as good as the full layout search.

Round 1 proposes the search's top-k for the request (:func:`tools.search.run_search`, exhaustive
over the legal space with exact pruning), so the graph's best equals the search's best: the
seed trials are inside the same space (:mod:`agent.seeds`), scored by the same engine, and ties
go to the search's order (:func:`agent.nodes.rank_key`).  Later rounds propose single-axis
neighbours of the current best that were not tried yet (history and explanations, no new
winner possible); with nothing left it proposes nothing and reflect stops.
"""

from __future__ import annotations

from typing import Any

from agent.policies.base import Explained, Parsed, PolicyStep
from agent.progress import emit
from agent.request import Clarification, TuneRequest, network_fields, parse_request
from agent.seeds import single_axis_moves
from agent.space import Job
from agent.toolbox import ToolFailure, failure_of
from agent.trials import trial_score

NEIGHBOURS_PER_ROUND = 6
MIN_SEARCH_TOP_K = 5


def search_summary(result: Any) -> dict[str, Any]:
    """The plain-data part of a SearchResult the agent keeps in its state."""
    return {
        "enumerated": result.enumerated, "screened_out": result.screened_out, "projected": result.projected,
        "pruned": result.pruned, "elapsed_s": round(result.elapsed_s, 3), "message": result.message,
        "rejected": len(result.rejected),
        "ranked": [c.model_dump(mode="json") for c in result.ranked],
    }


def run_request_search(request: dict[str, Any], top_k: int) -> tuple[dict[str, Any] | None, str | None]:
    """Run the layout search tool for a request (progress as 'search' events); (summary, error)."""
    summary, failure = request_search(request, top_k)
    return summary, None if failure is None else failure[1]


def request_search(request: dict[str, Any], top_k: int
                   ) -> tuple[dict[str, Any] | None, tuple[ToolFailure, str] | None]:
    """Run the layout search tool for a request; (summary, None) or (None, (the typed failure, the note)).

    A typed error (unknown name, bad constraint, invalid input) is the failure; any other exception propagates.
    """
    from pydantic import ValidationError

    from projection.errors import ProjtuneError
    from tools.constraints import Constraints
    from tools.search import SearchRequest, run_search

    try:
        search = SearchRequest(
            model=request["model"], gpu=request["gpu"], num_gpus=request["num_gpus"],
            gpus_per_node=request["gpus_per_node"], gbs=request["gbs"], seq_len=request["seq_len"],
            **network_fields(request), constraints=Constraints.parse(request.get("constraints") or []), top_k=top_k,
            candidates=request.get("candidates"), profile_path=request.get("profile_path"),
            finetune=None if request.get("candidates") else request.get("finetune"),
            packed_document_tokens=request.get("packed_document_tokens"),   # fills explicit candidates, as Job.check
            # Priced with the request's framework, only layouts it can launch (measured candidates as they ran).
            framework=None if request.get("candidates") else request.get("framework"))
        result = run_search(search, progress=lambda done, total: emit("search", done=done, total=total))
    except (ProjtuneError, ValidationError) as err:
        failure, _ = failure_of("search", SearchRequest, err)
        return None, (failure, f"search failed: {err}")
    return search_summary(result), None


class OfflinePolicy:
    """Search-anchored deterministic proposals (see the module docstring)."""

    name = "offline"

    def __init__(self, *, neighbours_per_round: int = NEIGHBOURS_PER_ROUND) -> None:
        self.neighbours_per_round = neighbours_per_round

    def read(self, text: str, base: TuneRequest | dict[str, Any] | None = None,
             state: dict[str, Any] | None = None) -> Parsed:
        """Read the request with the offline parser."""
        return Parsed(result=parse_request(text, base))

    def parse(self, text: str, base: TuneRequest | dict[str, Any] | None = None) -> TuneRequest | Clarification:
        """Read the request with the offline parser."""
        return parse_request(text, base)

    def propose(self, state: dict[str, Any]) -> PolicyStep:
        """Round 1: the search's top-k; later: untried single-axis neighbours of the best."""
        request = state["request"]
        if state.get("search") is None and state.get("candidates_ran") and request.get("candidates"):
            return self._measured(request)
        if state.get("search") is None:
            return self._from_search(request)
        job = Job(request)
        best = best_trial(state)
        if best is None:
            return PolicyStep()
        checked = job.check(best["config"])
        if checked.config is None:
            return PolicyStep()
        tried = {t["key"] for t in state.get("trials", []) if t.get("key")}
        moves = single_axis_moves(job, checked.config, limit=self.neighbours_per_round, skip=tried)
        return PolicyStep(proposals=[{**m, "source": self.name, "search_rank": None,
                                      "reason": f"neighbour of the best: {m['reason']}"} for m in moves])

    def _measured(self, request: dict[str, Any]) -> PolicyStep:
        """Candidates measured to run (an eval): every one goes to evaluate, which projects it whatever the
        memory verdict (the search's screen would drop runs that ran but are projected tight)."""
        candidates = request["candidates"]
        search = {"enumerated": len(candidates), "projected": 0, "ranked": [], "message": None,
                  "measured_candidates": True}
        return PolicyStep(search=search, proposals=[{"config": dict(c), "reason": f"measured candidate {i}",
                                                     "source": "candidates", "search_rank": None}
                                                    for i, c in enumerate(candidates)])

    def _from_search(self, request: dict[str, Any]) -> PolicyStep:
        candidates = request.get("candidates")
        top_k = min(len(candidates), 100) if candidates else max(request.get("top_k", 5), MIN_SEARCH_TOP_K)
        summary, failed = request_search(request, max(top_k, 1))
        if failed is not None:
            failure, error = failed
            return PolicyStep(tool_calls=1, notes=[error], tool_errors=[failure.model_dump()],
                              search={"enumerated": 0, "projected": 0, "ranked": [], "message": error})
        assert summary is not None
        return PolicyStep(tool_calls=1, search=summary, proposals=search_proposals(summary))

    def explain(self, state: dict[str, Any]) -> Explained:
        """Say why the best wins, from the numbers the report gathered (``state['facts']``)."""
        return Explained(text=offline_explanation(state.get("facts") or {}))


def search_proposals(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The search's ranked layouts as proposals that arrive scored (their LayoutScore, flat)."""
    return [{"config": c["config"], "reason": c["reason"], "source": "search", "search_rank": c["rank"],
             "scores": trial_score(c)} for c in summary["ranked"]]


def best_trial(state: dict[str, Any]) -> dict[str, Any] | None:
    """The best scored trial so far (first of the ranking), or None."""
    ranking = state.get("ranking") or []
    trials = {t["id"]: t for t in state.get("trials", [])}
    return trials.get(ranking[0]) if ranking else None


def offline_explanation(facts: dict[str, Any]) -> str:
    """A plain-text explanation built only from tool numbers."""
    best = facts.get("best")
    if not best:
        return facts.get("message") or "No layout fits."
    from agent.decide import mfu_labels, mfu_text

    gpu = (facts.get("request") or {}).get("gpu")
    mfu = mfu_labels(gpu, best["config"].get("precision", "bf16"), best["mfu"]) if gpu else {}
    parts = [f"{best['layout']} wins at {best['tokens_per_sec_per_gpu']:,.0f} tokens/s/GPU "
             f"({mfu_text({'mfu': best['mfu'], **mfu})}, "
             f"peak {best['peak_memory_gib']:.1f} GiB, {best['headroom_fraction']:.0%} HBM headroom, "
             f"bottleneck {best['bottleneck']})."]
    runner_up = facts.get("runner_up")
    if runner_up:
        gap = 1 - runner_up["tokens_per_sec_per_gpu"] / best["tokens_per_sec_per_gpu"]
        terms = ", ".join(f"{t['term']} {t['b_minus_a']:+.3f} s" for t in facts.get("why_terms", [])[:2]
                          if abs(t["b_minus_a"]) >= 5e-4)
        if gap < 5e-4:
            parts.append(f"The runner-up, {runner_up['layout']}, projects the same throughput; the simpler layout "
                         "ranks first.")
        else:
            parts.append(f"The runner-up, {runner_up['layout']}, is {gap:.1%} slower"
                         + (f" ({terms} per step)." if terms else "."))
    if facts.get("decision"):
        parts.append(facts["decision"][0].upper() + facts["decision"][1:] + ".")
    search = facts.get("search") or {}
    if search.get("enumerated"):
        parts.append(f"The layout search enumerated {search['enumerated']:,} legal layouts, screened "
                     f"{search.get('screened_out', 0):,} out for memory and projected {search.get('projected', 0):,}; "
                     f"the agent scored {facts.get('trials_scored', 0)} trials in {facts.get('rounds', 0)} rounds.")
    parts.append("Projections rank layouts well; measure the winner before trusting the absolute number.")
    return " ".join(parts)
