"""Runs whose record cannot describe the run are scored but never fitted on (``evals.record_issues``).

Files: megatron-lm.yaml (3 H100 runs; its 8B and 405B rows were documented record issues until CHECKS.md 39 recorded
the NeMo performance-script settings they follow, so the harness tests mark them documented again, ``_documented``)
and narayanan-sc21.yaml (its six DeepSpeed ZeRO-3 rows now record the recompute SC'21 states, CHECKS.md 15, so
they are fit evidence; the unfitted-framework rule is tested by marking them documented).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from evals import calibrate
from evals.fit import collect_fit_runs
from evals.record_issues import DOCUMENTED_RECORD_ISSUES, documented_issue, fit_evidence, left_out_text
from evals.sweep_file import load_sweep_files
from projtune.cli import app

DATA = Path(__file__).resolve().parents[2] / "evals" / "data"
KORTHIKANTI = DATA / "korthikanti-2022.yaml"
MEGATRON_LM = DATA / "megatron-lm.yaml"
NARAYANAN = DATA / "narayanan-sc21.yaml"
runner = CliRunner()


@pytest.fixture(autouse=True)
def _fewer_iterations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calibrate, "MAX_NFEV", 3)


MEGATRON_LM_DOCUMENTED = (("megatron-lm-llama3-8b-h100-sxm-8g-gbs128-s8k", 0),
                          ("megatron-lm-llama3.1-405b-h100-sxm-1024g-gbs512-s8k", 0))


@pytest.fixture
def _documented(monkeypatch: pytest.MonkeyPatch) -> None:
    """Megatron-LM's 8B and 405B rows as if their records could not describe the run (CHECKS.md 16 before 39)."""
    for key in MEGATRON_LM_DOCUMENTED:
        monkeypatch.setitem(DOCUMENTED_RECORD_ISSUES, key, "CHECKS.md 16: plain DDP, no recompute recorded (test)")


@pytest.mark.usefixtures("_documented")
def test_fit_evidence_leaves_out_exactly_the_documented_runs() -> None:
    runs = collect_fit_runs(load_sweep_files([MEGATRON_LM, KORTHIKANTI]).sweeps)
    kept, left_out = fit_evidence(runs)
    assert len(kept) + len(left_out) == len(runs)
    assert {(r.sweep.sweep.name, r.run.index) for r in left_out} == {
        ("megatron-lm-llama3-8b-h100-sxm-8g-gbs128-s8k", 0), ("megatron-lm-llama3.1-405b-h100-sxm-1024g-gbs512-s8k", 0)}
    assert all(documented_issue(r) is None for r in kept)
    assert "left 2 runs out of the fit" in left_out_text(left_out) and "2 (entry 16)" in left_out_text(left_out)
    assert left_out_text(kept[:0]) == ""


def test_every_documented_run_cites_its_checks_entry() -> None:
    for why in DOCUMENTED_RECORD_ISSUES.values():
        assert why.startswith("CHECKS.md ") and ": " in why, why


@pytest.mark.usefixtures("_documented")
def test_calibrate_all_fits_profiles_on_described_runs_only(tmp_path: Path) -> None:
    notes: list[str] = []
    out = calibrate.calibrate_all(load_sweep_files([KORTHIKANTI, MEGATRON_LM]).sweeps, tmp_path / "profiles",
                                  progress=notes.append, framework_dir=tmp_path / "frameworks")
    hopper = out["hopper"]
    assert isinstance(hopper, calibrate.FitResult)
    assert hopper.runs == 1                                   # Megatron-LM's one described run
    assert hopper.profile.fitted_on == ("megatron-lm-llama3-70b-h100-sxm-64g-gbs128-s8k",)
    assert any(note.startswith("left 2 runs out of the fit") for note in notes)


def test_a_framework_seen_only_in_left_out_runs_ships_unfitted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    frameworks = tmp_path / "frameworks"
    frameworks.mkdir()
    shipped = Path(__file__).resolve().parents[2] / "projection" / "catalog" / "frameworks" / "deepspeed.yaml"
    (frameworks / "deepspeed.yaml").write_text(shipped.read_text())
    deepspeed_runs = [(r.sweep.sweep.name, r.run.index) for r in collect_fit_runs(load_sweep_files([NARAYANAN]).sweeps)
                      if r.run.config.get("framework") == "deepspeed"]
    assert len(deepspeed_runs) == 6
    for key in deepspeed_runs:     # as if their records could not describe them
        monkeypatch.setitem(DOCUMENTED_RECORD_ISSUES, key, "CHECKS.md 15: a record issue (test)")
    calibrate.calibrate_all(load_sweep_files([KORTHIKANTI, NARAYANAN]).sweeps, tmp_path / "profiles",
                            framework_dir=frameworks)
    written = yaml.safe_load((frameworks / "deepspeed.yaml").read_text())
    assert written["compute_efficiency"] == 1.0 and written["dp_comm_efficiency"] == 1.0
    assert written["fitted_on"] == [] and "not fitted" in written["fit_note"] and "CHECKS.md 15" in written["fit_note"]
    # the shipped file's documented facts are kept
    assert written["zero3_gathers_block_host"] is True


def test_the_zero3_rows_record_the_recompute_sc21_states_and_are_fit_evidence() -> None:
    # CHECKS.md 15: Narayanan et al. SC'21, Appendix ("we are using activation recomputation, which requires an
    # additional forward pass before the backward pass") and Sec. 5.1 ("equation (3) assumes activation
    # recomputation"), the FLOP count of every Table 2 row.
    runs = [r for r in collect_fit_runs(load_sweep_files([NARAYANAN]).sweeps)
            if r.run.config.get("framework") == "deepspeed"]
    assert len(runs) == 6 and all(r.run.config.get("recompute") == "full" for r in runs)
    kept, left_out = fit_evidence(runs)
    assert len(kept) == 6 and not left_out


@pytest.mark.usefixtures("_documented")
def test_a_documented_run_still_counts_in_the_held_out_figures() -> None:
    cv = calibrate.cross_validate(load_sweep_files([KORTHIKANTI, MEGATRON_LM]).sweeps)
    overall = cv["overall"]
    assert overall["runs"] == 8 + 3                            # every scored run, documented or not
    assert overall["runs_described"] == 8 + 1
    assert overall["runs_left_out_of_fits"] == 2


@pytest.mark.usefixtures("_documented")
def test_calibrate_gpu_says_what_it_left_out(tmp_path: Path) -> None:
    result = runner.invoke(app, ["calibrate", str(MEGATRON_LM), "--gpu", "h100-sxm", "--out",
                                 str(tmp_path / "h100.yaml")])
    # one described run is too few to fit: the error names the two left out and why
    assert result.exit_code != 0
    assert "need at least" in result.output and "left 2 runs out of the fit" in result.output


def test_nemo_packed_squad_rows_record_their_documents_and_are_fitted_on() -> None:
    """CHECKS.md 39: the six NeMo 24.07 SFT/LoRA sweeps record packed_document_tokens (SQuAD packed to 4096 tokens
    attends per document), so they describe the run and are fit evidence; without the key they would be priced as one
    causal 4096-token sequence (more attention work: a longer step)."""
    from evals.fit import pristine_framework, pristine_profile
    from projection.engine import project

    runs = [r for r in collect_fit_runs(load_sweep_files([DATA / "nemo-24.07.yaml"]).sweeps)
            if "-sft-" in r.sweep.sweep.name or "-lora-" in r.sweep.sweep.name]
    assert len(runs) == 6
    assert all(documented_issue(r) is None for r in runs)
    for item in runs:
        spec = item.specs
        assert spec.config.packed_document_tokens == 250, item.sweep.sweep.name
        whole_config = spec.config.model_copy(update={"packed_document_tokens": None})
        step = {name: project(spec.model, spec.cluster, config, hardware=spec.hardware,
                              profile=pristine_profile(item.device_group),
                              framework=pristine_framework(item.framework)).iteration_time_s
                for name, config in (("packed", spec.config), ("whole", whole_config))}
        assert step["packed"] < step["whole"], item.sweep.sweep.name


def test_megatron_lm_rows_record_the_nemo_script_settings_and_fit() -> None:
    """CHECKS.md 39: the README rows follow NeMo's performance scripts (distributed optimizer, sequence parallelism
    for TP > 1, no recompute), so they fit an H100 and are fit evidence; recorded as plain DDP without sequence
    parallelism (entry 16) they would not fit, and a TP > 1 row would pay full activation all-reduces (slower)."""
    from evals.fit import pristine_framework, pristine_profile
    from projection.engine import project

    runs = collect_fit_runs(load_sweep_files([MEGATRON_LM]).sweeps)
    assert len(runs) == 3 and all(documented_issue(r) is None for r in runs)
    for item in runs:
        spec = item.specs
        assert spec.config.zero == 1 and spec.config.sequence_parallel == (spec.config.tp > 1)

        def run(config):
            return project(spec.model, spec.cluster, config, hardware=spec.hardware,
                           profile=pristine_profile(item.device_group), framework=pristine_framework(item.framework))

        recorded = run(spec.config)
        assert recorded.memory.verdict == "fits", item.sweep.sweep.name
        plain = run(spec.config.model_copy(update={"zero": 0, "sequence_parallel": False}))
        assert plain.memory.verdict != "fits" or spec.config.tp == 1, item.sweep.sweep.name
        if spec.config.tp > 1:
            assert recorded.iteration_time_s < plain.iteration_time_s, item.sweep.sweep.name
