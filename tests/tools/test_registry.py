"""The tool registry: every tool callable in-process, structured errors instead of exceptions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tools.registry import call_tool, registered, tool_names


def test_every_tool_is_registered_once_with_a_description(valid_arguments: dict[str, dict[str, Any]]) -> None:
    assert sorted(tool_names()) == sorted(valid_arguments)
    for tool in registered():
        assert len(tool.description) > 60, tool.name
        assert tool.input_model.model_config.get("extra") == "forbid", tool.name


@pytest.mark.parametrize("name", [t.name for t in registered()])
def test_every_tool_runs_with_valid_arguments(name: str, valid_arguments: dict[str, dict[str, Any]]) -> None:
    payload = call_tool(name, valid_arguments[name])
    assert payload["ok"], payload.get("error")
    json.dumps(payload)  # JSON-able
    tool = next(t for t in registered() if t.name == name)
    tool.output_model.model_validate(payload["result"])


def test_tool_results_make_sense(valid_arguments: dict[str, dict[str, Any]]) -> None:
    assert {m["id"] for m in call_tool("list_models", {})["result"]["models"]} >= {"llama3-8b", "mixtral-8x7b"}
    assert all(h["vendor"] == "amd" for h in call_tool("list_hardware", {"vendor": "amd"})["result"]["hardware"])
    compare = call_tool("compare", valid_arguments["compare"])["result"]
    assert max(r["relative_throughput"] for r in compare["rows"]) == pytest.approx(1.0)
    explain = call_tool("explain", valid_arguments["explain"])["result"]
    assert explain["winner"] in ("a", "b", "tie") and explain["time_terms_s"] and explain["memory_terms_gib"]
    search = call_tool("search", valid_arguments["search"])["result"]
    assert len(search["ranked"]) == 3 and all(c["config"]["tp"] >= 2 for c in search["ranked"])
    bench = call_tool("run_benchmark", valid_arguments["run_benchmark"])["result"]
    if bench["available"]:
        assert bench["results"]
    else:
        assert "no GPU here" in bench["message"] or "not installed" in bench["message"]


def _error(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    payload = call_tool(name, arguments)
    assert payload["ok"] is False
    assert set(payload["error"]) >= {"field", "message", "allowed"}
    return payload["error"]


def test_unknown_model_names_the_nearest(job: dict[str, Any], layout: dict[str, Any]) -> None:
    error = _error("project", {**job, "model": "llama3-8bb", "layout": layout})
    assert error["field"] == "model"
    assert error["nearest"][0] == "llama3-8b"
    assert "did you mean llama3-8b" in error["message"]
    assert "mixtral-8x7b" in error["allowed"]


def test_unknown_gpu_names_the_nearest(job: dict[str, Any], layout: dict[str, Any]) -> None:
    error = _error("check_memory", {**job, "gpu": "h100-sxn", "layout": layout})
    assert error["field"] == "gpu" and "h100-sxm" in error["nearest"]


def test_bad_choice_lists_allowed_values(job: dict[str, Any], layout: dict[str, Any]) -> None:
    error = _error("project", {**job, "layout": {**layout, "precision": "bf32"}})
    assert error["field"] == "layout.precision"
    assert "bf16" in error["allowed"] and "fp8" in error["allowed"]


def test_unknown_key_lists_allowed_keys(job: dict[str, Any], layout: dict[str, Any]) -> None:
    error = _error("project", {**job, "layout": {**layout, "tensor_parallel": 2}})
    assert error["field"] == "layout.tensor_parallel"
    assert "tp" in error["allowed"] and "pp" in error["allowed"]
    top = _error("list_models", {"family": "llama"})
    assert top["field"] == "family" and "contains" in top["allowed"]


def test_missing_field_and_wrong_type(job: dict[str, Any], layout: dict[str, Any]) -> None:
    assert _error("project", {"gpu": "h100-sxm", "num_gpus": 8, "layout": layout})["field"] == "model"
    assert _error("project", {**job, "num_gpus": "eight", "layout": layout})["field"] == "num_gpus"


def test_illegal_layout_lists_violations(job: dict[str, Any], layout: dict[str, Any]) -> None:
    error = _error("project", {**job, "layout": {**layout, "tp": 3}})
    assert error["field"] == "layout"
    assert any("tp=3" in v for v in error["violations"])
    compare = _error("compare", {**job, "layouts": [layout, {**layout, "tp": 16}]})
    assert compare["field"] == "layouts.1"


def test_constraint_errors_are_clear(job: dict[str, Any]) -> None:
    error = _error("search", {**job, "gbs": 32, "seq_len": 4096, "constraints": {"precision": "bf17"}})
    assert error["field"] == "constraints.precision"
    assert "did you mean bf16" in error["message"] and "bf16" in error["allowed"]
    error = _error("search", {**job, "gbs": 32, "seq_len": 4096, "constraints": {"tp": "<=eight"}})
    assert error["field"] == "constraints.tp" and "not an integer" in error["message"]


def test_unknown_tool_and_bad_arguments_never_raise() -> None:
    payload = call_tool("serch", {})
    assert payload["ok"] is False and payload["error"]["field"] == "name"
    assert "did you mean search" in payload["error"]["message"]
    assert call_tool("project", ["not", "a", "dict"])["ok"] is False  # type: ignore[arg-type]
    assert call_tool("search", None)["ok"] is False
