"""Serve every registered tool over MCP with the official ``mcp`` SDK 2.x (``MCPServer``): stdio or streamable HTTP.

Arguments are not validated by the SDK (a pass-through argument model): they go to
:func:`tools.registry.call_tool`, so a bad call returns our structured error (``is_error``
set, ``structured_content`` = ``{"ok": false, "error": {...}}``) rather than the SDK's text.
The advertised ``inputSchema`` is the tool's pydantic input schema; the ``outputSchema`` is
the success envelope ``{"ok", "tool", "result"}`` around the output model's schema.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver.tools.base import Tool as MCPTool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ConfigDict

from tools.registry import TOOLS, Tool, call_tool

DEFAULT_HTTP_PORT = 8765
_WRITES_NOTHING = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)


class _PassThrough(ArgModelBase):
    """Accept any JSON object; call_tool validates it."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    def model_dump_one_level(self) -> dict[str, Any]:
        """Every key the client sent, unvalidated."""
        return dict(self.model_extra or {})


def output_envelope_schema(tool: Tool) -> dict[str, Any]:
    """JSON Schema of a successful call's structured content."""
    result = tool.output_model.model_json_schema(mode="serialization")
    defs = result.pop("$defs", None)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"ok": {"const": True}, "tool": {"type": "string"}, "result": result},
        "required": ["ok", "tool", "result"],
    }
    if defs:
        schema["$defs"] = defs
    return schema


def _handler(tool: Tool):  # noqa: ANN202 - the SDK inspects nothing of this function's signature
    def handle(**arguments: Any) -> CallToolResult:
        payload = call_tool(tool.name, arguments)
        return CallToolResult(content=[TextContent(type="text", text=json.dumps(payload))],
                              structured_content=payload, is_error=not payload["ok"])

    handle.__name__ = tool.name
    return handle


def mcp_tool(tool: Tool) -> MCPTool:
    """One registry tool as an MCPServer tool."""
    return MCPTool(
        fn=_handler(tool), name=tool.name, description=tool.description,
        parameters=tool.input_model.model_json_schema(),
        fn_metadata=FuncMetadata(arg_model=_PassThrough, output_schema=output_envelope_schema(tool)),
        is_async=False, context_kwarg=None, annotations=_WRITES_NOTHING,
    )


def build_server(tools: Sequence[Tool] = TOOLS) -> MCPServer:
    """An MCPServer exposing ``tools`` (default: the whole registry)."""
    from projtune import __version__

    return MCPServer(
        name="projtune", version=__version__, tools=[mcp_tool(t) for t in tools], log_level="WARNING",
        instructions="Projection tools for distributed LLM training layouts: list_models/list_hardware for ids, "
                     "search for the best layouts, project/check_memory/compare/explain for given layouts, "
                     "export_launch_config to write one for Megatron-LM, Primus or torchtitan.",
    )


def serve(*, http: bool = False, host: str = "127.0.0.1", port: int = DEFAULT_HTTP_PORT) -> None:
    """Run the server: stdio (default) or streamable HTTP at http://HOST:PORT/mcp."""
    server = build_server()
    if http:
        server.run("streamable-http", host=host, port=port)
    else:
        server.run()
