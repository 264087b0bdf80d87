"""The ``tune`` tool's deadline: bounded argument, a typed 'deadline_exceeded' error with counts, no partial answer.

In-process (the agent checks the clock at every progress event), over MCP (the server also runs the
call in a child it kills at the deadline and relays progress as notifications), and the kill path alone.
"""

from __future__ import annotations

import time

import anyio
import pytest

from agent.tool import call_tool
from tools.mcp_server import build_server, call_deadline_s, call_with_progress

BIG = "tune llama3.1 405b on 1024 h100, seq 8k"


def _is_deadline_error(payload: dict[str, object]) -> dict[str, object]:
    assert payload["ok"] is False and "result" not in payload, "a stopped run must not come back as an answer"
    error = payload["error"]
    assert isinstance(error, dict)
    assert error["code"] == "deadline_exceeded" and error["field"] == "deadline_s"
    assert "deadline exceeded after" in str(error["message"]) and "no answer" in str(error["message"])
    assert isinstance(error["layouts"], int) and isinstance(error["trials"], int)
    return error


def test_a_tiny_deadline_stops_the_tune_with_a_typed_error() -> None:
    started = time.process_time()      # this process's CPU time: what the stopped work would have spent, not load
    error = _is_deadline_error(call_tool("tune", {"request": BIG, "deadline_s": 0.01}))
    assert time.process_time() - started < 30
    assert error["deadline_s"] == 0.01 and float(str(error["elapsed_s"])) > 0.01
    assert f"after {error['layouts']} layouts/{error['trials']} trials" in str(error["message"])


@pytest.mark.parametrize("bad", [0, -1, 1e6, "soon"])
def test_the_deadline_argument_is_bounded(bad: object) -> None:
    out = call_tool("tune", {"request": "tune llama3 8b on 8 h100", "deadline_s": bad})
    assert out["ok"] is False and out["error"]["field"] == "deadline_s"


def test_a_generous_deadline_changes_nothing() -> None:
    args = {"request": "tune llama3 8b on 8 h100", "max_rounds": 1}
    plain, bounded = call_tool("tune", args), call_tool("tune", {**args, "deadline_s": 600})
    assert plain["ok"] and bounded["ok"]
    assert plain["result"]["report"]["best"] == bounded["result"]["report"]["best"]


def test_the_server_kills_a_call_at_its_deadline_and_says_how_far_it_got(monkeypatch: pytest.MonkeyPatch) -> None:
    import tools.mcp_server as server

    def hangs(name: str, arguments: dict[str, object], relay: object) -> dict[str, object]:
        relay("search", {"done": 123, "total": 123})      # progress, then a call that never answers
        time.sleep(60)
        raise AssertionError("the child should have been killed")

    monkeypatch.setattr(server, "_call_relaying", hangs)   # the forked child runs the patched function
    events: list[str] = []
    started = time.monotonic()
    # no deadline_s in the arguments: only the kill stops it (deterministic: the child never answers)
    error = _is_deadline_error(call_with_progress("tune", {"request": BIG}, 1.0, lambda e, d: events.append(e)))
    assert time.monotonic() - started < 45   # the child sleeps 60 s: finishing sooner proves it was killed
    assert error["deadline_s"] == 1.0 and error["layouts"] == 123 and events == ["search"]
    assert call_deadline_s({"deadline_s": 5}) == 5.0 and call_deadline_s({"deadline_s": "x"}) > 5


def test_mcp_tune_honours_a_tiny_deadline_and_reports_progress() -> None:
    from mcp import Client

    progress: list[str | None] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    async def main() -> tuple[bool, dict[str, object], dict[str, object]]:
        with anyio.fail_after(60):
            async with Client(build_server(), raise_exceptions=True) as client:
                listed = await client.list_tools()
                schema = next(t for t in listed.tools if t.name == "tune").input_schema
                result = await client.call_tool("tune", {"request": BIG, "deadline_s": 0.05},
                                                progress_callback=on_progress)
                return result.is_error, result.structured_content, schema

    is_error, payload, schema = anyio.run(main)
    assert "deadline_s" in schema["properties"]
    assert is_error
    _is_deadline_error(payload)
