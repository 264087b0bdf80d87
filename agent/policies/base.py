"""The policy interface: what a policy gives the graph for each call (a step, a parse, an explanation).

A policy keeps nothing between calls; what it must remember lives in the graph state it is given
(:mod:`agent.state`), and the nodes write what it returns into the state.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from agent.text.request import Clarification, TuneRequest

_STEP = ConfigDict(extra="forbid", frozen=True)


class PolicyStep(BaseModel):
    """What one :meth:`Policy.propose` call gives the graph; the propose node writes it into the state."""

    model_config = _STEP

    proposals: list[dict[str, Any]] = Field(default_factory=list,
                                            description="``{config, reason, source, search_rank}`` dicts; [] when "
                                                        "the policy has nothing new.")
    tool_calls: int = Field(default=0, description="Tool calls the policy made (counted against the budget).")
    notes: list[str] = Field(default_factory=list, description="What the report should say about this step.")
    search: dict[str, Any] | None = Field(default=None, description="The search summary, when the step ran one.")
    degraded_reason: str | None = Field(default=None, description="Set when the policy fell back (offline) now.")
    conversation: list[dict[str, Any]] | None = Field(
        default=None, description="The LLM conversation after this step (None: the policy keeps none).")
    tool_errors: list[dict[str, Any]] = Field(default_factory=list,
                                              description="Typed tool failures (agent.toolbox.ToolFailure dumps).")


class Parsed(BaseModel):
    """What :meth:`Policy.read` gives the parse node: the request (or question back) and a fallback, if any."""

    model_config = _STEP

    result: TuneRequest | Clarification
    degraded_reason: str | None = None


class Explained(BaseModel):
    """What :meth:`Policy.explain` gives the report node: the text, notes about it, and a fallback, if any."""

    model_config = _STEP

    text: str
    notes: list[str] = Field(default_factory=list)
    degraded_reason: str | None = None


@runtime_checkable
class Policy(Protocol):
    """What the graph needs from a policy.  A policy keeps nothing between calls: what it must remember
    (the LLM's conversation, a fallback taken) lives in the graph state it is given."""

    name: str
    """'offline' or 'llm' (the report says which one ran)."""

    def propose(self, state: dict[str, Any]) -> PolicyStep:
        """The next proposals (and the step's tool calls, notes, search, conversation); no proposals when done."""
        ...

    def explain(self, state: dict[str, Any]) -> Explained:
        """The text that says why the best scored layout wins (numbers come from the tools)."""
        ...

    def read(self, text: str, base: TuneRequest | dict[str, Any] | None = None,
             state: dict[str, Any] | None = None) -> Parsed:
        """Read a request from text (``base``: the earlier request a follow-up changes), for the parse node."""
        ...

    def parse(self, text: str, base: TuneRequest | dict[str, Any] | None = None) -> TuneRequest | Clarification:
        """Read a request from text (``read(...).result``), for callers outside the graph."""
        ...
