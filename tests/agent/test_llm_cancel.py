"""A request abandoned at its deadline is cancelled: the stream closes and the server stops generating.

Issue 30: a request projtune gave up on kept running on the server, and on a one-request-at-a-time
server (llama.cpp with one slot) every later request then timed out too.  The scripted server's
slow model (``generate``) writes one token at a time and records whether the client was still
reading (tests/agent/fake_openai_server.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from fake_openai_server import FakeOpenAIServer, reply

from agent.llm_client import LLMClient, LLMUnavailable
from agent.llm_config import LLMConfig

HI = [{"role": "user", "content": "hi"}]


def _ended(server: FakeOpenAIServer, within_s: float) -> bool:
    ends = time.monotonic() + within_s
    while time.monotonic() < ends:
        if server.generations and not any(g["running"] for g in server.generations):
            return True
        time.sleep(0.02)
    return False


def test_an_abandoned_generation_stops_and_the_next_request_is_served(fast_llm: Callable[..., LLMConfig]) -> None:
    # 400 tokens at 20 ms each is an 8 s answer; the request's limit is 0.6 s
    script = [{"generate": 400, "delay": 0.02}, reply("served")]
    with FakeOpenAIServer(script, one_at_a_time=True) as server:
        client = LLMClient(fast_llm(server.url, timeout_s=0.6, max_attempts=1))
        start = time.monotonic()
        with pytest.raises(LLMUnavailable):
            client.complete(HI, max_tokens=400)
        abandoned_at = time.monotonic()
        assert abandoned_at - start < 1.5
        assert _ended(server, 1.0), "the server still generates for a request nobody reads"
        (generation,) = server.generations
        assert generation["abandoned"] and not generation["completed"]
        assert generation["tokens"] < 100                      # stopped near the limit, not after 400
        assert generation["ended_at"] - abandoned_at < 0.5
        assert client.abandoned == 1
        client.begin()
        started = time.monotonic()
        assert client.complete(HI, max_tokens=16)["content"] == "served"   # the one slot is free again
        assert time.monotonic() - started < 1.0


def test_without_streaming_the_server_would_run_on(fast_llm: Callable[..., LLMConfig]) -> None:
    """Why replies are streamed: a non-streamed request abandoned at its limit keeps the server generating to the
    end (the server writes nothing until then, so it cannot notice), holding its only slot."""
    with FakeOpenAIServer([{"generate": 60, "delay": 0.02}], one_at_a_time=True) as server:
        client = LLMClient(fast_llm(server.url, timeout_s=0.4, max_attempts=1, stream=False))
        with pytest.raises(LLMUnavailable):
            client.complete(HI, max_tokens=60)
        assert _ended(server, 3.0)
        (generation,) = server.generations
        assert generation["tokens"] == 60                      # generated to the end for nobody


def test_a_reply_over_the_size_cap_is_cut_and_its_generation_stopped(fast_llm: Callable[..., LLMConfig]) -> None:
    """A runaway reply (more text than max_content_chars) is closed there: the server stops generating too."""
    with FakeOpenAIServer([{"generate": 2000, "delay": 0.002}]) as server:
        client = LLMClient(fast_llm(server.url, timeout_s=5.0, max_content_chars=200))
        message = client.complete(HI, max_tokens=2000)
        assert message["content"].endswith("(cut: reply too long)")
        assert _ended(server, 1.0)
        (generation,) = server.generations
        assert generation["abandoned"] and generation["tokens"] < 2000 and client.abandoned == 1


def test_deadline_counts_across_requests(fast_llm: Callable[..., LLMConfig]) -> None:
    """All requests of one tune share the deadline: after it nothing more is sent."""
    script = [{"generate": 400, "delay": 0.02}] * 4
    with FakeOpenAIServer(script) as server:
        client = LLMClient(fast_llm(server.url, timeout_s=0.5, deadline_s=1.2, max_attempts=5))
        start = time.monotonic()
        with pytest.raises(LLMUnavailable):
            client.complete(HI, max_tokens=400)
        assert time.monotonic() - start < 2.5
        assert _ended(server, 1.0) and all(g["abandoned"] for g in server.generations)
        sent = len(server.requests)
        with pytest.raises(LLMUnavailable, match="deadline"):
            client.complete(HI, max_tokens=400)
        assert len(server.requests) == sent
