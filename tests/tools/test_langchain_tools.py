"""LangChain StructuredTools from the registry: same schemas, JSON results, structured errors, no exceptions."""

from __future__ import annotations

import json
from typing import Any

from tools.langchain_tools import langchain_tools
from tools.registry import TOOLS


def test_one_structured_tool_per_registry_tool() -> None:
    tools = langchain_tools()
    assert [t.name for t in tools] == [t.name for t in TOOLS]
    assert all(t.args_schema is r.input_model for t, r in zip(tools, TOOLS, strict=True))


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    tool = next(t for t in langchain_tools() if t.name == name)
    message = tool.invoke({"type": "tool_call", "id": "call-1", "name": name, "args": args})
    return json.loads(message.content)


def test_valid_call_returns_the_registry_payload(job: dict[str, Any], layout: dict[str, Any]) -> None:
    payload = _call("check_memory", {**job, "layout": layout})
    assert payload["ok"] and payload["result"]["verdict"] in ("fits", "at risk", "out of memory")


def test_invalid_calls_return_structured_errors(job: dict[str, Any], layout: dict[str, Any]) -> None:
    bad_value = _call("project", {**job, "layout": {**layout, "precision": "bf32"}})
    assert bad_value["ok"] is False and bad_value["error"]["field"] == "layout.precision"
    unknown = _call("project", {**job, "model": "llama3-8bb", "layout": layout})
    assert unknown["ok"] is False and unknown["error"]["nearest"][0] == "llama3-8b"
