"""A scripted OpenAI-compatible server on loopback for the LLM-policy tests (no network, no real model).

``FakeOpenAIServer(script)`` serves ``POST /v1/chat/completions`` from ``script``, one entry per
request, in order:

- ``{"message": {...}}``: 200 with a chat completion whose message is that dict
  (``content``, ``tool_calls`` as OpenAI-format dicts; use :func:`tool_call`);
- ``{"status": 429 | 500 | 400, "error": "..."}``: that HTTP error (429 with ``Retry-After: 0``);
- ``{"sleep": seconds, ...}``: wait first (longer than the client timeout makes a timeout), then
  answer the rest of the entry (or 500 if nothing else is given);
- ``{"drop": True}``: close the connection without an answer.

When the script runs out the server answers 503 (so a test never hangs).  It binds 127.0.0.1 on
port 0, records every request body in ``requests``, stops on ``close()`` / context exit, and
stops itself after ``max_lifetime_s`` whatever happens.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
        entry = self.server.owner.next_entry(self.path, body)
        if entry.get("sleep"):
            self.server.owner.stopped.wait(float(entry["sleep"]))
        if entry.get("drop"):
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if "message" in entry:
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

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
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
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: FakeOpenAIServer


class FakeOpenAIServer:
    """The scripted server (see the module docstring)."""

    def __init__(self, script: list[dict[str, Any]], *, max_lifetime_s: float = 60.0) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._timer = threading.Timer(max_lifetime_s, self.close)
        self._timer.daemon = True

    @property
    def url(self) -> str:
        """Base URL for the openai client, e.g. http://127.0.0.1:PORT/v1."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def next_entry(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Record a request and pop the next script entry (503 when the script is spent)."""
        with self._lock:
            self.requests.append(body)
            self.paths.append(path)
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
