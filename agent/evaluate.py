"""The evals hook: let the agent (offline policy) pick the best of a given candidate set.

``choose(model, gpu, num_gpus, gpus_per_node, gbs, seq_len, candidates)`` runs the tuning graph on
a request restricted to ``candidates`` (:attr:`TuneRequest.candidates`) and returns a :class:`Pick`.
``evals/agent_eval.py`` calls ``choose(sweep, runs, profile_path=...)``; the same function answers
that form too.

No silent fallback: when the agent scores nothing (every candidate illegal, a tool error), the
pick has ``index=None``, ``source="no pick"`` and the reason, and the eval counts it as a miss.
The candidates of an eval were measured to run, so the graph runs with ``candidates_ran``: each
is projected whatever its projected memory, and a projected misfit is reported as
``memory_warning`` next to the pick instead of screening the run out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent.policies.offline import OfflinePolicy
from agent.text.request import TuneRequest
from agent.run import tune

NO_PICK = "no pick"


class Pick(BaseModel):
    """What the agent chose from a candidate set, and what made the choice."""

    model_config = ConfigDict(extra="forbid")

    index: int | None = Field(description="Position in the candidates; None when nothing could be picked.")
    source: str = Field(description="'agent/<who proposed it>' (e.g. agent/candidates, agent/search), or 'no pick'.")
    scored_by: str | None = Field(default=None, description="The tool whose numbers ranked it (project, search).")
    reason: str = Field(default="", description="Why this one (or why none).")
    memory_warning: str | None = Field(default=None, description="The pick's projected memory is tight or over.")
    near_tie: list[int] = Field(default_factory=list,
                                description="Positions of candidates whose 80% intervals overlap the pick's.")
    decision: str = Field(default="", description="'clear' or the near-tie note (what a benchmark would settle).")


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _same(pick: dict[str, Any], candidate: dict[str, Any]) -> bool:
    """Whether a scored layout is this candidate (every key the candidate sets has the same value)."""
    return all(_plain(pick.get(k)) == _plain(v) for k, v in candidate.items() if v is not None)


def _position(config: dict[str, Any], filled: Sequence[dict[str, Any]]) -> int | None:
    return next((i for i, c in enumerate(filled) if _same(config, c)), None)


def choose_index(model: str | dict[str, Any], gpu: str, num_gpus: int, gpus_per_node: int, gbs: int, seq_len: int,
                 candidates: Sequence[dict[str, Any]], *, profile_path: str | None = None,
                 ran: bool = True) -> Pick:
    """The agent's pick among ``candidates`` (``ran``: they were measured to run, rank them all)."""
    if not candidates:
        raise ValueError("choose: no candidates given")
    request = TuneRequest(model=model, gpu=gpu,
                          num_gpus=num_gpus, gpus_per_node=gpus_per_node, gbs=gbs, seq_len=seq_len,
                          top_k=min(len(candidates), 50), candidates=[dict(c) for c in candidates],
                          profile_path=profile_path)
    report = tune(request=request, policy=OfflinePolicy(), budget={"max_rounds": 2}, candidates_ran=ran).report
    if report.best is None:
        failed = "".join(f"; {f.tool} failed ({f.kind}): {f.message}" for f in report.tool_errors[:1])
        return Pick(index=None, source=NO_PICK, reason=(report.message or "the agent scored no candidate") + failed)
    filled = [{"gbs": gbs, "seq_len": seq_len, **c} for c in candidates]
    index = _position(report.best.config, filled)
    if index is None:
        return Pick(index=None, source=NO_PICK,
                    reason=f"the agent's best ({report.best.layout}) is none of the given candidates")
    ties = [p for t in report.near_ties if (p := _position(t["config"], filled)) is not None and p != index]
    return Pick(index=index, source=f"agent/{report.best.source}", scored_by=report.best.scored_by,
                reason=report.best.reason, memory_warning=report.best.memory_warning, near_tie=ties,
                decision=report.decision)


def _choose_for_eval(sweep: Any, runs: Sequence[Any], *, profile_path: str | None = None) -> Pick:
    """The evals/agent_eval.py form: the pick among ``runs`` (positions in ``runs``)."""
    configs = [{**(getattr(r, "fill", None) or {}), **r.config} for r in runs]
    cluster = sweep.sweep.cluster
    first = configs[0]
    if "gbs" not in first or "seq_len" not in first:
        return Pick(index=None, source=NO_PICK, reason="the runs do not record gbs and seq_len")
    return choose_index(sweep.sweep.model, cluster.gpu, cluster.num_gpus, cluster.gpus_per_node,
                        first["gbs"], first["seq_len"], configs, profile_path=profile_path)


def choose(*args: Any, **kwargs: Any) -> Pick:
    """Pick a candidate: ``choose(model, gpu, num_gpus, gpus_per_node, gbs, seq_len, candidates)``, or
    ``choose(sweep, runs, profile_path=None)`` for ``evals/agent_eval.py``; a :class:`Pick` either way."""
    if args and hasattr(args[0], "sweep") and (len(args) > 1 or "runs" in kwargs):
        runs = args[1] if len(args) > 1 else kwargs.pop("runs")
        return _choose_for_eval(args[0], runs, profile_path=kwargs.get("profile_path"))
    return choose_index(*args, **kwargs)
