"""Fit the free parameters of a device profile to measured runs, and cross-validate the fit.

The fit minimises ``sum(rho(log(projected / measured)^2))`` over the throughput of complete
runs (rho = soft_l1) with ``scipy.optimize.least_squares``, over the profile's FITTABLE
parameters only (a handful per GPU or family, never one per workload), within the bounds
of their DeviceProfile fields, starting from the shipped profile. A weak prior,
``PRIOR_WEIGHT * log(p / p_start)`` per parameter, keeps parameters the runs cannot
identify (FP8 GEMMs on a bf16-only family, MoE on dense runs) at their start values.
Parameters that move no residual are not fitted at all.

Cross-validation is leave-one-source-out: each sweep file is one source; for each file, the
families it contains are fitted on the other files' runs and the file's runs are scored.
"""

from __future__ import annotations

import datetime
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evals.eval_run import family_of
from evals.runner import THROUGHPUT_METRICS, project_run
from evals.scoring import throughput
from evals.sweep_file import LoadedRun, LoadedSweep
from projection.device_profile import FITTABLE, DeviceProfile, default_profile, dump_profile
from projection.errors import ProjtuneError
from projection.hardware import load_hardware

MIN_FIT_RUNS = 3
"""Fewest complete scored runs a family or GPU needs to be fitted."""
PRIOR_WEIGHT = 0.1
"""Weight of log(p / p_start) per parameter, against unit-weight log errors of runs."""
MAX_NFEV = 5
"""least_squares iterations budget (each also costs one finite-difference Jacobian)."""
_DIFF_STEP = 1e-2  # relative: the engine is piecewise (tiles, max()), so tiny steps see flat spots

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class FitRun:
    """A complete run with a throughput metric that projects with the start profile."""

    sweep: LoadedSweep
    run: LoadedRun
    metric: str
    measured: float
    gpu: str
    family: str

    @property
    def file(self) -> str:
        """Return the sweep file (the run's source)."""
        return self.sweep.file


@dataclass(frozen=True, slots=True, kw_only=True)
class FitResult:
    """A fitted profile with its error before and after."""

    profile: DeviceProfile
    runs: int
    mape_before: float
    mape_after: float
    fitted: tuple[str, ...]
    """Parameters that were free (those the runs are sensitive to)."""


def fit_runs(sweeps: Sequence[LoadedSweep], *, gpu: str | None = None, family: str | None = None) -> list[FitRun]:
    """Return the complete runs with a throughput metric, of one GPU and/or family, that project."""
    runs = []
    for sweep in sweeps:
        hw = sweep.sweep.cluster.gpu
        fam = family_of(hw)
        if fam is None or (gpu is not None and hw != gpu) or (family is not None and fam != family):
            continue
        for run in sweep.runs:
            if not run.complete or run.metric not in THROUGHPUT_METRICS or run.run is None:
                continue
            item = FitRun(sweep=sweep, run=run, metric=run.metric, gpu=hw, family=fam,
                          measured=getattr(run.run.measured, run.metric))
            if _projected(item, None) is not None:
                runs.append(item)
    return runs


def _projected(item: FitRun, profile: DeviceProfile | None) -> float | None:
    try:
        _, _, metrics = project_run(item.sweep, item.run, profile=profile)
    except (ProjtuneError, ArithmeticError, ValueError):  # an engine failure loses only this run
        return None
    return metrics[item.metric]


def projected_values(profile: DeviceProfile | None, runs: Sequence[FitRun]) -> np.ndarray:
    """Return each run's projected primary metric (nan for a run that fails to project)."""
    return np.array([v if (v := _projected(item, profile)) is not None and v > 0 else math.nan for item in runs])


def log_errors(values: np.ndarray, runs: Sequence[FitRun]) -> np.ndarray:
    """Return log(projected / measured throughput) per run (0 where the projection failed)."""
    out = np.zeros(len(runs))
    for i, (value, item) in enumerate(zip(values, runs, strict=True)):
        if not math.isnan(value):
            out[i] = math.log(throughput(item.metric, value) / throughput(item.metric, item.measured))
    return out


def ape_values(values: np.ndarray, runs: Sequence[FitRun]) -> list[float]:
    """Return |projected - measured| / measured for each run that projected."""
    return [abs(v - item.measured) / item.measured for v, item in zip(values, runs, strict=True) if not math.isnan(v)]


def mape(profile: DeviceProfile, runs: Sequence[FitRun]) -> float:
    """Return the mean absolute percentage error of the runs' primary metric (nan if none projects)."""
    errors = ape_values(projected_values(profile, runs), runs)
    return statistics.fmean(errors) if errors else math.nan


def parameter_bounds(name: str) -> tuple[float, float]:
    """Return (low, high) of a FITTABLE parameter from its DeviceProfile field constraints."""
    low, high = -math.inf, math.inf
    for meta in DeviceProfile.model_fields[name].metadata:
        if getattr(meta, "ge", None) is not None:
            low = float(meta.ge)
        if getattr(meta, "gt", None) is not None:
            low = float(meta.gt) + 1e-3  # strictly above: a zero efficiency is undefined
        if getattr(meta, "le", None) is not None:
            high = float(meta.le)
        if getattr(meta, "lt", None) is not None:
            high = float(meta.lt) - 1e-3
    return low, high


def start_profile(gpu: str | None, family: str | None, runs: Sequence[FitRun]) -> DeviceProfile:
    """Return the shipped profile of the GPU (or of the family's first GPU), renamed to the target."""
    hardware = load_hardware(gpu or runs[0].gpu)
    return default_profile(hardware).model_copy(update={"hardware_id": gpu or family or hardware.id,
                                                        "fitted_on": (), "fit_note": ""})


def fit_profile(runs: Sequence[FitRun], start: DeviceProfile) -> FitResult:
    """Fit the FITTABLE parameters of `start` to the runs (see the module docstring)."""
    from scipy.optimize import least_squares

    if len(runs) < MIN_FIT_RUNS:
        raise ProjtuneError(f"need at least {MIN_FIT_RUNS} complete scored runs to fit, got {len(runs)}")
    base = projected_values(start, runs)
    free = _sensitive(start, runs, base)
    bounds = [parameter_bounds(n) for n in free]
    low, high = [b[0] for b in bounds], [b[1] for b in bounds]
    x0 = np.clip(np.array([getattr(start, n) for n in free], dtype=float), low, high)
    seen: dict[bytes, np.ndarray] = {}

    def residuals(x: np.ndarray) -> np.ndarray:
        values = projected_values(start.model_copy(update=dict(zip(free, x.tolist(), strict=True))), runs)
        seen[x.tobytes()] = values
        prior = PRIOR_WEIGHT * np.log(np.maximum(x, 1e-12) / np.maximum(x0, 1e-12))
        return np.concatenate([log_errors(values, runs), prior])

    fitted, values = start, base
    if free:
        solution = least_squares(residuals, x0, bounds=(low, high), loss="soft_l1", diff_step=_DIFF_STEP,
                                 x_scale=np.maximum(np.abs(x0), 1e-9), max_nfev=MAX_NFEV)
        fitted = start.model_copy(update=dict(zip(free, solution.x.tolist(), strict=True)))
        values = seen[solution.x.tobytes()] if solution.x.tobytes() in seen else projected_values(fitted, runs)
    before = statistics.fmean(ape_values(base, runs))
    after = statistics.fmean(ape_values(values, runs))
    if after > before:  # the robust loss can trade MAPE for fewer outliers; never ship a worse profile
        fitted, after = start, before
    sweeps = tuple(sorted({r.sweep.name for r in runs}))
    note = (f"{datetime.date.today().isoformat()}: projtune calibrate, least_squares soft_l1 on log throughput "
            f"error of {len(runs)} complete runs ({len(sweeps)} sweeps); fitted {', '.join(free) or 'nothing'}; "
            f"MAPE {before:.1%} -> {after:.1%}")
    profile = fitted.model_copy(update={"fitted_on": sweeps, "fit_note": note})
    return FitResult(profile=profile, runs=len(runs), mape_before=before, mape_after=after, fitted=tuple(free))


def _sensitive(start: DeviceProfile, runs: Sequence[FitRun], base: np.ndarray) -> list[str]:
    """Return the FITTABLE parameters that change at least one run's projection."""
    free = []
    for name in FITTABLE:
        value = getattr(start, name)
        low, high = parameter_bounds(name)
        probe = min(max(value * 0.9 if value > 0 else 1e-6, low), high)
        moved = projected_values(start.model_copy(update={name: probe}), runs)
        if np.nanmax(np.abs(moved - base) / base, initial=0.0) > 1e-9:
            free.append(name)
    return free


def write_profile(result: FitResult, path: Path) -> Path:
    """Write a fitted profile as YAML (load it with projection.device_profile.load_profile)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_profile(result.profile), encoding="utf-8")
    return path


def fit_many(jobs: Sequence[tuple[Sequence[FitRun], DeviceProfile]], progress: Progress | None = None
             ) -> list[FitResult]:
    """Run independent fits, in parallel processes when there are several CPUs; results in job order."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor, as_completed

    workers = min(len(jobs), os.cpu_count() or 1)
    if workers <= 1:
        return [fit_profile(runs, start) for runs, start in jobs]
    results: dict[int, FitResult] = {}
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        # Largest first, so one big fit does not start last.
        order = sorted(range(len(jobs)), key=lambda i: -len(jobs[i][0]))
        futures = {pool.submit(fit_profile, *jobs[i]): i for i in order}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if progress:
                progress(f"fitted {len(results)}/{len(jobs)}")
    return [results[i] for i in range(len(jobs))]


def calibrate_all(sweeps: Sequence[LoadedSweep], out_dir: Path,
                  progress: Progress | None = None) -> dict[str, FitResult | str]:
    """Fit every family with at least MIN_FIT_RUNS runs; write `<family>.yaml`; return results or skip reasons."""
    by_family: dict[str, list[FitRun]] = {}
    for item in fit_runs(sweeps):
        by_family.setdefault(item.family, []).append(item)
    results: dict[str, FitResult | str] = {}
    fitted = sorted(f for f, runs in by_family.items() if len(runs) >= MIN_FIT_RUNS)
    families = sorted({f for s in sweeps if (f := family_of(s.sweep.cluster.gpu))})
    for family in families:
        if family not in fitted:
            count = len(by_family.get(family, []))
            results[family] = f"skipped: {count} complete scored runs (need {MIN_FIT_RUNS})"
    jobs = [(by_family[f], start_profile(None, f, by_family[f])) for f in fitted]
    for family, result in zip(fitted, fit_many(jobs, progress), strict=True):
        write_profile(result, out_dir / f"{family}.yaml")
        results[family] = result
    return dict(sorted(results.items()))


@dataclass(slots=True, kw_only=True)
class SourceScore:
    """Held-out error of one source (sweep file) under leave-one-source-out."""

    source: str
    runs: int
    families: list[str]
    mape_default: float | None
    """MAPE with the shipped profiles."""
    mape_cv: float | None
    """MAPE with profiles fitted on the other sources."""
    fitted: dict[str, int] = field(default_factory=dict)
    """Training runs per family fitted for this fold (absent: too few, shipped profile used)."""


def cross_validate(sweeps: Sequence[LoadedSweep], progress: Progress | None = None) -> dict[str, Any]:
    """Return leave-one-source-out errors: {"sources": [SourceScore...], "overall": {...}}."""
    all_runs = fit_runs(sweeps)
    sources = sorted({r.file for r in all_runs})
    folds = []  # (source, family, train, test, start)
    for source in sources:
        for family in sorted({r.family for r in all_runs if r.file == source}):
            train = [r for r in all_runs if r.family == family and r.file != source]
            test = [r for r in all_runs if r.family == family and r.file == source]
            folds.append((source, family, train, test, start_profile(None, family, test)))
    to_fit = [i for i, fold in enumerate(folds) if len(fold[2]) >= MIN_FIT_RUNS]
    if progress:
        progress(f"{len(sources)} sources, {len(to_fit)} fits on {len(all_runs)} runs")
    fitted = dict(zip(to_fit, fit_many([(folds[i][2], folds[i][4]) for i in to_fit], progress), strict=True))
    rows: list[SourceScore] = []
    pooled_default: list[float] = []
    pooled_cv: list[float] = []
    for source in sources:
        row = SourceScore(source=source, runs=0, families=[], mape_default=None, mape_cv=None)
        fold_default: list[float] = []
        fold_cv: list[float] = []
        for i, (fold_source, family, train, test, start) in enumerate(folds):
            if fold_source != source:
                continue
            row.runs += len(test)
            row.families.append(family)
            profile = fitted[i].profile if i in fitted else start
            if i in fitted:
                row.fitted[family] = len(train)
            fold_default += ape_values(projected_values(start, test), test)
            fold_cv += ape_values(projected_values(profile, test), test)
        row.mape_default = statistics.fmean(fold_default) if fold_default else None
        row.mape_cv = statistics.fmean(fold_cv) if fold_cv else None
        pooled_default += fold_default
        pooled_cv += fold_cv
        rows.append(row)
    per_source = [r.mape_cv for r in rows if r.mape_cv is not None]
    overall = {
        "sources": len(rows), "runs": len(pooled_cv),
        "mape_default": statistics.fmean(pooled_default) if pooled_default else None,
        "mape_cv": statistics.fmean(pooled_cv) if pooled_cv else None,
        "mape_cv_source_mean": statistics.fmean(per_source) if per_source else None,
    }
    return {"sources": rows, "overall": overall}
