"""Where the LLM is and how hard to try, from projtune's own settings; importing this does not import the SDK.

Opt-in: the LLM policy runs only when ``PROJTUNE_LLM_BASE_URL`` or ``--llm-base-url`` names an
endpoint.  Generic variables (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``) set for other programs are
never read, so they cannot send a tuning request to a remote service the user did not choose.
The other ``PROJTUNE_LLM_*`` settings (key, model, timeout, deadline, attempts, retry wait,
context, streaming) and their flags are read through :mod:`projection.settings`.  A key or model
given without an endpoint is a usage error (it says to set the endpoint).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from projection.errors import ProjtuneError

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_TIMEOUT_S = 20.0
DEFAULT_DEADLINE_S = 30.0
DEFAULT_CONTEXT_TOKENS = 8192
NO_KEY = "not-needed"   # local servers (vLLM, Ollama, llama.cpp) accept any key


class LLMConfig(BaseModel):
    """Where the LLM is and how hard to try."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1.")
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
    context_tokens: int = Field(default=DEFAULT_CONTEXT_TOKENS, ge=2048, le=1_048_576,
                                description="The model's context window, tokens: prompt estimate + max_tokens stay "
                                            "below it (agent/prompt_budget.py).")
    stream: bool = Field(default=True, description="Stream replies, so an abandoned request closes its stream and "
                                                   "the server stops generating.")

    @classmethod
    def from_settings(cls, **flags: Any) -> LLMConfig | None:
        """The configured endpoint (flags over ``PROJTUNE_LLM_*``), or None when no endpoint is named.

        Raises:
            ProjtuneError: a setting is not valid, or a key or model is set without an endpoint.
        """
        from projection.settings import load_settings

        s = load_settings(**flags)
        if not s.llm_base_url:
            given = [n for n, v in (("PROJTUNE_LLM_API_KEY / --llm-api-key", s.llm_api_key),
                                    ("PROJTUNE_LLM_MODEL / --llm-model", s.llm_model)) if v]
            if given:
                raise ProjtuneError(f"{' and '.join(given)} set but no LLM endpoint: set PROJTUNE_LLM_BASE_URL or "
                                    "--llm-base-url (https://api.openai.com/v1 for OpenAI), or unset them to run "
                                    "offline")
            return None
        wait = s.llm_retry_wait
        return cls(base_url=s.llm_base_url, api_key=s.llm_api_key.get_secret_value() if s.llm_api_key else NO_KEY,
                   model=s.llm_model or DEFAULT_MODEL, timeout_s=s.llm_timeout, deadline_s=s.llm_deadline,
                   max_attempts=s.llm_max_attempts, retry_wait_s=wait, retry_wait_max_s=min(10 * wait, 10.0),
                   context_tokens=s.llm_context, stream=s.llm_stream)

    def describe(self) -> str:
        """'MODEL at URL' for messages."""
        return f"{self.model} at {self.base_url}"

