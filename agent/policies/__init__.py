"""Proposal policies: one interface, an offline deterministic policy (default) and an LLM policy.

A policy decides *what to evaluate*; it never scores.  The graph validates and scores whatever
it proposes with the tools, so a policy cannot put an unscored layout into the report.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from agent.request import Clarification, TuneRequest


@runtime_checkable
class Policy(Protocol):
    """What the graph needs from a policy."""

    name: str
    """'offline' or 'llm' (the report says which one ran)."""

    def propose(self, state: dict[str, Any]) -> list[dict[str, Any]]:
        """Return the next proposals: ``[{"config": {...}, "reason": str, "source": str}, ...]``; [] when done."""
        ...

    def explain(self, state: dict[str, Any]) -> str:
        """Return the text that says why the best scored layout wins (numbers come from the tools)."""
        ...

    def parse(self, text: str, base: TuneRequest | dict[str, Any] | None = None) -> TuneRequest | Clarification:
        """Read a request from text (``base``: the earlier request a follow-up changes)."""
        ...

    def status(self) -> dict[str, Any]:
        """Side facts of the last call: ``tool_calls`` made, ``degraded_reason`` (fallback taken), ``notes``."""
        ...


def make_policy(*, offline: bool = False, base_url: str | None = None, model: str | None = None,
                api_key: str | None = None, timeout_s: float | None = None) -> Policy:
    """The LLM policy when an endpoint is configured (flags or environment) and not ``offline``, else offline."""
    from agent.llm_config import LLMConfig
    from agent.policies.offline import OfflinePolicy

    if offline:
        return OfflinePolicy()
    config = LLMConfig.from_env(base_url=base_url, model=model, api_key=api_key, timeout_s=timeout_s)
    if config is None:
        return OfflinePolicy()
    from agent.policies.llm import LLMPolicy

    return LLMPolicy(config)
