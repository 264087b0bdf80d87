"""Proposal policies: one interface, an offline deterministic policy (default) and an LLM policy.

A policy decides *what to evaluate*; it never scores.  The graph validates and scores whatever
it proposes with the tools, so a policy cannot put an unscored layout into the report.
"""

from __future__ import annotations

from agent.policies.base import Explained, Parsed, Policy, PolicyStep

__all__ = ["Explained", "Parsed", "Policy", "PolicyStep", "make_policy"]


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
