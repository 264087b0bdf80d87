"""The tuning graph: parse -> search -> seed -> evaluate -> rank -> reflect -> (propose -> evaluate -> ... | report)
-> END.

The search step runs the layout search tool once through the Toolbox (:mod:`agent.search_step`); the policy's
first proposal round starts from its ranked layouts.  The seed trials are evaluated as round 0, before the
policy's first proposal, so a policy (the LLM especially) starts from scored baselines, as Primus's planner does.

``build_graph(policy)`` compiles it; ``graph`` is the module-level graph with the offline policy,
built on first use (compiling is cheap, but importing the policy pulls in the tools).  Invoke it
with ``{"text": "..."}`` or ``{"request": {...}}``, the run options as context, and a recursion
limit from :func:`recursion_limit` (the graph keeps its own round budget; the limit is a backstop).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from agent import nodes, routing
from agent.policies import Policy
from agent.progress import reporting
from agent.report import report
from agent.state import InputState, RunOptions, State

STEPS_PER_ROUND = 4     # propose, evaluate, rank, reflect


def recursion_limit(max_rounds: int) -> int:
    """Super-steps a run can take: parse, search, seed, report, four per round (seed round included), plus
    slack."""
    return STEPS_PER_ROUND * (int(max_rounds) + 1) + 8


def _node(fn: Callable[..., dict[str, Any]], **bound: Any) -> Callable[[State, Runtime[RunOptions]], dict[str, Any]]:
    """A node that runs ``fn`` with the run's progress reporter set (and ``bound`` keywords, e.g. the policy)."""
    call = functools.partial(fn, **bound) if bound else fn
    takes_runtime = "runtime" in fn.__code__.co_varnames[:fn.__code__.co_argcount + fn.__code__.co_kwonlyargcount]

    def run(state: State, runtime: Runtime[RunOptions]) -> dict[str, Any]:
        with reporting(nodes.options_of(runtime).progress):
            return call(state, runtime) if takes_runtime else call(state)

    run.__name__ = fn.__name__
    return run


def build_graph(policy: Policy, checkpointer: Any = None) -> Any:
    """Compile the tuning graph around ``policy`` (one thread per tuning run when a checkpointer is given)."""
    builder = StateGraph(State, input_schema=InputState, context_schema=RunOptions)
    builder.add_node("parse", _node(nodes.parse, policy=policy))
    builder.add_node("search", _node(nodes.search))
    builder.add_node("seed", _node(nodes.seed))
    builder.add_node("propose", _node(nodes.propose, policy=policy))
    builder.add_node("evaluate", _node(nodes.evaluate))
    builder.add_node("rank", _node(nodes.rank))
    builder.add_node("reflect", _node(nodes.reflect))
    builder.add_node("report", _node(report, policy=policy))
    builder.add_edge(START, "parse")
    builder.add_conditional_edges("parse", routing.after_parse, ["search", "report"])
    builder.add_edge("search", "seed")
    builder.add_edge("seed", "evaluate")
    builder.add_edge("propose", "evaluate")
    builder.add_edge("evaluate", "rank")
    builder.add_edge("rank", "reflect")
    builder.add_conditional_edges("reflect", routing.after_reflect, ["propose", "report"])
    builder.add_edge("report", END)
    return builder.compile(checkpointer=checkpointer, name="projtune-tuner")


@functools.cache
def _offline_graph() -> Any:
    from agent.policies.offline import OfflinePolicy

    return build_graph(OfflinePolicy())


def __getattr__(name: str) -> Any:
    """``agent.graph.graph``: the offline graph, compiled on first access."""
    if name == "graph":
        return _offline_graph()
    raise AttributeError(name)
