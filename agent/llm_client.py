"""Any OpenAI-compatible chat endpoint through the ``openai`` SDK, with tenacity retries on transient errors only.

Configuration (flags win over the environment): ``PROJTUNE_LLM_BASE_URL`` (else
``OPENAI_BASE_URL``), ``PROJTUNE_LLM_API_KEY`` (else ``OPENAI_API_KEY``), ``PROJTUNE_LLM_MODEL``,
``PROJTUNE_LLM_TIMEOUT`` (wall-clock seconds per request), ``PROJTUNE_LLM_DEADLINE`` (seconds for
all requests of one tune).  Neither a base URL nor a key: no LLM.

Retried (tenacity, exponential backoff with jitter): timeouts, connection errors, 429 and 5xx.
Never retried: 4xx other than 429 (a bad request stays bad), and a 200 whose body is not a chat
completion.  The SDK's own retries are off (``max_retries=0``) so attempts do not multiply.

Time is bounded twice, by the wall clock rather than per socket read (a response dripped a few
bytes at a time never resets it): each request ends after ``timeout_s``, and all requests of one
tune share ``deadline_s``, counted from the first request after construction or :meth:`begin`.
A response body is read up to ``max_response_bytes``; message text and tool arguments are cut to
``max_content_chars``.  When time, retries or the endpoint give out, :class:`LLMUnavailable`
says why; the LLM policy then finishes the run offline and the report says it did.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx
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
TRUNCATED = " ...(cut: reply too long)"


class LLMUnavailable(RuntimeError):
    """The endpoint could not answer (retries or time exhausted) or rejected the request."""

    def __init__(self, reason: str, *, transient: bool) -> None:
        self.reason, self.transient = reason, transient
        super().__init__(reason)


class _Limits:
    """The wall-clock end and size cap of the request in flight (read by the transport)."""

    def __init__(self, max_bytes: int) -> None:
        self.ends_at = float("inf")
        self.max_bytes = max_bytes


class _BoundedStream(httpx.SyncByteStream):
    """A response body that stops at the request's wall-clock end or at the size cap."""

    def __init__(self, inner: httpx.SyncByteStream, limits: _Limits, request: httpx.Request) -> None:
        self._inner, self._limits, self._request = inner, limits, request

    def __iter__(self) -> Iterator[bytes]:
        read = 0
        for chunk in self._inner:
            read += len(chunk)
            if time.monotonic() > self._limits.ends_at:
                raise httpx.ReadTimeout("response still arriving at the request's wall-clock limit",
                                        request=self._request)
            if read > self._limits.max_bytes:
                raise httpx.ReadError(f"response body over {self._limits.max_bytes} bytes", request=self._request)
            yield chunk

    def close(self) -> None:
        self._inner.close()


class _BoundedTransport(httpx.BaseTransport):
    """httpx transport whose responses obey :class:`_Limits` (wall clock across reads, body size)."""

    def __init__(self, limits: _Limits) -> None:
        self._inner = httpx.HTTPTransport()
        self._limits = limits

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        assert isinstance(response.stream, httpx.SyncByteStream)
        return httpx.Response(status_code=response.status_code, headers=response.headers,
                              stream=_BoundedStream(response.stream, self._limits, request),
                              extensions=response.extensions, request=request)

    def close(self) -> None:
        self._inner.close()


def _cut(text: Any, limit: int) -> str:
    value = text if isinstance(text, str) else "" if text is None else str(text)
    return value if len(value) <= limit else value[:limit] + TRUNCATED


def _message_dict(message: Any, limit: int) -> dict[str, Any]:
    """The assistant message as an OpenAI-format dict (tool-call arguments kept as the raw string, cut to size)."""
    calls = []
    for call in (getattr(message, "tool_calls", None) or [])[:32]:
        function = getattr(call, "function", None)
        arguments = getattr(function, "arguments", "") or ""
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, default=str)
        calls.append({"id": _cut(getattr(call, "id", None) or f"call_{len(calls)}", 200), "type": "function",
                      "function": {"name": _cut(getattr(function, "name", "") or "", 200),
                                   "arguments": arguments if len(arguments) <= limit else "{}"}})
    out: dict[str, Any] = {"role": "assistant", "content": _cut(getattr(message, "content", None), limit)}
    if calls:
        out["tool_calls"] = calls
    return out


class LLMClient:
    """Chat completions with retries and wall-clock limits; counts requests sent (``attempts``)."""

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.attempts = 0
        self._limits = _Limits(config.max_response_bytes)
        self._run_ends_at: float | None = None
        self._client = openai.OpenAI(base_url=config.base_url, api_key=config.api_key, timeout=config.timeout_s,
                                     max_retries=0,
                                     http_client=httpx.Client(transport=_BoundedTransport(self._limits)))

    def begin(self) -> None:
        """Start a new tune: the overall deadline counts from the next request."""
        self._run_ends_at = None

    def remaining_s(self) -> float:
        """Seconds left of this tune's LLM deadline (the full deadline before the first request)."""
        if self._run_ends_at is None:
            return self.config.deadline_s
        return self._run_ends_at - time.monotonic()

    def _create(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Any:
        left = self.remaining_s()
        if left <= 0:
            raise LLMUnavailable(f"LLM endpoint {self.config.describe()}: the tune's LLM deadline of "
                                 f"{self.config.deadline_s:g} s passed", transient=False)
        budget = min(self.config.timeout_s, left)
        self._limits.ends_at = time.monotonic() + budget
        self.attempts += 1
        extra: dict[str, Any] = {"tools": tools} if tools else {}
        return self._client.chat.completions.create(model=self.config.model, messages=messages,  # type: ignore[arg-type]
                                                    temperature=self.config.temperature, timeout=budget, **extra)

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Send one chat request (retrying transient failures); the assistant message as a dict.

        Raises:
            LLMUnavailable: retries or the deadline exhausted, or a non-retryable error (4xx, a body that
            is not a chat completion).
        """
        c = self.config
        if self._run_ends_at is None:
            self._run_ends_at = time.monotonic() + c.deadline_s
        retrying = Retrying(
            retry=retry_if_exception_type(TRANSIENT),
            wait=wait_random_exponential(multiplier=c.retry_wait_s, max=c.retry_wait_max_s),
            stop=stop_after_attempt(c.max_attempts) | stop_after_delay(min(c.max_total_s, c.deadline_s)),
            before_sleep=before_sleep_log(log, logging.WARNING), reraise=True)
        try:
            response = retrying(self._create, messages, tools)
        except LLMUnavailable:
            raise
        except TRANSIENT as err:
            raise LLMUnavailable(f"LLM endpoint {c.describe()} unavailable after {self.attempts} attempts: "
                                 f"{type(err).__name__}: {_cut(err, 300)}", transient=True) from err
        except openai.APIStatusError as err:
            raise LLMUnavailable(f"LLM endpoint {c.describe()} rejected the request (HTTP {err.status_code}): "
                                 f"{_cut(err.message, 300)}", transient=False) from err
        except (openai.OpenAIError, RetryError) as err:
            raise LLMUnavailable(f"LLM endpoint {c.describe()} failed: {type(err).__name__}: {_cut(err, 300)}",
                                 transient=False) from err
        except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError) as err:
            # e.g. an HTTP 200 whose body is not JSON (json.JSONDecodeError is a ValueError)
            raise LLMUnavailable(f"LLM endpoint {c.describe()} answered with a body that is not a chat completion "
                                 f"({type(err).__name__})", transient=False) from err
        return self._message(response)

    def _message(self, response: Any) -> dict[str, Any]:
        c = self.config
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices or getattr(choices[0], "message", None) is None:
            shape = "no choices" if not isinstance(response, str) else "text, not a chat completion"
            raise LLMUnavailable(f"LLM endpoint {c.describe()} returned {shape}", transient=False)
        try:
            return _message_dict(choices[0].message, c.max_content_chars)
        except (TypeError, ValueError, AttributeError) as err:
            raise LLMUnavailable(f"LLM endpoint {c.describe()} returned a malformed message ({type(err).__name__})",
                                 transient=False) from err
