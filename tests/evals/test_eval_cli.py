"""`projtune eval` and `projtune sweeps`: the JSON contract, per-run resilience, the report, log import.

Measured values in the tmp_path sweep files are made up for these tests (they check the
harness, not the engine's accuracy); the development data is used only through a small
`--sweep` selection of korthikanti-2022.yaml.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from projtune.cli import app
from projtune.errors import json_error

runner = CliRunner()
DATA = Path(__file__).resolve().parents[2] / "evals" / "data"
FIXTURES = Path(__file__).parent / "fixtures"
KORTHIKANTI = DATA / "korthikanti-2022.yaml"
SMALL = ["--sweep", "korthikanti-2022-gpt-22b-*", "--sweep", "korthikanti-2022-gpt-175b-*"]

SUMMARY_KEYS = {
    "files", "sweeps", "runs", "runs_scored", "runs_skipped", "runs_incomplete", "mape", "median_ape", "bias",
    "memory_runs", "memory_mape", "oom_runs", "oom_recall", "rankable_sweeps", "kendall_tau_mean",
    "spearman_mean", "top1_rate", "regret_mean", "agent", "baselines",
}
SWEEP_KEYS = {"name", "file", "gpu", "num_gpus", "runs", "mape", "kendall_tau", "spearman", "top1", "regret", "agent"}
RUN_KEYS = {"sweep", "index", "config", "metric", "measured", "projected", "ape", "memory_measured_gib",
            "memory_projected_gib", "oom_measured", "oom_projected", "filled", "skipped"}
AGENT_KEYS = {"config", "measured", "best_config", "best_measured", "regret"}

MIXED = """\
source: "made up for tests/evals/test_eval_cli.py"
sweeps:
  - name: mixed-llama3-8b-8xh100
    model: llama3-8b
    cluster: {gpu: h100-sxm, num_gpus: 8}
    fixed: {gbs: 64, seq_len: 8192, precision: bf16}
    runs:
      - config: {tp: 1, mbs: 1, zero: 1, recompute: selective}
        measured: {tokens_per_sec_per_gpu: 9000, peak_memory_gib: 60}
      - config: {tp: 2, mbs: 1, zero: 1}
        measured: {tokens_per_sec_per_gpu: 8000}
      - config: {tp: 2, vp: 2, mbs: 1}
        measured: {tokens_per_sec_per_gpu: 8000}
      - config: {tp: 3, mbs: 1}
        measured: {tokens_per_sec_per_gpu: 8000}
      - config: {tp: 4, mbs: 1}
        measured: {}
      - config: {tp: 1, mbs: 8, recompute: none}
        measured: {oom: true}
      - config: {tp: 2}
        measured: {tokens_per_sec_per_gpu: 8500}
        unknown: [mbs, recompute]
"""


def _eval(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["eval", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def small() -> dict[str, Any]:
    return _eval(str(KORTHIKANTI), *SMALL)


def test_contract_keys_present(small: dict[str, Any]) -> None:
    assert small["summary"].keys() >= SUMMARY_KEYS
    assert {"summary", "by_gpu", "sweeps", "runs", "by_family", "load_issues"} <= small.keys()
    assert all(s.keys() >= SWEEP_KEYS for s in small["sweeps"])
    assert all(r.keys() >= RUN_KEYS for r in small["runs"])
    assert {"runs", "mape", "bias"} <= small["by_gpu"]["a100-80gb"].keys()
    assert small["by_family"]["ampere"]["runs"] == small["by_gpu"]["a100-80gb"]["runs"]


def test_fractions_and_nulls(small: dict[str, Any]) -> None:
    summary = small["summary"]
    assert summary["sweeps"] == 3 and summary["files"] == 1
    assert 0 <= summary["mape"] < 5 and summary["rankable_sweeps"] >= 1
    assert summary["oom_runs"] == 0 and summary["oom_recall"] is None
    assert summary["agent"] is None and summary["memory_mape"] is None
    # Korthikanti's Table 5 carries the Calculon reproduction as a baseline.
    assert summary["baselines"]["calculon"]["runs"] >= 1
    assert summary["baselines"]["calculon"]["ours_mape_same_runs"] is not None
    for run in small["runs"]:
        if run["skipped"] is not None:
            assert run["projected"] is None and run["ape"] is None
        elif run["metric"] is not None:
            assert run["projected"] > 0 and run["ape"] >= 0
    single = [s for s in small["sweeps"] if s["kendall_tau"] is None and s["top1"] is None]
    assert all(s["regret"] is None for s in single)


def test_broken_runs_are_skipped_with_reasons(tmp_path: Path) -> None:
    (tmp_path / "mixed.yaml").write_text(MIXED)
    data = _eval(str(tmp_path))
    runs = {r["index"]: r for r in data["runs"]}
    assert runs[0]["skipped"] is None and runs[0]["ape"] is not None
    assert runs[0]["memory_measured_gib"] == 60 and runs[0]["memory_projected_gib"] > 0
    assert runs[1]["skipped"] is None
    assert "unknown config key 'vp'" in runs[2]["skipped"] and "did you mean vpp" in runs[2]["skipped"]
    assert "tp=3 does not divide num_attention_heads" in runs[3]["skipped"]
    assert "no metric given" in runs[4]["skipped"]
    assert runs[5]["skipped"] is None and runs[5]["oom_measured"] is True
    assert isinstance(runs[5]["oom_projected"], bool)
    assert runs[6]["skipped"].startswith("incomplete: missing mbs, recompute")
    summary = data["summary"]
    assert summary["runs"] == 7 and summary["runs_scored"] == 3 and summary["runs_incomplete"] == 1
    assert summary["oom_runs"] == 1 and summary["oom_recall"] in (0.0, 1.0)
    assert data["sweeps"][0]["top1"] is not None
    assert any("run 2" in issue for issue in data["load_issues"])


def test_fill_unknown_marks_filled(tmp_path: Path) -> None:
    (tmp_path / "mixed.yaml").write_text(MIXED)
    filled = _eval(str(tmp_path), "--fill-unknown")["runs"][6]
    assert filled["skipped"] is None and filled["filled"] is True
    assert set(filled["fill"]) == {"mbs", "recompute"} and filled["fill"]["mbs"] in (1, 2, 4, 8)


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "mixed.yaml").write_text(MIXED)
    (tmp_path / "bad.yaml").write_text("source: x\nsweeps:\n  - name: a\n    model: [llama\n")
    data = _eval(str(tmp_path))
    assert any("bad.yaml:5: malformed YAML" in issue for issue in data["load_issues"])
    assert data["summary"]["runs_scored"] == 3


def test_unknown_sweep_name_is_one_line_error() -> None:
    result = runner.invoke(app, ["eval", str(KORTHIKANTI), "--sweep", "korthikanti-2022-gpt-22b", "--json"])
    assert result.exit_code == 2
    assert "did you mean korthikanti-2022-gpt-22b-" in result.output


@pytest.mark.parametrize("as_json", [False, True])
def test_nothing_to_evaluate_prints_one_line_and_no_empty_table(tmp_path: Path, as_json: bool) -> None:
    """A missing path or a file with no loadable sweep: exit 2, the reason in one line (the OS's words, not an
    exception repr), and no empty summary table, summary JSON object or report folder: under --json, stdout holds
    only the error object (projtune/errors.py json_error)."""
    report = tmp_path / "report"
    flags = ["--json"] if as_json else ["--report", str(report)]
    missing = runner.invoke(app, ["eval", str(tmp_path / "nosuch"), *flags])
    assert missing.exit_code == 2
    reason = f"no sweep to evaluate: {tmp_path / 'nosuch'}: cannot read: No such file or directory"
    assert missing.stdout == (json_error(reason) + "\n" if as_json else "")
    assert missing.stderr.strip() == f"error: {reason}"
    (tmp_path / "bad.yaml").write_text("sweeps:\n  - name: a\n   gpu: h100\n")
    broken = runner.invoke(app, ["eval", str(tmp_path / "bad.yaml"), *flags])
    assert broken.exit_code == 2 and (json.loads(broken.stdout)["ok"] is False if as_json else broken.stdout == "")
    assert "bad.yaml:3: malformed YAML" in broken.stderr and len(broken.stderr.strip().splitlines()) == 1
    assert not report.exists()


def test_unknown_gpu_filter_names_the_nearest_and_what_the_files_have() -> None:
    result = runner.invoke(app, ["eval", str(KORTHIKANTI), "--gpu", "a100-80g", "--json"])
    assert result.exit_code == 2 and json.loads(result.stdout)["error"]["message"] == result.stderr.strip()[7:]
    assert "no sweep on --gpu 'a100-80g'; did you mean a100-80gb? (hardware ids and families in these sweeps: " \
           "a100-80gb, ampere)" in result.stderr


def test_table_output_and_agent(tmp_path: Path) -> None:
    (tmp_path / "mixed.yaml").write_text(MIXED)
    result = runner.invoke(app, ["eval", str(tmp_path), "--agent"])
    assert result.exit_code == 0, result.output
    assert "Eval summary" in result.stdout and "mixed-llama3-8b-8xh100" in result.stdout
    data = _eval(str(tmp_path), "--agent")
    agent = data["sweeps"][0]["agent"]
    assert agent.keys() >= AGENT_KEYS and agent["best_measured"] == 9000
    assert data["summary"]["agent"]["sweeps"] == 1


def test_report_writes_markdown_and_pngs(tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = runner.invoke(app, ["eval", str(KORTHIKANTI), *SMALL, "--report", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert "## By family" in (out / "report.md").read_text()
    pngs = [out / "projected_vs_measured.png", out / "error_histogram.png", *sorted((out / "ranks").glob("*.png"))]
    assert len(pngs) >= 3
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000


def test_sweeps_import_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "imported.yaml"
    logs = [str(FIXTURES / "megatron_llama3_8b_tp4_pp2.log"), str(FIXTURES / "megatron_llama3_8b_tp2_pp4_full.log")]
    result = runner.invoke(app, ["sweeps", "import", *logs, "--gpu", "h100-sxm", "--name", "rt", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert runner.invoke(app, ["sweeps", "validate", str(out)]).exit_code == 0
    data = _eval(str(out))
    assert data["sweeps"][0]["name"] == "rt" and data["summary"]["runs"] == 2


def test_sweeps_import_bad_log_and_validate_issues(tmp_path: Path) -> None:
    result = runner.invoke(app, ["sweeps", "import", str(FIXTURES / "no_iterations.log"), "--gpu", "h100-sxm"])
    assert result.exit_code == 2 and "no iteration lines" in result.output
    (tmp_path / "mixed.yaml").write_text(MIXED)
    result = runner.invoke(app, ["sweeps", "validate", str(tmp_path)])
    assert result.exit_code == 2
    assert "run 2: unknown config key 'vp'" in result.stdout


@pytest.mark.slow
def test_full_development_data() -> None:
    data = _eval(str(DATA))
    summary = data["summary"]
    assert summary["files"] == 17 and summary["runs"] == 411  # evals/data/README.md totals
    assert summary["runs_scored"] > 100 and summary["rankable_sweeps"] > 10
