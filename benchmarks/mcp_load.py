"""Loopback load test of the MCP streamable-HTTP server: concurrent client sessions with long calls mixed in.

Usage: python benchmarks/mcp_load.py [--clients 50] [--calls 20] [--search-share 0.05] [--seed 0]

Starts ``projtune mcp --http`` on a free 127.0.0.1 port (a subprocess, killed at the end), opens
``--clients`` sessions at once (the official ``mcp`` client, one HTTP connection pool each), and
has each make ``--calls`` tool calls: ``check_memory`` / ``project`` of a few layouts, and with
probability ``--search-share`` a ``search`` (seconds, the long call).  Every answer is compared
with the same call made in-process first (the oracle), so a wrong result is counted, not only an
error.  Prints: sessions dropped (any transport error: the session's remaining calls are lost),
wrong results, tool errors, and the latency of a call (p50/p99/max, seconds) per tool.

Acceptance (issue 29): 50 clients x 20 calls with 5% search: 0 dropped sessions, 0 wrong results.
Bounded: every session has a wall-clock limit (``--limit-s``); the server is killed on exit.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

JOB = {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8}
LAYOUTS = [{"tp": 1, "mbs": 1, "gbs": 32, "seq_len": 4096}, {"tp": 2, "mbs": 1, "gbs": 32, "seq_len": 4096},
           {"tp": 2, "pp": 2, "mbs": 1, "gbs": 32, "seq_len": 4096, "sequence_parallel": True, "zero": 1},
           {"tp": 8, "mbs": 2, "gbs": 64, "seq_len": 8192, "recompute": "full"}]
SEARCH = {**JOB, "gbs": 32, "seq_len": 4096, "top_k": 2, "constraints": {"precision": "bf16"}}


def call_plan(rng: random.Random, calls: int, search_share: float) -> list[tuple[str, dict[str, Any]]]:
    """One client's calls: (tool, arguments)."""
    plan = []
    for _ in range(calls):
        if rng.random() < search_share:
            plan.append(("search", SEARCH))
        else:
            plan.append((rng.choice(["check_memory", "project"]), {**JOB, "layout": rng.choice(LAYOUTS)}))
    return plan


def _key(tool: str, arguments: dict[str, Any]) -> str:
    return tool + json.dumps(arguments, sort_keys=True)


TIMING_KEYS = ("elapsed_s",)
"""Result fields that measure the call itself (wall-clock), left out of the comparison with the oracle."""


def comparable(payload: Any) -> str:
    """The payload as canonical JSON without its timing fields."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in TIMING_KEYS}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return json.dumps(strip(payload), sort_keys=True)


def oracle(plans: list[list[tuple[str, dict[str, Any]]]]) -> dict[str, str]:
    """The in-process answer of every distinct call (the results the server must give back)."""
    from tools.registry import call_tool

    answers = {}
    for plan in plans:
        for tool, arguments in plan:
            key = _key(tool, arguments)
            if key not in answers:
                answers[key] = comparable(call_tool(tool, dict(arguments), untrusted=True))
    return answers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(port: int, limit_s: float = 30.0) -> subprocess.Popen[bytes]:
    """``projtune mcp --http --port PORT`` as a subprocess, once it listens."""
    process = subprocess.Popen([sys.executable, "-c", "from projtune.cli import main; main()", "mcp", "--http",
                                "--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"server exited: {process.stderr.read().decode() if process.stderr else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("server did not start listening")


async def _session(url: str, plan: list[tuple[str, dict[str, Any]]], answers: dict[str, str],
                   stats: dict[str, Any], limit_s: float) -> None:
    import anyio
    from mcp import Client

    try:
        with anyio.fail_after(limit_s):
            async with Client(url) as client:
                for tool, arguments in plan:
                    start = time.perf_counter()
                    result = await client.call_tool(tool, dict(arguments))
                    stats["latency"][tool].append(time.perf_counter() - start)
                    got = comparable(result.structured_content)
                    stats["counts"]["calls"] += 1
                    if got != answers[_key(tool, arguments)]:
                        stats["counts"]["wrong"] += 1
                    if result.is_error:
                        stats["counts"]["tool_errors"] += 1
    except BaseException as err:  # noqa: BLE001 - a dropped session is what this counts
        if isinstance(err, KeyboardInterrupt):
            raise
        stats["counts"]["dropped"] += 1
        while isinstance(err, BaseExceptionGroup) and err.exceptions:
            err = err.exceptions[0]
        stats["errors"].append(f"{type(err).__name__}: {str(err)[:200]}")


async def _all(url: str, plans: list[list[tuple[str, dict[str, Any]]]], answers: dict[str, str],
               stats: dict[str, Any], limit_s: float) -> None:
    import anyio

    async with anyio.create_task_group() as group:
        for plan in plans:
            group.start_soon(_session, url, plan, answers, stats, limit_s)


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def run(clients: int, calls: int, search_share: float, seed: int, limit_s: float) -> dict[str, Any]:
    import anyio

    rng = random.Random(seed)
    plans = [call_plan(rng, calls, search_share) for _ in range(clients)]
    answers = oracle(plans)
    port = _free_port()
    server = start_server(port)
    stats: dict[str, Any] = {"counts": Counter(), "latency": defaultdict(list), "errors": []}
    started = time.perf_counter()
    try:
        anyio.run(_all, f"http://127.0.0.1:{port}/mcp", plans, answers, stats, limit_s)
    finally:
        server.kill()
        server.wait(timeout=10)
    every = [v for values in stats["latency"].values() for v in values]
    return {"clients": clients, "calls_planned": clients * calls, "calls_done": stats["counts"]["calls"],
            "dropped_sessions": stats["counts"]["dropped"], "wrong_results": stats["counts"]["wrong"],
            "tool_errors": stats["counts"]["tool_errors"], "wall_s": round(time.perf_counter() - started, 1),
            "latency_s": {tool: {"n": len(v), "p50": round(statistics.median(v), 3),
                                 "p99": round(percentile(v, 0.99), 3), "max": round(max(v), 3)}
                          for tool, v in sorted(stats["latency"].items())}
            | ({"all": {"n": len(every), "p50": round(statistics.median(every), 3),
                        "p99": round(percentile(every, 0.99), 3), "max": round(max(every), 3)}} if every else {}),
            "first_errors": stats["errors"][:5]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--search-share", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit-s", type=float, default=600.0, help="wall-clock limit of one session")
    args = parser.parse_args()
    report = run(args.clients, args.calls, args.search_share, args.seed, args.limit_s)
    print(json.dumps(report, indent=1))
    return 0 if report["dropped_sessions"] == 0 and report["wrong_results"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
