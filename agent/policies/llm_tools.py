"""What the LLM may call, and how its calls are read: schemas, pydantic validation, JSON repair.

The LLM gets ``propose_layouts`` (its only way to put a layout forward) and three read-only
registry tools (``legal_axes``, ``check_memory``, ``project``).  Arguments arrive as JSON text;
:func:`parse_arguments` tries ``json.loads``, then ``json_repair``; what still is not a JSON
object becomes an error the LLM sees as the tool result (it re-asks).  A model that writes its
call into the message text instead of ``tool_calls`` is read with :func:`calls_in_text`.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import json_repair
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from projection.training_config import TrainingConfig
from tools.openai_schema import openai_tools, parameters_schema

READ_ONLY_TOOLS = ("legal_axes", "check_memory", "project")
PRIORITY_READ_ONLY = ("project", "check_memory", "legal_axes")
"""The read-only tools in the order they are kept when the prompt must shrink (legal_axes goes first: the
system prompt already lists the legal values)."""
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


LAYOUT_KEYS_FROM_JOB = ("gbs", "seq_len", "dp", "framework", "finetune", "packed_document_tokens")
"""Layout keys the job fixes (dp derived): left out of the LLM's schemas and filled in by the code."""
LAYOUT_KEYS_LEFT_OUT = ("fsdp_size", "moe_routing", "moe_capacity_factor", "recompute_modules",
                        "pp_first_stage_layers", "pp_last_stage_layers", "pp_layout",
                        "compile", "attention_backend", "grad_reduce_in_fp32")
"""Rarely tuned keys left out of the compact schema to save prompt tokens (a layout may still carry them; uneven
pipeline splits come from the search, which offers them where stages cannot be even; compile, the attention kernel
and the gradient-reduction dtype are the framework's (its defaults, or the user's pins), while the knobs the search
varies, comm_overlap and cuda_graphs, stay)."""
_SCHEMA_KEYS = ("type", "enum", "items", "properties", "required", "maxItems")


def _compact(node: Any) -> Any:
    """A JSON Schema without its documentation: only type, enum, items, properties, required (nullable unions
    collapse to the non-null type: the argument may simply be left out)."""
    if isinstance(node, list):
        return [_compact(v) for v in node]
    if not isinstance(node, dict):
        return node
    options = [o for o in node.get("anyOf", []) if o.get("type") != "null"]
    if options:
        return _compact(options[0]) if len(options) == 1 else {"anyOf": _compact(options)}
    out = {k: _compact(v) for k, v in node.items() if k in _SCHEMA_KEYS}
    if "properties" in node:
        out["properties"] = {k: _compact(v) for k, v in node["properties"].items()}
    return out


def layout_schema() -> dict[str, Any]:
    """The compact schema of one layout the LLM writes (TrainingConfig's keys the job does not fix)."""
    layout = _compact(parameters_schema(TrainingConfig))
    for name in (*LAYOUT_KEYS_FROM_JOB, *LAYOUT_KEYS_LEFT_OUT):
        layout.get("properties", {}).pop(name, None)
    layout["required"] = [r for r in layout.get("required", []) if r in layout.get("properties", {})]
    if not layout["required"]:
        layout.pop("required")
    return layout


def _one_line(text: str, limit: int = 160) -> str:
    """The first sentence of a description, at most ``limit`` characters."""
    first = re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0]
    return first if len(first) <= limit else first[:limit - 3].rstrip() + "..."


def propose_schema() -> dict[str, Any]:
    """The OpenAI function schema of propose_layouts (compact: no per-field documentation)."""
    return {"type": "function", "function": {
        "name": PROPOSE,
        "description": "Put 1-8 layouts forward to be checked and scored; an empty list with done=true stops.",
        "parameters": {"type": "object", "properties": {
            "layouts": {"type": "array", "maxItems": MAX_PER_CALL, "items": {
                "type": "object", "properties": {"layout": layout_schema(), "reason": {"type": "string"}},
                "required": ["layout"]}},
            "hypothesis": {"type": "string"},
            "done": {"type": "boolean"}},
            "required": ["layouts"]}}}


_READ_ONLY_PARAMETERS: dict[str, dict[str, Any]] = {
    "legal_axes": {"type": "object", "properties": {}},
    "check_memory": {"type": "object", "properties": {"layout": {}}, "required": ["layout"]},
    "project": {"type": "object", "properties": {"layout": {}}, "required": ["layout"]},
}
"""What the LLM writes for each read-only tool: the job (model, GPUs, network, profile, batch) is filled in by the
code (:meth:`agent.toolbox.Toolbox.call_from_model`), so only the layout is asked for."""


def llm_tool_schemas() -> list[dict[str, Any]]:
    """The LLM's tools, most useful first (a tight context drops them from the end, agent/prompt_budget.py):
    propose_layouts, then project, check_memory, legal_axes; names, one-line descriptions, compact arguments."""
    registry = {t["function"]["name"]: t["function"] for t in openai_tools()}
    out = [propose_schema()]
    for name in PRIORITY_READ_ONLY:
        params = copy.deepcopy(_READ_ONLY_PARAMETERS[name])
        if "layout" in params["properties"]:
            params["properties"]["layout"] = layout_schema()
        out.append({"type": "function", "function": {"name": name,
                                                     "description": _one_line(registry[name]["description"]),
                                                     "parameters": params}})
    return out


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
