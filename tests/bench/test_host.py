"""`projtune bench host`: the per-op host cost measured on this CPU, and the engine using it when given."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from bench.host import DRIVER_LAUNCH_S, measure_host
from projection.engine import project
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from projtune.cli import app


def test_measure_host_counts_kernel_ops_and_adds_the_driver_launch() -> None:
    result = measure_host(iters=3, warmup=1)
    assert 50 <= result.ops_per_step <= 400            # an eager block's forward + backward, views excluded
    assert 0 < result.dispatch_per_op_s < 1e-3
    assert result.host_op_s == result.dispatch_per_op_s + DRIVER_LAUNCH_S and DRIVER_LAUNCH_S > 0


def test_bench_host_cli_prints_the_cost_and_the_engine_uses_it() -> None:
    out = CliRunner().invoke(app, ["bench", "host", "--iters", "3", "--json"])
    assert out.exit_code == 0, out.output
    host_op_s = json.loads(out.output)["host_op_s"]
    model = load_model("llama3.2-1b")
    config = TrainingConfig(tp=8, mbs=1, gbs=8, seq_len=512, framework="torchtitan")
    assert 0.0 < host_op_s
    # The engine takes the cost it is given: a host 20x slower than the measured one is slower still.  Capped at
    # Cluster.host_op_s's 1 ms bound, so a loaded machine (a large measured cost) still gives a valid input.
    slow = min(host_op_s * 20, 1e-3)
    faster = project(model, Cluster(gpu="h100-sxm", num_gpus=8, host_op_s=slow / 20), config)
    measured = project(model, Cluster(gpu="h100-sxm", num_gpus=8, host_op_s=slow), config)
    assert measured.iteration_time_s > faster.iteration_time_s   # a slower host shows up
