"""Serve every registered tool over MCP with the official ``mcp`` SDK 2.x (``MCPServer``): stdio or streamable HTTP.

Arguments are not validated by the SDK (a pass-through argument model): they go to
:func:`tools.registry.call_tool`, so a bad call returns our structured error (``is_error``
set, ``structured_content`` = ``{"ok": false, "error": {...}}``) rather than the SDK's text.
The advertised ``inputSchema`` is the tool's pydantic input schema; the ``outputSchema`` is
the success envelope ``{"ok", "tool", "result"}`` around the output model's schema.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def _result(payload: dict[str, Any]) -> CallToolResult:
    """A registry payload as the MCP result: JSON text, structured content, ``is_error`` when not ok."""
    return CallToolResult(content=[TextContent(type="text", text=json_text(payload))],
                          structured_content=payload, is_error=not payload["ok"])


def _handler(tool: Tool):  # noqa: ANN202 - the SDK inspects nothing of this function's signature
    def handle(**arguments: Any) -> CallToolResult:
        return _result(call_tool(tool.name, arguments, untrusted=True, deadline_s=tool_deadline_s()))

    handle.__name__ = tool.name
    return handle


_RELAYED = ("search", "seed", "round", "reflect", "stop")
SEARCH_PROGRESS_EVERY_S = 0.5
"""Least time between two relayed search-progress events (a search reports every few hundred layouts)."""


def call_deadline_s(arguments: dict[str, Any]) -> float:
    """The wall-clock limit of one call: the caller's ``deadline_s`` when valid, capped by the server's deadline."""
    server = tool_deadline_s()
    asked = arguments.get("deadline_s")
    if isinstance(asked, int | float) and not isinstance(asked, bool) and 0 < asked < server:
        return float(asked)
    return server


def call_with_progress(name: str, arguments: dict[str, Any], deadline_s: float,
                       relay: Any = None) -> dict[str, Any]:
    """Run a tool in a forked child that streams its progress events here; kill it at the deadline.

    ``relay(event, data)`` gets every progress event (the tuning agent's search counts, rounds); the
    last layout and trial counts seen go into the ``deadline_exceeded`` error when the child is
    killed, so a caller learns how far it got and never gets a partial answer as if complete.
    Without fork (not POSIX) the call runs in-process, bounded by the tool's own ``deadline_s``.
    """
    import multiprocessing
    import signal
    import time

    from projection.errors import DeadlineExceeded
    from tools.registry import error, reap_child

    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:
        return _call_relaying(name, arguments, relay)
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child_with_progress, args=(sender, name, arguments), daemon=False)
    started = time.monotonic()
    child.start()
    sender.close()
    payload: dict[str, Any] | None = None
    counts = {"layouts": 0, "trials": 0}
    try:
        while (left := started + deadline_s - time.monotonic()) > 0 and receiver.poll(left):
            try:
                message = receiver.recv()
            except (EOFError, OSError):
                break
            if message[0] == "done":
                payload = message[1]
                break
            _, event, data = message
            if event == "search" and isinstance(data.get("done"), int):
                counts["layouts"] = max(counts["layouts"], data["done"])
            elif event == "trial":
                counts["trials"] += 1
            if relay is not None:
                relay(event, data)
    finally:
        receiver.close()
        reap_child(child, answered=payload is not None)
    if payload is not None:
        return payload
    if child.exitcode in (None, -signal.SIGKILL):
        err = DeadlineExceeded(name, deadline_s, time.monotonic() - started, counts["layouts"], counts["trials"])
        return {"ok": False, "tool": name, "error": error(err.field, str(err), [], **err.details)}
    return {"ok": False, "tool": name,
            "error": error(None, f"tool {name} stopped without an answer (exit code {child.exitcode})", [])}


def _call_relaying(name: str, arguments: dict[str, Any], relay: Any) -> dict[str, Any]:
    from tools.functions import TUNE_PROGRESS

    token = TUNE_PROGRESS.set(relay)
    try:
        return call_tool(name, arguments, untrusted=True)
    finally:
        TUNE_PROGRESS.reset(token)


def _child_with_progress(sender: Any, name: str, arguments: dict[str, Any]) -> None:
    import contextlib
    import os
    import time

    with contextlib.suppress(OSError):
        os.setpgid(0, 0)   # own process group: the deadline kills any search workers too
    last = {"search": 0.0}

    def send(event: str, data: dict[str, Any]) -> None:
        if event not in _RELAYED and event != "trial":
            return
        if event == "search" and data.get("done") != data.get("total"):
            now = time.monotonic()
            if now - last["search"] < SEARCH_PROGRESS_EVERY_S:
                return
            last["search"] = now
        sender.send(("progress", event, {k: v for k, v in data.items() if isinstance(v, int | float | str | None)}))

    payload = _call_relaying(name, arguments, send)
    sender.send(("done", payload))
    sender.close()


def _progress_handler(tool: Tool):  # noqa: ANN202
    """An async handler that runs the tool in a killable child (:func:`call_with_progress`) and relays its
    progress events as MCP ``notifications/progress`` (layouts searched, rounds of the tuning agent; a no-op
    when the client sent no progress token).  The call stops at its deadline (:func:`call_deadline_s`)."""
    import anyio
    import anyio.from_thread
    import anyio.to_thread

    async def handle(ctx: Any, **arguments: Any) -> CallToolResult:
        steps = {"n": 0}

        def relay(event: str, data: dict[str, Any]) -> None:
            if event not in _RELAYED:
                return
            steps["n"] += 1
            detail = ", ".join(f"{k} {v}" for k, v in data.items() if v is not None)
            try:
                anyio.from_thread.run(ctx.report_progress, float(steps["n"]), None, f"{event}: {detail}")
            except Exception:  # noqa: BLE001 - progress is best effort; the answer still comes back
                pass

        def work() -> dict[str, Any]:
            return call_with_progress(tool.name, arguments, call_deadline_s(arguments), relay)

        return _result(await anyio.to_thread.run_sync(work))

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


class _Server(MCPServer):
    """An MCPServer whose answer to an unknown tool name is the registry's structured error (the nearest name and
    the allowed ones), not the SDK's bare "Unknown tool: projct"."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """The tool's result; for a name no tool has, ``{"ok": false, "error": {...}}`` with ``is_error``."""
        if self._tool_manager.get_tool(name) is None:
            return _result(call_tool(name, arguments or {}, untrusted=True))
        return await super().call_tool(name, arguments, context)


def build_server(tools: Sequence[Tool] | None = None) -> MCPServer:
    """An MCPServer exposing ``tools`` (default: the whole registry, with tools registered from above)."""
    chosen = registered() if tools is None else tools
    return _Server(
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


def check_port(host: str, port: int) -> None:
    """Refuse a port outside 1-65535, a host that does not resolve, or an address already in use, in one line
    (uvicorn would log its own error and exit 1 or 3, after `projtune mcp` announced the server).

    The probe binds the address the way uvicorn will (``SO_REUSEADDR``) and closes it at once.

    Raises:
        ProjtuneError: the port, the host or the address cannot be served.
    """
    import socket

    from projection.errors import ProjtuneError

    if not 1 <= port <= 65535:
        raise ProjtuneError(f"--port {port} is not a TCP port: give 1-65535 (default {DEFAULT_HTTP_PORT})")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as err:
        reason = getattr(err, "strerror", None) or "not a name or address"
        raise ProjtuneError(f"--host '{host}' cannot be resolved ({reason}): give an address such as 127.0.0.1 "
                            "or a name this machine resolves") from err
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as err:
            raise ProjtuneError(f"cannot serve MCP on {host}:{port}: {err.strerror or err}; give another --port "
                                "(1-65535) or stop what holds it") from err


KEEP_ALIVE_MARGIN_S = 30.0
"""Seconds an idle keep-alive connection outlives the longest tool call (uvicorn's own default is 5 s)."""


def http_timeouts(deadline_s: float) -> dict[str, Any]:
    """uvicorn settings for long tool calls: keep idle connections open longer than any call may take.

    With uvicorn's default 5 s keep-alive, a client that reuses a pooled connection while another of its
    calls runs for seconds (a ``search``) races the server closing that idle connection: the request is
    written to a socket the server has just closed and the client's session dies with ``ReadError``
    (issue 29: up to 45 of 50 sessions dropped).  The connection is kept for the tool deadline plus
    :data:`KEEP_ALIVE_MARGIN_S`; a graceful shutdown waits at most 5 s for calls in flight.
    """
    return {"timeout_keep_alive": int(deadline_s + KEEP_ALIVE_MARGIN_S), "timeout_graceful_shutdown": 5,
            "backlog": 2048}


def serve(*, http: bool = False, host: str = "127.0.0.1", port: int = DEFAULT_HTTP_PORT,
          token: str | None = None, announce: Callable[[str], None] | None = None) -> None:
    """Run the server: stdio (default) or streamable HTTP at http://HOST:PORT/mcp.

    HTTP on a non-loopback address needs a bearer token (``token`` or ``$PROJTUNE_MCP_TOKEN``);
    when one is set every request must carry it, on any address.  Each tool call has a deadline
    (``$PROJTUNE_TOOL_DEADLINE`` seconds, default 120) after which its work is cancelled.  ``announce``
    gets the server's URL once the token, the port and the address have been checked (:func:`check_port`).
    """
    import os

    server = build_server()
    if not http:
        server.run()
        return
    from projection.settings import load_settings

    secret = load_settings().mcp_token
    token = token or (secret.get_secret_value() if secret else None)
    check_bind(host, token)
    check_port(host, port)
    if announce is not None:
        announce(f"http://{host}:{port}/mcp")
    import uvicorn

    app: Any = server.streamable_http_app(host=host)
    if token:
        app = BearerAuth(app, token)
    uvicorn.run(app, host=host, port=port, log_level="warning", **http_timeouts(tool_deadline_s()))
