"""Grouped cross-validation (--group-by) and the band build: folds share fits, widenings come from the data."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evals import band_build
from evals.fit import collect_fit_runs
from evals.grouped_cv import (
    GROUPINGS,
    Record,
    check_groupings,
    make_folds,
    source_families,
    source_family,
)
from evals.sweep_file import load_sweep_files
from projection.errors import ProjtuneError
from projection.evidence import Novelty
from projection.hardware import load_hardware
from projection.uncertainty import band_for, build_table
from projtune.cli import app

DATA = Path(__file__).resolve().parents[2] / "evals" / "data"
KORTHIKANTI = DATA / "korthikanti-2022.yaml"
MEGATRON_LM = DATA / "megatron-lm.yaml"


def test_source_families_merge_releases_and_name_real_files() -> None:
    assert source_family("evals/data/megatron-bridge-25.09.yaml") == source_family("x/megatron-bridge-26.02.01.yaml")
    assert source_family("evals/data/nemo-24.07.yaml") == "nemo"
    assert source_family("held-out/new-publisher.yaml") == "new-publisher"
    for stem in source_families():
        assert (DATA / f"{stem}.yaml").is_file(), stem


def test_folds_that_train_on_the_same_runs_share_one_fit() -> None:
    runs = collect_fit_runs(load_sweep_files([KORTHIKANTI, MEGATRON_LM]).sweeps)
    folds = make_folds(runs, GROUPINGS)
    by = {(f.grouping, f.group): f for f in folds}
    # one file per family and per GPU family here: those folds are the source folds again
    assert by[("source-family", "megatron-lm")].key == by[("source", "megatron-lm")].key
    assert by[("gpu-family", "ampere")].key == by[("source", "korthikanti-2022")].key
    assert ("framework", "megatron") not in by          # the only framework: nothing left to train on
    assert len({f.key for f in folds}) == 2
    assert [(f.grouping, f.group) for f in folds] == [(f.grouping, f.group) for f in make_folds(runs, GROUPINGS)]
    for fold in folds:
        assert not {id(r) for r in fold.test} & {id(r) for r in fold.train}


def test_a_bad_grouping_is_a_one_line_error() -> None:
    assert check_groupings(["gpu-family", "source"]) == ["source", "gpu-family"]
    with pytest.raises(ProjtuneError, match="did you mean 'gpu-family'"):
        check_groupings(["gpu-famliy"])
    result = CliRunner().invoke(app, ["calibrate", "--cross-validate", str(KORTHIKANTI), "--group-by", "gpus"])
    assert result.exit_code == 2 and "--group-by 'gpus' is not a grouping" in result.output


def test_group_by_reports_per_group_mape_and_band_figures() -> None:
    result = CliRunner().invoke(app, ["calibrate", "--cross-validate", str(KORTHIKANTI), str(MEGATRON_LM),
                                      "--group-by", "gpu-family", "--json"])
    assert result.exit_code == 0, result.output
    grouped = json.loads(result.stdout)["overall"]["grouped"]
    entry = grouped["gpu-family"]
    assert set(entry["per_group"]) == {"ampere", "hopper"}
    assert entry["flagged_runs"] == entry["runs"]      # a held-out GPU family is always novel
    band = entry["shipped_band"]
    assert band["flagged"]["runs"] == entry["runs"] and band["inside"]["runs"] == 0
    assert "gpu-family" in band["by_reason"] and 0 <= band["coverage"] <= 1


def _record(i: int, ratio: float, keys: tuple[str, ...], source: str) -> Record:
    return Record(grouping="source", group=source, source=source, sweep=f"s{i}", run=0, family="hopper",
                  framework="megatron", moe=False, ratio=ratio, ape=abs(1 / ratio - 1),
                  reasons=tuple(Novelty(k, k) for k in keys))


def test_widenings_are_solved_from_how_novel_runs_erred() -> None:
    inside = [_record(i, 0.95 + 0.01 * (i % 10), (), f"in{i % 5}") for i in range(40)]
    novel = [_record(100 + i, 0.6 + 0.04 * (i % 20), ("sequence",), f"new{i % 4}") for i in range(40)]
    records = inside + novel
    table = band_build.base_table(records, 0.8)
    assert table.default.runs == 40                          # cells from runs inside the evidence only
    widenings = {w.key: w for w in band_build.derive_widenings(records, table)}
    assert widenings["sequence"].extra > 0.1 and widenings["sequence"].sources == 4
    low, high = band_for(table, "hopper", "megatron", False)
    covered = [lo <= r.ratio <= hi for r in novel for lo, hi in [band_build.record_band(
        table.model_copy(update={"novelty": tuple(widenings.values())}), r)]]
    assert sum(covered) / len(covered) >= 0.7
    assert sum(low <= r.ratio <= high for r in novel) / len(novel) < 0.5     # the cell alone misses them
    # a key no held-out run carried takes the widening every flagged run needed together
    assert widenings["gpu"].runs == 0 and widenings["gpu"].extra > 0


def test_nested_bands_never_see_their_own_group() -> None:
    records = [_record(i, 0.9 + 0.02 * (i % 10), (), f"src{i % 4}") for i in range(40)]
    pairs = band_build.nested_bands(records, "source", 0.8)
    assert len(pairs) == 40
    only_src0 = [r for r in records if r.source != "src0"]
    expected = build_table([band_build._residual(r) for r in only_src0 if not r.reasons], min_runs=8, min_sources=2,
                           coverage=0.8)
    first = next(b for r, b in pairs if r.source == "src0")
    assert first == pytest.approx(band_for(expected, "hopper", "megatron", False))
    assert all(math.isfinite(lo) and lo <= 1 <= hi for _, (lo, hi) in pairs)


def test_a_held_out_family_borrows_fitted_kernel_efficiencies_only_where_its_prior_is_uncited() -> None:
    """evals.calibrate.BORROWED: a Blackwell run (no cited attention / MoE prior) held out of a fold takes the median of
    the groups that fitted them; groups still at their own prior do not count; a CDNA3 run keeps its cited prior."""
    from dataclasses import replace

    from evals.calibrate import BORROWED, held_out_profile
    from projection.profile_priors import cited_prior, prior_profile

    runs = collect_fit_runs(load_sweep_files([KORTHIKANTI]).sweeps)
    a100 = runs[0]
    blackwell = replace(a100, device_group="b200", specs=replace(a100.specs, hardware=load_hardware("b200")))
    cdna3 = replace(a100, device_group="mi300x", specs=replace(a100.specs, hardware=load_hardware("mi300x")))
    fitted = {"h100-sxm": prior_profile("h100-sxm").model_copy(update={"attention_efficiency": 0.40,
                                                                       "moe_efficiency": 0.60}),
              "mi355x": prior_profile("mi355x").model_copy(update={"attention_efficiency": 0.30,
                                                                   "moe_efficiency": 0.50}),
              "a100-80gb": prior_profile("a100-80gb")}          # fitted nothing of these: left out of the median
    assert set(BORROWED) == {"attention_efficiency", "moe_efficiency"}
    assert not cited_prior("b200", "attention_efficiency") and cited_prior("mi300x", "attention_efficiency")
    borrowed = held_out_profile(blackwell, fitted)
    assert borrowed.attention_efficiency == pytest.approx(0.35)
    assert borrowed.moe_efficiency == pytest.approx(0.55)
    kept = held_out_profile(cdna3, fitted)
    assert kept.attention_efficiency == prior_profile("mi300x").attention_efficiency
    assert kept.moe_efficiency == prior_profile("mi300x").moe_efficiency
    # a group that fitted the parameter itself keeps its own value
    own = {**fitted, "b200": prior_profile("b200").model_copy(update={"attention_efficiency": 0.45})}
    assert held_out_profile(blackwell, own).attention_efficiency == pytest.approx(0.45)
    assert held_out_profile(blackwell, own).moe_efficiency == pytest.approx(0.55)
