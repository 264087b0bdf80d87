"""evals/anchor_folds.py: leave-one-source-out fits of the anchored evaluation, cached per fold (issue 27)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from evals import anchor_folds
from evals.fit import FitResult, collect_fit_runs, pristine_profile
from evals.grouped_cv import make_folds
from evals.sweep_file import load_sweep_files

FILES = ["evals/data/torchtitan.yaml", "evals/data/korthikanti-2022.yaml"]


@pytest.fixture(scope="module")
def runs():
    return collect_fit_runs(load_sweep_files(FILES).sweeps)


def _fake_fit(folds, progress=None):
    return {f.key: FitResult(device_profiles={g: pristine_profile(g) for g in {r.device_group for r in f.train}},
                             framework_profiles={}, runs=len(f.train), mape_before=0.1, mape_after=0.05)
            for f in folds}


def test_a_fold_key_changes_with_its_training_data_and_the_code(runs) -> None:
    fold = make_folds(runs, ["source"])[0]
    key = anchor_folds.fold_key(fold, "code")
    assert anchor_folds.fold_key(fold, "code") == key
    assert anchor_folds.fold_key(fold, "other code") != key
    changed = replace(fold, train=(replace(fold.train[0], measured=fold.train[0].measured * 1.01), *fold.train[1:]))
    assert anchor_folds.fold_key(changed, "code") != key


def test_folds_are_fitted_once_then_read_from_the_cache(runs, tmp_path, monkeypatch) -> None:
    calls = []

    def fit(folds, progress=None):
        calls.append(len(folds))
        return _fake_fit(folds)

    monkeypatch.setattr(anchor_folds, "fit_folds", fit)
    first = anchor_folds.source_folds(runs, cache=tmp_path)
    assert calls == [2] and len(first) == 2 and len(list(tmp_path.glob("*.json"))) == 2
    for held in first:                    # the held-out source is never in its own fold's training runs
        assert {r.source for r in held.fold.test}.isdisjoint({r.source for r in held.fold.train})
    second = anchor_folds.source_folds(runs, cache=tmp_path)
    assert calls == [2]
    assert [h.fit.device_profiles for h in second] == [h.fit.device_profiles for h in first]
    next(tmp_path.glob("*.json")).write_text("{broken")          # a damaged entry is refitted
    anchor_folds.source_folds(runs, cache=tmp_path)
    assert calls == [2, 1]
