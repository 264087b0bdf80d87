"""Calibrate device (and framework) profiles on measured runs, and cross-validate the calibration.

One fitter serves every entry point: :func:`evals.fit.fit_profiles` minimises the soft-L1
loss of ``log(projected / measured)`` over complete runs, jointly for every device group
(hardware id with enough runs, else its family) and every non-reference framework, with a
weak prior towards the shipped values.

- ``projtune calibrate PATH --gpu ID`` (or ``--family NAME``): fit on that GPU's runs only
  and write one device profile.
- ``projtune calibrate --all PATH --out-dir DIR``: fit everything; write ``<group>.yaml`` per
  device group, a ``<family>.yaml`` fallback for each family (the group with most runs), and
  the fitted framework multipliers to ``<DIR>/../frameworks/<name>.yaml``.
- ``projtune calibrate --cross-validate PATH [--group-by source|source-family|framework|gpu-family]``: hold out
  one group at a time (:mod:`evals.grouped_cv`; default leave-one-source-out, below), with MAPE per group and the
  80% band's coverage and width, flagged novel vs inside the evidence (:mod:`evals.band_build`); ``--bands-out``
  runs every grouping and writes the band table and the evidence summary.  Leave-one-source-out: each sweep file is one
  source, fitted on the others (the same procedure as ``--all``: the same runs-per-parameter
  budget, priors and bounds) and scored held out.  Each fold says what it fitted (device group:
  runs, sources, parameters; frameworks), and the summary adds ``mape_cv_described``: the pooled
  figure without the runs whose record cannot describe the run (``DOCUMENTED_RECORD_ISSUES``, each
  with its ``evals/data/CHECKS.md`` entry).

Every fit learns from :func:`evals.record_issues.fit_evidence`: the runs whose records describe them.  A run
with a documented record issue is scored like every other (eval, held-out and pooled figures) but never
fitted on, so a setting its record lacks is not absorbed into the parameters other runs share.
"""

from __future__ import annotations

import datetime
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from evals.band_build import choose_spread, grouped_summary, record_band, table_for
from evals.fit import (
    BOUNDS,
    FRAMEWORK_PARAMS,
    MIN_RUNS_PER_ID,
    MIN_RUNS_PER_PARAM,
    REFERENCE_FRAMEWORK,
    FitRun,
    collect_fit_runs,
    device_fit_runs,
    fit_profiles,
    fitted_frameworks,
    fitted_parameters,
    pristine_framework,
    pristine_profile,
    projected_value,
)
from evals.grouped_cv import (
    FIT_EVALUATIONS,
    GROUPINGS,
    Fold,
    Record,
    check_groupings,
    fit_folds,
    fold_evidence,
    make_folds,
    run_id,
    score_fold,
)
from evals.record_issues import DOCUMENTED_RECORD_ISSUES, checks_entry, documented_issue, fit_evidence, left_out_text
from evals.sweep_file import LoadedSweep
from projection.errors import nearest
from projection.device_profile import FITTABLE, DeviceProfile, default_profile, dump_profile
from projection.errors import ProjtuneError
from projection.framework import framework_profile
from projection.framework_profile import FrameworkProfile
from projection.profile_priors import (cited_prior, family_of, member_profile, physical, silicon_group,
                                      silicon_members)
from projection.profile_priors import parameter_bounds as profile_bounds
from projection.evidence import evidence_path_for, write_evidence
from projection.uncertainty import band_table, write_table

MIN_FIT_RUNS = 3
"""Fewest complete scored runs a GPU or family needs to be fitted."""
MAX_NFEV = FIT_EVALUATIONS
"""least_squares function-evaluation budget of one joint fit (every fit and fold shares it)."""

Progress = Callable[[str], None]

__all__ = ["DOCUMENTED_RECORD_ISSUES", "FITTABLE", "FitResult", "FitRun", "MIN_FIT_RUNS", "calibrate_all",
           "cross_validate", "documented_issue", "fit_profile", "fit_runs", "parameter_bounds", "start_profile",
           "write_profile"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FitResult:
    """A fitted device profile with its error before and after."""

    profile: DeviceProfile
    runs: int
    mape_before: float
    mape_after: float
    fitted: tuple[str, ...]


def parameter_bounds(name: str) -> tuple[float, float]:
    """Return the (low, high) bounds a fitted parameter is kept within."""
    return BOUNDS[name]


def fit_runs(sweeps: Sequence[LoadedSweep], *, gpu: str | None = None,
             family: str | None = None) -> tuple[list[FitRun], list[FitRun]]:
    """Complete throughput runs of one GPU and/or family (all when both are None), split into the fit's
    evidence and the runs left out of it (documented record issues, :func:`evals.record_issues.fit_evidence`)."""
    return fit_evidence([r for r in collect_fit_runs(sweeps)
                         if (gpu is None or r.specs.hardware.id == gpu)
                         and (family is None or r.specs.hardware.family == family)])


def start_profile(gpu: str | None, family: str | None, runs: Sequence[FitRun]) -> DeviceProfile:
    """The built-in profile the fit starts from, named for the target GPU or family."""
    return pristine_profile(gpu or family or runs[0].specs.hardware.id)


def _note(runs: Sequence[FitRun], before: float, after: float) -> str:
    sweeps = {r.sweep.name for r in runs}
    return (f"{datetime.date.today().isoformat()}: projtune calibrate (evals.fit joint least_squares, soft_l1 on "
            f"log error) on {len(runs)} complete runs ({len(sweeps)} sweeps); MAPE {before:.1%} -> {after:.1%}")


def fit_profile(runs: Sequence[FitRun], start: DeviceProfile, *, max_evaluations: int | None = None) -> FitResult:
    """Fit one device profile on ``runs`` (all treated as one device group)."""
    if len(runs) < MIN_FIT_RUNS:
        raise ProjtuneError(f"need at least {MIN_FIT_RUNS} complete scored runs to fit, got {len(runs)}")
    group = [replace(r, device_group=start.hardware_id) for r in runs]
    result = fit_profiles(group, max_evaluations=max_evaluations or MAX_NFEV, start={start.hardware_id: start})
    fitted, after = result.device_profiles[start.hardware_id], result.mape_after
    if after > result.mape_before:  # the robust loss can trade MAPE for fewer outliers: never ship worse
        fitted, after = start, result.mape_before
    profile = fitted.model_copy(update={"fitted_on": tuple(sorted({r.sweep.name for r in runs})),
                                        "fit_note": _note(runs, result.mape_before, after)})
    return FitResult(profile=profile, runs=len(runs), mape_before=result.mape_before, mape_after=after,
                     fitted=FITTABLE)


def write_profile(result: FitResult, path: Path) -> Path:
    """Write a fitted profile as YAML (load it with projection.device_profile.load_profile)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_profile(result.profile), encoding="utf-8")
    return path


def _write_framework(profile: FrameworkProfile, folder: Path, note: str, sweeps: Sequence[str]) -> Path:
    path = folder / f"{profile.name}.yaml"
    existing = yaml.safe_load(path.read_text()) if path.is_file() else {}
    header = "".join(line + "\n" for line in path.read_text().splitlines() if line.startswith("#")) \
        if path.is_file() else ""
    data = {**(existing or {}), "name": profile.name, "compute_efficiency": round(profile.compute_efficiency, 4),
            "dp_comm_efficiency": round(profile.dp_comm_efficiency, 4), "fitted_on": list(sweeps), "fit_note": note}
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def calibrate_all(sweeps: Sequence[LoadedSweep], out_dir: Path, progress: Progress | None = None,
                  *, framework_dir: Path | None = None) -> dict[str, FitResult | str]:
    """Fit every device group and framework jointly; write profiles; return results or skip reasons.

    The fit's evidence is :func:`evals.record_issues.fit_evidence` of the complete runs; ``progress`` says
    how many runs it left out and under which CHECKS.md entries.
    """
    runs, left_out = fit_evidence(collect_fit_runs(sweeps))
    families = sorted({r.specs.hardware.family for r in runs})
    if progress:
        progress(f"joint fit on {len(runs)} runs: {len({r.device_group for r in runs})} device groups, "
                 f"frameworks {sorted({r.framework for r in runs})}")
        if left_out:
            progress(left_out_text(left_out))
    result = fit_profiles(runs, max_evaluations=MAX_NFEV)
    if progress:
        progress("fitted " + _fold_text(runs, fold_parameters(runs)))
    out: dict[str, FitResult | str] = {}
    for group, profile in result.device_profiles.items():
        members = [r for r in runs if r.device_group == group]
        before, after = _group_mape(members, None, result), _group_mape(members, profile, result)
        fitted_names = fitted_parameters(members)
        gpus = sorted({r.specs.hardware.id for r in members})
        borrowed = borrowed_values(group, profile, result.device_profiles)
        note = (_note(members, before, after) + f"; GPUs {', '.join(gpus)}; fitted {', '.join(fitted_names)}"
                + borrowed_note(borrowed, result.device_profiles)
                + "; other parameters at the family prior (projection/catalog/priors/priors.yaml)")
        fitted = physical(profile.model_copy(update=borrowed)).model_copy(
            update={"fitted_on": tuple(sorted({r.sweep.name for r in members})), "fit_note": note})
        out[group] = FitResult(profile=fitted, runs=len(members), mape_before=before, mape_after=after,
                               fitted=fitted_names)
        write_profile(out[group], out_dir / f"{group}.yaml")
        for member in silicon_members(group):  # same die: the group's profile under each member's id
            if member != group:
                shared = member_profile(out[group].profile, member)
                write_profile(replace(out[group], profile=shared), out_dir / f"{member}.yaml")
    for family in families:  # family fallback for GPUs without a profile of their own
        if family in out:
            continue
        groups = Counter(r.device_group for r in runs if r.specs.hardware.family == family)
        best = groups.most_common(1)[0][0]
        source = out[best]
        assert isinstance(source, FitResult)
        fallback = FitResult(profile=source.profile.model_copy(update={"hardware_id": family}), runs=source.runs,
                             mape_before=source.mape_before, mape_after=source.mape_after, fitted=FITTABLE)
        write_profile(fallback, out_dir / f"{family}.yaml")
        out[family] = fallback
    frameworks = framework_dir or out_dir.parent / "frameworks"
    fitted_fw = fitted_frameworks(runs)
    for name, profile in result.framework_profiles.items():
        members = sorted({r.sweep.name for r in runs if r.framework == name})
        today = datetime.date.today().isoformat()
        note = (f"{today}: fitted jointly with the device profiles on {len(members)} sweeps" if name in fitted_fw else
                f"{today}: not fitted (multipliers 1.0): its {len(members)} sweeps share no "
                "device group with another framework, so the device profile carries their efficiency "
                "(evals.fit.fitted_frameworks)")
        _write_framework(profile, frameworks, note, members)
    for name in sorted({r.framework for r in left_out} - {r.framework for r in runs} - {REFERENCE_FRAMEWORK}):
        members = sorted({r.sweep.name for r in left_out if r.framework == name})
        note = (f"{datetime.date.today().isoformat()}: not fitted (multipliers 1.0): all {len(members)} of its "
                "development sweeps have a record the fit leaves out (evals.record_issues; CHECKS.md "
                + ", ".join(sorted({str(checks_entry(r)) for r in left_out if r.framework == name}, key=int)) + ")")
        _write_framework(pristine_framework(name), frameworks, note, [])
    for sweep in sweeps:
        gpu = sweep.sweep.cluster.gpu
        if gpu not in out and not any(r.specs.hardware.id == gpu for r in runs):
            out.setdefault(gpu, f"skipped: 0 complete scored runs (need {MIN_FIT_RUNS}); shipped profile kept")
    return dict(sorted(out.items()))


def _group_mape(members: Sequence[FitRun], profile: DeviceProfile | None, result: Any) -> float:
    errors = []
    for item in members:
        fw = result.framework_profiles.get(item.framework) if profile is not None else None
        value = projected_value(item, profile or pristine_profile(item.device_group),
                                fw or pristine_framework(item.framework))
        if value is not None:
            errors.append(abs(value / item.measured - 1))
    return statistics.fmean(errors) if errors else float("nan")


@dataclass(slots=True, kw_only=True)
class SourceScore:
    """Held-out error of one source (sweep file) under leave-one-source-out."""

    source: str
    runs: int
    families: list[str]
    mape_default: float | None
    """MAPE with the shipped profiles (fitted on every source: in-sample)."""
    mape_cv: float | None
    """MAPE with profiles fitted on the other sources."""
    fitted: dict[str, int] = field(default_factory=dict)
    """Training runs per device group fitted for this fold."""
    fitted_parameters: dict[str, list[str]] = field(default_factory=dict)
    """Parameters each device group (and framework) fitted in this fold; the rest stayed at the prior."""
    runs_scored: int = 0
    """Held-out runs with a projection (``runs`` also counts a run whose recorded layout is illegal: unscored)."""
    documented_runs: int = 0
    """Held-out runs whose record cannot describe the run (``DOCUMENTED_RECORD_ISSUES``)."""
    mape_cv_described: float | None = None
    """``mape_cv`` without the documented runs."""


def fold_parameters(train: Sequence[FitRun]) -> dict[str, list[str]]:
    """What a fit on ``train`` fits: each device group's parameters (by runs per parameter) and each
    framework's multipliers (``framework:<name>``) when it has enough runs."""
    fitted = fitted_frameworks(train)
    out = {g: list(fitted_parameters(device_fit_runs(train, g, fitted)))  # as evals.fit.fit_profiles does
           for g in sorted({r.device_group for r in train})}
    for name in sorted({r.framework for r in train} - {REFERENCE_FRAMEWORK}):
        out[f"framework:{name}"] = list(FRAMEWORK_PARAMS) if name in fitted else []
    return out


def _fold_text(train: Sequence[FitRun], parameters: dict[str, list[str]]) -> str:
    """One line saying what each profile of a fold was fitted on."""
    sources: dict[str, set[str]] = {}
    for r in train:
        for key in (r.device_group, f"framework:{r.framework}"):
            sources.setdefault(key, set()).add(Path(r.source).stem)
    runs = Counter(r.device_group for r in train) + Counter(f"framework:{r.framework}" for r in train)
    return "; ".join(f"{key} on {runs[key]} runs of {len(sources.get(key, ()))} sources: "
                     f"{', '.join(names) or 'prior only'}" for key, names in parameters.items())


# Parameters that describe the software stack and the network more than the die: a GPU no fold has
# fitted borrows them (median over the fold's fitted groups) instead of the DeviceProfile defaults.
TRANSFERRED = ("scale_up_efficiency", "scale_out_efficiency", "dp_overlap_fraction", "tp_overlap_fraction",
               "ep_overlap_fraction", "kernel_overhead_s", "moe_layer_overhead_s")
# Kernel efficiencies a held-out run's profile borrows when its family has no cited prior for them in
# projection/catalog/priors/priors.yaml (so its value would be the DeviceProfile default) and its own group did not
# fit them in this fold: the median over the fold's groups that did fit them (value moved off their own prior),
# kept inside the run's family bounds.  Why these two transfer across dies:
# - moe_efficiency is a ratio to the same die's dense GEMM efficiency (projection/workload.py), so the die's
#   throughput cancels; what is left is the grouped GEMM's ragged-tile penalty and the MoE block's extra passes,
#   which the software stack (Megatron-core / Transformer Engine grouped GEMM, XLA ragged dot) sets, as it sets the
#   TRANSFERRED parameters.
# - attention_efficiency: the default 0.55 is no measurement of any NVIDIA die's fused attention forward + backward
#   (FlashAttention-2 reaches 35% of H100's peak, Shah et al. 2024, arXiv 2407.08608, Sec. 1; its A100 forward
#   figure is 73%, Dao 2023); the fitted fused-attention fractions of the development set's dies (H100, B200, B300,
#   A100, MI300X, MI355X, shipped profiles of 2026-12-02: 0.36-0.53) are the evidence there is for a die without
#   its own fit.  A family with a cited prior (CDNA3/CDNA4 kernel measurements) keeps it.
BORROWED = ("moe_efficiency", "attention_efficiency")


def borrowed_values(group: str, profile: DeviceProfile, profiles: dict[str, DeviceProfile]) -> dict[str, float]:
    """The :data:`BORROWED` parameters ``group``'s ``profile`` takes from the other fitted groups: each one that sits at
    an uncited default prior (no family prior in priors.yaml, value still the DeviceProfile default) becomes the
    median of the groups in ``profiles`` that fitted it (moved off their own prior), kept inside ``group``'s family
    bounds.  Empty when nothing is borrowed.  Cross-validation (a held-out run's fold profile) and ``calibrate --all``
    (the shipped profiles) use this one rule, so production projects what the held-out figures measured."""
    update: dict[str, float] = {}
    for name in BORROWED:
        if cited_prior(group, name) or getattr(profile, name) != getattr(pristine_profile(group), name):
            continue
        fitted = [getattr(profiles[g], name) for g in _lenders(name, profiles)]
        if fitted:
            low, high = profile_bounds(group, name)
            update[name] = min(max(statistics.median(fitted), low), high)
    return update


def borrowed_note(update: dict[str, float], profiles: dict[str, DeviceProfile]) -> str:
    """One clause saying which parameters a profile borrowed, their values and from which groups ("" if none)."""
    if not update:
        return ""
    return ("; borrowed (no fit and no cited prior; evals/calibrate.py BORROWED): "
            + ", ".join(f"{name} {value:.3g} = median of {', '.join(_lenders(name, profiles))}"
                        for name, value in update.items()))


def _lenders(name: str, profiles: dict[str, DeviceProfile]) -> list[str]:
    """The groups of ``profiles`` that fitted ``name`` (moved it off their own prior), sorted."""
    return sorted(g for g, p in profiles.items() if getattr(p, name) != getattr(pristine_profile(g), name))


def _borrowed(item: FitRun, profile: DeviceProfile, profiles: dict[str, DeviceProfile]) -> DeviceProfile:
    """``profile`` with the :func:`borrowed_values` of the held-out run's group; unchanged when none."""
    update = borrowed_values(item.device_group, profile, profiles)
    return physical(profile.model_copy(update=update)) if update else profile


def held_out_profile(item: FitRun, profiles: dict[str, DeviceProfile]) -> DeviceProfile:
    """The fold's profile for a held-out run: its group's; else its silicon's; else a fitted one of its
    family; else its family prior with the stack/network parameters transferred from the fitted groups.
    Kernel efficiencies left at an uncited default borrow the fitted groups' median (:data:`BORROWED`)."""
    for group in (item.device_group, silicon_group(item.specs.hardware.id)):
        if group in profiles:
            return _borrowed(item, profiles[group], profiles)
    family = item.specs.hardware.family
    same_family = [p for g, p in profiles.items() if family_of(g) == family]
    if same_family:
        return _borrowed(item, same_family[0], profiles)
    prior = pristine_profile(item.device_group)
    if not profiles:
        return prior
    return _borrowed(item, prior.model_copy(update={name: statistics.median(getattr(p, name) for p in profiles.values())
                                                    for name in TRANSFERRED}), profiles)


def held_out_sources(runs: Sequence[FitRun], hold_out: Sequence[str] | None) -> list[str]:
    """The sources (sweep files) to hold out: all, or those whose file name contains one of ``hold_out``.

    A name that matches no source is an error naming the sources there are (never an empty or partial run).
    """
    sources = sorted({r.source for r in runs})
    if not hold_out:
        return sources
    names = [Path(s).name for s in sources]
    for text in hold_out:
        if not any(text in name for name in names):
            near = nearest(text, names)
            raise ProjtuneError(f"--hold-out '{text}' matches no source" + (f"; did you mean '{near}'?" if near
                                else "") + f" (sources: {', '.join(names)})")
    return [s for s, name in zip(sources, names, strict=True) if any(text in name for text in hold_out)]


def _source_row(fold: Fold, records: Sequence[Record]) -> tuple[SourceScore, list[tuple[str, float]]]:
    """One source's leave-one-source-out row, and (vendor, error) of each of its scored runs."""
    row = SourceScore(source=fold.test[0].source, runs=len(fold.test),
                      families=sorted({r.specs.hardware.family for r in fold.test}), mape_default=None, mape_cv=None,
                      fitted=dict(Counter(r.device_group for r in fold.train)),
                      fitted_parameters=fold_parameters(fold.train))
    default_err = []
    for item in fold.test:
        base = projected_value(item, default_profile(item.specs.hardware), framework_profile(item.framework))
        if base is not None:
            default_err.append(abs(base / item.measured - 1))
    by_key = {run_id(i): i for i in fold.test}
    cv = [(by_key[r.run_key], r.ape) for r in records]
    described = [e for item, e in cv if documented_issue(item) is None]
    row.runs_scored = len(cv)
    row.documented_runs = len(cv) - len(described)
    row.mape_default = statistics.fmean(default_err) if default_err else None
    row.mape_cv = statistics.fmean(e for _, e in cv) if cv else None
    row.mape_cv_described = statistics.fmean(described) if described else None
    return row, [(item.specs.hardware.vendor, e) for item, e in cv]


def _pooled(rows: Sequence[SourceScore], vendor_errors: Sequence[tuple[str, float]],
            records: Sequence[Record], left_out: int, hold_out: bool) -> dict[str, Any]:
    """The leave-one-source-out pooled figures (what ``overall`` reported before grouped folds)."""
    cv = [e for _, e in vendor_errors]
    described = [r.ape for r in records if (r.sweep, r.run) not in DOCUMENTED_RECORD_ISSUES]
    default = [r.mape_default * r.runs_scored for r in rows if r.mape_default is not None]
    per_source = [r.mape_cv for r in rows if r.mape_cv is not None]
    by_vendor: dict[str, list[float]] = {}
    for vendor, err in vendor_errors:
        by_vendor.setdefault(vendor, []).append(err)
    runs_default = sum(r.runs_scored for r in rows if r.mape_default is not None)
    return {
        "sources": len(rows), "runs": len(cv),
        "mape_default": sum(default) / runs_default if runs_default else None,
        "mape_cv": statistics.fmean(cv) if cv else None,
        "median_ape_cv": statistics.median(cv) if cv else None,
        "mape_cv_source_mean": statistics.fmean(per_source) if per_source else None,
        "runs_described": len(described),
        "mape_cv_described": statistics.fmean(described) if described else None,
        "by_vendor": {v: {"runs": len(e), "mape_cv": statistics.fmean(e)} for v, e in sorted(by_vendor.items())},
        "min_runs_per_gpu_profile": MIN_RUNS_PER_ID,
        "min_runs_per_parameter": MIN_RUNS_PER_PARAM,
        "runs_left_out_of_fits": left_out,
        "partial": hold_out,
        "residuals": [{"source": Path(r.source).name, "sweep": r.sweep, "run": r.run, "family": r.family,
                       "framework": r.framework, "moe": r.moe, "measured_over_projected": r.ratio,
                       "novelty": [n.text for n in r.reasons]} for r in records],
    }


def cross_validate(sweeps: Sequence[LoadedSweep], progress: Progress | None = None, *,
                   bands_out: Path | None = None, hold_out: Sequence[str] | None = None,
                   group_by: Sequence[str] = ("source",)) -> dict[str, Any]:
    """Return held-out errors: {"sources": [SourceScore...], "overall": {...}}.

    ``group_by`` names the groupings to hold out (:data:`evals.grouped_cv.GROUPINGS`: source, source-family,
    framework, gpu-family); folds of different groupings that train on the same runs share one fit.
    ``sources`` and the pooled keys of ``overall`` are leave-one-source-out's (when ``source`` is among them);
    ``overall.grouped`` has, per grouping, the pooled and per-group MAPE and the 80% band's coverage and median
    width, flagged novel vs inside the evidence (:func:`evals.band_build.grouped_summary`).  ``bands_out`` runs
    every grouping and writes the band table (cells and novelty widenings, :mod:`evals.band_build`) and, beside
    it, the evidence summary of every fitted run (:mod:`projection.evidence`).  ``hold_out`` (substrings of file
    names) runs only those sources' folds, each still fitted on every other source: a quick check whose pooled
    figures cover those sources only (``overall.partial``; no band table).
    """
    runs = collect_fit_runs(sweeps)
    groupings = check_groupings(group_by or ("source",))
    if bands_out is not None:
        if hold_out:
            raise ProjtuneError("--bands-out needs every source held out: drop --hold-out to write the band table")
        groupings = list(GROUPINGS)
    if hold_out and groupings != ["source"]:
        raise ProjtuneError("--hold-out goes with --group-by source (it names sources to hold out)")
    stems = {Path(s).stem for s in held_out_sources(runs, hold_out)}
    folds = make_folds(runs, groupings, only=lambda grouping, group: grouping != "source" or group in stems)
    left_out = fit_evidence(runs)[1]
    if progress and left_out:
        progress("every fold " + left_out_text(left_out))
    fits = fit_folds(folds, progress)
    rows: list[SourceScore] = []
    vendor_errors: list[tuple[str, float]] = []
    records: list[Record] = []
    for fold in folds:
        scored = score_fold(fold, fits[fold.key], held_out_profile)
        records += scored
        if fold.grouping == "source":
            if progress:
                progress(f"held out {fold.group}: " + _fold_text(fold.train, fold_parameters(fold.train)))
            row, errors = _source_row(fold, scored)
            rows.append(row)
            vendor_errors += errors
    loso = [r for r in records if r.grouping == "source"]
    overall = _pooled(rows, vendor_errors, loso, len(left_out), bool(hold_out))
    full = bool(loso) and not hold_out
    spread, by_spread = choose_spread(records) if full else (None, {})
    overall["grouped"] = grouped_summary(records, spread, band_table())
    if full:
        nested = overall["grouped"]["source"]["nested_band"]
        overall.update({"interval_coverage_cv": nested["coverage"], "interval_spread": spread,
                        "interval_coverage_by_spread": {f"{s:.2f}": c for s, c in by_spread.items()}})
    if bands_out is not None and spread is not None:
        table = table_for(records, spread, written=datetime.date.today().isoformat())
        inside = [lo <= r.ratio <= hi for r in loso for lo, hi in [record_band(table, r)]]
        overall.update({"interval_coverage_in_sample": statistics.fmean(inside) if inside else None,
                        "interval_band_default": [table.default.low, table.default.high],
                        "novelty_widenings": {w.key: w.extra for w in table.novelty}})
        write_table(table, bands_out)
        evidence = fold_evidence(fit_evidence(runs)[0])
        write_evidence(evidence.model_copy(update={"written": table.written}), evidence_path_for(bands_out))
        overall["bands_written"] = str(bands_out)
    return {"sources": rows, "overall": overall}
