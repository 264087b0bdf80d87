"""`projtune bench`: the no-GPU message, the CPU plumbing path, restoring a measurement, the reduction view."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import bench.runtime
from bench.measurement import Measurement, read_measurement
from projtune.cli import app

ROOT = Path(__file__).resolve().parents[2]
TARGET = ["--model", "mixtral-8x7b", "--gpu-target", "h100-sxm", "--gpus", "16", "--ep", "8", "--gbs", "64"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PROJTUNE_CACHE", str(tmp_path / "cache"))


def test_run_without_a_gpu_says_so_in_one_line(monkeypatch) -> None:
    monkeypatch.setattr(bench.runtime, "gpu_available", lambda: False)
    result = CliRunner().invoke(app, ["bench", "run", *TARGET])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "no GPU" in lines[0] and "--cpu" in lines[0]


def test_cpu_run_writes_a_measurement_that_projects(tmp_path) -> None:
    out = tmp_path / "m.json"
    result = CliRunner().invoke(app, ["bench", "run", *TARGET, "--cpu", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "NOT REPRESENTATIVE" in result.output
    m = read_measurement(out)
    assert m.source == "cpu" and not m.representative
    assert [f.axis for f in m.reduction.removed] == ["ep", "dp"]
    assert [t.kind for t in m.layers] == ["moe"] and m.layers[0].backward_split == "analytic-ratio"
    assert list((tmp_path / "cache" / "bench").glob("*.json"))

    projected = CliRunner().invoke(app, ["bench", "project", "--measured", str(out), "--json"])
    assert projected.exit_code == 0, projected.output
    data = json.loads(projected.stdout)
    assert data["config"]["ep"] == 8 and data["tokens_per_sec_per_gpu"] > 0
    assert data["measured"]["source"] == "cpu" and data["measured"]["warnings"]

    other = CliRunner().invoke(app, ["bench", "project", "--measured", str(out), "--tp", "2", "--gpus", "32", "--json"])
    assert other.exit_code == 0, other.output
    assert json.loads(other.stdout)["config"]["tp"] == 2


def test_project_rejects_a_file_that_is_not_a_measurement(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    result = CliRunner().invoke(app, ["bench", "project", "--measured", str(bad)])
    assert result.exit_code == 2 and "not a projtune measurement" in result.output


def test_reduce_shows_the_bench_layout() -> None:
    result = CliRunner().invoke(app, ["bench", "reduce", "--model", "deepseek-v3", "--gpu", "h100-sxm", "--gpus", "256",
                                      "--tp", "2", "--pp", "8", "--ep", "32", "--gbs", "512", "--bench-gpus", "4"])
    assert result.exit_code == 0, result.output
    assert "TP2 PP1 EP4" in result.output and "removed pp: 8 -> 1" in result.output


def test_device_cpu_writes_a_profile(tmp_path) -> None:
    out = tmp_path / "p.yaml"
    result = CliRunner().invoke(app, ["bench", "device", "--cpu", "--gpu-target", "h200", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.is_file() and "NOT REPRESENTATIVE" in result.output


def test_measurement_cache_is_reused(tmp_path) -> None:
    from bench.runner import BenchOptions, run_measurement
    from projection.model_spec import load_model
    from projection.training_config import Cluster, TrainingConfig

    options = BenchOptions(device="cpu", max_hidden=64, max_tokens=32, warmup=1, iters=2)
    args = (load_model("llama3-8b"), Cluster(gpu="h100-sxm", num_gpus=8), TrainingConfig(tp=2, gbs=16))
    first = run_measurement(*args, local_gpus=1, options=options)
    second = run_measurement(*args, local_gpus=1, options=options)
    assert second == first
    assert Measurement.model_validate_json(first.model_dump_json()) == first


@pytest.mark.skipif(bench.runtime.gpu_available(), reason="checks the no-GPU path")
def test_gpu_check_exits_quickly_without_a_gpu() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")], capture_output=True, text=True,
                          timeout=60, check=False)   # the timeout bounds it; no wall-clock assertion (load)
    assert done.returncode == 2 and "no GPU" in done.stdout
