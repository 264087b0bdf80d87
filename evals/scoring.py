"""Score projections against measurements: per run, per sweep, and the summary of an eval.

Pure functions over plain data: no IO and no engine calls (``evals/eval_run.py`` collects
the inputs). Definitions (shared/specs/sweep-format.md, *Measured metrics*):

- ``ape`` = ``|projected - measured| / measured`` on the run's primary metric.
- ``signed_error`` has the same magnitude, with the sign of the *throughput* error:
  positive means the projection is optimistic (projects a faster run than measured),
  also for ``iteration_time_s`` where a smaller value is faster. ``bias`` is its mean.
- Ranking uses throughput: the metric itself, or ``1 / iteration_time_s``.
- A sweep is *rankable* when at least two scored runs share a primary metric; when
  runs carry different primary metrics, the metric with the most scored runs is ranked.
- ``oom_recall`` = share of measured-OOM runs projected "out of memory" or "at risk".
- ``oom_false_alarm_rate`` = share of runs that ran (a throughput, no OOM) projected "out of memory";
  ``ran_at_risk_rate`` = share of them projected "at risk" (the verdict's calibrated band,
  ``projection/memory_verdict.py``).

Fractions everywhere, never percents.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from evals.sweep_models import PRIMARY_METRICS

TIME_METRIC = "iteration_time_s"
OOM_VERDICT = "out of memory"
RISK_VERDICT = "at risk"


@dataclass(slots=True, kw_only=True)
class RunScore:
    """One run of the eval; field names are the keys of the JSON contract (plus extras)."""

    sweep: str
    index: int
    """Index of the run in the sweep's `runs:` list (0-based)."""
    config: dict[str, Any]
    """Effective config as written in the file (fill values are in `fill`)."""
    metric: str | None
    """Primary metric; None for runs measured only in memory / OOM."""
    measured: float | None
    """Measured value of the primary metric."""
    projected: float | None
    """Projected value of the primary metric."""
    ape: float | None
    memory_measured_gib: float | None
    memory_projected_gib: float | None
    oom_measured: bool | None
    oom_projected: bool | None
    """True when the projection's memory verdict is "out of memory"."""
    filled: bool
    """True when missing keys were filled by `--fill-unknown`."""
    skipped: str | None
    """Why the run was not projected; None for a scored run."""
    gpu: str
    family: str | None
    file: str
    signed_error: float | None = None
    verdict: str | None = None
    """Memory verdict of the projection: fits / at risk / out of memory."""
    missing_keys: list[str] = field(default_factory=list)
    fill: dict[str, Any] | None = None
    """Values chosen for the missing keys (with `--fill-unknown`)."""
    projected_metrics: dict[str, float] | None = None
    """Every projected throughput metric and peak_memory_gib."""
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per baseline tool: {"metric", "value", "ape"} on the metric it shares with the run."""
    projected_low: float | None = None
    """Low end of the projection's 80% interval on the primary metric (projection/uncertainty.py)."""
    projected_high: float | None = None
    """High end of the projection's 80% interval on the primary metric."""
    band_reasons: list[str] = field(default_factory=list)
    """Why the interval is wide: each way the run lies outside the development evidence (projection/evidence.py)."""
    novelty: list[str] = field(default_factory=list)
    """The novelty keys of ``band_reasons`` (projection.evidence.REASON_KEYS)."""

    @property
    def scored(self) -> bool:
        """Return True if the run was projected."""
        return self.skipped is None


@dataclass(slots=True, kw_only=True)
class SweepScore:
    """One sweep of the eval; field names are the keys of the JSON contract (plus extras)."""

    name: str
    file: str
    gpu: str
    num_gpus: int
    runs: int
    runs_scored: int
    mape: float | None
    rank_metric: str | None
    """Primary metric the ranking uses; None when the sweep is not rankable."""
    kendall_tau: float | None
    spearman: float | None
    top1: bool | None
    regret: float | None
    agent: dict[str, Any] | None = None


def throughput(metric: str, value: float) -> float:
    """Return a higher-is-better throughput for a primary-metric value."""
    return 1.0 / value if metric == TIME_METRIC else value


def errors(metric: str, measured: float, projected: float) -> tuple[float, float]:
    """Return (ape, signed_error) of one value (signed_error > 0: projection optimistic)."""
    ape = abs(projected - measured) / measured
    faster = projected < measured if metric == TIME_METRIC else projected > measured
    return ape, ape if faster else -ape


def interval(metric: str, projected: float, band: tuple[float, float]) -> tuple[float, float]:
    """(low, high) of the primary metric from throughput multipliers ``band`` (time metrics invert)."""
    low, high = band
    if metric == TIME_METRIC:
        return projected / high, projected / low
    return projected * low, projected * high


def inside(run: RunScore) -> bool | None:
    """Whether the measured value lies in the run's projected 80% interval (None without one)."""
    if run.measured is None or run.projected_low is None or run.projected_high is None:
        return None
    return run.projected_low <= run.measured <= run.projected_high


def baseline_errors(metric: str | None, measured: dict[str, Any],
                    baselines: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Return each baseline's error on the run's primary metric, else on peak memory."""
    out: dict[str, dict[str, Any]] = {}
    for name, values in baselines.items():
        shared = [m for m in (metric, "peak_memory_gib") if m and values.get(m) and measured.get(m)]
        if shared:
            key = shared[0]
            out[name] = {"metric": key, "value": values[key],
                         "ape": abs(values[key] - measured[key]) / measured[key]}
    return out


def _mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return statistics.fmean(items) if items else None


def _median(values: Iterable[float]) -> float | None:
    items = list(values)
    return statistics.median(items) if items else None


def _finite(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def rank_runs(runs: Sequence[RunScore]) -> tuple[str | None, list[RunScore]]:
    """Return the metric to rank on and the scored runs carrying it (empty if not rankable)."""
    by_metric: dict[str, list[RunScore]] = {}
    for run in runs:
        if run.scored and run.metric is not None and run.projected is not None:
            by_metric.setdefault(run.metric, []).append(run)
    if not by_metric:
        return None, []
    metric = max(by_metric, key=lambda m: (len(by_metric[m]), -PRIMARY_METRICS.index(m)))
    chosen = by_metric[metric]
    return (metric, chosen) if len(chosen) >= 2 else (None, [])


def regret(metric: str, runs: Sequence[RunScore], chosen: RunScore) -> float:
    """Return 1 - measured throughput of `chosen` / best measured throughput among `runs`."""
    best = max(throughput(metric, r.measured) for r in runs)  # type: ignore[arg-type]
    return 1.0 - throughput(metric, chosen.measured) / best  # type: ignore[arg-type]


def score_sweep(*, name: str, file: str, gpu: str, num_gpus: int, runs: Sequence[RunScore]) -> SweepScore:
    """Score one sweep: MAPE, and when rankable Kendall tau, Spearman, top-1 and regret."""
    from scipy import stats

    scored = [r for r in runs if r.scored]
    metric, ranked = rank_runs(runs)
    score = SweepScore(
        name=name, file=file, gpu=gpu, num_gpus=num_gpus, runs=len(runs), runs_scored=len(scored),
        mape=_mean(r.ape for r in scored if r.ape is not None), rank_metric=metric,
        kendall_tau=None, spearman=None, top1=None, regret=None,
    )
    if metric is None:
        return score
    measured = [throughput(metric, r.measured) for r in ranked]  # type: ignore[arg-type]
    projected = [throughput(metric, r.projected) for r in ranked]  # type: ignore[arg-type]
    if len(set(measured)) > 1 and len(set(projected)) > 1:
        score.kendall_tau = _finite(stats.kendalltau(projected, measured).statistic)
        score.spearman = _finite(stats.spearmanr(projected, measured).statistic)
    best = ranked[max(range(len(ranked)), key=lambda i: projected[i])]
    score.top1 = throughput(metric, best.measured) == max(measured)  # type: ignore[arg-type]
    score.regret = regret(metric, ranked, best)
    return score


def _group(runs: Sequence[RunScore], key: str) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[RunScore]] = {}
    for run in runs:
        if run.ape is not None and getattr(run, key) is not None:
            groups.setdefault(getattr(run, key), []).append(run)
    return {
        name: {"runs": len(items), "mape": _mean(r.ape for r in items),  # type: ignore[misc]
               "bias": _mean(r.signed_error for r in items)}  # type: ignore[misc]
        for name, items in sorted(groups.items())
    }


def _baselines(runs: Sequence[RunScore]) -> dict[str, dict[str, Any]]:
    pairs: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        for name, b in run.baselines.items():
            ours = run.ape if b["metric"] == run.metric else _memory_ape(run)
            if run.scored and ours is not None:
                pairs.setdefault(name, []).append((b["ape"], ours))
    return {
        name: {"runs": len(items), "mape": _mean(b for b, _ in items),
               "ours_mape_same_runs": _mean(o for _, o in items)}
        for name, items in sorted(pairs.items())
    }


def _memory_ape(run: RunScore) -> float | None:
    if run.memory_measured_gib is None or run.memory_projected_gib is None:
        return None
    return abs(run.memory_projected_gib - run.memory_measured_gib) / run.memory_measured_gib


def _agent_summary(sweeps: Sequence[SweepScore]) -> dict[str, Any] | None:
    asked = [s.agent for s in sweeps if s.agent is not None]
    if not asked:
        return None
    sources: dict[str, int] = {}
    for a in asked:
        sources[a.get("source", "?")] = sources.get(a.get("source", "?"), 0) + 1
    # a "no pick" is a miss for top-1 and has no regret (counted under no_pick instead)
    return {"sweeps": len(asked), "top1_rate": _mean(float(a["top1"]) for a in asked),
            "regret_mean": _mean(a["regret"] for a in asked if a.get("regret") is not None),
            "no_pick": sum(1 for a in asked if a.get("no_pick")),
            "memory_warnings": sum(1 for a in asked if a.get("memory_warning")),
            "near_ties": sum(1 for a in asked if a.get("near_tie")), "sources": sources}


def interval_groups(runs: Sequence[RunScore], keys: Any) -> dict[str, dict[str, Any]]:
    """{group: {runs, coverage, median_width}} of runs with an interval; ``keys(run)`` lists a run's groups.
    ``median_width`` is the interval's high minus low over the projected value."""
    groups: dict[str, list[RunScore]] = {}
    for run in runs:
        if inside(run) is not None:
            for key in keys(run):
                groups.setdefault(key, []).append(run)
    return {k: {"runs": len(v), "coverage": _mean(float(bool(inside(r))) for r in v),
                "median_width": _median((r.projected_high - r.projected_low) / r.projected for r in v)}
            for k, v in sorted(groups.items())}


def summarize(*, files: int, runs: Sequence[RunScore], sweeps: Sequence[SweepScore]) -> dict[str, Any]:
    """Return the `summary` block of the JSON contract."""
    scored = [r for r in runs if r.scored]
    with_ape = [r for r in scored if r.ape is not None]
    memory = [a for r in scored if (a := _memory_ape(r)) is not None]
    oom = [r for r in scored if r.oom_measured]
    ran = [r for r in scored if r.oom_measured is not True and r.metric is not None]
    rankable = [s for s in sweeps if s.rank_metric is not None]
    return {
        "files": files, "sweeps": len(sweeps), "runs": len(runs), "runs_scored": len(scored),
        "runs_skipped": len(runs) - len(scored),
        "runs_incomplete": sum(1 for r in runs if r.missing_keys),
        "runs_filled": sum(1 for r in scored if r.filled),
        "mape": _mean(r.ape for r in with_ape),  # type: ignore[misc]
        "mape_complete": _mean(r.ape for r in with_ape if not r.filled),  # type: ignore[misc]
        "mape_filled": _mean(r.ape for r in with_ape if r.filled),  # type: ignore[misc]
        "median_ape": _median(r.ape for r in with_ape),  # type: ignore[misc]
        "bias": _mean(r.signed_error for r in with_ape),  # type: ignore[misc]
        "interval_coverage": _mean(float(c) for r in with_ape if (c := inside(r)) is not None),
        "interval_by_file": interval_groups(with_ape, lambda r: [r.file]),
        "interval_by_novelty": interval_groups(with_ape, lambda r: sorted(set(r.novelty)) or ["inside the evidence"]),
        "memory_runs": len(memory), "memory_mape": _mean(memory),
        "oom_runs": len(oom),
        "oom_recall": _mean(float(r.verdict in (OOM_VERDICT, RISK_VERDICT)) for r in oom),
        "oom_false_alarm_rate": _mean(float(r.verdict == OOM_VERDICT) for r in ran),
        "ran_at_risk_rate": _mean(float(r.verdict == RISK_VERDICT) for r in ran),
        "rankable_sweeps": len(rankable),
        "kendall_tau_mean": _mean(s.kendall_tau for s in rankable if s.kendall_tau is not None),
        "spearman_mean": _mean(s.spearman for s in rankable if s.spearman is not None),
        "top1_rate": _mean(float(s.top1) for s in rankable if s.top1 is not None),
        "regret_mean": _mean(s.regret for s in rankable if s.regret is not None),
        "agent": _agent_summary(sweeps),
        "baselines": _baselines(runs),
    }


def by_gpu(runs: Sequence[RunScore]) -> dict[str, dict[str, Any]]:
    """Return {hardware id: {runs, mape, bias}} over runs with a primary-metric error."""
    return _group(runs, "gpu")


def by_family(runs: Sequence[RunScore]) -> dict[str, dict[str, Any]]:
    """Return {hardware family: {runs, mape, bias}} over runs with a primary-metric error."""
    return _group(runs, "family")
