"""Tool calls with a misspelt value of a closed set get the nearest valid value in their structured error.

`export_launch_config` with framework 'torchtitn' used to answer only "Input should be 'megatron', ... or
'maxtext'": the rule is what was wrong, what is allowed and the nearest valid name.
"""

from __future__ import annotations

from tools.registry import call_tool

LAYOUT = {"tp": 2, "mbs": 1, "gbs": 256, "seq_len": 8192}
JOB = {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 64}


def test_misspelt_framework_names_the_nearest() -> None:
    out = call_tool("export_launch_config", {**JOB, "framework": "torchtitn", "layout": LAYOUT})
    assert out["ok"] is False
    err = out["error"]
    assert err["field"] == "framework"
    assert "(got 'torchtitn'); did you mean 'torchtitan'?" in err["message"]
    assert err["allowed"] == ["megatron", "megatron-bridge", "primus", "torchtitan", "maxtext"]


def test_misspelt_nested_literal_names_the_nearest() -> None:
    out = call_tool("project", {**JOB, "layout": {**LAYOUT, "precision": "fp9"}})
    assert out["ok"] is False
    assert out["error"]["field"] == "layout.precision"
    assert out["error"]["message"].endswith("(got 'fp9'); did you mean 'fp8'?")


def test_value_with_no_near_name_gets_no_suggestion() -> None:
    out = call_tool("project", {**JOB, "layout": {**LAYOUT, "precision": "zzzzzz"}})
    assert out["ok"] is False and "did you mean" not in out["error"]["message"]
    assert "(got 'zzzzzz')" in out["error"]["message"]


def test_misspelt_keys_name_the_nearest() -> None:
    out = call_tool("project", {**JOB, "layout": {**LAYOUT, "seq_lenn": 8192}})
    assert out["error"]["field"] == "layout.seq_lenn"
    assert "layout.seq_lenn: unknown key; did you mean seq_len?" in out["error"]["message"]
    out = call_tool("search", {**JOB, "gbs": 256, "seq_len": 8192, "constraints": {"tpp": 8}})
    assert out["error"]["message"] == "constraints.tpp: unknown key; did you mean tp?"
    assert "tp" in out["error"]["allowed"]


def test_openai_style_json_text_arguments_are_read_and_bad_ones_named() -> None:
    """An OpenAI tool call carries `function.arguments` as JSON text: call_tool answered "arguments must be a JSON
    object" to a valid object's text, and to malformed text alike; deeply nested text raised RecursionError."""
    import json

    good = call_tool("check_memory", json.dumps({**JOB, "layout": LAYOUT}))
    assert good["ok"] is True
    bad = call_tool("project", '{"model": "llama3-8b",')
    assert bad["error"]["message"].startswith("arguments are not valid JSON: Expecting property name")
    assert call_tool("project", "[" * 100_000)["error"]["message"].startswith("arguments are not valid JSON: maximum "
                                                                              "recursion depth exceeded")
    assert call_tool("project", "[1, 2]")["error"]["message"] == \
        "arguments must be a JSON object of the tool's fields (got list)"


def test_tools_call_args_nested_too_deep_is_one_line(tmp_path) -> None:
    from typer.testing import CliRunner

    from projtune.cli import app

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    result = CliRunner().invoke(app, ["tools", "call", "project", "-a", f"@{deep}"])
    assert result.exit_code == 2 and result.stderr.startswith("error: --args is not valid JSON: maximum recursion")
