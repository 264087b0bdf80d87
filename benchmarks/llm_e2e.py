"""The LLM path end to end against a real endpoint (outside CI): one tune and a 3-turn chat, one table.

    PROJTUNE_LLM_BASE_URL=http://127.0.0.1:8080/v1 PROJTUNE_LLM_CONTEXT=8192 \\
        PROJTUNE_LLM_TIMEOUT=300 PROJTUNE_LLM_DEADLINE=900 python benchmarks/llm_e2e.py
    python benchmarks/llm_e2e.py --scripted      # against benchmarks/scripted_llm_server.py on loopback

Whatever endpoint projtune's settings name (``PROJTUNE_LLM_*``, projection/settings.py) is used;
``--scripted`` starts the scripted loopback server instead (no model: it shows the table's shape
and the honesty checks, not a model's quality).  Per run it prints the wall time, the LLM requests
sent and tool calls the model made, the fallbacks taken (the report's degraded reason), and the
numbers of the explanation kept (grounded) and removed.  Chat sessions go to a temporary
``PROJTUNE_HOME``.  The layouts and scores come from the tools whatever the model does.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REQUEST = "tune llama3 8b on 8 h100 with gbs 64, seq 2k, zero=1, precision=bf16"
CHAT = [REQUEST, "what if I only have 4?", "set gbs to 128"]


class _Counting:
    """Wraps an LLMClient: requests sent and tool calls the model made, per run."""

    def __init__(self, client: Any) -> None:
        self.client, self.requests, self.tool_calls = client, 0, 0
        self._complete = client.complete
        client.complete = self.complete

    def complete(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.requests += 1
        message = self._complete(*args, **kwargs)
        self.tool_calls += len(message.get("tool_calls") or [])
        return message

    def take(self) -> tuple[int, int]:
        out = (self.requests, self.tool_calls)
        self.requests, self.tool_calls = 0, 0
        return out


def _numbers(report: dict[str, Any]) -> tuple[int, int]:
    """(numbers kept, numbers removed) in a report's explanation."""
    from agent.text.number_kinds import read_numbers

    text = report.get("explanation") or ""
    return len(read_numbers(text.replace("[?]", ""))), text.count("[?]")


def _row(name: str, seconds: float, counts: tuple[int, int], report: dict[str, Any]) -> list[str]:
    kept, removed = _numbers(report)
    fallback = report.get("degraded_reason") or "-"
    best = (report.get("best") or {}).get("layout") or report.get("status", "?")
    return [name, f"{seconds:.1f}", str(counts[0]), str(counts[1]), fallback[:60], f"{kept}/{removed}", best[:40]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scripted", action="store_true", help="use the scripted loopback server")
    parser.add_argument("--rounds", type=int, default=2, help="proposal rounds per tune (default 2)")
    args = parser.parse_args()
    server = None
    if args.scripted:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from scripted_llm_server import start

        url, server = start()
        os.environ.update(PROJTUNE_LLM_BASE_URL=url, PROJTUNE_LLM_MODEL="scripted")
    os.environ.setdefault("PROJTUNE_HOME", tempfile.mkdtemp(prefix="projtune-llm-e2e-"))

    from agent.policies import make_policy
    from agent.run import tune
    from agent.text.session import ChatSession

    policy = make_policy()
    if policy.name != "llm":
        print("no LLM configured: set PROJTUNE_LLM_BASE_URL (see the README's LLM section) or pass --scripted",
              file=sys.stderr)
        return 2
    counter = _Counting(policy.client)
    print(f"endpoint: {policy.endpoint}; context {policy.config.context_tokens} tokens; "
          f"timeout {policy.config.timeout_s:g} s; deadline {policy.config.deadline_s:g} s", file=sys.stderr)
    rows = []
    start = time.monotonic()
    outcome = tune(REQUEST, policy=policy, budget={"max_rounds": args.rounds})
    rows.append(_row("tune", time.monotonic() - start, counter.take(), outcome.report.model_dump(mode="json")))
    with ChatSession(ChatSession.new_name() + "-e2e", policy, budget={"max_rounds": args.rounds}) as chat:
        for i, line in enumerate(CHAT, 1):
            start = time.monotonic()
            chat.ask(line)
            rows.append(_row(f"chat {i}: {line[:24]}", time.monotonic() - start, counter.take(),
                             chat.values().get("report") or {}))
    if server is not None:
        server.shutdown()
    head = ["run", "time s", "LLM requests", "tool calls", "fallback", "numbers kept/removed", "best"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, ["-" * w for w in widths], *rows]:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
