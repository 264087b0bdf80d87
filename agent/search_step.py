"""The graph's search step: the layout search for the request, run once through the Toolbox before the seed round.

:func:`agent.nodes.search` is the ``search`` node of :mod:`agent.graph`: it calls the search tool
(:meth:`agent.toolbox.Toolbox.search`, :func:`tools.search.run_search`: exhaustive over the legal space with
exact pruning, priced with the request's framework) and writes its summary into the state's ``search``.  A
policy's first round proposes from that summary (:func:`search_proposals`: the ranked layouts arrive scored);
an eval's measured candidates skip the search (they are ranked as they ran, :func:`measured_summary`).
"""

from __future__ import annotations

from typing import Any

from agent.progress import emit
from agent.text.request import network_fields
from agent.toolbox import Toolbox, ToolFailed, ToolFailure, failure_of
from agent.trials import trial_score

MIN_SEARCH_TOP_K = 5


def search_summary(result: Any) -> dict[str, Any]:
    """The plain-data part of a SearchResult the agent keeps in its state."""
    return {
        "enumerated": result.enumerated, "screened_out": result.screened_out, "projected": result.projected,
        "pruned": result.pruned, "elapsed_s": round(result.elapsed_s, 3), "message": result.message,
        "rejected": len(result.rejected),
        "ranked": [c.model_dump(mode="json") for c in result.ranked],
        "anchoring": None if result.anchoring is None else result.anchoring.model_dump(mode="json"),
    }


def search_top_k(request: dict[str, Any]) -> int:
    """How many layouts the search ranks for a request: every explicit candidate (up to 100), else the request's
    top_k, at least MIN_SEARCH_TOP_K."""
    candidates = request.get("candidates")
    top_k = min(len(candidates), 100) if candidates else max(request.get("top_k", 5), MIN_SEARCH_TOP_K)
    return max(top_k, 1)


def request_search(request: dict[str, Any], top_k: int
                   ) -> tuple[dict[str, Any] | None, tuple[ToolFailure, str] | None]:
    """Run the layout search tool for a request; (summary, None) or (None, (the typed failure, the note)).

    A typed error (unknown name, bad constraint, invalid input) is the failure; any other exception propagates.
    """
    from projection.errors import ProjtuneError
    from tools.constraints import Constraints
    from tools.search import SearchRequest

    tools = Toolbox.for_request(request)
    try:
        constraints = Constraints.parse(request.get("constraints") or [])
    except ProjtuneError as err:
        failure, _ = failure_of("search", SearchRequest, err)
        return None, (failure, f"search failed: {err}")
    try:
        result = tools.search(
            progress=lambda done, total: emit("search", done=done, total=total),
            gbs=request["gbs"], seq_len=request["seq_len"], **network_fields(request), constraints=constraints,
            top_k=top_k, candidates=request.get("candidates"),
            finetune=None if request.get("candidates") else request.get("finetune"),
            # packed documents fill explicit candidates, as LayoutSpace.check
            packed_document_tokens=request.get("packed_document_tokens"),
            # Priced with the request's framework, only layouts it can launch (measured candidates as they ran).
            framework=None if request.get("candidates") else request.get("framework"))
    except ToolFailed as err:
        return None, (err.failure, f"search failed: {err.__cause__}")
    return search_summary(result), None


def run_request_search(request: dict[str, Any], top_k: int) -> tuple[dict[str, Any] | None, str | None]:
    """Run the layout search tool for a request (progress as 'search' events); (summary, error)."""
    summary, failure = request_search(request, top_k)
    return summary, None if failure is None else failure[1]


def measured_summary(request: dict[str, Any]) -> dict[str, Any]:
    """The search step of measured candidates (an eval): nothing searched, every candidate goes to evaluate."""
    return {"enumerated": len(request["candidates"]), "projected": 0, "ranked": [], "message": None,
            "measured_candidates": True}


def search_proposals(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The search's ranked layouts as proposals that arrive scored (their LayoutScore, flat)."""
    return [{"config": c["config"], "reason": c["reason"], "source": "search", "search_rank": c["rank"],
             "scores": trial_score(c)} for c in summary["ranked"]]


def measured_proposals(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Candidates measured to run (an eval): every one goes to evaluate, which projects it whatever the memory
    verdict (the search's screen would drop runs that ran but are projected tight)."""
    return [{"config": dict(c), "reason": f"measured candidate {i}", "source": "candidates", "search_rank": None}
            for i, c in enumerate(request["candidates"])]
