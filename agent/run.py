"""Run the tuning graph once: text or a typed request in, a :class:`TuneReport` and the trial history out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.policies import Policy
from agent.report import TuneReport
from agent.text.request import TuneRequest
from agent.state import DEFAULT_BUDGET, RunOptions


@dataclass(slots=True)
class TuneOutcome:
    """A finished run: the report, every trial (for --log) and the final graph state."""

    report: TuneReport
    trials: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)


def tune(text: str | None = None, *, request: TuneRequest | dict[str, Any] | None = None,
         policy: Policy | None = None, budget: dict[str, float] | None = None,
         options: RunOptions | None = None, candidates_ran: bool = False) -> TuneOutcome:
    """Tune one job: parse (unless ``request`` is given), seed, propose/evaluate rounds, report.

    ``candidates_ran``: the request's explicit candidates were measured to run (an eval), so each is
    scored whatever its projected memory (a misfit is reported as a warning next to the layout).
    """
    from projection.module_heap import loading_modules

    with loading_modules():   # importing langgraph takes ~1 s and builds ~100,000 objects that live for good
        from agent.graph import build_graph, recursion_limit
        from agent.policies.offline import OfflinePolicy

    if policy is None:
        policy = OfflinePolicy()
    inputs: dict[str, Any] = {"text": text or ""}
    if request is not None:
        inputs = {"request": request.model_dump() if isinstance(request, TuneRequest) else dict(request)}
    if budget:
        inputs["budget"] = dict(budget)
    if candidates_ran:
        inputs["candidates_ran"] = True
    rounds = {**DEFAULT_BUDGET, **(budget or {})}["max_rounds"]
    final = build_graph(policy).invoke(inputs, config={"recursion_limit": recursion_limit(rounds)},
                                       context=options or RunOptions())
    return TuneOutcome(report=TuneReport.model_validate(final["report"]), trials=list(final.get("trials", [])),
                       state=dict(final))


def trial_log_rows(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One JSON-able row per trial for the --log JSONL file."""
    keys = ("id", "round", "source", "status", "config", "layout", "verdict", "tokens_per_sec_per_gpu", "mfu",
            "peak_memory_gib", "headroom_fraction", "bottleneck", "scored_by", "search_rank", "reason", "violations")
    return [{k: t.get(k) for k in keys} for t in trials]
