"""`projtune eval --anchor-one`: how much one measured run of a job corrects the projections of its other layouts.

Two evaluations over the scored runs of the sweep files (``evals.eval_run`` projects them):

- **in-sweep**: every run is projected with one other run of its sweep as anchor (same model, GPU type,
  framework, source, scale), for every such other run in turn; MAPE and band coverage are over these
  (target, anchor) pairs, and top-1 over (sweep, anchor) choices: the anchored projections of all runs
  of the sweep pick a best layout as ``search --anchor`` ranks them (the anchor's own layout at its anchored
  projection too, the correction of its own cell, not its measured value: a shrunk correction of the others
  against a fully known anchor would reorder layouts on a shrinkage artefact, not on evidence that the error
  differs by layout).
- **restore from one node**: runs are grouped into *series* (same source file, model, GPU type and
  framework); a series that spans two or more GPU counts is restored from its smallest-scale run(s):
  every larger run is projected with a smallest-scale run as its only anchor.

Both are run in two settings (:data:`SETTINGS`):

- **held-out** (the main figure): every run is projected with profiles fitted without its source
  (leave-one-source-out, ``projtune calibrate --cross-validate``'s folds and fit, cached by
  :mod:`evals.anchor_folds`): a job whose source is not in the fitting data, what a user with their own
  cluster sees.  A source that is the only one given is projected with the priors (a fit on nothing).
- **in-sample**: the shipped profiles (``--profile``), fitted on these very sweeps: the unanchored projection
  has already absorbed each sweep's systematic error, so an anchor has little left to correct.

Each anchored figure is reported next to the unanchored one on the same runs, per source file.  The factors
are shrunk by the shared-error weight (:func:`shared_weights`, projection/anchor.py), estimated for each
source from the other sources' pairs of the same setting only; the anchored 80% band of each pair is
:func:`projection.uncertainty.anchored_band` of a table built on the other sources' anchored residuals.
``--bands-out`` writes the held-out setting's weights and bands from every source
(``catalog/uncertainty/anchored_bands.yaml``, what an anchored answer uses).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals.eval_run import EvalOptions, ProfileSource, select_sweeps
from evals.fit import FitRun, collect_fit_runs, pristine_framework, pristine_profile
from evals.runner import project_run, projected_metrics
from evals.scoring import throughput
from evals.sweep_file import LoadedSweep, load_sweep_files
from projection.anchor import (
    Corrections,
    alike_in_communication,
    anchor_point,
    anchored_projection,
    band_uninformed,
    posterior_weight,
    solve_corrections,
    step_parts,
)
from projection.device_profile import DeviceProfile
from projection.engine import Projection, project
from projection.errors import ProjtuneError
from projection.framework_profile import FrameworkProfile
from projection.memory import GIB
from projection.profile_priors import member_profile
from projection.uncertainty import (
    MIN_WEIGHT_PAIRS,
    SCALE_GROUPS,
    AnchoredBandTable,
    SharedWeight,
    anchor_class,
    anchored_band,
    build_anchored_table,
    scale_group,
)

SETTINGS = ("held-out", "in-sample")
"""held-out: leave-one-source-out profiles (the main figure); in-sample: the shipped profiles."""


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
    full_shift: float = 0.0
    """log(anchored / unanchored step time) of the target with a fully trusted anchor (weight 1)."""
    uninformed: float = 0.0
    """Share of the target's step the anchor never exercised (scale-out targets only, projection.anchor)."""
    alike: bool = True
    """Target and anchor within COMM_SHARE_SPREAD in communication share (the weight's cell)."""
    anchor_compute_share: float = 1.0
    """The anchor's projected compute share of its step (how much its error says about the compute factor)."""
    anchor_self: float = 0.0
    """The anchor's own layout projected with the pair's anchor, shrunk by the weight of its own cell (same scale,
    alike in communication), in the anchor's metric: what a search ranks the anchor's layout at."""

    @property
    def target_residual(self) -> float:
        """log(measured / unanchored projected step time) of the target."""
        return math.log(self.target.measured_time_s / self.target.projection.iteration_time_s)

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
class SettingEval:
    """Pairs of both evaluations and the (sweep, anchor) top-1 outcomes under one setting's profiles."""

    setting: str
    runs: list[ScoredRun] = field(default_factory=list)
    pairs: list[Pair] = field(default_factory=list)
    top1: list[tuple[str, bool, bool, float, float]] = field(default_factory=list)
    """(sweep, anchored top-1 hit, unanchored top-1 hit, anchored regret, unanchored regret) per (sweep, anchor)
    choice; regret: 1 - measured throughput of the pick / the best measured."""
    band_spreads: dict[str, float] = field(default_factory=dict)
    """Percentile spread of the leave-one-source-out anchored bands per scale group (empty: a given table)."""
    weights: dict[str, SharedWeight] = field(default_factory=dict)
    """The shared-error weights estimated from every source's pairs (what ``--bands-out`` ships)."""
    weights_by_source: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per source file, the weights its own pairs were scored with (estimated without that source)."""

    def to_dict(self) -> dict[str, Any]:
        """One setting's figures."""
        in_sweep = [p for p in self.pairs if p.kind == "in-sweep"]
        restore = [p for p in self.pairs if p.kind == "restore"]
        return {
            "setting": self.setting, "runs_scored": len(self.runs), "band_spreads": self.band_spreads,
            "shared_weights": {g: {"weight": w.weight, "pairs": w.pairs} for g, w in self.weights.items()},
            "in_sweep": _summary(in_sweep) | {"mape_one_factor_floor": one_factor_floor(in_sweep)} | _top1(self.top1)
            | {"top1_misses": top1_misses(in_sweep)},
            "restore_from_smallest": _summary(restore),
            "by_source": {"in_sweep": _by_source(in_sweep), "restore_from_smallest": _by_source(restore)},
            "by_anchor_class": {kind: _by_class(ps) for kind, ps in (("in_sweep", in_sweep), ("restore", restore))},
            "shared_weights_by_source": {Path(f).name: w for f, w in sorted(self.weights_by_source.items())},
            "pairs": [_pair_row(p) for p in self.pairs],
        }

    def residuals(self) -> list[tuple[str, str, float]]:
        """(source file, anchor class, measured / anchored throughput) of every pair."""
        return [(p.target.file, p.anchor_class, p.ratio) for p in self.pairs]


@dataclass(slots=True, kw_only=True)
class AnchorEval:
    """Both settings (:data:`SETTINGS`) and the series they share."""

    settings: dict[str, SettingEval] = field(default_factory=dict)
    series: int = 0
    scaling_series: int = 0

    @property
    def main(self) -> SettingEval:
        """The held-out setting (the main figure), else the only one run."""
        return self.settings.get("held-out") or next(iter(self.settings.values()))

    @property
    def runs(self) -> list[ScoredRun]:
        """The main setting's scored runs."""
        return self.main.runs

    @property
    def pairs(self) -> list[Pair]:
        """The main setting's pairs."""
        return self.main.pairs

    @property
    def band_spreads(self) -> dict[str, float]:
        """The main setting's band spreads."""
        return self.main.band_spreads

    def residuals(self) -> list[tuple[str, str, float]]:
        """The main setting's anchored residuals."""
        return self.main.residuals()

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``projtune eval --anchor-one --json``: the main (held-out) setting at the top, every
        setting under ``settings``."""
        main = self.main.to_dict()
        others = {name: ev.to_dict() for name, ev in self.settings.items()}
        for data in others.values():
            data.pop("pairs", None)
        return {"series": self.series, "scaling_series": self.scaling_series,
                "main_setting": self.main.setting} | main | {"settings": others}


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
        "mape_unanchored_pairs": _mean(p.ape_unanchored for p in pairs),
        "median_ape_anchored": statistics.median([p.ape for p in pairs]) if pairs else None,
        "coverage_anchored": _mean(float(p.inside) for p in pairs),
        "band_width_mean": _mean(p.band[1] - p.band[0] for p in pairs),
        "memory_pairs": len(memory_anchored), "memory_mape_anchored": _mean(memory_anchored),
        "memory_mape_unanchored": _mean(memory_unanchored),
    }


def _top1(outcomes: Sequence[tuple[str, bool, bool, float, float]]) -> dict[str, Any]:
    sweeps = sorted({o[0] for o in outcomes})
    per_sweep = {s: [o[1:] for o in outcomes if o[0] == s] for s in sweeps}
    return {
        "rankable_sweeps": len(sweeps),
        "top1_anchored": _mean(_mean(float(o[0]) for o in v) for v in per_sweep.values()),   # type: ignore[misc]
        "top1_unanchored": _mean(float(v[0][1]) for v in per_sweep.values()),
        "top1_regret_anchored": _mean(_mean(o[2] for o in v) for v in per_sweep.values()),  # type: ignore[misc]
        "top1_regret_unanchored": _mean(v[0][3] for v in per_sweep.values()),
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


def _held_out_projection(item: FitRun, profile: DeviceProfile, framework: FrameworkProfile) -> Projection:
    """A development run projected with a fold's profiles (a silicon group's profile as the run's GPU runs it,
    as :func:`evals.fit.projected_value` does)."""
    if profile.hardware_id != item.specs.hardware.id and profile.hardware_id == item.device_group:
        profile = member_profile(profile, item.specs.hardware.id)
    s = item.specs
    return project(s.model, s.cluster, s.config, hardware=s.hardware, profile=profile, framework=framework)


def _scored(item: FitRun, projection: Projection) -> ScoredRun:
    sweep, run = item.sweep, item.run
    gpu = sweep.sweep.cluster.gpu
    model = sweep.sweep.model if isinstance(sweep.sweep.model, str) else repr(sorted(sweep.sweep.model.items()))
    job = tuple(str(run.config.get(k, d)) for k, d in (("framework", "megatron"), ("finetune", None)))
    metrics = projected_metrics(sweep, item.specs, projection)
    return ScoredRun(sweep=sweep.name, file=sweep.file, index=run.index, series=(series_source(sweep), model, gpu, *job),
                     num_gpus=sweep.sweep.cluster.num_gpus, metric=item.metric, measured=item.measured,
                     projection=projection, projected=metrics[item.metric],
                     measured_peak_gib=run.run.measured.peak_memory_gib if run.run is not None else None,
                     family=item.specs.hardware.family)


def held_out_runs(fitting: Sequence[LoadedSweep], scored: Sequence[LoadedSweep],
                  progress: Callable[[str], None] | None = None) -> list[ScoredRun]:
    """The runs of ``scored`` projected with profiles fitted on ``fitting`` without their source
    (leave-one-source-out folds, :func:`evals.anchor_folds.source_folds`); a source with no other source to
    fit on is projected with the priors."""
    from evals.anchor_folds import source_folds
    from evals.calibrate import held_out_profile

    keep = {(s.file, s.name) for s in scored}
    folds = {Path(h.fold.test[0].source).stem: h for h in source_folds(collect_fit_runs(fitting), progress)}
    out: list[ScoredRun] = []
    for item in collect_fit_runs(scored):
        if (item.source, item.sweep.name) not in keep:
            continue
        held = folds.get(Path(item.source).stem)
        if held is not None:
            profile, framework = held_out_profile(item, held.fit.device_profiles), held.framework(item)
        else:
            profile, framework = pristine_profile(item.device_group), pristine_framework(item.framework)
        try:
            out.append(_scored(item, _held_out_projection(item, profile, framework)))
        except (ProjtuneError, ValueError, ArithmeticError):
            continue
    return out


def _pair(kind: str, target: ScoredRun, anchor: ScoredRun, weight: float = 1.0, self_weight: float = 1.0) -> Pair:
    """The target projected with ``anchor`` as its only anchor, the factors shrunk by ``weight`` (band assigned
    later); ``full_shift`` is the fully trusted anchor's correction of the target (what the weight regresses on);
    ``anchor_self`` the anchor's own layout corrected with ``self_weight`` (its own cell's weight)."""
    point = anchor_point(anchor.label, anchor.projection, anchor.measured_time_s,
                         measured_peak_gib=anchor.measured_peak_gib)
    full = solve_corrections([point])
    full_time = anchored_projection(target.projection, full).iteration_time_s
    corrections = full if weight == 1.0 else solve_corrections([point], weight)
    own = full if self_weight == 1.0 else solve_corrections([point], self_weight)
    anchored = anchored_projection(target.projection, corrections)
    parts = step_parts(target.projection.breakdown)
    cls = anchor_class(target.num_gpus, corrections.anchor_gpus)
    return Pair(kind=kind, target=target, anchor=anchor, corrections=corrections,
                anchored=target.value_at(anchored.iteration_time_s), band=(1.0, 1.0), anchor_class=cls,
                full_shift=math.log(full_time / target.projection.iteration_time_s),
                uninformed=band_uninformed(cls, parts, corrections), alike=alike_in_communication(parts, corrections),
                anchor_compute_share=point.parts.compute_share,
                anchor_self=anchor.value_at(anchored_projection(anchor.projection, own).iteration_time_s))


def _reweighted(pair: Pair, weights: dict[str, SharedWeight]) -> Pair:
    """The pair re-solved with the shared-error weights of its cell (and its anchor's own, same scale and alike)."""
    return _pair(pair.kind, pair.target, pair.anchor, weight_for(weights, pair),
                 weights[weight_key(SCALE_GROUPS[0], True)].weight)


def estimate_weight(pairs: Sequence[Pair], group: str, alike: bool | None = True) -> SharedWeight:
    """The shared-error weight of one scale group, for targets alike or not in communication share to their anchor
    (:func:`projection.anchor.alike_in_communication`; None: both), from (target, anchor) pairs: the
    weight ``w`` (on :data:`WEIGHT_GRID`) whose corrections explain the targets' log errors ``r`` best in least
    squares, ``sum (r - h g)^2``: ``g`` the log correction a fully trusted anchor makes to the target, ``h`` the
    power the anchor's factor takes at weight ``w`` (:func:`projection.anchor.posterior_weight` of the anchor's
    compute share; an all-compute anchor: ``w``, and the fit is the slope of ``r`` on ``g`` through the origin).

    With a series effect shared by its runs (variance tau^2) and each run's own error (sigma^2), ``g`` is about the
    anchor's own log error, and ``w`` is the empirical-Bayes posterior weight ``tau^2 / (tau^2 + sigma^2)``
    of the shared part: the cross-validated residual covariance within series over the anchors' variance.  Fewer
    than :data:`projection.uncertainty.MIN_WEIGHT_PAIRS` pairs: weight 0 (nothing is known to be shared)."""
    members = [p for p in pairs if scale_group(p.anchor_class) == group and alike in (None, p.alike)]
    weight = 0.0
    if len(members) >= MIN_WEIGHT_PAIRS and any(p.full_shift for p in members):
        weight = min(WEIGHT_GRID, key=lambda w: (sum((p.target_residual - posterior_weight(w, (p.anchor_compute_share,))
                                                      * p.full_shift) ** 2 for p in members), w))
    return SharedWeight(group=group, alike=alike is not False, weight=weight, pairs=len(members))


WEIGHT_GRID = tuple(i / 200 for i in range(201))
"""Shared-error weights :func:`estimate_weight` tries (0..1 in steps of 0.005: finer than its sampling error)."""


def weight_key(group: str, alike: bool) -> str:
    """``same-scale``, ``same-scale, comm differs``, ...: a weight cell's name."""
    return group + ("" if alike else ", comm differs")


def shared_weights(pairs: Sequence[Pair]) -> dict[str, SharedWeight]:
    """:func:`estimate_weight` of the same-scale group for targets alike and not alike in communication share, and of
    the scale-out group as one cell (beyond the anchors' scale the communication differs by construction: its extra
    share is what the band keeps unanchored, :func:`projection.anchor.band_uninformed`).

    The cells are bounded by what they share at most: a target that differs from its anchor in communication shares
    no more of the anchor's error than a target alike at the same scale (its extra terms are errors of its own), and
    a target beyond its anchor's scale, whose communication differs by construction, no more than one that differs
    at the same scale; each weight is capped by the one before it."""
    cap = 1.0
    out = {}
    for key, estimate in ((weight_key(SCALE_GROUPS[0], True), estimate_weight(pairs, SCALE_GROUPS[0], True)),
                          (weight_key(SCALE_GROUPS[0], False), estimate_weight(pairs, SCALE_GROUPS[0], False)),
                          (SCALE_GROUPS[1], estimate_weight(pairs, SCALE_GROUPS[1], None))):
        cap = min(cap, estimate.weight)
        out[key] = estimate.model_copy(update={"weight": cap})
    return out


def weight_for(weights: dict[str, SharedWeight], pair: Pair) -> float:
    """The weight of a pair's cell."""
    group = scale_group(pair.anchor_class)
    return weights[weight_key(group, pair.alike or group != SCALE_GROUPS[0])].weight


def _unanchored_band(run: ScoredRun) -> tuple[float, float]:
    p = run.projection
    return p.tokens_per_sec_per_gpu_low / p.tokens_per_s_per_gpu, p.tokens_per_sec_per_gpu_high / p.tokens_per_s_per_gpu


BAND_SPREADS = (0.8, 0.85, 0.9, 0.95)
"""Percentile spreads tried for the anchored bands (as evals.calibrate does for the unanchored ones)."""
TARGET_COVERAGE = 0.78
"""Leave-one-source-out coverage the narrowest chosen spread must reach."""


def assign_bands(pairs: Sequence[Pair], table: AnchoredBandTable | None,
                 spreads: dict[str, float] | None = None) -> None:
    """Give every pair its anchored band: from ``table``, or (None) from a table built on the other sources' pairs
    only with ``spreads`` (scale group -> percentile spread; leave-one-source-out, what the coverage reports)."""
    spreads = spreads or {}
    tables: dict[str, AnchoredBandTable] = {}
    for p in pairs:
        use = table
        if use is None:
            file = p.target.file
            if file not in tables:
                tables[file] = build_anchored_table(
                    [(q.anchor_class, q.ratio) for q in pairs if q.target.file != file],
                    coverage=spreads.get(SCALE_GROUPS[0], 0.8), scale_out_coverage=spreads.get(SCALE_GROUPS[1]))
            use = tables[file]
        p.band = anchored_band(p.anchor_class, _unanchored_band(p.target), use, p.uninformed)


def choose_spreads(pairs: Sequence[Pair]) -> dict[str, float]:
    """Per scale group, the narrowest of :data:`BAND_SPREADS` whose leave-one-source-out coverage of that group's
    pairs reaches :data:`TARGET_COVERAGE` (the widest when none does); leaves every pair with those bands."""
    spreads = {g: BAND_SPREADS[-1] for g in SCALE_GROUPS}
    for group in SCALE_GROUPS:
        members = [p for p in pairs if scale_group(p.anchor_class) == group]
        for spread in BAND_SPREADS:
            spreads[group] = spread
            assign_bands(pairs, None, spreads)
            if members and statistics.fmean(float(p.inside) for p in members) >= TARGET_COVERAGE:
                break
    assign_bands(pairs, None, spreads)
    return spreads


def _full_pairs(runs: Sequence[ScoredRun]) -> tuple[list[Pair], list[Pair]]:
    """(in-sweep and restore pairs, scored; every smaller-scale anchor of a series for a larger target, the
    scale-out weight's estimation pairs), all with fully trusted anchors."""
    pairs: list[Pair] = []
    by_sweep: dict[str, list[ScoredRun]] = {}
    for run in runs:
        by_sweep.setdefault(run.sweep, []).append(run)
    for members in by_sweep.values():
        for anchor in members:
            pairs += [_pair("in-sweep", t, anchor) for t in members if t is not anchor and t.series == anchor.series]
    estimation: list[Pair] = []
    for members in series_of(runs).values():
        scales = sorted({r.num_gpus for r in members})
        if len(scales) < 2:
            continue
        smallest = [r for r in members if r.num_gpus == scales[0]]
        for target in (r for r in members if r.num_gpus > scales[0]):
            pairs += [_pair("restore", target, anchor) for anchor in smallest]
            estimation += [_pair("scale-out", target, a) for a in members
                           if scales[0] < a.num_gpus < target.num_gpus]
    return pairs, estimation


def series_of(runs: Sequence[ScoredRun]) -> dict[tuple[str, ...], list[ScoredRun]]:
    """Runs grouped by series (one job at any layout and scale)."""
    out: dict[tuple[str, ...], list[ScoredRun]] = {}
    for run in runs:
        out.setdefault(run.series, []).append(run)
    return out


def _anchor_choices(pairs: Iterable[Pair]) -> dict[tuple[str, str], list[Pair]]:
    """The pairs grouped by (sweep, anchor label): one anchor's choice among its sweep's layouts, kept only where the
    anchor and every target share one metric (a ranking compares like with like)."""
    groups: dict[tuple[str, str], list[Pair]] = {}
    for p in pairs:
        groups.setdefault((p.target.sweep, p.anchor.label), []).append(p)
    return {key: members for key, members in groups.items()
            if len({members[0].anchor.metric, *(p.target.metric for p in members)}) == 1}


def top1_outcomes(pairs: Sequence[Pair]) -> list[tuple[str, bool, bool, float, float]]:
    """(sweep, anchored hit, unanchored hit, anchored regret, unanchored regret) of every (sweep, anchor) choice whose
    runs share one metric: the anchored projections of the sweep's runs pick a best layout as ``search --anchor``
    ranks candidates (tools/search.py: every layout, the anchor's own included, at its anchored projection,
    :attr:`Pair.anchor_self`); regret is the throughput the pick loses against the measured best (0: the best).

    The anchor's own measured value is not what it competes with: against the others' shrunk corrections it would
    favour the anchor whenever it was underestimated (and the others whenever it was overestimated), an artefact
    of the shrinkage, not evidence that the error differs by layout."""
    out = []
    for (sweep, _), members in _anchor_choices(p for p in pairs if p.kind == "in-sweep").items():
        anchor = members[0].anchor
        same = [anchor, *(p.target for p in members)]
        values = {anchor.label: throughput(anchor.metric, members[0].anchor_self)}
        values |= {p.target.label: throughput(p.target.metric, p.anchored) for p in members}
        best = max(throughput(r.metric, r.measured) for r in same)
        pick = max(same, key=lambda r: values[r.label])
        pick_un = max(same, key=lambda r: throughput(r.metric, r.projected))
        got, got_un = throughput(pick.metric, pick.measured), throughput(pick_un.metric, pick_un.measured)
        out.append((sweep, got == best, got_un == best, 1 - got / best, 1 - got_un / best))
    return out


def one_factor_floor(pairs: Sequence[Pair]) -> float | None:
    """MAPE of the pairs' targets corrected by the best single factor of their sweep chosen in hindsight (the median
    of the sweep's log errors, measured / unanchored step time): what no correction shared by a sweep's layouts can
    beat, however its anchor and weights are chosen; the rest of the error is layout-specific (physics terms)."""
    logs: dict[str, list[float]] = {}
    for p in {p.target.label: p for p in pairs}.values():
        logs.setdefault(p.target.sweep, []).append(p.target_residual)
    medians = {sweep: statistics.median(values) for sweep, values in logs.items()}
    return _mean(abs(math.exp(medians[p.target.sweep] - p.target_residual) - 1.0) for p in pairs)


def top1_misses(pairs: Sequence[Pair]) -> list[dict[str, Any]]:
    """Every (sweep, anchor) choice whose anchored pick is not the measured best: the two layouts' measured and
    anchored throughputs, their measured gap, and whether their anchored 80% bands overlap (a near-tie the
    projection cannot settle: what ``tune``'s benchmark plan proposes to measure)."""
    out = []
    for (sweep, anchor_label), members in sorted(_anchor_choices(pairs).items()):
        anchor = members[0].anchor
        rows = {anchor.label: (anchor, members[0].anchor_self, members[0].band)}   # same scale: its cell's band
        rows |= {p.target.label: (p.target, p.anchored, p.band) for p in members}
        value = {k: throughput(r.metric, v) for k, (r, v, _) in rows.items()}
        measured = {k: throughput(r.metric, r.measured) for k, (r, _, _) in rows.items()}
        pick, best = max(value, key=value.__getitem__), max(measured, key=measured.__getitem__)
        if measured[pick] == measured[best]:
            continue
        bands = {k: (value[k] * b[0], value[k] * b[1]) for k, (_, _, b) in rows.items()}
        overlap = bands[best][1] >= bands[pick][0] and bands[pick][1] >= bands[best][0]
        out.append({"sweep": sweep, "anchor": anchor_label, "pick": pick, "best": best,
                    "measured_pick": measured[pick], "measured_best": measured[best],
                    "anchored_pick": value[pick], "anchored_best": value[best],
                    "measured_gap": 1.0 - measured[pick] / measured[best],
                    "anchored_gap": value[pick] / value[best] - 1.0, "bands_overlap": overlap})
    return out


def evaluate_setting(setting: str, runs: list[ScoredRun], table: AnchoredBandTable | None = None) -> SettingEval:
    """Both evaluations of one setting's runs: pairs with fully trusted anchors, the shared-error weights of each
    source estimated on the other sources' pairs (leave-one-source-out), the pairs re-solved with them, then
    bands (``table``, else leave-one-source-out tables of the anchored residuals) and top-1."""
    full, estimation = _full_pairs(runs)
    result = SettingEval(setting=setting, runs=runs)
    result.weights = shared_weights(full + estimation)
    pairs: list[Pair] = []
    for file in sorted({p.target.file for p in full}):
        weights = shared_weights([p for p in full + estimation if p.target.file != file])
        result.weights_by_source[file] = {g: w.weight for g, w in weights.items()}
        pairs += [_reweighted(p, weights) for p in full if p.target.file == file]
    result.pairs = pairs
    result.top1 = top1_outcomes(pairs)
    if table is None:
        result.band_spreads = choose_spreads(pairs)
    else:
        assign_bands(pairs, table)
    return result


def evaluate_anchored(paths: Sequence[Path | str], options: EvalOptions | None = None,
                      table: AnchoredBandTable | None = None, settings: Sequence[str] = SETTINGS,
                      progress: Callable[[str], None] | None = None) -> AnchorEval:
    """Both anchored evaluations over the sweep files under ``paths``, in each of ``settings``.

    ``table``: the anchored band table to score coverage with; None: leave-one-source-out tables built
    from this evaluation's own pairs (each source's bands come from the other sources only).
    """
    options = options or EvalOptions()
    loaded = load_sweep_files(list(paths))
    sweeps = select_sweeps(loaded.sweeps, options)
    result = AnchorEval()
    for setting in settings:
        if setting == "held-out":
            runs = held_out_runs(loaded.sweeps, sweeps, progress)
        elif setting == "in-sample":
            runs = scored_runs(sweeps, ProfileSource(options.profile))
        else:
            raise ProjtuneError(f"unknown anchored-evaluation setting '{setting}' (use {', '.join(SETTINGS)})")
        result.settings[setting] = evaluate_setting(setting, runs, table)
    series = series_of(result.main.runs)
    result.series = len(series)
    result.scaling_series = sum(1 for m in series.values() if len({r.num_gpus for r in m}) >= 2)
    return result
