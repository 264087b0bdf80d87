"""Any OpenAI-compatible chat endpoint through the ``openai`` SDK, with tenacity retries on transient errors only.

Configuration (flags win over the environment): ``PROJTUNE_LLM_BASE_URL`` (else
``OPENAI_BASE_URL``), ``PROJTUNE_LLM_API_KEY`` (else ``OPENAI_API_KEY``), ``PROJTUNE_LLM_MODEL``,
``PROJTUNE_LLM_TIMEOUT`` (seconds per request).  Neither a base URL nor a key: no LLM.

Retried (tenacity, exponential backoff with jitter): timeouts, connection errors, 429 and 5xx.
Never retried: 4xx other than 429 (a bad request stays bad).  The SDK's own retries are off
(``max_retries=0``) so attempts do not multiply.  When the retries run out, or the endpoint
rejects the request, :class:`LLMUnavailable` says why; the LLM policy then falls back offline.
"""

from __future__ import annotations

import logging
from typing import Any

import openai
from tenacity import (
    RetryError,
    Retrying,
    before_sleep_log,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from agent.llm_config import LLMConfig

__all__ = ["TRANSIENT", "LLMClient", "LLMConfig", "LLMUnavailable"]
log = logging.getLogger(__name__)
TRANSIENT: tuple[type[Exception], ...] = (openai.RateLimitError, openai.APITimeoutError, openai.APIConnectionError,
                                          openai.InternalServerError)


class LLMUnavailable(RuntimeError):
    """The endpoint could not answer (retries exhausted) or rejected the request."""

    def __init__(self, reason: str, *, transient: bool) -> None:
        self.reason, self.transient = reason, transient
        super().__init__(reason)


def _message_dict(message: Any) -> dict[str, Any]:
    """The assistant message as an OpenAI-format dict (tool-call arguments kept as the raw string)."""
    calls = []
    for call in getattr(message, "tool_calls", None) or []:
        function = getattr(call, "function", None)
        calls.append({"id": getattr(call, "id", None) or f"call_{len(calls)}", "type": "function",
                      "function": {"name": getattr(function, "name", "") or "",
                                   "arguments": getattr(function, "arguments", "") or ""}})
    out: dict[str, Any] = {"role": "assistant", "content": getattr(message, "content", None) or ""}
    if calls:
        out["tool_calls"] = calls
    return out


class LLMClient:
    """Chat completions with retries; counts requests sent (``attempts``)."""

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.attempts = 0
        self._client = openai.OpenAI(base_url=config.base_url, api_key=config.api_key, timeout=config.timeout_s,
                                     max_retries=0)

    def _create(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Any:
        self.attempts += 1
        extra: dict[str, Any] = {"tools": tools} if tools else {}
        return self._client.chat.completions.create(model=self.config.model, messages=messages,  # type: ignore[arg-type]
                                                    temperature=self.config.temperature, **extra)

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Send one chat request (retrying transient failures); the assistant message as a dict.

        Raises:
            LLMUnavailable: retries exhausted, or a non-retryable error (4xx, malformed response).
        """
        c = self.config
        retrying = Retrying(
            retry=retry_if_exception_type(TRANSIENT),
            wait=wait_random_exponential(multiplier=c.retry_wait_s, max=c.retry_wait_max_s),
            stop=stop_after_attempt(c.max_attempts) | stop_after_delay(c.max_total_s),
            before_sleep=before_sleep_log(log, logging.WARNING), reraise=True)
        try:
            response = retrying(self._create, messages, tools)
        except TRANSIENT as err:
            raise LLMUnavailable(f"LLM endpoint {c.describe()} unavailable after {self.attempts} attempts: "
                                 f"{type(err).__name__}: {err}", transient=True) from err
        except openai.APIStatusError as err:
            raise LLMUnavailable(f"LLM endpoint {c.describe()} rejected the request (HTTP {err.status_code}): "
                                 f"{err.message}", transient=False) from err
        except (openai.OpenAIError, RetryError) as err:
            raise LLMUnavailable(f"LLM endpoint {c.describe()} failed: {type(err).__name__}: {err}",
                                 transient=False) from err
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise LLMUnavailable(f"LLM endpoint {c.describe()} returned no choices", transient=False)
        return _message_dict(choices[0].message)
