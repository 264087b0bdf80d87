"""Grouped cross-validation folds: hold out a source, a source family, a framework or a GPU family.

``projtune calibrate --cross-validate --group-by GROUPING`` holds out, one group at a time, every run of that
group, fits the profiles on the rest (:func:`evals.fit.fit_profiles`, the procedure of ``--all``) and scores
the held-out runs.  Groupings (:data:`GROUPINGS`):

- ``source``: one sweep file (leave-one-source-out).
- ``source-family``: the files of one publisher's table or repository (``evals/source_families.yaml``).
- ``framework``: the runs of one framework key (Megatron-core stacks are one: ``megatron``).
- ``gpu-family``: the runs of one GPU family (hopper, blackwell, cdna3, ...).

A fold is identified by its training runs: two folds of different groupings that train on the same runs
(the source family of a single file, the framework only one file used) share one fit, so every grouping
together fits each distinct training set once.  Folds are ordered by grouping and group name; the fit is
deterministic (``least_squares`` from the prior), so the figures are reproducible.

Each held-out run becomes a :class:`Record`: its ``measured / projected`` throughput and its novelty
reasons against the fold's own evidence (:func:`projection.evidence.novelty` of the training runs' summary).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from evals.fit import FitRun, fit_profiles, pristine_framework, projected_value
from evals.record_issues import fit_evidence
from projection.errors import ProjtuneError
from projection.evidence import Evidence, Novelty, Tagged, build_evidence, job_features, novelty

GROUPINGS: tuple[str, ...] = ("source", "source-family", "framework", "gpu-family")
"""Every grouping ``--group-by`` accepts, in report order."""
FAMILIES_FILE = Path(__file__).with_name("source_families.yaml")

Progress = Callable[[str], None]
RunId = tuple[str, str, int]


@lru_cache(maxsize=1)
def source_families() -> dict[str, str]:
    """File stem -> source family (``evals/source_families.yaml``); a stem not listed is its own family."""
    data = yaml.safe_load(FAMILIES_FILE.read_text())
    return {stem: family for family, entry in data["families"].items() for stem in entry["sources"]}


def source_family(source: str) -> str:
    """The source family of a sweep file path."""
    stem = Path(source).stem
    return source_families().get(stem, stem)


def group_of(item: FitRun, grouping: str) -> str:
    """The group ``item`` belongs to under ``grouping``."""
    if grouping == "source":
        return Path(item.source).stem
    if grouping == "source-family":
        return source_family(item.source)
    if grouping == "framework":
        return item.framework
    if grouping == "gpu-family":
        return item.specs.hardware.family
    raise ProjtuneError(f"unknown grouping '{grouping}': use one of {', '.join(GROUPINGS)}")


def check_groupings(names: Sequence[str]) -> list[str]:
    """``names`` validated and in report order (a bad name is an error naming the allowed ones)."""
    from projection.errors import nearest

    for name in names:
        if name not in GROUPINGS:
            near = nearest(name, list(GROUPINGS))
            raise ProjtuneError(f"--group-by '{name}' is not a grouping" + (f"; did you mean '{near}'?" if near
                                else "") + f" (use one of {', '.join(GROUPINGS)})")
    return [g for g in GROUPINGS if g in names]


def run_id(item: FitRun) -> RunId:
    """A run's identity across folds: (source, sweep name, run index)."""
    return (item.source, item.sweep.sweep.name, item.run.index)


@dataclass(frozen=True, slots=True)
class Fold:
    """One held-out group: its test runs and the training runs (the fit's evidence) of the rest."""

    grouping: str
    group: str
    test: tuple[FitRun, ...]
    train: tuple[FitRun, ...]

    @property
    def key(self) -> frozenset[RunId]:
        """What identifies the fit: its training runs."""
        return frozenset(run_id(r) for r in self.train)


def make_folds(runs: Sequence[FitRun], groupings: Sequence[str],
               only: Callable[[str, str], bool] | None = None) -> list[Fold]:
    """Every fold of ``groupings`` (``only(grouping, group)`` keeps some), ordered by grouping then group.

    A group that holds every fit-evidence run (the one framework of a small data set) has nothing to train
    on and no fold."""
    folds = []
    for grouping in groupings:
        groups = sorted({group_of(r, grouping) for r in runs})
        for group in groups:
            if only is not None and not only(grouping, group):
                continue
            test = tuple(r for r in runs if group_of(r, grouping) == group)
            train = tuple(fit_evidence([r for r in runs if group_of(r, grouping) != group])[0])
            if train:
                folds.append(Fold(grouping=grouping, group=group, test=test, train=train))
    return folds


FIT_EVALUATIONS = 30
"""least_squares function-evaluation budget of one fold's joint fit (as ``evals.calibrate.MAX_NFEV``)."""


def _fit(train: Sequence[FitRun]) -> Any:
    return fit_profiles(train, max_evaluations=FIT_EVALUATIONS)


def fit_folds(folds: Sequence[Fold], progress: Progress | None = None) -> dict[frozenset[RunId], Any]:
    """One fit per distinct training set, on forked worker processes when there are several CPUs."""
    distinct: dict[frozenset[RunId], Fold] = {}
    for fold in folds:
        distinct.setdefault(fold.key, fold)
    if progress and len(distinct) < len(folds):
        progress(f"{len(folds)} folds share {len(distinct)} distinct fits")
    workers = min(len(distinct), os.cpu_count() or 1)
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return {key: _fit(fold.train) for key, fold in distinct.items()}
    fits: dict[frozenset[RunId], Any] = {}
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = {pool.submit(_fit, fold.train): (key, fold) for key, fold in distinct.items()}
        for future in as_completed(futures):
            key, fold = futures[future]
            fits[key] = future.result()
            if progress:
                progress(f"fit {len(fits)}/{len(distinct)} done (held out {fold.grouping} {fold.group})")
    return fits


def fold_evidence(train: Sequence[FitRun]) -> Evidence:
    """The evidence summary of a fold's training runs (what a held-out run's novelty is measured against)."""
    return build_evidence([Tagged(source=r.source, features=features_of(r)) for r in train])


def features_of(item: FitRun) -> Any:
    """A development run's :class:`projection.evidence.JobFeatures`."""
    s = item.specs
    return job_features(s.model, s.cluster, s.config, s.hardware)


@dataclass(frozen=True, slots=True)
class Record:
    """One held-out run of one fold: its cell, ``measured / projected`` throughput and novelty in that fold."""

    grouping: str
    group: str
    source: str
    sweep: str
    run: int
    family: str
    framework: str
    moe: bool
    ratio: float
    ape: float
    reasons: tuple[Novelty, ...]

    @property
    def run_key(self) -> RunId:
        """The run's identity (as :func:`run_id`)."""
        return (self.source, self.sweep, self.run)


def throughput_ratio(item: FitRun, value: float) -> float:
    """measured / projected throughput of a run (time metrics invert)."""
    return value / item.measured if item.metric == "iteration_time_s" else item.measured / value


def score_fold(fold: Fold, fitted: Any, held_out_profile: Callable[[FitRun, dict[str, Any]], Any]) -> list[Record]:
    """The held-out records of one fold under its fit (runs the engine cannot project are left out)."""
    evidence = fold_evidence(fold.train)
    out = []
    for item in fold.test:
        fw = fitted.framework_profiles.get(item.framework) or pristine_framework(item.framework)
        value = projected_value(item, held_out_profile(item, fitted.device_profiles), fw)
        if value is None:
            continue
        out.append(Record(grouping=fold.grouping, group=fold.group, source=item.source, sweep=item.sweep.sweep.name,
                          run=item.run.index, family=item.specs.hardware.family, framework=item.framework,
                          moe=item.specs.model.is_moe, ratio=throughput_ratio(item, value),
                          ape=abs(value / item.measured - 1), reasons=novelty(features_of(item), evidence)))
    return out
