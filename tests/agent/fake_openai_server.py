"""A scripted OpenAI-compatible server on loopback for the LLM-policy tests (no network, no real model).

``FakeOpenAIServer(script)`` serves ``POST /v1/chat/completions`` from ``script``, one entry per
request, in order:

- ``{"message": {...}}``: 200 with a chat completion whose message is that dict
  (``content``, ``tool_calls`` as OpenAI-format dicts; use :func:`tool_call`);
- ``{"status": 429 | 500 | 400, "error": "..."}``: that HTTP error (429 with ``Retry-After: 0``);
- ``{"sleep": seconds, ...}``: wait first (longer than the client timeout makes a timeout), then
  answer the rest of the entry (or 500 if nothing else is given);
- ``{"drop": True}``: close the connection without an answer;
- ``{"generate": n, "delay": s}``: stream n content tokens, one every s seconds (a slow model); a
  client that closes the stream stops it at the next write, and ``generations`` records each one
  (tokens sent, completed or abandoned).

A request with ``"stream": true`` is answered as server-sent events (chunks of the message, then
``[DONE]``), as OpenAI and local servers stream.  Like a strict server, it refuses (400) a request
without an integer ``max_tokens``, a ``tool_choice`` that is not one the OpenAI API defines (or is
sent without tools), tools without ``tool_choice`` (llama.cpp answers tool calls only when asked),
and, with ``context_tokens``, a prompt whose estimate (agent/prompt_budget.py) plus ``max_tokens``
exceeds it (llama.cpp's "exceeds the available context size").  ``prompt_estimates`` records each
request's estimate.

When the script runs out the server answers 503 (so a test never hangs).  It binds 127.0.0.1 on
port 0, records every request body in ``requests``, stops on ``close()`` / context exit, and
stops itself after ``max_lifetime_s`` whatever happens.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from typing import Any


def tool_call(name: str, arguments: dict[str, Any] | str, call_id: str = "call_1") -> dict[str, Any]:
    """One OpenAI-format tool call; ``arguments`` as a dict (serialised) or raw text (e.g. broken JSON)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def reply(content: str = "", calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A script entry answering with an assistant message."""
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = calls
    return {"message": message}


def closed_port() -> int:
    """A loopback port nothing listens on (connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep test output quiet
        return

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        owner = self.server.owner
        refused = owner.check(body)
        entry = owner.next_entry(self.path, body, refused)
        if entry.get("sleep"):
            owner.stopped.wait(float(entry["sleep"]))
        if entry.get("drop"):
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if "generate" in entry:
            self._generate(int(entry["generate"]), float(entry.get("delay", 0.05)), bool(body.get("stream")))
            return
        if "message" in entry:
            if body.get("stream"):
                self._stream(entry["message"])
                return
            self._send(200, {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                             "model": body.get("model", "fake"),
                             "choices": [{"index": 0, "message": entry["message"],
                                          "finish_reason": "tool_calls" if entry["message"].get("tool_calls")
                                          else "stop"}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
            return
        status = int(entry.get("status", 500))
        headers = {"Retry-After": "0"} if status == 429 else {}
        self._send(status, {"error": {"message": entry.get("error", f"scripted {status}"), "type": "fake"}}, headers)

    def _events(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()

    def _event(self, delta: dict[str, Any], finish: str | None = None) -> None:
        chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()),
                 "model": "fake", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self.wfile.flush()

    def _stream(self, message: dict[str, Any]) -> None:
        """The message as server-sent events: role, content in pieces, each tool call (arguments in two halves)."""
        try:
            self._events()
            self._event({"role": "assistant", "content": ""})
            text = message.get("content") or ""
            for i in range(0, len(text), 64):
                self._event({"content": text[i:i + 64]})
            for index, call in enumerate(message.get("tool_calls") or []):
                args = call["function"]["arguments"]
                half = len(args) // 2
                head = {"name": call["function"]["name"], "arguments": args[:half]}
                self._event({"tool_calls": [{"index": index, "id": call["id"], "type": "function", "function": head}]})
                self._event({"tool_calls": [{"index": index, "function": {"arguments": args[half:]}}]})
            self._event({}, "tool_calls" if message.get("tool_calls") else "stop")
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _generate(self, tokens: int, delay: float, stream: bool) -> None:
        """A slow model: one content token per ``delay`` s.  Streamed, each token is written as it comes, so the
        first write after the client left fails and generation stops; not streamed (like a real server), nothing
        is written until the whole answer is ready, so an abandoned request runs to its end."""
        record = self.server.owner.generation_started()
        try:
            if not stream:
                for _ in range(tokens):
                    if self.server.owner.stopped.wait(delay):
                        return
                    record["tokens"] += 1
                self._send(200, {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                                 "model": "fake", "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                     "role": "assistant", "content": " tok" * tokens}}]}, raise_on_close=True)
                record["completed"] = True
                return
            self._events()
            self._event({"role": "assistant", "content": ""})
            for _ in range(tokens):
                if self.server.owner.stopped.wait(delay):
                    return
                self._event({"content": " tok"})
                record["tokens"] += 1
            self._event({}, "stop")
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            record["completed"] = True
        except (BrokenPipeError, ConnectionResetError):
            record["abandoned"] = True
        finally:
            record["running"] = False
            record["ended_at"] = time.monotonic()

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None,
              raise_on_close: bool = False) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            if raise_on_close:
                raise


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: FakeOpenAIServer


class _SerialServer(HTTPServer):
    """One request at a time (like a llama.cpp server with one slot): the next waits for the one before."""

    owner: FakeOpenAIServer


class FakeOpenAIServer:
    """The scripted server (see the module docstring)."""

    def __init__(self, script: list[dict[str, Any]], *, max_lifetime_s: float = 60.0,
                 context_tokens: int | None = None, one_at_a_time: bool = False) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.prompt_estimates: list[int] = []
        self.generations: list[dict[str, Any]] = []
        self.context_tokens = context_tokens
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._server = (_SerialServer if one_at_a_time else _Server)(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._timer = threading.Timer(max_lifetime_s, self.close)
        self._timer.daemon = True

    @property
    def url(self) -> str:
        """Base URL for the openai client, e.g. http://127.0.0.1:PORT/v1."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def check(self, body: dict[str, Any]) -> str | None:
        """Why a strict OpenAI-compatible server would refuse this request (None: it would not)."""
        from agent.prompt_budget import estimate_tokens

        tools, choice, cap = body.get("tools"), body.get("tool_choice"), body.get("max_tokens")
        estimate = estimate_tokens(body.get("messages") or [], tools)
        with self._lock:
            self.prompt_estimates.append(estimate)
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
            return f"max_tokens must be a positive integer, got {cap!r}"
        if choice is not None and not tools:
            return "tool_choice is only allowed when tools are specified"
        if tools and choice is None:
            return "tools sent without tool_choice"
        names = {t["function"]["name"] for t in tools or []}
        if choice is not None and choice not in ("none", "auto", "required") and not (
                isinstance(choice, dict) and choice.get("type") == "function"
                and (choice.get("function") or {}).get("name") in names):
            return f"invalid tool_choice {choice!r}"
        if self.context_tokens is not None and estimate + cap > self.context_tokens:
            return (f"the request exceeds the available context size ({estimate} prompt + {cap} max_tokens > "
                    f"{self.context_tokens}), try increasing it")
        return None

    def generation_started(self) -> dict[str, Any]:
        """A new entry in ``generations`` (a slow model started answering)."""
        record = {"tokens": 0, "completed": False, "abandoned": False, "running": True,
                  "started_at": time.monotonic(), "ended_at": None}
        with self._lock:
            self.generations.append(record)
        return record

    def next_entry(self, path: str, body: dict[str, Any], refused: str | None = None) -> dict[str, Any]:
        """Record a request and pop the next script entry (503 when the script is spent; 400 when refused)."""
        with self._lock:
            self.requests.append(body)
            self.paths.append(path)
            if refused is not None:
                return {"status": 400, "error": refused}
            if not path.endswith("/chat/completions"):
                return {"status": 404, "error": f"no route {path}"}
            return self.script.pop(0) if self.script else {"status": 503, "error": "script exhausted"}

    def start(self) -> FakeOpenAIServer:
        """Serve in a daemon thread."""
        self._thread.start()
        self._timer.start()
        return self

    def close(self) -> None:
        """Stop serving (idempotent); wakes any sleeping handler."""
        if self.stopped.is_set():
            return
        self.stopped.set()
        self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
