"""One regression test per case under "Why" of issue 13 (bounded work, inputs, LLM path, security, flake-free tests).

The LLM transport cases live in tests/agent/test_llm_transport.py, the chat-session cases in
tests/agent/test_session_safety.py and the request-parser cases in tests/agent/test_request.py;
this file holds the rest.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from fuzz_checks import strict_json
from hypothesis import settings
from typer.testing import CliRunner

from evals.sweep_file import load_sweep_files
from projection.errors import ModelSpecError
from projection.model_spec import model_from_hf_config
from projtune.cli import app
from tools.registry import call_tool

ROOT = Path(__file__).resolve().parents[2]
GOOD = ROOT / "evals" / "data" / "korthikanti-2022.yaml"
runner = CliRunner()
JOB = {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8}
LAYOUT = ["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--seq-len", "4096"]
LAUGHS = ('a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
          + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8))
          + "source: x\nsweeps: [*i]\n")


# ------------------------------------------------------------------ bounded work


def test_huge_gbs_is_refused_at_the_cli_with_the_allowed_range() -> None:
    """`--gbs 2147483648` hung and grew to ~24 GB (pipeline simulation linear in micro-batches)."""
    start = time.process_time()        # in-process CLI: its CPU time, whatever the machine's load
    result = runner.invoke(app, ["project", *LAYOUT, "--gbs", "2147483648"])
    assert result.exit_code == 2 and "less than or equal to 1048576" in result.output
    assert time.process_time() - start < 10


def test_micro_batches_per_step_are_bounded() -> None:
    result = runner.invoke(app, ["project", *LAYOUT, "--pp", "8", "--gbs", "1048576"])
    assert result.exit_code == 2 and "exceeds 16384 (bounded work" in result.output


def test_huge_gbs_over_mcp_is_a_structured_error() -> None:
    payload = call_tool("project", {**JOB, "layout": {"gbs": 2147483648, "seq_len": 4096}}, untrusted=True,
                        deadline_s=30)
    assert payload["ok"] is False and payload["error"]["field"] == "layout.gbs"


def test_a_remote_call_past_its_deadline_is_cancelled() -> None:
    """The same over MCP kept a core and memory busy after the client gave up: the work is killed.  The deadline is
    far below the search's time even with every in-process cache warm (0.13 s after the README's own search of this
    job, which tests/cli runs first; the forked child inherits the caches)."""
    start = time.process_time()        # the work runs in a child: the caller spends no CPU on it
    payload = call_tool("search", {"model": "llama3.1-405b", "gpu": "h100-sxm", "num_gpus": 16384, "gbs": 2048,
                                   "seq_len": 8192}, untrusted=True, deadline_s=0.01)
    assert payload["ok"] is False and "exceeded its deadline of 0.01 s and was cancelled" in payload["error"]["message"]
    assert time.process_time() - start < 5


# ------------------------------------------------------------------ sweep files and measured values


def test_billion_laughs_is_refused_and_validate_prints_little(tmp_path: Path) -> None:
    """A 673-byte file with anchors made `sweeps validate` print 722 MB."""
    bomb = tmp_path / "laughs.yaml"
    bomb.write_text(LAUGHS)
    assert len(LAUGHS) < 1000
    result = runner.invoke(app, ["sweeps", "validate", str(bomb)])
    assert len(result.output) < 5000 and "alias" in result.output
    assert result.exit_code != 0 and "Traceback" not in result.output


def test_deep_nesting_is_reported_and_good_files_are_still_scored(tmp_path: Path) -> None:
    """A deeply nested file raised RecursionError and the whole eval stopped, good files unscored."""
    (tmp_path / "a-deep.yaml").write_text("source: x\nsweeps: " + "[" * 20000 + "]" * 20000 + "\n")
    (tmp_path / "b-good.yaml").write_text(GOOD.read_text())
    loaded = load_sweep_files([tmp_path])
    assert [e.level for e in loaded.errors] == ["file"] and "nested" in str(loaded.errors[0])
    assert loaded.sweeps and all(s.file.endswith("b-good.yaml") for s in loaded.sweeps)
    result = runner.invoke(app, ["eval", str(tmp_path), "--json"])
    assert "Traceback" not in result.output
    data = strict_json(result.stdout)
    assert "korthikanti" in json.dumps(data)


def test_infinite_measured_value_is_rejected_and_json_stays_strict(tmp_path: Path) -> None:
    """`measured: .inf` made the summary MAPE NaN and `--json` emit NaN (not JSON)."""
    text = GOOD.read_text().replace("measured: {iteration_time_s: 1.1, mfu: 0.415}",
                                    "measured: {iteration_time_s: .inf, mfu: 0.415}", 1)
    assert ".inf" in text
    path = tmp_path / "inf.yaml"
    path.write_text(text)
    loaded = load_sweep_files([path])
    assert any("iteration_time_s = inf is not a finite number" in str(e) for e in loaded.errors)
    result = runner.invoke(app, ["eval", str(path), "--json"])
    assert "NaN" not in result.stdout and "Infinity" not in result.stdout
    strict_json(result.stdout)


def test_json_output_is_strict() -> None:
    result = runner.invoke(app, ["project", *LAYOUT, "--gbs", "32", "--json"])
    assert result.exit_code == 0
    strict_json(result.stdout)


def test_strict_json_writer_never_writes_nan() -> None:
    from tools.json_out import json_text

    assert json_text({"mape": float("nan"), "x": [float("inf"), 1.0]}) == '{"mape": null, "x": [null, 1.0]}'


# ------------------------------------------------------------------ HF configs

BASE = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}


@pytest.mark.parametrize(("change", "says"), [
    ({"num_attention_heads": 0}, "'num_attention_heads' = 0 is out of range (allowed 1..16384)"),
    ({"hidden_size": -4096}, "'hidden_size' = -4096 is out of range"),
    ({"intermediate_size": -1}, "'intermediate_size' = -1 is out of range"),
    ({"num_hidden_layers": 0}, "'num_hidden_layers' = 0 is out of range"),
    ({"vocab_size": float("inf")}, "'vocab_size' must be a whole, finite number"),
    ({"hidden_size": float("nan")}, "'hidden_size' must be a whole, finite number"),
    ({"head_dim": "128"}, "'head_dim' must be a whole number, got str"),
    ({"num_key_value_heads": 5}, "not divisible by num_key_value_heads=5"),
    ({"hidden_size": 16, "num_attention_heads": 32, "num_key_value_heads": 32}, "head_dim"),
    ({"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 9}, "'num_experts_per_tok' = 9"),
    ({"layer_types": ["full_attention"] * 3, "sliding_window": 128}, "'layer_types' has 3 entries"),
])
def test_hf_configs_are_checked_field_by_field(change: dict[str, object], says: str) -> None:
    """Zero heads or negative sizes gave tracebacks or "fits at -17.9 GiB"."""
    with pytest.raises(ModelSpecError) as err:
        model_from_hf_config({**BASE, **change})
    assert says in str(err.value)


@pytest.mark.parametrize("model_type", ["mistral", "qwen2", "gemma", "gemma2", "phi3"])
def test_hf_types_the_catalog_lacks_are_read(model_type: str) -> None:
    spec = model_from_hf_config({**BASE, "model_type": model_type, "head_dim": 128})
    assert spec.model_type == model_type and spec.gated_mlp and spec.num_layers == 32


def test_a_bad_model_file_is_not_quoted(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("secret_token: hunter2\n  bad: [indent\n")
    result = call_tool("project", {**JOB, "model": str(path), "layout": {"gbs": 8, "seq_len": 1024}})
    assert result["ok"] is False and "hunter2" not in json.dumps(result)


# ------------------------------------------------------------------ security


def test_profile_path_outside_the_profile_folder_is_never_read_remotely(tmp_path: Path) -> None:
    """`profile_path` read any file and quoted its content in the error (reachable over MCP)."""
    secret = tmp_path / "secret.yaml"
    secret.write_text("peak_fraction: hunter2\n")
    for untrusted in (True, False):
        payload = call_tool("check_memory", {**JOB, "profile_path": str(secret),
                                             "layout": {"gbs": 8, "seq_len": 1024}}, untrusted=untrusted)
        assert payload["ok"] is False and "hunter2" not in json.dumps(payload)
    refused = call_tool("check_memory", {**JOB, "profile_path": str(secret), "layout": {"gbs": 8, "seq_len": 1024}},
                        untrusted=True)["error"]
    assert refused["field"] == "profile_path" and "h100-sxm" in refused["allowed"]
    named = call_tool("check_memory", {**JOB, "profile_path": "h100-sxm", "layout": {"gbs": 8, "seq_len": 1024}},
                      untrusted=True)
    assert named["ok"] is True
    escape = call_tool("check_memory", {**JOB, "profile_path": "../../../../etc/hostname",
                                        "layout": {"gbs": 8, "seq_len": 1024}}, untrusted=True)
    assert escape["ok"] is False and escape["error"]["field"] == "profile_path"


def test_mcp_call_cannot_read_a_model_file(tmp_path: Path) -> None:
    from mcp import Client

    from tools.mcp_server import build_server

    secret = tmp_path / "config.json"
    secret.write_text('{"model_type": "hunter2"}')

    async def main() -> dict[str, object]:
        with anyio.fail_after(30):
            async with Client(build_server()) as client:
                result = await client.call_tool("check_memory", {**JOB, "model": str(secret),
                                                                 "layout": {"gbs": 8, "seq_len": 1024}})
                return result.structured_content

    payload = anyio.run(main)
    assert payload["ok"] is False and payload["error"]["field"] == "model" and "hunter2" not in json.dumps(payload)


def test_mcp_http_refuses_a_public_bind_without_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--host 0.0.0.0` exposed the MCP server with no authentication."""
    monkeypatch.delenv("PROJTUNE_MCP_TOKEN", raising=False)
    result = subprocess.run([sys.executable, "-c", "from projtune.cli import main; main()", "mcp", "--http",
                             "--host", "0.0.0.0", "--port", "0"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "PROJTUNE_MCP_TOKEN" in result.stderr and "Traceback" not in result.stderr
    from tools.mcp_server import check_bind, is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and not is_loopback("0.0.0.0")
    check_bind("0.0.0.0", "a-token")   # with a token it may bind
    check_bind("127.0.0.1", None)


def test_mcp_http_checks_the_bearer_token() -> None:
    from tools.mcp_server import BearerAuth

    seen: list[str] = []

    async def inner(scope, receive, send) -> None:  # noqa: ANN001 - ASGI
        seen.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    app_ = BearerAuth(inner, "t0ken")

    async def call(header: bytes | None) -> int:
        sent: list[dict[str, object]] = []

        async def send(message: dict[str, object]) -> None:
            sent.append(message)

        async def receive() -> dict[str, object]:
            return {"type": "http.request", "body": b""}

        headers = [(b"authorization", header)] if header is not None else []
        await app_({"type": "http", "path": "/mcp", "headers": headers}, receive, send)
        return int(sent[0]["status"])  # type: ignore[arg-type]

    assert anyio.run(call, None) == 401
    assert anyio.run(call, b"Bearer wrong") == 401
    assert anyio.run(call, b"Bearer t0ken") == 200 and seen == ["/mcp"]


# ------------------------------------------------------------------ tests that never flake


def test_hypothesis_never_replays_a_saved_failure() -> None:
    """Hypothesis replayed a saved failure from `.hypothesis/` forever: no example database in the suite."""
    assert settings.default.database is None
    assert settings.default.deadline is None


def test_every_json_output_goes_through_the_strict_writer() -> None:
    """No command prints `json.dumps(...)` directly (which writes NaN/Infinity): all use tools.json_out."""
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "projtune" / "commands").glob("*.py")
                 if "typer.echo(json.dumps(" in p.read_text()]
    assert offenders == []
