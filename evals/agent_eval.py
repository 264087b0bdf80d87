"""Agent evals: ask the tuning agent to pick the best of a sweep's measured layouts, then score its pick.

The agent is imported directly (:func:`agent.evaluate.choose`); there is no fallback to the search
or to this eval's own projections, so every pick is the agent's and says what made it (``source``:
``agent/<who proposed it>``, ``scored_by``: the tool whose numbers ranked it).  When the agent
cannot pick, the sweep's block says ``source: "no pick"`` with the reason, and it counts as a miss
(top-1 false; it has no regret, and the summary counts it under ``no_pick``).

The measured runs ran, so the agent ranks every one of them even where the memory model projects
it tight or over; such a pick carries ``memory_warning``.  Near-ties (80% intervals overlapping the
pick's) are listed by position with the agent's ``decision`` line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.evaluate import NO_PICK, choose
from evals.scoring import RunScore, regret, throughput
from evals.sweep_file import LoadedSweep


def run_config(run: RunScore) -> dict[str, Any]:
    """Return the config the run was projected with (its own keys over the fill values)."""
    return {**(run.fill or {}), **run.config}


def choose_from_candidates(sweep: LoadedSweep, runs: Sequence[RunScore], *,
                           profile_path: str | None = None) -> dict[str, Any]:
    """The agent's pick among ``runs`` as a plain dict (``index`` None when it could not pick)."""
    return choose(sweep, runs, profile_path=profile_path).model_dump()


def agent_result(sweep: LoadedSweep, runs: Sequence[RunScore], *,
                 profile_path: str | None = None) -> dict[str, Any]:
    """Return the `agent` block of a sweep: the pick, the measured best, and the pick's regret."""
    metric = runs[0].metric
    assert metric is not None and all(r.metric == metric for r in runs), "candidates share a metric"
    pick = choose_from_candidates(sweep, runs, profile_path=profile_path)
    best = max(runs, key=lambda r: throughput(metric, r.measured))  # type: ignore[arg-type]
    block: dict[str, Any] = {
        "best_config": run_config(best), "best_measured": best.measured, "best_index": best.index,
        "metric": metric, "source": pick["source"], "scored_by": pick["scored_by"], "reason": pick["reason"],
        "memory_warning": pick["memory_warning"], "decision": pick["decision"],
        "near_tie": [runs[i].index for i in pick["near_tie"]],
    }
    if pick["index"] is None or pick["source"] == NO_PICK:
        return {**block, "config": None, "measured": None, "regret": None, "top1": False, "index": None,
                "no_pick": True}
    chosen = runs[pick["index"]]
    loss = regret(metric, runs, chosen)
    return {**block, "config": run_config(chosen), "measured": chosen.measured, "regret": loss, "top1": loss <= 0.0,
            "index": chosen.index, "no_pick": False}
