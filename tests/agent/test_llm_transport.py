"""LLM transport robustness (issue 13): any response shape ends in a report, within a wall-clock deadline.

A raw loopback server answers with what no OpenAI server should send: a 200 whose body is not
JSON, a chat completion dripped a few bytes at a time, a huge body.  Each ends in
:class:`LLMUnavailable` (so the policy falls back offline and says so) within the limits.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from agent.llm_client import LLMClient, LLMConfig, LLMUnavailable
from agent.toolbox import Toolbox

Body = Callable[[socket.socket], None]


def _completion(content: str) -> bytes:
    return json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                    "finish_reason": "stop"}]}).encode()


def _headers(length: int | None, content_type: str = "application/json") -> bytes:
    size = f"Content-Length: {length}\r\n" if length is not None else ""
    return f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n{size}Connection: close\r\n\r\n".encode()


@pytest.fixture
def raw_server() -> Iterator[Callable[[Body], str]]:
    sockets: list[socket.socket] = []
    stop = threading.Event()

    def start(body: Body) -> str:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.settimeout(0.2)
        sockets.append(server)

        def loop() -> None:
            while not stop.is_set():
                try:
                    conn, _ = server.accept()
                except (TimeoutError, OSError):
                    continue
                with conn:
                    conn.settimeout(5)
                    try:
                        data = b""
                        while b"\r\n\r\n" not in data:
                            data += conn.recv(65536)
                        head, rest = data.split(b"\r\n\r\n", 1)
                        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                                       if line.lower().startswith(b"content-length")), 0)
                        while len(rest) < length:
                            rest += conn.recv(65536)
                        body(conn)
                    except OSError:
                        pass

        threading.Thread(target=loop, daemon=True).start()
        return f"http://127.0.0.1:{server.getsockname()[1]}/v1"

    yield start
    stop.set()
    for s in sockets:
        s.close()


def _config(url: str, **changes: float) -> LLMConfig:
    values = {"base_url": url, "api_key": "k", "model": "m", "timeout_s": 2.0, "max_attempts": 2,
              "retry_wait_s": 0.01, "retry_wait_max_s": 0.02, **changes}
    return LLMConfig(**values)


def test_http_200_with_a_body_that_is_not_json(raw_server) -> None:
    def body(conn: socket.socket) -> None:
        text = b"<html>gateway says hello</html>"
        conn.sendall(_headers(len(text), "text/html") + text)

    client = LLMClient(_config(raw_server(body)))
    with pytest.raises(LLMUnavailable) as err:
        client.complete([{"role": "user", "content": "hi"}], max_tokens=64)
    assert not err.value.transient


def test_http_200_json_but_not_a_completion(raw_server) -> None:
    def body(conn: socket.socket) -> None:
        text = b'["not", "a", "completion"]'
        conn.sendall(_headers(len(text)) + text)

    with pytest.raises(LLMUnavailable):
        LLMClient(_config(raw_server(body))).complete([{"role": "user", "content": "hi"}], max_tokens=64)


def test_dripped_response_respects_the_wall_clock(raw_server) -> None:
    """Regression: 87 s for one request with a 2 s timeout when the answer came a byte at a time."""
    text = _completion("slow " * 400)
    sent: list[int] = []

    def body(conn: socket.socket) -> None:
        conn.sendall(_headers(len(text)))
        for i in range(len(text)):
            conn.sendall(text[i:i + 1])
            sent.append(1)
            time.sleep(0.05)

    client = LLMClient(_config(raw_server(body), timeout_s=1.0, deadline_s=2.5))
    with pytest.raises(LLMUnavailable):
        client.complete([{"role": "user", "content": "hi"}], max_tokens=64)
    # Load-independent: the whole body takes len(text) x 0.05 s (~100 s); a client that gave up at its 2.5 s
    # deadline has read a small part of it (a slower machine drips fewer bytes, never more).
    assert len(sent) < len(text) // 4
    with pytest.raises(LLMUnavailable) as err:   # the tune's deadline is spent: no more requests
        client.complete([{"role": "user", "content": "again"}], max_tokens=64)
    assert "deadline" in err.value.reason
    client.begin()
    assert client.remaining_s() == pytest.approx(2.5)


def test_huge_text_is_cut(raw_server) -> None:
    def body(conn: socket.socket) -> None:
        text = _completion("x" * 200_000)
        conn.sendall(_headers(len(text)) + text)

    client = LLMClient(_config(raw_server(body), max_content_chars=1000))
    message = client.complete([{"role": "user", "content": "h"}], max_tokens=64)
    assert len(message["content"]) < 1100 and message["content"].endswith("(cut: reply too long)")


def test_body_over_the_size_cap_is_refused(raw_server) -> None:
    def body(conn: socket.socket) -> None:
        text = _completion("y" * 3_000_000)
        conn.sendall(_headers(len(text)) + text)

    with pytest.raises(LLMUnavailable):
        LLMClient(_config(raw_server(body), max_response_bytes=100_000)).complete([{"role": "user", "content": "h"}],
                                                                                 max_tokens=64)


def test_tool_argument_named_tool_does_not_collide() -> None:
    """Regression: an LLM tool call whose arguments hold a key 'tool' raised TypeError (multiple values)."""
    box = Toolbox(model="llama3-8b", gpu="h100-sxm", num_gpus=8, gpus_per_node=8)
    out = box.call_from_model("legal_axes", {"tool": "x", "seq_len": 4096})
    assert out["ok"] is False and out["error"]["field"] == "tool"
    assert [(f.tool, f.kind, f.field) for f in box.failures] == [("legal_axes", "invalid_input", "tool")]


def test_model_chosen_arguments_cannot_change_the_job_or_read_files(tmp_path) -> None:
    secret = tmp_path / "secret.yaml"
    secret.write_text("api_key: hunter2\n")
    box = Toolbox(model="llama3-8b", gpu="h100-sxm", num_gpus=8, gpus_per_node=8)
    out = box.call_from_model("check_memory", {"model": "llama3-70b", "num_gpus": 4096, "profile_path": str(secret),
                                               "layout": {"tp": 1, "gbs": 8, "seq_len": 1024}})
    assert out["ok"] is True and "hunter2" not in json.dumps(out)


def test_a_tune_against_a_dripping_endpoint_ends_offline_within_its_deadline(raw_server) -> None:
    """One overall LLM deadline per tune; then the offline policy finishes and the report says so."""
    from agent.policies.llm import LLMPolicy
    from agent.run import tune

    text = _completion("drip " * 2000)
    sent: list[int] = []

    def body(conn: socket.socket) -> None:
        conn.sendall(_headers(len(text)))
        sent.append(0)
        for i in range(0, len(text), 4):
            conn.sendall(text[i:i + 4])
            sent[-1] += 4
            time.sleep(0.02)

    config = _config(raw_server(body), timeout_s=1.5, deadline_s=3.0)
    out = tune("tune llama3 8b on 8 h100, gbs 64, seq 2k", policy=LLMPolicy(config), budget={"max_rounds": 2})
    # Load-independent: each body takes ~len(text) / 4 x 0.02 s (~55 s); within its 3 s deadline the client read
    # a small part of any of them.
    assert sent and max(sent) < len(text) // 4
    report = out.report
    assert report.status == "ok" and report.best is not None
    assert report.degraded and "fell back to the offline policy" in (report.degraded_reason or "")


def test_model_tool_calls_that_cannot_run_are_recorded_failures() -> None:
    """An unknown tool, or arguments that are not an object, answer a structured error and are recorded
    (never run with the job's arguments alone)."""
    box = Toolbox(model="llama3-8b", gpu="h100-sxm", num_gpus=8, gpus_per_node=8)
    unknown = box.call_from_model("projekt", {"layout": {}})
    assert unknown["ok"] is False and unknown["error"]["field"] == "name" and "project" in unknown["error"]["allowed"]
    not_object = box.call_from_model("legal_axes", ["seq_len", 4096])  # type: ignore[arg-type]
    assert not_object["ok"] is False and not_object["error"]["field"] == "arguments"
    assert [(f.tool, f.kind) for f in box.failures] == [("projekt", "unknown_name"), ("legal_axes", "invalid_input")]


def test_headers_dripped_a_line_at_a_time_are_cut_at_the_wall_clock(raw_server) -> None:
    """Regression (issue 30): an endpoint that sent one header line every few hundred ms ran 267 s past a 3 s timeout
    and a 12 s deadline; the limit now covers connecting, the headers and the body."""
    def body(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        for i in range(600):
            conn.sendall(f"X-Drip-{i}: {'z' * 20}\r\n".encode())
            time.sleep(0.1)

    client = LLMClient(_config(raw_server(body), timeout_s=1.0, deadline_s=2.5))
    start = time.monotonic()
    with pytest.raises(LLMUnavailable) as err:
        client.complete([{"role": "user", "content": "hi"}], max_tokens=64)
    assert time.monotonic() - start < 4.0
    assert err.value.transient and client.attempts == 2
