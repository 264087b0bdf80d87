"""The ``tune`` tool: the whole tuning question as one registry tool (MCP, OpenAI schemas, Python).

Importing this module registers ``tune`` in :mod:`tools.registry` (the tools layer never imports
the agent); ``projtune tools ...`` and ``projtune mcp`` import it, and so can any Python caller:

    from agent.tool import call_tool
    call_tool("tune", {"request": "tune llama3 8b on 8 h100", "tokens": "10B"})

Progress: the tool reads :data:`tools.functions.TUNE_PROGRESS` (the MCP server sets it to relay
the agent's rounds as ``notifications/progress``).

Deadline: with ``deadline_s`` every progress event (layouts searched, trials scored, rounds) checks
the clock, and once it has passed the run stops with :class:`projection.errors.DeadlineExceeded`
(the registry's structured error, code ``deadline_exceeded``, with the counts reached): a stopped
run gives no answer, since the best of a partial search is not the best layout.  The MCP server
also runs the call in a child process it kills at the deadline (:mod:`tools.mcp_server`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agent.batch_default import default_gbs
from agent.planning import parse_duration, parse_tokens
from agent.policies.offline import OfflinePolicy
from agent.text.request import NETWORK_KEYS, Clarification, TuneRequest, parse_request
from agent.run import tune as run_tune
from agent.state import RunOptions
from projection.errors import DeadlineExceeded
from projection.model_spec import load_model
from tools import schemas as s
from tools.functions import TUNE_PROGRESS
from tools.registry import call_tool, register

__all__ = ["TUNE_TOOL", "call_tool", "tune"]

_JOB_FIELDS = {"model", "gpu", "num_gpus", "gpus_per_node", "gbs", "seq_len", "packed_document_tokens",
               *NETWORK_KEYS}

Reporter = Callable[[str, dict[str, Any]], None]


class Deadline:
    """A progress reporter that counts layouts and trials, forwards events, and stops the run once the limit passes."""

    def __init__(self, limit_s: float, forward: Reporter | None = None, *, tool: str = "tune") -> None:
        self.limit_s, self.forward, self.tool = limit_s, forward, tool
        self.started = time.monotonic()
        self.layouts = self.trials = 0

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        """Count the event, forward it, then raise DeadlineExceeded when the time is up."""
        if event == "search" and isinstance(data.get("done"), int):
            self.layouts = max(self.layouts, data["done"])
        elif event == "trial":
            self.trials += 1
        if self.forward is not None:
            self.forward(event, data)
        self.check()

    def check(self) -> None:
        """Raise DeadlineExceeded if the limit has passed."""
        elapsed = time.monotonic() - self.started
        if elapsed > self.limit_s:
            raise DeadlineExceeded(self.tool, self.limit_s, elapsed, self.layouts, self.trials)


def tune(inp: s.TuneInput) -> s.TuneOutput:
    """Ask the whole tuning question: the agent searches, scores and ranks layouts and explains the best.

    Give the question in words (request: 'tune Llama 3.1 70B on 64 H100, seq 8k, bf16 only') and/or
    as fields (model, gpu, num_gpus, gbs, seq_len, constraints; fields win). Returns the report: the
    best layout and top-k with projected tokens/s/GPU and their 80% intervals, MFU against the GEMM
    precision's peak and against BF16, near-ties, every assumption made, a launch config, and job
    planning with tokens ('15T') and deadline ('30d'). Network overrides: nics_per_node, nic_gbps
    (Gbit/s per NIC), nvlink_domain (72 for NVL72). Packed fine-tuning data: packed_document_tokens (mean tokens
    per document, at most seq_len; attention is per document). A request it cannot read comes back as
    status 'clarification' with the question. Measured runs of the job (anchors, as data: a 1-node trial,
    yesterday's job) correct every layout; with a near-tie the report's benchmark_plan names the 1-node runs
    (launch configs, expected minutes) whose logs, given back as anchors, settle it. Offline and
    deterministic; a few seconds. deadline_s
    bounds the call's wall time: past it the call fails with code 'deadline_exceeded' (no partial answer).
    """
    watch = Deadline(inp.deadline_s, TUNE_PROGRESS.get()) if inp.deadline_s is not None else None
    fields = {k: v for k, v in inp.model_dump(include=_JOB_FIELDS).items() if v is not None}
    parsed: Any = parse_request(inp.request) if inp.request else None
    if isinstance(parsed, Clarification) and not {"model", "gpu", "num_gpus"} <= fields.keys():
        return s.TuneOutput(status="clarification", summary=parsed.question, report=parsed.model_dump(mode="json"))
    base = parsed.model_dump() if isinstance(parsed, TuneRequest) else {}
    if not base:
        missing = [k for k in ("model", "gpu", "num_gpus") if k not in fields]
        if missing:
            question = f"tune needs a request in words or the fields {', '.join(missing)}"
            return s.TuneOutput(status="clarification", summary=question,
                                report={"question": question, "missing": missing})
        seq_len = fields.get("seq_len", 4096)
        gbs, note = default_gbs(load_model(fields["model"]), fields["num_gpus"], seq_len)
        base = {"gbs": gbs, "seq_len": seq_len,
                "notes": [note if "gbs" not in fields else "assumed seq_len 4096 (give seq_len to change it)"]}
    request = TuneRequest.model_validate({**base, **fields, "top_k": inp.top_k,
                                          "constraints": [*base.get("constraints", []), *inp.constraints],
                                          "anchors": [a.model_dump(mode="json") for a in inp.anchors]})
    options = RunOptions(framework=inp.framework, progress=watch or TUNE_PROGRESS.get(),
                         tokens=parse_tokens(inp.tokens) if inp.tokens else None,
                         deadline_s=parse_duration(inp.deadline) if inp.deadline else None)
    report = run_tune(request=request, policy=OfflinePolicy(), budget={"max_rounds": inp.max_rounds},
                      options=options).report
    if report.best is not None:
        summary = f"{report.best.layout}: {report.best.tokens_per_sec_per_gpu:,.0f} tokens/s/GPU projected"
    else:
        summary = report.message or "no layout"
    return s.TuneOutput(status=report.status, summary=summary, report=report.model_dump(mode="json"))


TUNE_TOOL = register(tune, s.TuneInput, s.TuneOutput)
