"""Where the LLM is (flags, then environment) and how hard to try; importing this does not import the SDK.

``PROJTUNE_LLM_BASE_URL`` (else ``OPENAI_BASE_URL``), ``PROJTUNE_LLM_API_KEY`` (else
``OPENAI_API_KEY``), ``PROJTUNE_LLM_MODEL``, ``PROJTUNE_LLM_TIMEOUT`` (seconds per request),
``PROJTUNE_LLM_MAX_ATTEMPTS`` and ``PROJTUNE_LLM_RETRY_WAIT`` (backoff multiplier, seconds),
``PROJTUNE_LLM_DEADLINE`` (seconds for all LLM requests of one tune, default 30: then the offline
policy finishes the run and the report says so).
Neither a base URL nor a key: no LLM is configured and the offline policy runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_TIMEOUT_S = 20.0
DEFAULT_DEADLINE_S = 30.0
NO_KEY = "not-needed"   # local servers (vLLM, Ollama, llama.cpp) accept any key


class LLMConfig(BaseModel):
    """Where the LLM is and how hard to try."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(default=None, description="OpenAI-compatible base URL, e.g. http://localhost:8000/v1.")
    api_key: str = Field(default=NO_KEY, repr=False)
    model: str = DEFAULT_MODEL
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0, le=3600, allow_inf_nan=False,
                             description="Wall-clock limit of one request, seconds (a dripped answer included).")
    deadline_s: float = Field(default=DEFAULT_DEADLINE_S, gt=0, le=3600, allow_inf_nan=False,
                              description="All LLM requests of one tune, seconds; then the offline policy takes over.")
    max_response_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, description="Largest response body read.")
    max_content_chars: int = Field(default=32_000, ge=100, description="Longest message text or tool arguments "
                                                                       "kept from one reply (cut beyond).")
    max_attempts: int = Field(default=4, ge=1, description="Attempts per request (1 = no retry).")
    retry_wait_s: float = Field(default=1.0, ge=0, description="Backoff multiplier.")
    retry_wait_max_s: float = Field(default=10.0, ge=0, description="Longest single backoff wait.")
    max_total_s: float = Field(default=60.0, gt=0, description="Give up retrying one request after this long.")
    temperature: float = 0.0

    @classmethod
    def from_env(cls, *, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                 timeout_s: float | None = None, env: Mapping[str, str] | None = None) -> LLMConfig | None:
        """The configured endpoint (flags, then environment), or None when no LLM is configured."""
        env = os.environ if env is None else env
        url = base_url or env.get("PROJTUNE_LLM_BASE_URL") or env.get("OPENAI_BASE_URL")
        key = api_key or env.get("PROJTUNE_LLM_API_KEY") or env.get("OPENAI_API_KEY")
        if not url and not key:
            return None
        timeout = timeout_s or _seconds(env.get("PROJTUNE_LLM_TIMEOUT"), DEFAULT_TIMEOUT_S)
        tuning: dict[str, float] = {"deadline_s": _seconds(env.get("PROJTUNE_LLM_DEADLINE"), DEFAULT_DEADLINE_S)}
        if env.get("PROJTUNE_LLM_MAX_ATTEMPTS", "").strip().isdigit():
            tuning["max_attempts"] = max(1, int(env["PROJTUNE_LLM_MAX_ATTEMPTS"]))
        if env.get("PROJTUNE_LLM_RETRY_WAIT"):
            wait = _seconds(env["PROJTUNE_LLM_RETRY_WAIT"], 1.0)
            tuning.update(retry_wait_s=wait, retry_wait_max_s=min(10 * wait, 10.0))
        return cls(base_url=url or None, api_key=key or NO_KEY, model=model or env.get("PROJTUNE_LLM_MODEL")
                   or DEFAULT_MODEL, timeout_s=timeout, **tuning)

    def describe(self) -> str:
        """'MODEL at URL' for messages."""
        return f"{self.model} at {self.base_url or 'https://api.openai.com/v1'}"


def _seconds(text: str | None, default: float) -> float:
    """A positive, finite number of seconds from an environment value, else ``default``."""
    try:
        value = float(text) if text else default
    except ValueError:
        return default
    return value if 0 < value <= 3600 else default
