"""The benchmark plan of a near-tie: in `tune` output and --json, launchable (the framework checks pass), and its
logs come back as anchors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from projection.job import resolve_job
from projection.legality import layout_violations
from projection.training_config import TrainingConfig
from projtune.cli import app
from tools.bench_plan import PLAN_ITERATIONS, benchmark_plan, one_node_layout
from tools.framework_rules import framework_violations

REQUEST = "tune llama3 70b on 64 h100, seq 8k, gbs 128"


@pytest.fixture(scope="module")
def tuned() -> dict[str, Any]:
    out = CliRunner().invoke(app, ["tune", REQUEST, "--offline", "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_a_near_tie_gets_a_plan_with_launchable_one_node_runs(tuned: dict[str, Any]) -> None:
    assert tuned["near_ties"], "the scripted request must be a near-tie"
    plan = tuned["benchmark_plan"]
    assert plan and plan["reason"].startswith("near-tie") and 1 <= len(plan["runs"]) <= 2
    job = resolve_job("llama3-70b", "h100-sxm", 64)
    for run in plan["runs"]:
        assert run["num_gpus"] <= 8
        model = job.model.model_copy(update={"num_layers": run["num_layers"]})
        cluster = job.cluster.model_copy(update={"num_gpus": run["num_gpus"]})
        config = TrainingConfig(**run["config"])
        assert not layout_violations(model, job.hardware, cluster, config)
        assert not framework_violations(run["framework"], model, cluster, config)
        assert f"--num-layers {run['num_layers']}" in run["launch_config"]["text"]
        assert run["expected_minutes"] == pytest.approx(run["projected_step_s"] * PLAN_ITERATIONS / 60)
    assert "--anchor" in plan["then"]


def test_the_plan_is_in_the_text_output() -> None:
    out = CliRunner().invoke(app, ["tune", REQUEST, "--offline"])
    assert out.exit_code == 0, out.output
    assert "Benchmark plan" in out.output and "decides:" in out.output and "--tensor-model-parallel-size" in out.output


def test_one_node_reduction_keeps_the_per_gpu_work() -> None:
    job = resolve_job("llama3-70b", "h100-sxm", 64)
    target = TrainingConfig(tp=4, pp=4, vpp=5, mbs=1, gbs=128, seq_len=8192, sequence_parallel=True, zero=1)
    model, reduced, gpus, how = one_node_layout(job, target)
    assert gpus == 8 and reduced.tp == 4 and reduced.pp == 2
    assert model.num_layers // reduced.pp == job.model.num_layers // target.pp      # layers per stage kept
    assert reduced.gbs // (reduced.mbs * reduced.data_parallel(gpus)) == target.gbs // (target.mbs * 4)  # micro-batches
    assert "layers 80 -> 40" in how


def test_no_one_node_run_when_tp_spans_nodes() -> None:
    job = resolve_job("llama3-70b", "gb200", 72, nvlink_domain=72, gpus_per_node=4)
    wide = {"tp": 8, "pp": 1, "mbs": 1, "gbs": 72, "seq_len": 4096}
    assert benchmark_plan(job, [("wide", wide)], reason="test", framework="megatron") is None
