"""Agent evals: ask the tuner to pick the best of a sweep's measured layouts, then score its pick.

`choose_from_candidates` is the one seam: it asks, in order of preference,

1. the tuning agent, `agent.evaluate.choose(sweep, runs, profile_path=...)` when that exists
   (same signature and return value as `choose_from_candidates`);
2. the layout search, `tools.search.run_search` with the runs' configs as its explicit
   candidate set (its pick is `ranked[0]`);
3. this eval's own projections (the run with the highest projected throughput).

The eval then compares the pick's measured throughput with the sweep's measured best.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from evals.scoring import RunScore, regret, throughput
from evals.sweep_file import LoadedSweep


def run_config(run: RunScore) -> dict[str, Any]:
    """Return the config the run was projected with (its own keys over the fill values)."""
    return {**(run.fill or {}), **run.config}


def choose_from_candidates(sweep: LoadedSweep, runs: Sequence[RunScore], *,
                           profile_path: str | None = None) -> tuple[int, str]:
    """Return (position in `runs` of the chosen layout, name of what chose it).

    Args:
        sweep: The sweep the runs belong to (model, cluster).
        runs: Scored runs sharing one primary metric (the candidate set), at least one.
        profile_path: Device profile file the eval projects with, if not the shipped one.
    """
    agent_choose = _agent_choose()
    if agent_choose is not None:
        return agent_choose(sweep, runs, profile_path=profile_path)
    picked = _search_choice(sweep, runs, profile_path)
    if picked is not None:
        return picked, "search"
    metric = runs[0].metric or "tokens_per_sec_per_gpu"
    best = max(range(len(runs)), key=lambda i: throughput(metric, runs[i].projected or 0.0))
    return best, "projection"


def agent_result(sweep: LoadedSweep, runs: Sequence[RunScore], *,
                 profile_path: str | None = None) -> dict[str, Any]:
    """Return the `agent` block of a sweep: the pick, the measured best, and the pick's regret."""
    metric = runs[0].metric
    assert metric is not None and all(r.metric == metric for r in runs), "candidates share a metric"
    chosen_at, source = choose_from_candidates(sweep, runs, profile_path=profile_path)
    chosen = runs[chosen_at]
    best = max(runs, key=lambda r: throughput(metric, r.measured))  # type: ignore[arg-type]
    loss = regret(metric, runs, chosen)
    return {
        "config": run_config(chosen), "measured": chosen.measured,
        "best_config": run_config(best), "best_measured": best.measured,
        "regret": loss, "top1": loss <= 0.0, "index": chosen.index, "best_index": best.index,
        "metric": metric, "source": source,
    }


def _agent_choose() -> Any:
    try:
        module = importlib.import_module("agent.evaluate")
    except ModuleNotFoundError as err:
        if err.name not in ("agent", "agent.evaluate"):
            raise
        return None
    except ImportError:  # sys.modules entry set to None (tests) or a partial package
        return None
    return getattr(module, "choose", None)


def _search_choice(sweep: LoadedSweep, runs: Sequence[RunScore], profile_path: str | None) -> int | None:
    """Return the position of the search tool's pick, or None if the tool is absent or picks nothing."""
    try:
        from tools.search import SearchRequest, run_search
    except ImportError:
        return None
    from pydantic import ValidationError

    from projection.errors import ProjtuneError

    candidates = [_plain(run_config(r)) for r in runs]
    first = candidates[0]
    cluster = sweep.sweep.cluster
    try:
        request = SearchRequest(
            model=sweep.sweep.model, gpu=cluster.gpu, num_gpus=cluster.num_gpus,
            gpus_per_node=cluster.gpus_per_node, gbs=first["gbs"], seq_len=first["seq_len"],
            candidates=candidates, top_k=min(len(candidates), 100), profile_path=profile_path,
        )
        result = run_search(request)
    except (ProjtuneError, ValidationError, KeyError):
        return None
    if not result.ranked:
        return None
    pick = _plain(result.ranked[0].config)
    return next((i for i, c in enumerate(candidates) if all(pick.get(k) == v for k, v in c.items())), None)


def _plain(config: dict[str, Any]) -> dict[str, Any]:
    """Return the config with tuples as lists (the search reports configs in JSON form)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()}
