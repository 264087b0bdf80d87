"""The CLI commands of search_cmd: search, export, tools schema/list/call, models, hardware."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from projtune.cli import app

runner = CliRunner()
SMALL = ["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--gbs", "32", "--seq-len", "4096",
         "-C", "precision=bf16", "-C", "pp<=2"]


def test_search_json_prints_one_object() -> None:
    result = runner.invoke(app, ["search", *SMALL, "--top", "3", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert len(data["ranked"]) == 3 and data["ranked"][0]["rank"] == 1
    assert all(c["config"]["pp"] <= 2 for c in data["ranked"])


def test_search_table_and_pareto() -> None:
    result = runner.invoke(app, ["search", *SMALL, "--pareto"])
    assert result.exit_code == 0, result.output
    assert "Best layouts" in result.stdout and "Pareto front" in result.stdout and "enumerated" in result.stdout


def test_search_says_why_nothing_fits() -> None:
    result = runner.invoke(app, ["search", *SMALL, "-C", "tp=16"])
    assert result.exit_code == 1
    assert "excludes every legal layout" in result.stdout


def test_bad_constraint_is_one_line_and_exit_2() -> None:
    result = runner.invoke(app, ["search", *SMALL, "-C", "tpp<=8"])
    assert result.exit_code == 2
    assert "did you mean tp" in result.stderr and "Traceback" not in result.output


def test_export_megatron_and_torchtitan(tmp_path) -> None:  # noqa: ANN001
    base = ["export", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "16", "--tp", "2", "--pp", "2",
            "--mbs", "1", "--gbs", "64", "--seq-len", "8192", "--sp", "--zero", "1"]
    result = runner.invoke(app, base)
    assert result.exit_code == 0, result.output
    assert "--tensor-model-parallel-size 2" in result.stdout
    out = tmp_path / "job.toml"
    result = runner.invoke(app, [*base[:-2], "--zero", "3", "--framework", "torchtitan", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "tensor_parallel_degree = 2" in out.read_text()
    bad = runner.invoke(app, [*base, "--tp", "3"])
    assert bad.exit_code == 2 and "tp=3" in bad.stderr


def test_tools_schema_list_and_call() -> None:
    schema = runner.invoke(app, ["tools", "schema"])
    assert schema.exit_code == 0
    assert {t["function"]["name"] for t in json.loads(schema.stdout)} >= {"search", "project", "check_memory"}
    listed = runner.invoke(app, ["tools", "list"])
    assert "export_launch_config" in listed.stdout
    call = runner.invoke(app, ["tools", "call", "list_hardware", "--args", '{"vendor": "nvidia"}'])
    assert call.exit_code == 0 and json.loads(call.stdout)["ok"] is True
    bad = runner.invoke(app, ["tools", "call", "project", "--args", '{"model": "llama3-8bb"}'])
    assert bad.exit_code == 2 and json.loads(bad.stdout)["ok"] is False


def test_catalog_listings() -> None:
    models = runner.invoke(app, ["models", "--json"])
    assert models.exit_code == 0 and any(m["id"] == "llama3-8b" for m in json.loads(models.stdout)["models"])
    hardware = runner.invoke(app, ["hardware"])
    assert hardware.exit_code == 0 and "mi300x" in hardware.stdout
