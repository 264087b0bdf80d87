"""The offline policy: deterministic, no network, and as good as the full layout search.

Round 1 proposes the top-k of the graph's search step (:mod:`agent.search_step`, the search tool: exhaustive
over the legal space with exact pruning), so the graph's best equals the search's best: the
seed trials are inside the same space (:mod:`agent.seeds`), scored by the same engine, and ties
go to the search's order (:func:`agent.nodes.rank_key`).  Later rounds propose single-axis
neighbours of the current best that were not tried yet (history and explanations, no new
winner possible); with nothing left it proposes nothing and reflect stops.
"""

from __future__ import annotations

from typing import Any

from agent.policies.base import Explained, Parsed, PolicyStep
from agent.text.request import Clarification, TuneRequest, parse_request
from agent.search_step import measured_proposals, search_proposals
from agent.seeds import single_axis_moves
from agent.space import LayoutSpace

NEIGHBOURS_PER_ROUND = 6


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
        """Round 1: the graph's search step's top-k (or the measured candidates); later: untried single-axis
        neighbours of the best."""
        search = state.get("search")
        if state.get("round") == 1 and search is not None:
            if search.get("measured_candidates"):
                return PolicyStep(proposals=measured_proposals(state["request"]))
            return PolicyStep(proposals=search_proposals(search))   # none when the search found or failed
        return self.neighbours(state)

    def neighbours(self, state: dict[str, Any]) -> PolicyStep:
        """Untried single-axis neighbours of the best trial (none when nothing is scored yet)."""
        job = LayoutSpace(state["request"])
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

    def explain(self, state: dict[str, Any]) -> Explained:
        """Say why the best wins, from the numbers the report gathered (``state['facts']``)."""
        return Explained(text=offline_explanation(state.get("facts") or {}))


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
