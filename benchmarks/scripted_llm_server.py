"""A scripted OpenAI-compatible chat server on loopback, standing in for a small local model (benchmarks only).

Serves ``POST /v1/chat/completions`` (streamed or not) and ``GET /v1/models`` on 127.0.0.1 only,
answers like a weak but well-behaved tool-calling model, and stops itself after ``max_requests``
requests or ``max_lifetime_s`` seconds:

- a request with tools: the first time in a conversation, a ``propose_layouts`` call with two
  layouts (TP1 and TP2, no recompute); after its tool result, ``propose_layouts`` with done=true;
- the explanation prompt: three sentences built from the first ranked line of the facts it was
  given (its layout and throughput, quoted correctly) plus one invented figure ("about 37.5%
  faster than #2") and one invented degree ("DP7"), so grounding has something to keep and
  something to remove;
- anything else (the request-parse prompt): ``{"question": "Which model and how many GPUs?"}``.

Like a strict server it refuses (400) a request without ``max_tokens`` or with tools but no
``tool_choice``.  ``python benchmarks/scripted_llm_server.py`` serves until interrupted (or its
limits) and prints its base URL; :func:`start` runs it in a thread for benchmarks/llm_e2e.py.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LAYOUTS = [{"tp": 1, "pp": 1, "mbs": 1, "recompute": "none"}, {"tp": 2, "pp": 1, "mbs": 1, "recompute": "none"}]


def answer(body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message this scripted model gives to a chat request."""
    messages = body.get("messages") or []
    if body.get("tools"):
        last = messages[-1] if messages else {}
        proposed = last.get("role") == "tool"
        args = {"layouts": [], "done": True} if proposed else {
            "layouts": [{"layout": x, "reason": "less tensor-parallel traffic"} for x in LAYOUTS],
            "hypothesis": "a small TP keeps communication off the critical path"}
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{len(messages)}", "type": "function",
            "function": {"name": "propose_layouts", "arguments": json.dumps(args)}}]}
    prompt = str(messages[-1].get("content") if messages else "")
    first = re.search(r"^1\. (.+?): ([\d,]+) tok/s/GPU", prompt, re.M)
    if "reporting step" in prompt and first:
        return {"role": "assistant", "content": (
            f"{first.group(1)} wins at {first.group(2)} tok/s/GPU in the projection. It is about 37.5% faster "
            "than #2 and would also run as DP7. Measure it before trusting the absolute number.")}
    return {"role": "assistant", "content": json.dumps({"question": "Which model and how many GPUs?"})}


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        return

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        self._json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        self.server.count()
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if not isinstance(body.get("max_tokens"), int):
            return self._json(400, {"error": {"message": "max_tokens is required", "type": "invalid_request"}})
        if body.get("tools") and body.get("tool_choice") is None:
            return self._json(400, {"error": {"message": "tools need tool_choice", "type": "invalid_request"}})
        message = answer(body)
        if not body.get("stream"):
            return self._json(200, {"id": "scripted", "object": "chat.completion", "created": int(time.time()),
                                    "model": "scripted", "choices": [{"index": 0, "message": message,
                                                                      "finish_reason": "stop"}]})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        delta = {k: v for k, v in message.items() if v is not None}
        if "tool_calls" in delta:
            delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(delta["tool_calls"])]
        for part in ({"role": "assistant"}, delta):
            chunk = {"id": "scripted", "object": "chat.completion.chunk", "created": int(time.time()),
                     "model": "scripted", "choices": [{"index": 0, "delta": part, "finish_reason": None}]}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        return None

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, max_requests: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.left = max_requests
        self._lock = threading.Lock()

    def count(self) -> None:
        with self._lock:
            self.left -= 1
            if self.left <= 0:
                threading.Thread(target=self.shutdown, daemon=True).start()


def start(*, max_requests: int = 500, max_lifetime_s: float = 600.0) -> tuple[str, _Server]:
    """Serve in daemon threads; (base URL, server): call ``server.shutdown()`` when done."""
    server = _Server(max_requests)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    timer = threading.Timer(max_lifetime_s, server.shutdown)
    timer.daemon = True
    timer.start()
    return f"http://127.0.0.1:{server.server_address[1]}/v1", server


if __name__ == "__main__":
    url, server = start()
    print(f"scripted OpenAI-compatible server on {url} (stops after 500 requests or 600 s)", file=sys.stderr)
    ends = time.monotonic() + 600.0
    try:
        while server.left > 0 and time.monotonic() < ends:
            time.sleep(0.5)
    except KeyboardInterrupt:
        server.shutdown()
