"""The MCP server (official SDK 2.x): every tool listed, search and check_memory called, structured errors.

Three transports: in-process, stdio (`projtune mcp` as a subprocess) and streamable HTTP
(`projtune mcp --http --port N` on 127.0.0.1, killed at the end). Each test is bounded in time.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tools.mcp_server import build_server
from tools.registry import tool_names

CLI = [sys.executable, "-c", "from projtune.cli import main; main()"]
JOB = {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8}
LAYOUT = {"tp": 2, "pp": 2, "mbs": 1, "gbs": 32, "seq_len": 4096, "sequence_parallel": True, "zero": 1}
SEARCH = {**JOB, "gbs": 32, "seq_len": 4096, "top_k": 2, "constraints": {"precision": "bf16", "pp": 1}}
LIMIT_S = 15


async def _exercise(client: Client) -> None:
    listed = await client.list_tools()
    assert sorted(t.name for t in listed.tools) == sorted(tool_names())
    project = next(t for t in listed.tools if t.name == "project")
    assert "layout" in project.input_schema["properties"]

    search = await client.call_tool("search", SEARCH)
    assert not search.is_error
    assert search.structured_content["ok"] is True
    assert len(search.structured_content["result"]["ranked"]) == 2
    assert json.loads(search.content[0].text)["ok"] is True

    memory = await client.call_tool("check_memory", {**JOB, "layout": LAYOUT})
    assert not memory.is_error
    assert memory.structured_content["result"]["verdict"] in ("fits", "at risk", "out of memory")

    bad = await client.call_tool("check_memory", {**JOB, "model": "llama3-8bb", "layout": LAYOUT})
    assert bad.is_error
    error = bad.structured_content["error"]
    assert error["field"] == "model" and error["nearest"][0] == "llama3-8b"

    bad_type = await client.call_tool("project", {**JOB, "num_gpus": "eight", "layout": LAYOUT})
    assert bad_type.is_error and bad_type.structured_content["error"]["field"] == "num_gpus"


def _run(client: Client) -> None:
    async def main() -> None:
        with anyio.fail_after(LIMIT_S):
            async with client:
                await _exercise(client)

    anyio.run(main)


def test_in_process() -> None:
    _run(Client(build_server(), raise_exceptions=True))


def test_stdio_subprocess() -> None:
    _run(Client(StdioServerParameters(command=CLI[0], args=[*CLI[1:], "mcp"])))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def http_server() -> Iterator[str]:
    port = _free_port()
    process = subprocess.Popen([*CLI, "mcp", "--http", "--port", str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + LIMIT_S
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"server exited: {process.stderr.read().decode() if process.stderr else ''}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.1)
        else:
            raise AssertionError("server did not start listening")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait(timeout=10)


def test_streamable_http_subprocess(http_server: str) -> None:
    _run(Client(http_server))


def test_output_schema_is_the_success_envelope() -> None:
    async def main() -> Any:
        async with Client(build_server()) as client:
            return (await client.list_tools()).tools

    tools = anyio.run(main)
    search = next(t for t in tools if t.name == "search")
    assert search.output_schema["required"] == ["ok", "tool", "result"]
    assert search.annotations.read_only_hint is True


def test_http_keeps_idle_connections_longer_than_a_tool_call() -> None:
    from tools.mcp_server import http_timeouts

    for deadline in (5.0, 120.0, 3600.0):
        assert http_timeouts(deadline)["timeout_keep_alive"] > deadline   # the 5 s default dropped sessions


def test_a_misspelt_tool_name_gets_the_structured_error_with_the_nearest() -> None:
    """The SDK answered "Unknown tool: projct" (text only): no nearest name, no allowed list."""
    async def main() -> None:
        with anyio.fail_after(LIMIT_S):
            async with Client(build_server()) as client:
                result = await client.call_tool("projct", {})
                assert result.is_error
                error = result.structured_content["error"]
                assert error["message"] == "unknown tool 'projct'; did you mean project?"
                assert error["field"] == "name" and "project" in error["allowed"]

    anyio.run(main)
