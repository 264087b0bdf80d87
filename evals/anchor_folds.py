"""Leave-one-source-out profiles for the anchored evaluation, fitted once per fold and cached on disk.

The honest setting for anchoring is a job whose source is not in the fitting data (what a user with their own
cluster sees): every run of a sweep file is projected with profiles fitted on the other files only.  The folds
and the fit are ``projtune calibrate --cross-validate``'s (:func:`evals.grouped_cv.make_folds`,
:func:`evals.grouped_cv.fit_folds`, :func:`evals.calibrate.held_out_profile`); a fold's fitted profiles are
cached under :func:`cache_dir` keyed by its training runs (source, sweep, run, measured value) and a
fingerprint of the code and catalogs the fit reads, so a change of physics or data refits and nothing stale
is ever read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.fit import FitResult, FitRun, pristine_framework
from evals.grouped_cv import FIT_EVALUATIONS, Fold, fit_folds, make_folds, run_id
from projection.device_profile import DeviceProfile
from projection.framework_profile import FrameworkProfile

Progress = Callable[[str], None]

_ROOT = Path(__file__).resolve().parent.parent
_FINGERPRINTED = (("projection", "*.py"), ("projection/catalog", "*.yaml"), ("evals", "*.py"))
_NOT_FIT_INPUTS = ("catalog/profiles", "catalog/uncertainty", "projection/anchor.py", "projection/uncertainty.py",
                   "projection/settings.py", "anchor_eval.py", "anchor_folds.py", "anchor_read.py")
"""Files no fitted parameter depends on (the shipped fitted profiles; bands and anchored corrections, which never
enter a projected step time; environment settings: endpoints, folders; this evaluation): left out of the
fingerprint so changing them does not refit."""


def cache_dir() -> Path:
    """``$PROJTUNE_CACHE/anchor-folds`` when set (projection/settings.py), else ``~/.cache/projtune/anchor-folds``."""
    from projection.settings import cache_folder

    return cache_folder("anchor-folds")


def code_fingerprint() -> str:
    """sha256 over the source and catalog files a fit reads (sorted paths and contents)."""
    digest = hashlib.sha256()
    for folder, pattern in _FINGERPRINTED:
        for path in sorted((_ROOT / folder).rglob(pattern)):
            rel = path.relative_to(_ROOT).as_posix()
            if any(part in rel for part in _NOT_FIT_INPUTS) or "__pycache__" in rel:
                continue
            digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def fold_key(fold: Fold, fingerprint: str) -> str:
    """A fold's cache key: its training runs with their measured values, the fit budget and the code."""
    rows = sorted(f"{Path(s).name}|{sw}|{i}|{r.measured!r}|{r.metric}"
                  for r in fold.train for s, sw, i in [run_id(r)])
    text = "\n".join([fingerprint, str(FIT_EVALUATIONS), *rows])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _dump(fit: FitResult) -> dict[str, Any]:
    return {"device": {g: p.model_dump(mode="json") for g, p in fit.device_profiles.items()},
            "framework": {f: p.model_dump(mode="json") for f, p in fit.framework_profiles.items()},
            "runs": fit.runs, "mape_before": fit.mape_before, "mape_after": fit.mape_after}


def _load(data: dict[str, Any]) -> FitResult:
    return FitResult(device_profiles={g: DeviceProfile.model_validate(p) for g, p in data["device"].items()},
                     framework_profiles={f: FrameworkProfile.model_validate(p) for f, p in data["framework"].items()},
                     runs=data["runs"], mape_before=data["mape_before"], mape_after=data["mape_after"])


@dataclass(frozen=True, slots=True)
class HeldOut:
    """One source's fold: its held-out runs and the profiles fitted without it."""

    fold: Fold
    fit: FitResult

    def framework(self, item: FitRun) -> FrameworkProfile:
        """The fold's profile of a run's framework (its documented facts when the fold fitted none)."""
        return self.fit.framework_profiles.get(item.framework) or pristine_framework(item.framework)


def source_folds(runs: Sequence[FitRun], progress: Progress | None = None, *,
                 cache: Path | None = None) -> list[HeldOut]:
    """Every leave-one-source-out fold of ``runs`` with its fit: read from the cache, else fitted (the folds not
    cached, in parallel as ``calibrate --cross-validate`` does) and written to it."""
    folds = make_folds(runs, ["source"])
    folder = cache if cache is not None else cache_dir()
    fingerprint = code_fingerprint()
    keys = {fold.key: fold_key(fold, fingerprint) for fold in folds}
    fits: dict[frozenset[Any], FitResult] = {}
    for fold in folds:
        path = folder / f"{keys[fold.key]}.json"
        if path.is_file():
            try:
                fits[fold.key] = _load(json.loads(path.read_text()))
            except (ValueError, KeyError, TypeError):
                pass       # a damaged entry is refitted and rewritten
    missing = [fold for fold in folds if fold.key not in fits]
    if missing:
        if progress:
            progress(f"fitting {len(missing)} of {len(folds)} leave-one-source-out folds "
                     f"(cached in {folder} afterwards)")
        fitted = fit_folds(missing, progress)
        folder.mkdir(parents=True, exist_ok=True)
        for fold in missing:
            fits[fold.key] = fitted[fold.key]
            tmp = folder / f"{keys[fold.key]}.json.tmp"
            tmp.write_text(json.dumps(_dump(fitted[fold.key])))
            tmp.replace(folder / f"{keys[fold.key]}.json")
    return [HeldOut(fold=fold, fit=fits[fold.key]) for fold in folds]
