"""`projtune calibrate`: a fitted profile loads and records its runs; cross-validation reports per source.

Runs come from two small development files (korthikanti-2022.yaml: Korthikanti et al. 2022
Table 5, 8 complete A100 runs; megatron-lm.yaml: Megatron-LM README tables, 3 runs; one test marks 2 of them
as documented record issues, never fitted on), so the fits here take seconds. Only the harness is
checked, not how good the fit is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evals import calibrate
from evals.fit import collect_fit_runs, pristine_framework, pristine_profile, projected_value
from evals.sweep_file import load_sweep_files
from projection.device_profile import FITTABLE, DeviceProfile, load_profile
from projtune.cli import app

runner = CliRunner()
DATA = Path(__file__).resolve().parents[2] / "evals" / "data"
KORTHIKANTI = DATA / "korthikanti-2022.yaml"
MEGATRON_LM = DATA / "megatron-lm.yaml"


@pytest.fixture(autouse=True)
def _fewer_iterations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calibrate, "MAX_NFEV", 3)


def test_parameter_bounds_follow_profile_fields() -> None:
    for name in FITTABLE:
        low, high = calibrate.parameter_bounds(name)
        default = DeviceProfile.model_fields[name].default
        assert low <= default <= high
    # physical: no GEMM above the best public max-achievable fraction (A100 0.87), no collective at line rate
    assert calibrate.parameter_bounds("gemm_efficiency")[1] <= 0.87
    assert calibrate.parameter_bounds("scale_up_efficiency")[1] <= 0.9
    assert calibrate.parameter_bounds("scale_out_efficiency")[1] <= 0.9
    low, high = calibrate.parameter_bounds("kernel_overhead_s")
    assert 0 < low < high < 1e-4  # seconds: a kernel costs between 1 and 30 microseconds


@pytest.mark.parametrize("group", ["h100-sxm", "hopper", "b200", "gb300", "mi300x", "mi325x", "mi355x", "cdna4",
                                   "a100-80gb"])
def test_priors_sit_inside_their_bounds_and_stay_physical(group: str) -> None:
    from projection.profile_priors import parameter_bounds, prior_profile

    prior = prior_profile(group)
    for name in FITTABLE:
        low, high = parameter_bounds(group, name)
        assert low <= getattr(prior, name) <= high, name
    assert prior.fp4_gemm_efficiency <= prior.low_precision_gemm_efficiency <= prior.gemm_efficiency


def _shipped_profiles() -> list[Path]:
    return sorted((Path(__file__).resolve().parents[2] / "projection" / "catalog" / "profiles").glob("*.yaml"))


@pytest.mark.parametrize("path", _shipped_profiles(), ids=lambda p: p.stem)
def test_shipped_profiles_are_inside_their_physical_bounds(path: Path) -> None:
    from projection.profile_priors import parameter_bounds

    profile = load_profile(path)
    for name in FITTABLE:
        low, high = parameter_bounds(profile.hardware_id, name)
        assert low * (1 - 1e-6) <= getattr(profile, name) <= high * (1 + 1e-6), f"{path.stem}: {name}"
    # a narrower format never reaches a higher share of its own peak
    assert profile.fp4_gemm_efficiency <= profile.low_precision_gemm_efficiency <= profile.gemm_efficiency
    assert profile.fitted_on or "not fitted" in profile.fit_note or not profile.fit_note


def test_same_silicon_ships_one_set_of_parameters() -> None:
    from projection.profile_priors import SILICON, member_profile

    folder = _shipped_profiles()[0].parent
    for group, members in SILICON.items():
        if not (folder / f"{group}.yaml").is_file():
            continue
        shared = load_profile(folder / f"{group}.yaml")
        for member in members:
            if (folder / f"{member}.yaml").is_file():
                expected = member_profile(shared, member)
                got = load_profile(folder / f"{member}.yaml")
                for name in FITTABLE:
                    assert getattr(got, name) == pytest.approx(getattr(expected, name)), (member, name)


def test_a_group_fits_only_parameters_its_runs_exercise() -> None:
    from evals.fit import MIN_RUNS_PER_PARAM, fitted_parameters

    runs = collect_fit_runs(load_sweep_files([KORTHIKANTI]).sweeps)  # 8 dense A100 runs, bf16/fp16, TP > 1
    names = fitted_parameters(runs)
    assert len(names) <= len(runs) // MIN_RUNS_PER_PARAM
    assert not {"moe_efficiency", "moe_layer_overhead_s", "ep_overlap_fraction", "low_precision_gemm_efficiency",
                "fp4_gemm_efficiency"} & set(names)
    assert names[0] == "gemm_efficiency"


def test_cross_validation_reports_interval_coverage(tmp_path: Path) -> None:
    bands = tmp_path / "bands.yaml"
    cv = calibrate.cross_validate(load_sweep_files([KORTHIKANTI, MEGATRON_LM]).sweeps, bands_out=bands)
    overall = cv["overall"]
    assert 0 <= overall["interval_coverage_in_sample"] <= 1
    assert overall["interval_coverage_cv"] is not None
    import yaml

    from projection.uncertainty import BandTable

    table = BandTable.model_validate(yaml.safe_load(bands.read_text()))
    assert table.default.runs == overall["runs"]


def test_fit_runs_are_complete_throughput_runs() -> None:
    runs, left_out = calibrate.fit_runs(load_sweep_files([KORTHIKANTI]).sweeps, gpu="a100-80gb")
    assert len(runs) >= calibrate.MIN_FIT_RUNS and not left_out
    assert all(r.run.complete and r.metric == "iteration_time_s" for r in runs)


def test_calibrate_writes_a_loadable_profile(tmp_path: Path) -> None:
    out = tmp_path / "a100-80gb.yaml"
    result = runner.invoke(app, ["calibrate", str(KORTHIKANTI), "--gpu", "a100-80gb", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    profile = load_profile(out)
    assert profile.hardware_id == "a100-80gb"
    assert profile.fitted_on and all(name.startswith("korthikanti-2022-") for name in profile.fitted_on)
    assert "MAPE" in profile.fit_note and f"{summary['runs']} complete runs" in profile.fit_note
    assert summary["mape_after"] <= summary["mape_before"]


def test_calibrate_without_runs_is_one_line_error() -> None:
    result = runner.invoke(app, ["calibrate", str(KORTHIKANTI), "--gpu", "mi300x"])
    assert result.exit_code == 2 and "no complete scored runs of mi300x" in result.output


def test_cross_validate_reports_each_source() -> None:
    result = runner.invoke(app, ["calibrate", "--cross-validate", str(KORTHIKANTI), str(MEGATRON_LM), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    sources = {Path(row["source"]).name: row for row in data["sources"]}
    assert set(sources) == {"korthikanti-2022.yaml", "megatron-lm.yaml"}
    for row in sources.values():
        assert row["runs"] > 0 and row["mape_cv"] is not None and row["mape_default"] is not None
    by_vendor = data["overall"]["by_vendor"]
    assert set(by_vendor) == {"nvidia"} and by_vendor["nvidia"]["runs"] == data["overall"]["runs"]
    assert abs(by_vendor["nvidia"]["mape_cv"] - data["overall"]["mape_cv"]) < 1e-12
    # Each file holds the only runs of its family here: no fold trains on the held-out family, so its
    # runs are scored with the built-in defaults - never with the shipped profiles, which were fitted
    # on every source (that would leak the held-out runs into their own score).
    for name, row in sources.items():
        assert set(row["fitted"]).isdisjoint({"a100-80gb", "ampere"} if name.startswith("korth") else {"h100-sxm"})
    held_out = collect_fit_runs(load_sweep_files([KORTHIKANTI]).sweeps)
    expected = sum(abs(projected_value(r, pristine_profile(r.device_group), pristine_framework(r.framework))
                       / r.measured - 1) for r in held_out) / len(held_out)
    assert sources["korthikanti-2022.yaml"]["mape_cv"] == pytest.approx(expected)
    assert data["overall"]["runs"] == sum(row["runs"] for row in sources.values())
    table = runner.invoke(app, ["calibrate", "--cross-validate", str(KORTHIKANTI), str(MEGATRON_LM)])
    assert "korthikanti-2022" in table.stdout and "overall" in table.stdout


def test_cross_validate_fits_on_the_other_source(tmp_path: Path) -> None:
    # Split Korthikanti's A100 sweeps into two files, so each fold fits on the other one.
    text = KORTHIKANTI.read_text()
    head, _, body = text.partition("sweeps:\n")
    sweeps = body.split("\n- name: ")
    first = head + "sweeps:\n" + "\n- name: ".join(sweeps[:2]) + "\n"
    second = head + "sweeps:\n- name: " + "\n- name: ".join(sweeps[2:])
    (tmp_path / "a.yaml").write_text(first)
    (tmp_path / "b.yaml").write_text(second)
    cv = calibrate.cross_validate(load_sweep_files([tmp_path]).sweeps)
    fitted = [row.fitted for row in cv["sources"]]
    assert any(f.get("ampere", 0) + f.get("a100-80gb", 0) >= calibrate.MIN_FIT_RUNS for f in fitted)


def test_calibrate_all_writes_family_files(tmp_path: Path) -> None:
    result = runner.invoke(app, ["calibrate", "--all", str(KORTHIKANTI), "--out-dir", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["a100-80gb"]["runs"] >= calibrate.MIN_FIT_RUNS
    assert load_profile(tmp_path / "a100-80gb.yaml").fitted_on
    assert load_profile(tmp_path / "ampere.yaml").hardware_id == "ampere"  # family fallback


def test_documented_record_issues_name_scored_runs_and_checks_entries() -> None:
    import re

    runs = {(r.sweep.sweep.name, r.run.index) for r in collect_fit_runs(load_sweep_files([DATA]).sweeps)}
    entries = set(re.findall(r"^### (\d+)", (DATA / "CHECKS.md").read_text(), flags=re.M))
    for key, why in calibrate.DOCUMENTED_RECORD_ISSUES.items():
        assert key in runs, key
        entry = re.match(r"CHECKS\.md (\d+): ", why)
        assert entry and entry.group(1) in entries, why


def test_cross_validation_reports_what_each_fold_fitted(monkeypatch: pytest.MonkeyPatch) -> None:
    from evals.fit import MIN_RUNS_PER_PARAM

    for key in (("megatron-lm-llama3-8b-h100-sxm-8g-gbs128-s8k", 0),
                ("megatron-lm-llama3.1-405b-h100-sxm-1024g-gbs512-s8k", 0)):
        monkeypatch.setitem(calibrate.DOCUMENTED_RECORD_ISSUES, key, "CHECKS.md 16: plain DDP, no recompute (test)")

    notes: list[str] = []
    cv = calibrate.cross_validate(load_sweep_files([KORTHIKANTI, MEGATRON_LM]).sweeps, progress=notes.append)
    for row in cv["sources"]:
        assert row.fitted_parameters, row.source
        for group, names in row.fitted_parameters.items():
            assert group.startswith("framework:") or len(names) <= row.fitted[group] // MIN_RUNS_PER_PARAM
    assert any(note.startswith("held out ") and " runs of " in note for note in notes)
    # Megatron-LM's 8B and 405B rows marked as records that cannot describe the run: out of the described figure
    assert cv["overall"]["runs_described"] == cv["overall"]["runs"] - 2
    assert sum(row.documented_runs for row in cv["sources"]) == 2
    assert sum(row.runs_scored for row in cv["sources"]) == cv["overall"]["runs"]   # the pooled figure's runs
    # ... and no fold fits on them (evals.record_issues.fit_evidence), which the progress says
    assert cv["overall"]["runs_left_out_of_fits"] == 2
    assert any("left 2 runs out of the fit" in note and "2 (entry 16)" in note for note in notes)
    korthikanti = next(row for row in cv["sources"] if row.source.endswith("korthikanti-2022.yaml"))
    assert korthikanti.fitted == {"hopper": 1}   # Megatron-LM's one described run (too few for an id group)


def test_a_power_capped_member_runs_the_shared_profile_slower() -> None:
    from projection.profile_priors import MEMBER_EFFICIENCY, member_profile, prior_profile

    shared = prior_profile("h100-sxm")
    capped = member_profile(shared, "h100-96gb-500w")
    assert MEMBER_EFFICIENCY["h100-96gb-500w"] < 1
    assert capped.gemm_efficiency == pytest.approx(shared.gemm_efficiency * MEMBER_EFFICIENCY["h100-96gb-500w"])
    assert capped.attention_efficiency < shared.attention_efficiency
    assert capped.scale_up_efficiency == shared.scale_up_efficiency  # the cap slows the SMs, not NVLink
    assert capped.scale_out_efficiency == shared.scale_out_efficiency
    assert member_profile(shared, "h800").gemm_efficiency == shared.gemm_efficiency


def test_a_framework_alone_on_its_gpus_is_not_fitted() -> None:
    from evals.fit import fitted_frameworks

    maxtext = collect_fit_runs(load_sweep_files([DATA / "maxtext-mi355x-deepseek-v3.yaml", KORTHIKANTI]).sweeps)
    assert {r.framework for r in maxtext} >= {"jax", "megatron"}
    assert "jax" not in fitted_frameworks(maxtext)  # MI355X ran MaxText only: its multipliers are the device's
    titan = collect_fit_runs(load_sweep_files([DATA / "torchtitan.yaml", KORTHIKANTI]).sweeps)
    assert "torchtitan" in fitted_frameworks(titan)  # A100 ran both torchtitan and Megatron-core


def test_a_device_is_fitted_on_runs_whose_framework_is_not() -> None:
    """A device group's parameters come from Megatron-core's runs (or a framework alone on it), never from runs
    whose framework multipliers are fitted at the same time."""
    from evals.fit import device_fit_runs, fitted_frameworks, fitted_parameters

    other = collect_fit_runs(load_sweep_files([DATA / "torchtitan.yaml", DATA / "narayanan-sc21.yaml"]).sweeps)
    multiplied = fitted_frameworks(other)
    assert {"torchtitan", "deepspeed"} <= set(multiplied)
    assert any(r.device_group == "a100-80gb" for r in other)
    assert device_fit_runs(other, "a100-80gb", multiplied) == []
    assert fitted_parameters(device_fit_runs(other, "a100-80gb", multiplied)) == ()  # A100 keeps its prior
    with_megatron = collect_fit_runs(load_sweep_files([DATA / "torchtitan.yaml", DATA / "narayanan-sc21.yaml",
                                                       KORTHIKANTI]).sweeps)
    anchors = device_fit_runs(with_megatron, "a100-80gb", fitted_frameworks(with_megatron))
    assert anchors and {r.framework for r in anchors} == {"megatron"}
    assert "gemm_efficiency" in fitted_parameters(anchors)


def test_calibrate_refuses_a_partial_set_of_files(tmp_path) -> None:
    """A sweep file that does not load stops the fit (no profiles written from part of the data)."""
    out = tmp_path / "profiles"
    result = runner.invoke(app, ["calibrate", "--all", str(KORTHIKANTI), str(tmp_path / "missing.yaml"),
                                 "--out-dir", str(out)])
    assert result.exit_code == 2
    assert "did not load, so nothing was fitted" in result.output
    assert not out.exists()


def test_calibrate_refuses_an_empty_folder(tmp_path) -> None:
    result = runner.invoke(app, ["calibrate", "--cross-validate", str(tmp_path)])
    assert result.exit_code == 2
    assert f"{tmp_path}: a folder without sweep files (*.yaml / *.yml)" in result.output


def test_hold_out_runs_only_the_named_folds_with_the_same_figures() -> None:
    sweeps = load_sweep_files([KORTHIKANTI, MEGATRON_LM]).sweeps
    full = {Path(r.source).name: r.mape_cv for r in calibrate.cross_validate(sweeps)["sources"]}
    quick = calibrate.cross_validate(sweeps, hold_out=["korthikanti"])
    assert [Path(r.source).name for r in quick["sources"]] == ["korthikanti-2022.yaml"]
    assert quick["sources"][0].mape_cv == pytest.approx(full["korthikanti-2022.yaml"])  # still fitted on the rest
    assert quick["overall"]["partial"] and "interval_coverage_cv" not in quick["overall"]
    with pytest.raises(calibrate.ProjtuneError, match="did you mean 'korthikanti-2022.yaml'"):
        calibrate.cross_validate(sweeps, hold_out=["korthikant1"])
    with pytest.raises(calibrate.ProjtuneError, match="--bands-out needs every source"):
        calibrate.cross_validate(sweeps, hold_out=["korthikanti"], bands_out=Path("unused.yaml"))
    result = runner.invoke(app, ["calibrate", "--cross-validate", str(KORTHIKANTI), str(MEGATRON_LM),
                                 "--hold-out", "megatron-lm"])
    assert result.exit_code == 0, result.output
    assert "these sources" in result.stdout and "measured/projected  megatron-lm-" in result.stdout


def test_every_family_ships_a_profile_so_the_uncited_defaults_are_never_used() -> None:
    from typing import get_args

    from projection.hardware import Family

    folder = Path(__file__).resolve().parents[2] / "projection" / "catalog" / "profiles"
    assert all((folder / f"{family}.yaml").is_file() for family in get_args(Family))


def test_calibrate_all_borrows_what_a_group_cannot_fit_by_the_cross_validation_rule(tmp_path: Path) -> None:
    """An A100 group (Korthikanti: dense runs only) cannot fit moe_efficiency and has no cited prior for it: the shipped
    profile takes the median of the groups that fitted it, as a held-out A100 run does in cross-validation
    (evals.calibrate.borrowed_values), and its fit note says so.  Without any group fitting it, nothing is borrowed."""
    from projection.profile_priors import prior_profile

    sweeps = load_sweep_files([KORTHIKANTI]).sweeps
    alone = calibrate.calibrate_all(sweeps, tmp_path / "alone", framework_dir=tmp_path / "fw")
    a100 = alone["a100-80gb"] if "a100-80gb" in alone else alone["ampere"]
    assert isinstance(a100, calibrate.FitResult)
    assert a100.profile.moe_efficiency == prior_profile("a100-80gb").moe_efficiency and "borrowed" not in \
        a100.profile.fit_note
    lender = prior_profile("b200").model_copy(update={"moe_efficiency": 0.5})
    update = calibrate.borrowed_values("a100-80gb", a100.profile, {"a100-80gb": a100.profile, "b200": lender})
    assert update == {"moe_efficiency": pytest.approx(0.5)}
    note = calibrate.borrowed_note(update, {"a100-80gb": a100.profile, "b200": lender})
    assert "moe_efficiency 0.5 = median of b200" in note


def test_calibrate_all_writes_the_borrowed_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calibrate, "borrowed_values", lambda group, profile, profiles: {"moe_efficiency": 0.5})
    out = calibrate.calibrate_all(load_sweep_files([KORTHIKANTI]).sweeps, tmp_path / "p", framework_dir=tmp_path / "f")
    written = [r for r in out.values() if isinstance(r, calibrate.FitResult)]
    assert written and all(r.profile.moe_efficiency == 0.5 and "borrowed" in r.profile.fit_note for r in written)
    assert all(load_profile(path).moe_efficiency == 0.5 for path in (tmp_path / "p").glob("*.yaml"))
