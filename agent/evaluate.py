"""The evals hook: let the agent (offline policy) pick the best of a given candidate set.

``choose(model, gpu, num_gpus, gpus_per_node, gbs, seq_len, candidates)`` runs the tuning graph on
a request restricted to ``candidates`` (:attr:`TuneRequest.candidates`, passed to the search as
its explicit candidate set) and returns the index of the chosen one.  ``evals/agent_eval.py``
calls ``choose(sweep, runs, profile_path=...)`` and expects ``(index, source)``; the same
function answers that form too, so `projtune eval --agent` uses the agent when it is installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.policies.offline import OfflinePolicy
from agent.request import TuneRequest
from agent.run import tune

SOURCE = "agent"


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _same(pick: dict[str, Any], candidate: dict[str, Any]) -> bool:
    """Whether a scored layout is this candidate (every key the candidate sets has the same value)."""
    return all(_plain(pick.get(k)) == _plain(v) for k, v in candidate.items() if v is not None)


def choose_index(model: str | dict[str, Any], gpu: str, num_gpus: int, gpus_per_node: int, gbs: int, seq_len: int,
                 candidates: Sequence[dict[str, Any]], *, profile_path: str | None = None) -> int:
    """Index in ``candidates`` of the layout the agent picks (the roomiest-looking first one if none fits)."""
    if not candidates:
        raise ValueError("choose: no candidates given")
    request = TuneRequest(model=model, gpu=gpu,
                          num_gpus=num_gpus, gpus_per_node=gpus_per_node, gbs=gbs, seq_len=seq_len,
                          top_k=min(len(candidates), 50), candidates=[dict(c) for c in candidates],
                          profile_path=profile_path,
                          # measured runs ran: rank them all, however tight the projected memory
                          constraints=["headroom>=0"])
    report = tune(request=request, policy=OfflinePolicy(), budget={"max_rounds": 2}).report
    if report.best is None:
        return _fallback(candidates)
    filled = [{"gbs": gbs, "seq_len": seq_len, **c} for c in candidates]
    return next((i for i, c in enumerate(filled) if _same(report.best.config, c)), _fallback(candidates))


def _fallback(candidates: Sequence[dict[str, Any]]) -> int:
    """Nothing scored: the first candidate (the caller's order)."""
    return 0


def _choose_for_eval(sweep: Any, runs: Sequence[Any], *, profile_path: str | None = None) -> tuple[int, str]:
    """The evals/agent_eval.py form: (position in ``runs``, 'agent')."""
    configs = [{**(getattr(r, "fill", None) or {}), **r.config} for r in runs]
    cluster = sweep.sweep.cluster
    first = configs[0]
    index = choose_index(sweep.sweep.model, cluster.gpu, cluster.num_gpus, cluster.gpus_per_node,
                         first.get("gbs", 1), first.get("seq_len", 4096), configs, profile_path=profile_path)
    return index, SOURCE


def choose(*args: Any, **kwargs: Any) -> Any:
    """Pick a candidate: ``choose(model, gpu, num_gpus, gpus_per_node, gbs, seq_len, candidates) -> int``.

    Also accepts ``choose(sweep, runs, profile_path=None) -> (index, "agent")`` for
    ``evals/agent_eval.py``.
    """
    if args and hasattr(args[0], "sweep") and (len(args) > 1 or "runs" in kwargs):
        runs = args[1] if len(args) > 1 else kwargs.pop("runs")
        return _choose_for_eval(args[0], runs, profile_path=kwargs.get("profile_path"))
    return choose_index(*args, **kwargs)
