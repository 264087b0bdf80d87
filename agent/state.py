"""Graph state of the tuning agent: a narrow input, a wider working state, and the run options.

Everything in the state is plain data (dicts, lists, strings, numbers), so a checkpointer can
store it without custom serialisers.  A *proposal* is ``{"config": {...}, "reason": str,
"source": "seed" | "search" | "offline" | "llm", "search_rank": int | None}``; a *trial* is a
proposal after evaluation (see :func:`agent.nodes.evaluate`); a scored trial carries its
:class:`tools.layout_score.LayoutScore` flat (the keys of :data:`tools.layout_score.SCORE_FIELDS`).

What a policy must remember between calls lives here too, written by node return values only:
its notes (``notes``), a fallback it took (``degraded``/``degraded_reason``), the search it ran
(``search``) and the LLM's conversation (``conversation``), so a checkpoint holds the whole run.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

DEFAULT_BUDGET: dict[str, float] = {
    "max_rounds": 3,              # propose -> evaluate -> rank -> reflect cycles
    "max_proposals": 60,          # proposals evaluated over the run (seeds included)
    "max_tool_calls": 400,        # tool calls over the run (memory screens, projections, explain, ...)
    "max_benchmark_minutes": 10,  # measured-mode time on a local GPU, when allowed
}


class InputState(TypedDict, total=False):
    """What a caller gives the graph: the request as text or as a typed dict, and budget overrides."""

    text: str
    """The request in words ("tune Mixtral 8x7B for 64 MI300X"); parsed by the policy."""
    request: dict[str, Any]
    """A :class:`agent.text.request.TuneRequest` as a dict; wins over ``text`` when given."""
    budget: dict[str, float]
    """Overrides of :data:`DEFAULT_BUDGET` keys."""
    candidates_ran: bool
    """The request's explicit candidates were measured to run (an eval): score every one of them, with
    the memory verdict as a warning instead of a screen."""


class State(InputState, total=False):
    """The working state: the parsed request, budgets, every trial, the ranking and the report."""

    run_id: str
    """Unique per run (set by parse); a policy with memory (the LLM's conversation) starts over on a new one."""
    clarification: dict[str, Any] | None
    """Set by parse when the request needs a question back; the graph then goes to report."""
    round: int
    """Proposal rounds started so far (0 before the first)."""
    usage: dict[str, float]
    """Spent budget: proposals, tool_calls, benchmark_minutes."""
    pending: list[dict[str, Any]]
    """Proposals waiting for evaluate (replaced, not appended, by each writer)."""
    trials: Annotated[list[dict[str, Any]], operator.add]
    """Every evaluated proposal, in order (scored, screened out, illegal, excluded)."""
    ranking: list[int]
    """Trial ids of the scored layouts that fit, best first."""
    best_history: list[float]
    """Best tokens/s/GPU after each round (0.0 while nothing fits)."""
    search: dict[str, Any] | None
    """Summary of the layout search the policy ran (enumerated, projected, message, ranked layouts)."""
    stop_reason: str | None
    """Why reflect stopped the loop (None while it continues)."""
    policy_done: bool
    """The policy said it has nothing new to propose."""
    degraded: bool
    """The configured policy failed (e.g. the LLM endpoint stayed down) and the offline one took over."""
    degraded_reason: str | None
    notes: Annotated[list[str], operator.add]
    """Things the report should say (defaults assumed, budget cut-offs, benchmark availability)."""
    tool_errors: Annotated[list[dict[str, Any]], operator.add]
    """Tool calls that failed on a typed error (:class:`agent.toolbox.ToolFailure` dumps), in order."""
    conversation: list[dict[str, Any]]
    """The LLM policy's chat messages so far (replaced by each propose; empty for the offline policy)."""
    benchmarks: Annotated[list[dict[str, Any]], operator.add]
    """run_benchmark results for top layouts (only when allowed)."""
    report: dict[str, Any] | None
    """The final :class:`agent.report.TuneReport` as a dict."""


@dataclass(kw_only=True)
class RunOptions:
    """Per-run options a caller passes as the graph context (``graph.invoke(..., context=RunOptions(...))``)."""

    framework: str = "megatron"
    """Launch-config format of the report: megatron, primus or torchtitan."""
    allow_benchmark: bool = False
    """Whether evaluate may call run_benchmark on the top layouts (it says "no GPU here" without one)."""
    benchmark_top: int = 2
    """How many top layouts to benchmark per round."""
    tokens: float | None = None
    """Token budget of the training job (job planning: days and GPU-hours), tokens."""
    deadline_s: float | None = None
    """Deadline of the training job (job planning: smallest GPU count that meets it), seconds."""
    progress: Callable[[str, dict[str, Any]], None] | None = None
    """Called with (event, data) as the run advances: 'round', 'search', 'trial', 'stop'."""
    read_anchors: Callable[[list[str], str], list[dict[str, Any]]] | None = None
    """Chat: reads the runs a user points at ("I ran it, here is the log: runs/"), ``(paths, gpu) -> anchors`` as
    AnchorRun dicts; the CLI passes evals' reader (evals/anchor_read.py, a layer above the agent).  None: chat
    says it cannot read runs here."""
