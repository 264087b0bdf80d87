"""`projtune mcp --http`: a port it cannot serve is one line and exit 2, before the server is announced.

Before this check a port above 65535 ended in an OverflowError traceback from asyncio, and a port in use in
uvicorn's own log line and exit code 3, after "projtune MCP server on ..." had been printed.
"""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

from projection.errors import ProjtuneError
from projtune.cli import app
from tools.mcp_server import check_port

runner = CliRunner()


@pytest.mark.parametrize("port", [0, 65536, 99999, -1])
def test_port_outside_the_tcp_range_is_refused(port: int) -> None:
    with pytest.raises(ProjtuneError, match=r"is not a TCP port: give 1-65535 \(default 8765\)"):
        check_port("127.0.0.1", port)


def test_port_in_use_is_one_line_exit_2_and_no_announcement() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        result = runner.invoke(app, ["mcp", "--http", "--port", str(port)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: cannot serve MCP on 127.0.0.1:{port}: Address already in use; give another --port (1-65535) or "
        "stop what holds it"]


def test_a_free_port_passes() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    check_port("127.0.0.1", port)
