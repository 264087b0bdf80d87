"""Serve every registered tool over MCP with the official ``mcp`` SDK 2.x (``MCPServer``): stdio or streamable HTTP.

Arguments are not validated by the SDK (a pass-through argument model): they go to
:func:`tools.registry.call_tool`, so a bad call returns our structured error (``is_error``
set, ``structured_content`` = ``{"ok": false, "error": {...}}``) rather than the SDK's text.
The advertised ``inputSchema`` is the tool's pydantic input schema; the ``outputSchema`` is
the success envelope ``{"ok", "tool", "result"}`` around the output model's schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import version
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver.tools.base import Tool as MCPTool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ConfigDict

from tools.json_out import json_text
from tools.registry import Tool, call_tool, registered, tool_deadline_s

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
        payload = call_tool(tool.name, arguments, untrusted=True, deadline_s=tool_deadline_s())
        return CallToolResult(content=[TextContent(type="text", text=json_text(payload))],
                              structured_content=payload, is_error=not payload["ok"])

    handle.__name__ = tool.name
    return handle


def _progress_handler(tool: Tool):  # noqa: ANN202
    """An async handler that runs the tool in a worker thread and relays its progress events as MCP
    ``notifications/progress`` (rounds of the tuning agent; a no-op when the client sent no progress token)."""
    import anyio
    import anyio.from_thread
    import anyio.to_thread

    from tools.functions import TUNE_PROGRESS

    async def handle(ctx: Any, **arguments: Any) -> CallToolResult:
        steps = {"n": 0}

        def relay(event: str, data: dict[str, Any]) -> None:
            if event not in ("seed", "round", "reflect", "stop"):
                return
            steps["n"] += 1
            detail = ", ".join(f"{k} {v}" for k, v in data.items() if v is not None)
            try:
                anyio.from_thread.run(ctx.report_progress, float(steps["n"]), None, f"{event}: {detail}")
            except Exception:  # noqa: BLE001 - progress is best effort; the answer still comes back
                pass

        def work() -> dict[str, Any]:
            token = TUNE_PROGRESS.set(relay)
            try:
                return call_tool(tool.name, arguments, untrusted=True)
            finally:
                TUNE_PROGRESS.reset(token)

        payload = await anyio.to_thread.run_sync(work)
        return CallToolResult(content=[TextContent(type="text", text=json_text(payload))],
                              structured_content=payload, is_error=not payload["ok"])

    handle.__name__ = tool.name
    return handle


_WITH_PROGRESS = frozenset({"tune"})


def mcp_tool(tool: Tool) -> MCPTool:
    """One registry tool as an MCPServer tool (``tune`` reports progress)."""
    progress = tool.name in _WITH_PROGRESS
    return MCPTool(
        fn=_progress_handler(tool) if progress else _handler(tool), name=tool.name, description=tool.description,
        parameters=tool.input_model.model_json_schema(),
        fn_metadata=FuncMetadata(arg_model=_PassThrough, output_schema=output_envelope_schema(tool)),
        is_async=progress, context_kwarg="ctx" if progress else None, annotations=_WRITES_NOTHING,
    )


def build_server(tools: Sequence[Tool] | None = None) -> MCPServer:
    """An MCPServer exposing ``tools`` (default: the whole registry, with tools registered from above)."""
    chosen = registered() if tools is None else tools
    return MCPServer(
        name="projtune", version=version("projtune"), tools=[mcp_tool(t) for t in chosen], log_level="WARNING",
        instructions="Projection tools for distributed LLM training layouts: list_models/list_hardware for ids, "
                     "search for the best layouts, project/check_memory/compare/explain for given layouts, "
                     "export_launch_config to write one for Megatron-LM, Primus or torchtitan.",
    )


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
TOKEN_ENV = "PROJTUNE_MCP_TOKEN"


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds only this machine (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class BearerAuth:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer <token>`` (constant-time check), else 401."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self._token = app, token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            import hmac

            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, b"Bearer " + self._token):
                body = b'{"error": "unauthorized: send Authorization: Bearer <token>"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def check_bind(host: str, token: str | None) -> None:
    """Refuse a non-loopback HTTP bind without a bearer token.

    Raises:
        ProjtuneError: ``host`` is reachable from other machines and no token is configured.
    """
    from projection.errors import ProjtuneError

    if not is_loopback(host) and not token:
        raise ProjtuneError(f"refusing to serve MCP on {host} (reachable from other machines) without "
                            f"authentication: set {TOKEN_ENV} to a bearer token (clients send 'Authorization: "
                            "Bearer TOKEN'), or bind 127.0.0.1")


def serve(*, http: bool = False, host: str = "127.0.0.1", port: int = DEFAULT_HTTP_PORT,
          token: str | None = None) -> None:
    """Run the server: stdio (default) or streamable HTTP at http://HOST:PORT/mcp.

    HTTP on a non-loopback address needs a bearer token (``token`` or ``$PROJTUNE_MCP_TOKEN``);
    when one is set every request must carry it, on any address.  Each tool call has a deadline
    (``$PROJTUNE_TOOL_DEADLINE`` seconds, default 120) after which its work is cancelled.
    """
    import os

    server = build_server()
    if not http:
        server.run()
        return
    token = token or os.environ.get(TOKEN_ENV) or None
    check_bind(host, token)
    import uvicorn

    app: Any = server.streamable_http_app(host=host)
    if token:
        app = BearerAuth(app, token)
    uvicorn.run(app, host=host, port=port, log_level="warning")
