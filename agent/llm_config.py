"""Where the LLM is (flags, then environment) and how hard to try; importing this does not import the SDK.

``PROJTUNE_LLM_BASE_URL`` (else ``OPENAI_BASE_URL``), ``PROJTUNE_LLM_API_KEY`` (else
``OPENAI_API_KEY``), ``PROJTUNE_LLM_MODEL``, ``PROJTUNE_LLM_TIMEOUT`` (seconds per request),
``PROJTUNE_LLM_MAX_ATTEMPTS`` and ``PROJTUNE_LLM_RETRY_WAIT`` (backoff multiplier, seconds).
Neither a base URL nor a key: no LLM is configured and the offline policy runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_MODEL = "gpt-4o-mini"
NO_KEY = "not-needed"   # local servers (vLLM, Ollama, llama.cpp) accept any key


class LLMConfig(BaseModel):
    """Where the LLM is and how hard to try."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(default=None, description="OpenAI-compatible base URL, e.g. http://localhost:8000/v1.")
    api_key: str = Field(default=NO_KEY, repr=False)
    model: str = DEFAULT_MODEL
    timeout_s: float = Field(default=60.0, gt=0, description="Per-request timeout.")
    max_attempts: int = Field(default=4, ge=1, description="Attempts per request (1 = no retry).")
    retry_wait_s: float = Field(default=1.0, ge=0, description="Backoff multiplier.")
    retry_wait_max_s: float = Field(default=10.0, ge=0, description="Longest single backoff wait.")
    max_total_s: float = Field(default=180.0, gt=0, description="Give up retrying after this long.")
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
        timeout = timeout_s or float(env.get("PROJTUNE_LLM_TIMEOUT") or 60.0)
        tuning: dict[str, float] = {}
        if env.get("PROJTUNE_LLM_MAX_ATTEMPTS"):
            tuning["max_attempts"] = int(env["PROJTUNE_LLM_MAX_ATTEMPTS"])
        if env.get("PROJTUNE_LLM_RETRY_WAIT"):
            wait = float(env["PROJTUNE_LLM_RETRY_WAIT"])
            tuning.update(retry_wait_s=wait, retry_wait_max_s=min(10 * wait, 10.0))
        return cls(base_url=url or None, api_key=key or NO_KEY, model=model or env.get("PROJTUNE_LLM_MODEL")
                   or DEFAULT_MODEL, timeout_s=timeout, **tuning)

    def describe(self) -> str:
        """'MODEL at URL' for messages."""
        return f"{self.model} at {self.base_url or 'https://api.openai.com/v1'}"
