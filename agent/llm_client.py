"""Any OpenAI-compatible chat endpoint through the ``openai`` SDK, with tenacity retries on transient errors only.

Configuration: :class:`agent.llm_config.LLMConfig` (from projtune's own ``PROJTUNE_LLM_*`` settings
and flags; nothing else turns the LLM on).

Retried (tenacity, exponential backoff with jitter): timeouts, connection errors, 429 and 5xx.
Never retried: 4xx other than 429 (a bad request stays bad), and a 200 whose body is not a chat
completion.  The SDK's own retries are off (``max_retries=0``) so attempts do not multiply.

Every request is bounded: ``max_tokens`` (sized per step by the caller, agent/prompt_budget.py)
and, with tools, ``tool_choice: "auto"`` as the OpenAI API defines it (llama.cpp answers tool
calls only when asked so; no ``tool_choice`` is sent without tools, which the API forbids).

Time is bounded by the wall clock, not per socket read: each request ends ``timeout_s`` after it
starts and all requests of one tune share ``deadline_s`` (counted from the first request after
construction or :meth:`begin`).  The limit covers connecting, the response headers and the body:
every socket operation gets only the time left (:class:`_DeadlineBackend`), so an endpoint that
drips its headers or body a line at a time is cut at the limit.  Replies are streamed (unless
``stream`` is off): a request abandoned at its limit has its stream closed, the connection
dropped, and the server's next write fails, so it stops generating instead of holding a
one-request-at-a-time server for minutes.  A response body is read up to ``max_response_bytes``;
message text and tool arguments are cut to ``max_content_chars`` (a stream is closed there too).
HTTP(S) proxy variables are not used (``trust_env=False``): every byte goes through the deadline.
When time, retries or the endpoint give out, :class:`LLMUnavailable` says why; the LLM policy then
finishes the run offline and the report says it did.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import httpcore
import httpx
import openai
from openai.types.chat import ChatCompletion
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
                                          openai.InternalServerError, httpx.TransportError)
"""Retried: also httpx's own errors, raised while a streamed body is read (outside the SDK's mapping)."""
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


def _time_left(limits: _Limits, timeout: float | None) -> float:
    """The socket timeout for the next operation: what is left of the request's wall clock (raises when none)."""
    left = limits.ends_at - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("the request's wall-clock limit passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A socket whose every read and write gets only the time left of the request (headers dripped a line at a
    time are cut at the limit, not after one read timeout per line)."""

    def __init__(self, inner: httpcore.NetworkStream, limits: _Limits) -> None:
        self._inner, self._limits = inner, limits

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _time_left(self._limits, timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _time_left(self._limits, timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, _time_left(self._limits, timeout)),
                               self._limits)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's socket backend with connecting and every socket operation bounded by :class:`_Limits`."""

    def __init__(self, limits: _Limits) -> None:
        self._inner, self._limits = httpcore.SyncBackend(), limits

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(host, port, _time_left(self._limits, timeout), local_address,
                                         socket_options)
        return _DeadlineStream(stream, self._limits)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_unix_socket(path, _time_left(self._limits, timeout),
                                                               socket_options), self._limits)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _BoundedTransport(httpx.BaseTransport):
    """httpx transport whose requests obey :class:`_Limits` (wall clock over connect, headers and body; size)."""

    def __init__(self, limits: _Limits) -> None:
        self._inner = httpx.HTTPTransport()
        # httpx builds its connection pool without a way to pass the socket backend: rebuild it with ours
        # (same defaults as httpx.HTTPTransport()).
        self._inner._pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(), max_connections=4,
                                                    max_keepalive_connections=0,
                                                    network_backend=_DeadlineBackend(limits))
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


class _Reply:
    """A streamed reply put back together: the message (content, tool calls) and how it ended."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.chars = 0
        self.calls: dict[int, dict[str, Any]] = {}
        self.cut = False
        self.chunks = 0

    def add(self, chunk: Any, limit: int) -> None:
        for choice in getattr(chunk, "choices", None) or []:
            delta = getattr(choice, "delta", None)
            if delta is None:
                continue
            text = getattr(delta, "content", None)
            if isinstance(text, str) and text:
                self.content.append(text)
                self.chars += len(text)
            for call in getattr(delta, "tool_calls", None) or []:
                slot = self.calls.setdefault(int(getattr(call, "index", 0) or 0),
                                             {"id": None, "name": "", "arguments": ""})
                slot["id"] = slot["id"] or getattr(call, "id", None)
                function = getattr(call, "function", None)
                slot["name"] += getattr(function, "name", None) or ""
                slot["arguments"] += getattr(function, "arguments", None) or ""
                self.chars += len(getattr(function, "arguments", None) or "")
        self.cut = self.cut or self.chars > limit

    def message(self) -> Any:
        """The reply as the attribute shape of a non-streamed message (read by :func:`_message_dict`)."""
        from types import SimpleNamespace as NS

        calls = [NS(id=c["id"], function=NS(name=c["name"], arguments=c["arguments"]))
                 for _, c in sorted(self.calls.items())]
        return NS(content="".join(self.content) or None, tool_calls=calls or None)


class LLMClient:
    """Chat completions with retries and wall-clock limits; counts requests sent (``attempts``) and abandoned
    (``abandoned``: closed at their limit or size cap, so the server stops generating)."""

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.attempts = 0
        self.abandoned = 0
        self._limits = _Limits(config.max_response_bytes)
        self._run_ends_at: float | None = None
        self._client = openai.OpenAI(base_url=config.base_url, api_key=config.api_key, timeout=config.timeout_s,
                                     max_retries=0, http_client=httpx.Client(
                                         transport=_BoundedTransport(self._limits), trust_env=False))

    def begin(self) -> None:
        """Start a new tune: the overall deadline counts from the next request."""
        self._run_ends_at = None

    def remaining_s(self) -> float:
        """Seconds left of this tune's LLM deadline (the full deadline before the first request)."""
        if self._run_ends_at is None:
            return self.config.deadline_s
        return self._run_ends_at - time.monotonic()

    def _create(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, max_tokens: int) -> Any:
        left = self.remaining_s()
        if left <= 0:
            raise LLMUnavailable(f"LLM endpoint {self.config.describe()}: the tune's LLM deadline of "
                                 f"{self.config.deadline_s:g} s passed", transient=False)
        budget = min(self.config.timeout_s, left)
        self._limits.ends_at = time.monotonic() + budget
        self.attempts += 1
        extra: dict[str, Any] = {"tools": tools, "tool_choice": "auto"} if tools else {}
        request = {"model": self.config.model, "messages": messages, "temperature": self.config.temperature,
                   "max_tokens": max_tokens, "timeout": budget, **extra}
        if not self.config.stream:
            response = self._client.chat.completions.create(**request)  # type: ignore[call-overload]
            choices = getattr(response, "choices", None)
            if not isinstance(choices, list) or not choices or getattr(choices[0], "message", None) is None:
                shape = "no choices" if not isinstance(response, str) else "text, not a chat completion"
                raise LLMUnavailable(f"LLM endpoint {self.config.describe()} returned {shape}", transient=False)
            return choices[0].message
        stream = self._client.chat.completions.create(stream=True, **request)  # type: ignore[call-overload]
        reply = _Reply()
        finished = False
        try:
            if "event-stream" not in stream.response.headers.get("content-type", ""):
                # a server that ignores "stream": read the body as one chat completion (ValueError if it is not)
                completion = ChatCompletion.model_validate(json.loads(stream.response.read()))
                finished = True
                return completion.choices[0].message
            for chunk in stream:
                reply.chunks += 1
                reply.add(chunk, self.config.max_content_chars)
                if reply.cut:
                    break
            finished = True
        finally:
            if not finished or reply.cut:
                self.abandoned += 1
            stream.close()   # closes the connection: a server still generating sees its next write fail
        if not reply.chunks:
            raise LLMUnavailable(f"LLM endpoint {self.config.describe()} answered with a body that is not a chat "
                                 "completion stream (a server that cannot stream: set PROJTUNE_LLM_STREAM=0)",
                                 transient=False)
        return reply.message()

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
                 max_tokens: int) -> dict[str, Any]:
        """Send one chat request (retrying transient failures); the assistant message as a dict.

        ``max_tokens``: the reply's cap (every request carries one; agent/prompt_budget.py sizes it).

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
            message = retrying(self._create, messages, tools, max_tokens)
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
        except (ValueError, TypeError, KeyError, AttributeError, IndexError, UnicodeDecodeError) as err:
            # e.g. an HTTP 200 whose body is not JSON (json.JSONDecodeError is a ValueError)
            raise LLMUnavailable(f"LLM endpoint {c.describe()} answered with a body that is not a chat completion "
                                 f"({type(err).__name__})", transient=False) from err
        try:
            return _message_dict(message, c.max_content_chars)
        except (TypeError, ValueError, AttributeError) as err:
            raise LLMUnavailable(f"LLM endpoint {c.describe()} returned a malformed message ({type(err).__name__})",
                                 transient=False) from err
