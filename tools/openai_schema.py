"""OpenAI function-calling schemas for every registered tool (``projtune tools schema`` prints them).

Each tool becomes ``{"type": "function", "function": {"name", "description", "parameters"}}``
with the input model's JSON Schema as ``parameters``.  ``$ref``s are inlined and ``$defs``
dropped: several local OpenAI-compatible servers (vLLM guided decoding, llama.cpp grammars)
handle a self-contained schema more reliably, and our models are not recursive.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from tools.registry import Tool, registered

_REF_PREFIX = "#/$defs/"


def _inline(node: Any, defs: dict[str, Any], depth: int = 0) -> Any:
    if depth > 32:
        raise ValueError("schema nesting too deep (recursive model?)")
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            target = copy.deepcopy(defs[ref.removeprefix(_REF_PREFIX)])
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            return _inline({**target, **siblings}, defs, depth + 1)
        return {k: _inline(v, defs, depth + 1) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline(v, defs, depth + 1) for v in node]
    return node


def parameters_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The self-contained JSON Schema (Draft 2020-12) of a tool's input model."""
    schema = model.model_json_schema()
    inlined = _inline(schema, schema.get("$defs", {}))
    inlined.setdefault("type", "object")
    inlined.setdefault("properties", {})
    return inlined


def openai_tool(tool: Tool) -> dict[str, Any]:
    """One tool as an OpenAI function-calling schema."""
    return {"type": "function",
            "function": {"name": tool.name, "description": tool.description,
                         "parameters": parameters_schema(tool.input_model)}}


def openai_tools(tools: Sequence[Tool] | None = None) -> list[dict[str, Any]]:
    """Every tool as an OpenAI function-calling schema, registry order (default: every registered tool)."""
    return [openai_tool(t) for t in (registered() if tools is None else tools)]
