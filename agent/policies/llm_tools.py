"""What the LLM may call, and how its calls are read: schemas, pydantic validation, JSON repair.

The LLM gets ``propose_layouts`` (its only way to put a layout forward) and three read-only
registry tools (``legal_axes``, ``check_memory``, ``project``).  Arguments arrive as JSON text;
:func:`parse_arguments` tries ``json.loads``, then ``json_repair``; what still is not a JSON
object becomes an error the LLM sees as the tool result (it re-asks).  A model that writes its
call into the message text instead of ``tool_calls`` is read with :func:`calls_in_text`.
"""

from __future__ import annotations

import json
import re
from typing import Any

import json_repair
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from projection.training_config import TrainingConfig
from tools.openai_schema import openai_tools, parameters_schema

READ_ONLY_TOOLS = ("legal_axes", "check_memory", "project")
PROPOSE = "propose_layouts"
MAX_PER_CALL = 8
MAX_RESULT_CHARS = 4000


class ProposedLayout(BaseModel):
    """One layout the LLM puts forward, with the hypothesis it tests."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    layout: dict[str, Any] = Field(validation_alias=AliasChoices("layout", "config"),
                                   description="Sweep-format keys (tp, pp, vpp, cp, ep, etp, mbs, precision, ...).")
    reason: str = Field(default="", validation_alias=AliasChoices("reason", "why", "hypothesis"))


class ProposeLayoutsArgs(BaseModel):
    """Arguments of propose_layouts."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    layouts: list[ProposedLayout] = Field(default_factory=list, max_length=MAX_PER_CALL,
                                          validation_alias=AliasChoices("layouts", "configs", "proposals"))
    hypothesis: str = ""
    done: bool = False


def propose_schema() -> dict[str, Any]:
    """The OpenAI function schema of propose_layouts (layout items use the TrainingConfig schema)."""
    layout = parameters_schema(TrainingConfig)
    for name in ("gbs", "seq_len", "dp", "framework"):
        layout.get("properties", {}).pop(name, None)
    return {"type": "function", "function": {
        "name": PROPOSE,
        "description": ("Put 1-8 layouts forward to be checked for legality, screened for memory and projected. "
                        "Illegal ones come back with the reason. Call with an empty list and done=true to stop."),
        "parameters": {"type": "object", "properties": {
            "layouts": {"type": "array", "maxItems": MAX_PER_CALL, "items": {
                "type": "object", "properties": {"layout": layout, "reason": {"type": "string"}},
                "required": ["layout", "reason"]}},
            "hypothesis": {"type": "string", "description": "What this batch tests."},
            "done": {"type": "boolean", "description": "True when nothing better is left to try."}},
            "required": ["layouts"]}}}


def llm_tool_schemas() -> list[dict[str, Any]]:
    """propose_layouts plus the read-only registry tools, as OpenAI function schemas."""
    return [propose_schema(), *[t for t in openai_tools() if t["function"]["name"] in READ_ONLY_TOOLS]]


def parse_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(arguments, note): strict JSON, else repaired JSON (note says so), else (None, why)."""
    if isinstance(raw, dict):
        return raw, None
    text = raw if isinstance(raw, str) else ""
    if not text.strip():
        return {}, None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        repaired = json_repair.loads(text)
        if isinstance(repaired, dict) and repaired:
            return repaired, f"repaired malformed JSON arguments ({err.msg})"
        return None, f"arguments are not valid JSON ({err.msg} at char {err.pos}); send a JSON object"
    if not isinstance(value, dict):
        return None, "arguments must be a JSON object"
    return value, None


def calls_in_text(content: str) -> list[tuple[str, dict[str, Any]]]:
    """Tool calls written into message text: ```json fences, <tool_call> tags or a bare {...} object."""
    blocks = re.findall(r"<tool_call>(.*?)</tool_call>", content, re.S) or re.findall(
        r"```(?:json)?\s*(.*?)```", content, re.S)
    if not blocks:
        start, end = content.find("{"), content.rfind("}")
        blocks = [content[start:end + 1]] if 0 <= start < end else []
    calls = []
    for block in blocks:
        value = json_repair.loads(block)
        if not isinstance(value, dict) or not value:
            continue
        name = value.get("name")
        args = value.get("arguments", value.get("parameters"))
        if isinstance(name, str) and isinstance(args, dict | str):
            parsed, _ = parse_arguments(args)
            if parsed is not None:
                calls.append((name, parsed))
        elif any(k in value for k in ("layouts", "configs", "proposals")):
            calls.append((PROPOSE, value))
    return calls


def tool_result_text(payload: Any) -> str:
    """A tool result as JSON text for the LLM, cut to a readable size."""
    text = json.dumps(payload, default=str)
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + " ...(truncated)"
