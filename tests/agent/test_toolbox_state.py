"""The agent's tool door, its typed failures, the one scored-layout shape, and policy state in the graph state.

- a tool that fails on a typed error (projection/errors.py, input validation) is a ToolFailure in the state's
  ``tool_errors`` and in the report (JSON field and a text line); the run still answers;
- an unexpected exception (an engine bug) is not swallowed into a quiet trial: the run raises;
- the LLM's path (``call_from_model``) turns bad model arguments into the error the model reads;
- LayoutScore is frozen, round-trips to the same JSON, and every scored-layout view is one;
- no policy reaches the graph through a ``status()`` side channel: notes and the conversation are state fields.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_jobs import SMALL
from fake_openai_server import FakeOpenAIServer, reply, tool_call
from pydantic import ValidationError

from agent.llm_config import LLMConfig
from agent.policies.llm import LLMPolicy
from agent.text.replies import report_text
from agent.report import RankedLayout, TuneReport
from agent.run import tune
from agent.toolbox import Toolbox, ToolFailed, ToolFailure
from projection.errors import IllegalLayoutError
from tools import functions
from tools.layout_score import SCORE_FIELDS, LayoutScore, ProjectedLayout, score_of
from tools.schemas import CompareRow
from tools.search import Candidate

AGENT = Path(__file__).resolve().parents[2] / "agent"
BOX = {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8, "gpus_per_node": 8}
LAYOUT = {"tp": 2, "pp": 1, "mbs": 1, "gbs": 64, "seq_len": 4096, "precision": "bf16", "zero": 1}


def test_a_typed_tool_error_is_a_tool_failure_in_the_report(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(inp: Any) -> Any:
        raise IllegalLayoutError(["explain is broken for this test"])

    monkeypatch.setattr(functions, "explain", broken)
    out = tune(SMALL, budget={"max_rounds": 1})
    report = out.report
    assert report.status == "ok" and report.best is not None and report.why == []
    assert report.tool_errors and {(f.tool, f.kind) for f in report.tool_errors} == {("explain", "illegal_layout")}
    assert "explain is broken for this test" in report.tool_errors[0].message
    assert any(e["tool"] == "explain" for e in out.state["tool_errors"])     # the graph state holds it too
    dumped = report.model_dump(mode="json")
    assert dumped["tool_errors"][0]["kind"] == "illegal_layout"
    assert TuneReport.model_validate(dumped) == report
    assert any(line.startswith("tool errors: ") and "explain (illegal_layout)" in line
               for line in report_text(report).splitlines())


def test_a_clean_run_has_no_tool_errors_key() -> None:
    report = tune(SMALL, budget={"max_rounds": 1}).report
    assert report.tool_errors == [] and "tool_errors" not in report.model_dump(mode="json")
    assert "tool errors" not in report_text(report)


def test_an_unexpected_exception_is_not_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    def bug(inp: Any) -> Any:
        raise ZeroDivisionError("engine bug")

    monkeypatch.setattr(functions, "check_memory", bug)
    with pytest.raises(ZeroDivisionError, match="engine bug"):
        tune(SMALL, budget={"max_rounds": 1})
    with pytest.raises(ZeroDivisionError):
        Toolbox(**BOX).check_memory(LAYOUT)


def test_toolbox_calls_are_typed_and_failures_recorded() -> None:
    box = Toolbox(**BOX)
    memory = box.check_memory(LAYOUT)
    projected = box.project(LAYOUT)
    assert memory.verdict in ("fits", "at risk", "out of memory") and projected.tokens_per_sec_per_gpu > 0
    assert box.calls == 2 and box.failures == []
    with pytest.raises(ToolFailed) as err:
        box.project({**LAYOUT, "tp": 3})
    assert err.value.failure.kind == "illegal_layout" and err.value.failure.tool == "project"
    with pytest.raises(ToolFailed) as err:
        box.check_memory({**LAYOUT, "precision": "fp3"})
    assert err.value.failure.kind == "invalid_input"
    assert [f.kind for f in box.failures] == ["illegal_layout", "invalid_input"]
    assert ToolFailure.model_validate(box.failures_dump()[0]) == box.failures[0]


def test_the_models_bad_arguments_come_back_as_an_error_it_reads() -> None:
    box = Toolbox(**BOX)
    out = box.call_from_model("project", {"layout": {**LAYOUT, "tp": "many"}})
    assert out["ok"] is False and out["tool"] == "project" and "layout.tp" in out["error"]["message"]
    assert box.failures[-1].kind == "invalid_input"
    assert box.call_from_model("no_such_tool", {})["ok"] is False
    good = box.call_from_model("project", {"layout": LAYOUT})
    assert good["ok"] is True and good["result"]["tokens_per_sec_per_gpu"] > 0


def test_layout_score_is_frozen_and_round_trips() -> None:
    projected = Toolbox(**BOX).project(LAYOUT)
    score = projected.score()
    with pytest.raises(ValidationError):
        score.mfu = 0.9   # type: ignore[misc]
    text = score.model_dump_json()
    again = LayoutScore.model_validate_json(text)
    assert again == score and again.model_dump_json() == text
    assert json.loads(text) == json.loads(LayoutScore.model_validate(json.loads(text)).model_dump_json())
    assert set(SCORE_FIELDS) == set(LayoutScore.model_fields)


def test_every_scored_layout_view_is_a_layout_score() -> None:
    for view in (Candidate, CompareRow, RankedLayout):
        assert issubclass(view, LayoutScore) and view.model_config.get("frozen")
    assert issubclass(Candidate, ProjectedLayout) and issubclass(CompareRow, ProjectedLayout)
    out = tune(SMALL, budget={"max_rounds": 1})
    best = out.report.best
    assert best is not None
    trial = next(t for t in out.trials if t["id"] == best.trial)
    assert score_of(trial) == score_of(best)            # the trial carries the same score, field for field
    search = out.state["search"]["ranked"][0]
    assert score_of(Candidate.model_validate(search)) == score_of(search)


def _side_channels(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "status":
            found.append(f"{path.name}: def status")
        if isinstance(node, ast.Attribute) and node.attr in ("status", "_status") and isinstance(
                node.value, ast.Name) and node.value.id in ("policy", "self", "fallback"):
            found.append(f"{path.name}:{node.lineno}: {node.value.id}.{node.attr}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "status"):
            found.append(f"{path.name}:{node.lineno}: getattr(..., 'status')")
    return found


def _policy_run_state(path: Path) -> list[str]:
    """Attributes a policy sets outside __init__ (state kept between calls instead of in the graph state)."""
    found = []
    for cls in (n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.ClassDef)):
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name != "__init__"):
            for node in ast.walk(fn):
                targets = node.targets if isinstance(node, ast.Assign) else (
                    [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else [])
                for t in targets:
                    while isinstance(t, ast.Subscript):
                        t = t.value
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        found.append(f"{path.name}:{node.lineno}: {cls.name}.{fn.name} sets self.{t.attr}")
    return found


def test_no_status_side_channel_between_policies_and_the_graph() -> None:
    files = [*AGENT.glob("*.py"), *(AGENT / "policies").glob("*.py")]
    assert [hit for path in files for hit in _side_channels(path)] == []
    policies = sorted((AGENT / "policies").glob("*.py"))
    assert [hit for path in policies for hit in _policy_run_state(path)] == []


def test_the_llm_conversation_and_policy_notes_live_in_the_graph_state(fast_llm: Callable[..., LLMConfig]) -> None:
    good = {"tp": 2, "pp": 1, "mbs": 1, "sequence_parallel": True, "zero": 1, "precision": "bf16",
            "recompute": "full", "recompute_num_layers": 8}
    args = {"layouts": [{"layout": good, "reason": "test"}], "done": False}
    script = [reply(calls=[tool_call("propose_layouts", args, "c1")]),
              reply(calls=[tool_call("propose_layouts", {"layouts": [], "done": True}, "c2")]),
              reply("x" * 5000)]
    with FakeOpenAIServer(script) as server:
        out = tune(SMALL, policy=LLMPolicy(fast_llm(server.url)), budget={"max_rounds": 3})
    conversation = out.state["conversation"]
    assert conversation[0]["role"] == "system" and any(m["role"] == "tool" for m in conversation)
    assert server.requests[1]["messages"] == conversation[:len(server.requests[1]["messages"])]
    assert any("explanation was cut" in n for n in out.report.notes)   # a note of explain, through its return
