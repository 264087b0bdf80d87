"""Proposal policies: one interface, an offline deterministic policy (default) and an LLM policy.

A policy decides *what to evaluate*; it never scores.  The graph validates and scores whatever
it proposes with the tools, so a policy cannot put an unscored layout into the report.
"""

from __future__ import annotations

from typing import Any

from agent.policies.base import Explained, Parsed, Policy, PolicyStep

__all__ = ["Explained", "Parsed", "Policy", "PolicyStep", "make_policy"]


def make_policy(*, offline: bool = False, **flags: Any) -> Policy:
    """The LLM policy when projtune's own setting names an endpoint (``--llm-base-url`` or
    ``PROJTUNE_LLM_BASE_URL``) and not ``offline``, else the offline policy.

    ``flags``: settings given on the command line (projection/settings.py field names, None = not given).

    Raises:
        ProjtuneError: a setting is not valid, a key or model is set without an endpoint, or ``offline`` comes
            with LLM flags (they would be ignored; the environment's settings are, as documented).
    """
    from agent.llm_config import LLMConfig
    from agent.policies.offline import OfflinePolicy
    from projection.errors import ProjtuneError

    if offline:
        given = [f"--{name.replace('_', '-')}" for name, value in flags.items() if value is not None]
        if given:
            raise ProjtuneError(f"--offline and {', '.join(given)} contradict each other: offline, no LLM is asked, "
                                "so drop --offline to use the endpoint, or drop the LLM flags")
        return OfflinePolicy()
    config = LLMConfig.from_settings(**flags)
    if config is None:
        return OfflinePolicy()
    from agent.policies.llm import LLMPolicy

    return LLMPolicy(config)
