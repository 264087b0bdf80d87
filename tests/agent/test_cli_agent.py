"""`projtune tune`: equal to `search` (Mixtral on 64 MI300X), JSON and log output, flags, and clear failures."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_jobs import SMALL
from typer.testing import CliRunner

from projtune.cli import app
from tools.search import SearchRequest, run_search

runner = CliRunner()
MIXTRAL = "tune Mixtral 8x7B for 64 MI300X"


def projtune_command() -> list[str]:
    exe = shutil.which("projtune")
    return [exe] if exe else [sys.executable, "-c", "from projtune.cli import main; main()"]


@pytest.mark.slow
def test_mixtral_tune_equals_the_search_best() -> None:
    """The acceptance check: a fresh `projtune tune` process, offline, against run_search for the same job
    (restricted, as tune is by default, to the layouts Megatron-LM can launch)."""
    start = time.perf_counter()
    proc = subprocess.Popen([*projtune_command(), "tune", MIXTRAL, "--json", "--offline"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    search = run_search(SearchRequest(model="mixtral-8x7b", gpu="mi300x", num_gpus=64, gbs=1024, seq_len=4096,
                                      framework="megatron"))
    stdout, stderr = proc.communicate(timeout=300)
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, stderr
    report = json.loads(stdout)
    assert report["request"]["gbs"] == 1024 and report["request"]["seq_len"] == 4096   # 4M tokens (agent/batch_default)
    assert report["best"]["config"] == search.ranked[0].config, elapsed
    assert report["best"]["verdict"] != "out of memory" and report["best"]["scored_by"] == "search"
    assert "round" in stderr   # progress went to stderr
    assert "error" not in report["launch_config"], report["launch_config"]   # the best layout launches


def test_tune_searches_only_what_the_launch_framework_runs() -> None:
    """Unfiltered, the Mixtral best is ZeRO-3 with EP 8, which Megatron-LM rejects (--use-torch-fsdp2 with EP);
    tune (default --framework megatron) never reports it, and a framework named in the request wins."""
    from agent.run import tune

    unfiltered = run_search(SearchRequest(model="mixtral-8x7b", gpu="mi300x", num_gpus=64, gbs=256, seq_len=4096))
    def fsdp_with_ep(config: dict) -> bool:
        return config.get("zero") == 3 and config.get("ep", 1) > 1

    assert any(fsdp_with_ep(c.config) for c in unfiltered.ranked[:3])
    report = tune(MIXTRAL).report
    assert report.best is not None and not fsdp_with_ep(report.best.config)
    assert "error" not in report.launch_config and not any(fsdp_with_ep(t.config) for t in report.top5)
    titan = tune(MIXTRAL + " with maxtext").report   # MaxText runs FSDP with EP
    assert titan.request["framework"] == "jax" and "error" not in titan.launch_config


def test_tune_json_log_and_flags(tmp_path: Path) -> None:
    log = tmp_path / "trials.jsonl"
    result = runner.invoke(app, ["tune", SMALL, "--json", "--offline", "--log", str(log), "--top", "3",
                                 "-C", "recompute=none", "-C", "zero=3", "--framework", "torchtitan"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert len(report["top5"]) == 3 and "recompute=none" in report["request"]["constraints"]
    assert all(row["config"]["recompute"] == "none" for row in report["top5"])
    assert report["launch_config"]["framework"] == "torchtitan"
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == report["trials"]
    assert {"config", "verdict", "tokens_per_sec_per_gpu", "source", "round"} <= rows[0].keys()


def test_tune_human_output() -> None:
    result = runner.invoke(app, ["tune", SMALL, "--offline"])
    assert result.exit_code == 0, result.output
    for text in ("Best layout:", "tok/s/GPU", "headroom", "bottleneck", "Why it wins", "--tensor-model-parallel-size"):
        assert text in result.stdout


@pytest.mark.parametrize(("request_text", "says"), [
    ("", "Empty request"),
    ("tune gpt5 on 64 h100", "Unknown model 'gpt5'; did you mean gpt3-175b?"),
    ("tune llama3 8b on 8 tpu-v5", "Unknown GPU type 'tpu-v5'"),
    ("tune llama 70b on 64 h100", "llama2-70b, llama3-70b, llama3.1-70b"),
])
def test_unknown_or_missing_names_exit_2(request_text: str, says: str) -> None:
    result = runner.invoke(app, ["tune", request_text, "--offline"])
    assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output
    as_json = runner.invoke(app, ["tune", request_text, "--offline", "--json"])
    assert as_json.exit_code == 2 and json.loads(as_json.stdout)["status"] == "clarification"


def test_bad_flags_exit_2() -> None:
    assert runner.invoke(app, ["tune", SMALL, "-C", "tq<=2"]).exit_code == 2
    assert runner.invoke(app, ["tune", SMALL, "--framework", "jax"]).exit_code == 2


def test_impossible_request_exits_1_with_the_reason() -> None:
    result = runner.invoke(app, ["tune", "tune llama3.1-405b on 8 a100-40gb", "--offline", "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["status"] == "no_fit" and "the smallest layout that fits needs 256 GPUs" in report["message"]


def test_llm_from_the_environment_falls_back_when_down(monkeypatch: pytest.MonkeyPatch) -> None:
    from fake_openai_server import closed_port

    monkeypatch.setenv("PROJTUNE_LLM_BASE_URL", f"http://127.0.0.1:{closed_port()}/v1")
    monkeypatch.setenv("PROJTUNE_LLM_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("PROJTUNE_LLM_RETRY_WAIT", "0.01")
    result = runner.invoke(app, ["tune", SMALL, "--json", "--llm-timeout", "0.5"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["policy"] == "llm" and report["degraded"] and "after 2 attempts" in report["degraded_reason"]
    assert report["best"] is not None
    offline = json.loads(runner.invoke(app, ["tune", SMALL, "--json", "--offline"]).stdout)
    assert offline["policy"] == "offline" and not offline["degraded"]
    assert offline["best"]["config"] == report["best"]["config"]
