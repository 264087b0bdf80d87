"""The LLM policy end to end through the real openai client against a scripted server on loopback.

Each test checks the final report: the best layout was scored by the tools, the degraded flag,
and the LLM's explanation when the endpoint is healthy.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from agent_jobs import SMALL
from fake_openai_server import FakeOpenAIServer, closed_port, reply, tool_call

from agent.llm_config import LLMConfig
from agent.policies.llm import LLMPolicy
from agent.run import TuneOutcome, tune

GOOD = {"tp": 2, "pp": 1, "mbs": 1, "sequence_parallel": True, "zero": 1, "precision": "bf16", "recompute": "full",
        "recompute_num_layers": 8}  # legal, within SMALL's constraints, outside the search space (never a duplicate)
ILLEGAL = {"tp": 3, "pp": 1, "mbs": 1, "zero": 1, "precision": "bf16"}
EXPLANATION = "LLM says: TP1 with interleaved PP keeps tensor-parallel traffic off the critical path."


def propose(*layouts: dict[str, Any], done: bool = False, call_id: str = "call_1") -> dict[str, Any]:
    args = {"layouts": [{"layout": layout, "reason": "test hypothesis"} for layout in layouts], "done": done}
    return reply(calls=[tool_call("propose_layouts", args, call_id)])


def run(server: FakeOpenAIServer, config: LLMConfig, **policy: Any) -> TuneOutcome:
    return tune(SMALL, policy=LLMPolicy(config, **policy), budget={"max_rounds": 3})


def assert_scored(outcome: TuneOutcome) -> None:
    report = outcome.report
    assert report.status == "ok" and report.best is not None
    scored = {t["id"]: t for t in outcome.trials if t["status"] == "scored"}
    assert report.best.trial in scored and scored[report.best.trial]["config"] == report.best.config
    assert all(row.trial in scored for row in report.top5)


def llm_trials(outcome: TuneOutcome) -> list[dict[str, Any]]:
    return [t for t in outcome.trials if t["source"] == "llm"]


def test_good_session(fast_llm: Callable[..., LLMConfig]) -> None:
    script = [propose(GOOD), propose(done=True), reply(EXPLANATION)]
    with FakeOpenAIServer(script) as server:
        out = run(server, fast_llm(server.url))
    assert_scored(out)
    assert out.report.policy == "llm" and not out.report.degraded and out.report.explanation == EXPLANATION
    assert [t["status"] for t in llm_trials(out)] == ["scored"]
    first = server.requests[0]
    names = {t["function"]["name"] for t in first["tools"]}
    assert names == {"propose_layouts", "legal_axes", "check_memory", "project"}
    assert first["messages"][0]["role"] == "system" and "legal values per axis" in first["messages"][0]["content"]
    second = server.requests[1]["messages"]
    assert second[-2]["role"] == "tool" and json.loads(second[-2]["content"])["accepted"] == 1
    assert "Round 2" in second[-1]["content"] and "[llm]" in second[-1]["content"]


def test_rate_limit_and_server_error_are_retried(fast_llm: Callable[..., LLMConfig]) -> None:
    script = [{"status": 429}, {"status": 500}, propose(GOOD), propose(done=True), reply(EXPLANATION)]
    with FakeOpenAIServer(script) as server:
        out = run(server, fast_llm(server.url))
    assert_scored(out)
    assert not out.report.degraded and out.report.explanation == EXPLANATION
    assert len(server.requests) == 5 and len(llm_trials(out)) == 1


def test_timeout_is_retried(fast_llm: Callable[..., LLMConfig]) -> None:
    script = [{"sleep": 2.0, **propose(ILLEGAL)}, propose(GOOD), propose(done=True), reply(EXPLANATION)]
    with FakeOpenAIServer(script) as server:
        out = run(server, fast_llm(server.url, timeout_s=0.5))
    assert_scored(out)
    assert not out.report.degraded and out.report.explanation == EXPLANATION
    assert [t["config"]["tp"] for t in llm_trials(out)] == [2]   # the late (timed-out) answer was never used


def test_malformed_tool_call_json_is_repaired(fast_llm: Callable[..., LLMConfig]) -> None:
    broken = json.dumps({"layouts": [{"layout": GOOD, "reason": "r"}]})[:-2]  # cut off: '...]' and '}' missing
    script = [reply(calls=[tool_call("propose_layouts", broken)]), propose(done=True), reply(EXPLANATION)]
    with FakeOpenAIServer(script) as server:
        out = run(server, fast_llm(server.url))
    assert_scored(out)
    assert len(llm_trials(out)) == 1 and any("repaired malformed JSON" in n for n in out.report.notes)
    sent = server.requests[1]["messages"]
    resent = next(m for m in sent if m.get("tool_calls"))
    assert json.loads(resent["tool_calls"][0]["function"]["arguments"])["layouts"]   # canonical JSON goes back


def test_unrepairable_json_is_asked_again(fast_llm: Callable[..., LLMConfig]) -> None:
    script = [reply(calls=[tool_call("propose_layouts", "<<not json>>")]), propose(GOOD), propose(done=True),
              reply(EXPLANATION)]
    with FakeOpenAIServer(script) as server:
        out = run(server, fast_llm(server.url))
    assert_scored(out)
    error = json.loads(server.requests[1]["messages"][-1]["content"])
    assert error["ok"] is False and "not valid JSON" in error["error"]
    assert len(llm_trials(out)) == 1


def test_second_unreadable_reply_ends_the_round(fast_llm: Callable[..., LLMConfig]) -> None:
    bad = reply(calls=[tool_call("propose_layouts", "<<not json>>")])
    with FakeOpenAIServer([bad, bad, propose(done=True), reply(EXPLANATION)]) as server:
        out = run(server, fast_llm(server.url))
    assert_scored(out)
    assert len(server.requests) == 4 and out.report.explanation == EXPLANATION and not out.report.degraded
    assert any("could not be read twice" in n for n in out.report.notes) and llm_trials(out) == []


def test_call_written_in_the_message_text_is_read(fast_llm: Callable[..., LLMConfig]) -> None:
    call = {"name": "propose_layouts", "arguments": {"layouts": [{"layout": GOOD, "reason": "in text"}]}}
    script = [reply(f"Here is my proposal:\n```json\n{json.dumps(call)}\n```"), propose(done=True), reply(EXPLANATION)]
    with FakeOpenAIServer(script) as server:
        out = run(server, fast_llm(server.url))
    assert_scored(out)
    assert [t["reason"] for t in llm_trials(out)] == ["in text"]


def test_illegal_proposal_goes_back_with_the_reason(fast_llm: Callable[..., LLMConfig]) -> None:
    script = [propose(ILLEGAL), propose(GOOD), propose(done=True), reply(EXPLANATION)]
    with FakeOpenAIServer(script) as server:
        out = run(server, fast_llm(server.url))
    assert_scored(out)
    result = json.loads(server.requests[1]["messages"][-1]["content"])
    assert result["accepted"] == 0 and result["rejected"][0]["status"] == "illegal"
    assert any("tp=3 does not divide" in r for r in result["rejected"][0]["reasons"])
    assert [t["config"]["tp"] for t in llm_trials(out)] == [2]
    assert all(row.config["tp"] != 3 for row in out.report.top5)


@pytest.mark.parametrize("endpoint", ["refused", "silent"])
def test_dead_endpoint_falls_back_offline(fast_llm: Callable[..., LLMConfig], endpoint: str) -> None:
    with FakeOpenAIServer([{"sleep": 5.0}] * 6) as server:
        url = f"http://127.0.0.1:{closed_port()}/v1" if endpoint == "refused" else server.url
        out = run(server, fast_llm(url, timeout_s=0.3, max_attempts=2), anchor_search=False)
    assert_scored(out)
    report = out.report
    assert report.degraded and "fell back to the offline policy" in report.degraded_reason
    assert ("APIConnectionError" if endpoint == "refused" else "APITimeoutError") in report.degraded_reason
    assert llm_trials(out) == [] and report.best.source == "search"
    assert report.explanation and report.policy == "llm"


def test_bad_request_is_not_retried(fast_llm: Callable[..., LLMConfig]) -> None:
    with FakeOpenAIServer([{"status": 400, "error": "tools not supported"}, propose(GOOD)]) as server:
        out = run(server, fast_llm(server.url))
    assert_scored(out)
    assert len(server.requests) == 1 and out.report.degraded and "HTTP 400" in out.report.degraded_reason


def test_llm_reads_a_request_the_offline_parser_cannot(fast_llm: Callable[..., LLMConfig]) -> None:
    parsed = {"model": "mixtral-8x22b", "gpu": "mi300x", "num_gpus": 64, "gbs": None, "constraints": ["tp<=2"]}
    with FakeOpenAIServer([reply(json.dumps(parsed))]) as server:
        request = LLMPolicy(fast_llm(server.url)).parse("tune the big mistral MoE on sixty-four MI300X, "
                                                        "tensor parallel at most two")
    assert (request.model, request.gpu, request.num_gpus, request.constraints) == (
        "mixtral-8x22b", "mi300x", 64, ["tp<=2"])
    assert "request read by the LLM" in request.notes
