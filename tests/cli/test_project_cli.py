"""`projtune project` / `projtune memory`: tables, one JSON object, one-line errors with exit code 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from projtune.cli import app

runner = CliRunner()
MIXTRAL = ["--model", "mixtral-8x22b", "--gpu", "mi355x", "--gpus", "64", "--tp", "1", "--pp", "4", "--vpp", "2",
           "--ep", "8", "--mbs", "1", "--gbs", "256", "--seq-len", "8192"]


def test_project_prints_memory_throughput_mfu_breakdown() -> None:
    result = runner.invoke(app, ["project", *MIXTRAL])
    assert result.exit_code == 0, result.output
    for text in ("tokens/s/GPU", "MFU", "Memory per GPU", "pp_bubble", "ep_comm", "bottleneck"):
        assert text in result.output


def test_project_json_is_one_object() -> None:
    result = runner.invoke(app, ["project", *MIXTRAL, "--json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["tokens_per_sec_per_gpu"] > 0 and 0 < data["mfu"] < 1
    assert len(data["memory"]["stages"]) == 4
    assert data["config"]["dp"] == 16


def test_memory_json() -> None:
    result = runner.invoke(app, ["memory", *MIXTRAL, "--json"])
    data = json.loads(result.stdout)
    assert data["verdict"] in ("fits", "at risk", "out of memory")
    assert data["stages"][0]["weights_gib"] > 0


def test_layout_file_with_flag_override(tmp_path) -> None:
    layout = tmp_path / "layout.yaml"
    layout.write_text("model: llama3-8b\ncluster: {gpu: h100-sxm, num_gpus: 8}\nconfig: {tp: 2, gbs: 64, seq_len: 8192}\n")
    result = runner.invoke(app, ["project", "--config", str(layout), "--tp", "1", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["config"]["tp"] == 1


@pytest.mark.parametrize(("args", "fragment"), [
    (["--model", "mixtrall-8x22b", "--gpu", "mi355x", "--gpus", "64"], "did you mean mixtral-8x22b"),
    (["--model", "llama3-8b", "--gpu", "h1000", "--gpus", "8"], "unknown hardware 'h1000'"),
    (["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--tp", "3", "--gbs", "8"],
     "does not divide num_attention_heads"),
    (["--model", "llama3-8b", "--gpu", "a100-80gb", "--gpus", "8", "--precision", "fp8", "--gbs", "8"],
     "not supported on a100-80gb"),
    (["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--recompute", "some"], "recompute"),
    (["--gpu", "h100-sxm", "--gpus", "8"], "no model given"),
    (["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--precision", "bf61"], "did you mean 'bf16'?"),
    (["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--finetune", "lorax"], "did you mean 'lora'?"),
])
def test_bad_input_is_one_line_exit_2(args, fragment) -> None:
    result = runner.invoke(app, ["project", *args])
    assert result.exit_code == 2
    assert fragment in result.output
    assert "Traceback" not in result.output


def test_project_and_search_take_a_fine_tuning_job() -> None:
    job = ["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--gbs", "32", "--seq-len", "4096"]
    full = runner.invoke(app, ["project", *job, "--mbs", "1", "--json"])
    lora = runner.invoke(app, ["project", *job, "--mbs", "1", "--finetune", "lora", "--json"])
    assert full.exit_code == 0 and lora.exit_code == 0, lora.output
    assert json.loads(lora.stdout)["config"]["finetune"] == "lora"
    # frozen base weights: no weight-gradient GEMMs, so the same layout steps faster
    assert json.loads(lora.stdout)["tokens_per_sec_per_gpu"] > 1.3 * json.loads(full.stdout)["tokens_per_sec_per_gpu"]
    found = runner.invoke(app, ["search", *job, "--finetune", "lora", "--top", "2", "--json"])
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)["request"]["finetune"] == "lora"
    bad = runner.invoke(app, ["search", *job, "--finetune", "lorax"])
    assert bad.exit_code == 2 and "did you mean 'lora'?" in bad.output and "Traceback" not in bad.output
