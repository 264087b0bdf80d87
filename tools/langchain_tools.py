"""LangChain ``StructuredTool``s for the agent, built from the one registry.

Each tool validates with its pydantic input model (the schema ``bind_tools`` sends) and runs
through :func:`tools.registry.call_tool`, so a bad call comes back as the same structured
error JSON (``{"ok": false, "error": {...}}``) instead of an exception.  Content is that JSON
text; the artifact is the dict.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.tools import StructuredTool
from pydantic import BaseModel, ValidationError

from tools.registry import TOOLS, Tool, _validation_error, call_tool


def _plain(value: Any) -> Any:
    """Nested pydantic models (already validated by LangChain) back to JSON-able data."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _runner(tool: Tool) -> Callable[..., tuple[str, dict[str, Any]]]:
    def run(**kwargs: Any) -> tuple[str, dict[str, Any]]:
        payload = call_tool(tool.name, _plain(kwargs))
        return json.dumps(payload), payload

    run.__name__ = tool.name
    return run


def _on_invalid(tool: Tool) -> Callable[[ValidationError], str]:
    def handle(err: ValidationError) -> str:
        return json.dumps({"ok": False, "tool": tool.name, "error": _validation_error(tool.input_model, err)})

    return handle


def langchain_tool(tool: Tool) -> StructuredTool:
    """One registry tool as a LangChain StructuredTool (content: JSON text; artifact: the dict)."""
    return StructuredTool.from_function(
        func=_runner(tool), name=tool.name, description=tool.description, args_schema=tool.input_model,
        response_format="content_and_artifact", handle_validation_error=_on_invalid(tool),
    )


def langchain_tools(tools: Sequence[Tool] = TOOLS) -> list[StructuredTool]:
    """Every registry tool as a LangChain StructuredTool, registry order."""
    return [langchain_tool(t) for t in tools]
