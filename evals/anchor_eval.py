"""`projtune eval --anchor-one`: how much one measured run of a job corrects the projections of its other layouts.

Two evaluations over the scored runs of the sweep files (``evals.eval_run`` projects them):

- **in-sweep**: every run is projected with one other run of its sweep as anchor (same model, GPU type,
  framework, source, scale), for every such other run in turn; MAPE and band coverage are over these
  (target, anchor) pairs, and top-1 over (sweep, anchor) choices: the anchored projections of all runs
  of the sweep (the anchor's own measured value included) pick a best layout.
- **restore from one node**: runs are grouped into *series* (same source file, model, GPU type and
  framework); a series that spans two or more GPU counts is restored from its smallest-scale run(s):
  every larger run is projected with a smallest-scale run as its only anchor.

Each anchored figure is reported next to the unanchored one on the same runs, per source file.
The anchored 80% band of each pair is :func:`projection.uncertainty.anchored_band`; ``residuals``
feeds :func:`projection.uncertainty.build_anchored_table` (leave-one-source-out, ``--bands-out``).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals.eval_run import EvalOptions, ProfileSource, select_sweeps
from evals.runner import project_run
from evals.scoring import throughput
from evals.sweep_file import LoadedSweep, load_sweep_files
from projection.anchor import Corrections, anchor_point, anchored_projection, solve_corrections
from projection.engine import Projection
from projection.memory import GIB
from projection.errors import ProjtuneError
from projection.uncertainty import AnchoredBandTable, anchor_class, anchored_band, build_anchored_table


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoredRun:
    """One projected run with a throughput measurement."""

    sweep: str
    file: str
    index: int
    series: tuple[str, ...]
    """(source, model, GPU, framework, fine-tuning mode): one job at any layout and scale (:func:`series_source`)."""
    num_gpus: int
    metric: str
    measured: float
    projection: Projection
    projected: float
    """Projected value of ``metric``."""
    measured_peak_gib: float | None
    family: str

    @property
    def measured_time_s(self) -> float:
        """Measured step time, s: the projected one times projected / measured throughput."""
        ratio = throughput(self.metric, self.measured) / throughput(self.metric, self.projected)
        return self.projection.iteration_time_s / ratio

    def value_at(self, iteration_time_s: float) -> float:
        """The run's metric at another step time (throughput metrics scale inversely)."""
        if self.metric == "iteration_time_s":
            return iteration_time_s
        return self.projected * self.projection.iteration_time_s / iteration_time_s

    @property
    def label(self) -> str:
        """``sweep#index``."""
        return f"{self.sweep}#{self.index}"


@dataclass(slots=True, kw_only=True)
class Pair:
    """One target run projected with one anchor."""

    kind: str                  # "in-sweep" | "restore"
    target: ScoredRun
    anchor: ScoredRun
    corrections: Corrections
    anchored: float
    band: tuple[float, float]
    anchor_class: str

    @property
    def ape(self) -> float:
        """Anchored absolute percentage error."""
        return abs(self.anchored - self.target.measured) / self.target.measured

    @property
    def ape_unanchored(self) -> float:
        """The target's unanchored absolute percentage error."""
        return abs(self.target.projected - self.target.measured) / self.target.measured

    @property
    def ratio(self) -> float:
        """Measured / anchored throughput (the band's residual)."""
        return throughput(self.target.metric, self.target.measured) / throughput(self.target.metric, self.anchored)

    @property
    def inside(self) -> bool:
        """Whether the measured throughput lies inside the anchored 80% band."""
        return self.band[0] <= self.ratio <= self.band[1]


@dataclass(slots=True, kw_only=True)
class AnchorEval:
    """Pairs of both evaluations and the (sweep, anchor) top-1 outcomes."""

    runs: list[ScoredRun] = field(default_factory=list)
    pairs: list[Pair] = field(default_factory=list)
    top1: list[tuple[str, bool, bool]] = field(default_factory=list)
    """(sweep, anchored top-1 hit, unanchored top-1 hit) per (sweep, anchor) choice."""
    series: int = 0
    scaling_series: int = 0
    band_spread: float | None = None
    """Percentile spread of the leave-one-source-out anchored bands (None: a given table was used)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``projtune eval --anchor-one --json``."""
        in_sweep = [p for p in self.pairs if p.kind == "in-sweep"]
        restore = [p for p in self.pairs if p.kind == "restore"]
        return {
            "series": self.series, "scaling_series": self.scaling_series, "band_spread": self.band_spread,
            "runs_scored": len(self.runs),
            "in_sweep": _summary(in_sweep) | _top1(self.top1),
            "restore_from_smallest": _summary(restore),
            "by_source": {"in_sweep": _by_source(in_sweep), "restore_from_smallest": _by_source(restore)},
            "by_anchor_class": {kind: _by_class(ps) for kind, ps in (("in_sweep", in_sweep), ("restore", restore))},
            "pairs": [_pair_row(p) for p in self.pairs],
        }

    def residuals(self) -> list[tuple[str, str, float]]:
        """(source file, anchor class, measured / anchored throughput) of every pair."""
        return [(p.target.file, p.anchor_class, p.ratio) for p in self.pairs]


def _mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return statistics.fmean(items) if items else None


def _memory_apes(pairs: Sequence[Pair]) -> tuple[list[float], list[float]]:
    """(anchored, unanchored) peak-memory APEs of the pairs whose target and anchor both logged a peak."""
    anchored, unanchored = [], []
    for p in pairs:
        measured = p.target.measured_peak_gib
        if measured is None or p.anchor.measured_peak_gib is None:
            continue
        projected = p.target.projection.memory.peak_bytes / GIB
        unanchored.append(abs(projected - measured) / measured)
        anchored.append(abs(projected + p.corrections.memory_offset_gib - measured) / measured)
    return anchored, unanchored


def _summary(pairs: Sequence[Pair]) -> dict[str, Any]:
    targets = {p.target.label: p for p in pairs}
    memory_anchored, memory_unanchored = _memory_apes(pairs)
    return {
        "pairs": len(pairs), "targets": len(targets),
        "mape_anchored": _mean(p.ape for p in pairs),
        "mape_unanchored": _mean(p.ape_unanchored for p in targets.values()),
        "median_ape_anchored": statistics.median([p.ape for p in pairs]) if pairs else None,
        "coverage_anchored": _mean(float(p.inside) for p in pairs),
        "band_width_mean": _mean(p.band[1] - p.band[0] for p in pairs),
        "memory_pairs": len(memory_anchored), "memory_mape_anchored": _mean(memory_anchored),
        "memory_mape_unanchored": _mean(memory_unanchored),
    }


def _top1(outcomes: Sequence[tuple[str, bool, bool]]) -> dict[str, Any]:
    sweeps = sorted({s for s, _, _ in outcomes})
    per_sweep = {s: [(a, u) for name, a, u in outcomes if name == s] for s in sweeps}
    return {
        "rankable_sweeps": len(sweeps),
        "top1_anchored": _mean(_mean(float(a) for a, _ in v) for v in per_sweep.values()),   # type: ignore[misc]
        "top1_unanchored": _mean(float(v[0][1]) for v in per_sweep.values()),
    }


def _by_source(pairs: Sequence[Pair]) -> dict[str, dict[str, Any]]:
    files = sorted({p.target.file for p in pairs})
    return {Path(f).name: _summary([p for p in pairs if p.target.file == f]) for f in files}


def _by_class(pairs: Sequence[Pair]) -> dict[str, dict[str, Any]]:
    classes = sorted({p.anchor_class for p in pairs})
    return {c: _summary([p for p in pairs if p.anchor_class == c]) for c in classes}


def _pair_row(p: Pair) -> dict[str, Any]:
    return {"kind": p.kind, "target": p.target.label, "anchor": p.anchor.label, "metric": p.target.metric,
            "measured": p.target.measured, "unanchored": p.target.projected, "anchored": p.anchored,
            "band": list(p.band), "anchor_class": p.anchor_class,
            "compute_factor": p.corrections.compute_factor, "comm_factor": p.corrections.comm_factor}


def series_source(sweep: LoadedSweep) -> str:
    """The source a scaling series shares: the sweep's citation (its own, else its file's), cut before a results
    folder's per-system part (MLPerf: ``training_results_v5.0/tree/main/HPE/results/<system>`` -> one submitter
    of one round, whose systems at 1, 2, 4 nodes are one series)."""
    return f"{sweep.file}|{sweep.source.split('/results/')[0]}"


def scored_runs(sweeps: Sequence[LoadedSweep], profiles: ProfileSource) -> list[ScoredRun]:
    """Project every complete run that has a throughput metric (others cannot anchor or be scored)."""
    out: list[ScoredRun] = []
    for sweep in sweeps:
        gpu = sweep.sweep.cluster.gpu
        model = sweep.sweep.model if isinstance(sweep.sweep.model, str) else repr(sorted(sweep.sweep.model.items()))
        for run in sweep.runs:
            if not run.complete or run.metric is None or run.run is None:
                continue
            try:
                specs, projection, metrics = project_run(sweep, run, profile=profiles.profile_for(gpu))
            except (ProjtuneError, ValueError, ArithmeticError):
                continue
            measured = getattr(run.run.measured, run.metric)
            job = tuple(str(run.config.get(k, d)) for k, d in (("framework", "megatron"), ("finetune", None)))
            out.append(ScoredRun(
                sweep=sweep.name, file=sweep.file, index=run.index, series=(series_source(sweep), model, gpu, *job),
                num_gpus=sweep.sweep.cluster.num_gpus, metric=run.metric, measured=measured, projection=projection,
                projected=metrics[run.metric], measured_peak_gib=run.run.measured.peak_memory_gib,
                family=specs.hardware.family))
    return out


def _pair(kind: str, target: ScoredRun, anchor: ScoredRun) -> Pair:
    """The target projected with ``anchor`` as its only anchor (band assigned later)."""
    point = anchor_point(anchor.label, anchor.projection, anchor.measured_time_s,
                         measured_peak_gib=anchor.measured_peak_gib)
    corrections = solve_corrections([point])
    anchored = anchored_projection(target.projection, corrections)
    return Pair(kind=kind, target=target, anchor=anchor, corrections=corrections,
                anchored=target.value_at(anchored.iteration_time_s), band=(1.0, 1.0),
                anchor_class=anchor_class(target.num_gpus, corrections.anchor_gpus))


def _unanchored_band(run: ScoredRun) -> tuple[float, float]:
    p = run.projection
    return p.tokens_per_sec_per_gpu_low / p.tokens_per_s_per_gpu, p.tokens_per_sec_per_gpu_high / p.tokens_per_s_per_gpu


BAND_SPREADS = (0.8, 0.85, 0.9, 0.95)
"""Percentile spreads tried for the anchored bands (as evals.calibrate does for the unanchored ones)."""
TARGET_COVERAGE = 0.78
"""Leave-one-source-out coverage the narrowest chosen spread must reach."""


def assign_bands(pairs: Sequence[Pair], table: AnchoredBandTable | None, spread: float = 0.8) -> None:
    """Give every pair its anchored band: from ``table``, or (None) from a table of ``spread`` built on the other
    sources' pairs only (leave-one-source-out, what the coverage figure reports)."""
    tables: dict[str, AnchoredBandTable] = {}
    for p in pairs:
        use = table
        if use is None:
            file = p.target.file
            if file not in tables:
                tables[file] = build_anchored_table([(q.anchor_class, q.ratio) for q in pairs if q.target.file != file],
                                                    coverage=spread)
            use = tables[file]
        p.band = anchored_band(p.anchor_class, _unanchored_band(p.target), use)


def choose_spread(pairs: Sequence[Pair]) -> float:
    """The narrowest of :data:`BAND_SPREADS` whose leave-one-source-out coverage reaches :data:`TARGET_COVERAGE`
    (the widest when none does); leaves every pair with the bands of that spread."""
    for spread in BAND_SPREADS:
        assign_bands(pairs, None, spread)
        if pairs and statistics.fmean(float(p.inside) for p in pairs) >= TARGET_COVERAGE:
            return spread
    return BAND_SPREADS[-1]


def evaluate_anchored(paths: Sequence[Path | str], options: EvalOptions | None = None,
                      table: AnchoredBandTable | None = None) -> AnchorEval:
    """Both anchored evaluations over the sweep files under ``paths``.

    ``table``: the anchored band table to score coverage with; None: leave-one-source-out tables built
    from this evaluation's own pairs (each source's bands come from the other sources only).
    """
    options = options or EvalOptions()
    loaded = load_sweep_files(list(paths))
    sweeps = select_sweeps(loaded.sweeps, options)
    runs = scored_runs(sweeps, ProfileSource(options.profile))
    result = AnchorEval(runs=runs)
    by_sweep: dict[str, list[ScoredRun]] = {}
    for run in runs:
        by_sweep.setdefault(run.sweep, []).append(run)
    for sweep, members in by_sweep.items():
        for anchor in members:
            partners = [t for t in members if t is not anchor and t.series == anchor.series]
            if not partners:
                continue
            values = {anchor.label: throughput(anchor.metric, anchor.measured)}
            for target in partners:
                pair = _pair("in-sweep", target, anchor)
                result.pairs.append(pair)
                values[target.label] = throughput(target.metric, pair.anchored)
            same = [anchor, *partners]
            if len({r.metric for r in same}) == 1:
                best_measured = max(throughput(r.metric, r.measured) for r in same)
                pick = max(same, key=lambda r: values[r.label])
                pick_un = max(same, key=lambda r: throughput(r.metric, r.projected))
                result.top1.append((sweep, throughput(pick.metric, pick.measured) == best_measured,
                                    throughput(pick_un.metric, pick_un.measured) == best_measured))
    by_series: dict[tuple[str, ...], list[ScoredRun]] = {}
    for run in runs:
        by_series.setdefault(run.series, []).append(run)
    result.series = len(by_series)
    for members in by_series.values():
        scales = sorted({r.num_gpus for r in members})
        if len(scales) < 2:
            continue
        result.scaling_series += 1
        smallest = [r for r in members if r.num_gpus == scales[0]]
        for target in (r for r in members if r.num_gpus > scales[0]):
            result.pairs += [_pair("restore", target, anchor) for anchor in smallest]
    if table is None:
        result.band_spread = choose_spread(result.pairs)
    else:
        assign_bands(result.pairs, table)
    return result
