"""The LLM policy: an OpenAI-compatible model proposes layouts through tool calls and writes the explanation.

Per round the model sees the job, the legal axes (computed in code) and every trial so far with
its scores, and answers with ``propose_layouts`` calls (it may check ideas with the read-only
tools first).  Each proposed layout is validated here, in code: an illegal one goes straight back
to the model as the tool result, with the reasons; legal ones go to the graph, which scores them.
Round 1 also carries the layout search's top-k (``anchor_search``), so the answer is never worse
than the search and the model's work is to beat it and to explain.

Degradation: malformed arguments are repaired (json_repair) or sent back as an error (the model
re-asks); a round without a legal proposal after ``max_turns`` ends the loop; an endpoint that
stays down or rejects requests switches the run to :class:`OfflinePolicy` and marks it degraded
(the step's ``degraded_reason`` becomes the state's; the report says why).  The policy object keeps
no run state: the conversation is the graph state's ``conversation``, so a checkpoint resumes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from agent.text.grounding import ground_numbers
from agent.llm_client import LLMClient, LLMConfig, LLMUnavailable
from agent.text.plain_text import plain_text
from agent.policies.base import Explained, Parsed, PolicyStep
from agent.policies.llm_tools import (
    PROPOSE,
    READ_ONLY_TOOLS,
    ProposeLayoutsArgs,
    calls_in_text,
    llm_tool_schemas,
    parse_arguments,
    tool_result_text,
)
from agent.policies.offline import OfflinePolicy, offline_explanation
from agent.prompt_budget import REPLY_TOKENS, PromptTooLarge, fit_request
from agent.search_step import measured_proposals, search_proposals
from agent.text.prompts_text import history_table, job_text, parse_reply
from agent.text.request import Clarification, TuneRequest, parse_request
from agent.space import LayoutSpace
from agent.toolbox import Toolbox, ToolFailed
from prompts.loader import render_prompt
from tools.schemas import LegalAxesOutput

MAX_TURNS = 6


EXPLANATION_MAX_CHARS = 2000
"""Longest LLM explanation a report keeps (the prompt asks for at most 8 sentences, about 1,200 characters); a
longer reply is cut and the cut is noted, so a prompt-injected or runaway reply cannot flood the answer."""


class LLMPolicy:
    """Proposals and explanations from an OpenAI-compatible endpoint (see the module docstring).

    The policy keeps no run state: the conversation is the graph state's ``conversation`` (returned in
    each :class:`PolicyStep`), and a fallback taken is the state's ``degraded_reason``.
    """

    name = "llm"

    def __init__(self, config: LLMConfig, *, client: LLMClient | None = None, anchor_search: bool = True,
                 max_turns: int = MAX_TURNS) -> None:
        self.config = config
        self.client = client or LLMClient(config)
        self.anchor_search, self.max_turns = anchor_search, max_turns
        self.offline = OfflinePolicy()

    @property
    def endpoint(self) -> str:
        """'MODEL at URL' (the answer names the endpoint it used)."""
        return self.config.describe()

    def _ask(self, messages: list[dict[str, Any]], step: str, tools: list[dict[str, Any]] | None = None,
             round_start: int | None = None, notes: list[str] | None = None) -> dict[str, Any]:
        """One request fitted to the context (agent/prompt_budget.py) with the step's ``max_tokens``; what the fit
        left out goes to ``notes``.

        Raises:
            LLMUnavailable: the endpoint failed, or the prompt cannot fit the context (not transient).
        """
        try:
            fitted = fit_request(messages, tools, context=self.config.context_tokens,
                                 reply_tokens=REPLY_TOKENS[step], round_start=round_start)
        except PromptTooLarge as err:
            raise LLMUnavailable(f"LLM endpoint {self.config.describe()}: {err}", transient=False) from err
        if notes is not None:
            notes += [n for n in fitted.notes if n not in notes]
        return self.client.complete(fitted.messages, fitted.tools or None, max_tokens=fitted.max_tokens)

    @staticmethod
    def _fallen_back(err: LLMUnavailable) -> str:
        return f"{err.reason}; fell back to the offline policy"

    def read(self, text: str, base: TuneRequest | dict[str, Any] | None = None,
             state: dict[str, Any] | None = None) -> Parsed:
        """Offline parser first; when it asks back, the LLM reads the text (names checked against the catalog)."""
        offline = parse_request(text, base)
        if isinstance(offline, TuneRequest) or (state or {}).get("degraded") or not text.strip():
            return Parsed(result=offline)
        from agent.text.names import gpu_index, model_catalog

        prompt = render_prompt("parse", text=text, models=", ".join(sorted(model_catalog())),
                               gpus=", ".join(sorted(set(gpu_index().values()))))
        try:
            reply = self._ask([{"role": "user", "content": prompt}], "parse")
        except LLMUnavailable as err:
            return Parsed(result=offline, degraded_reason=self._fallen_back(err))
        return Parsed(result=parse_reply(reply.get("content") or "", base, offline, text=text))

    def parse(self, text: str, base: TuneRequest | dict[str, Any] | None = None) -> TuneRequest | Clarification:
        """The request :meth:`read` finds (for callers outside the graph)."""
        return self.read(text, base).result

    def propose(self, state: dict[str, Any]) -> PolicyStep:
        """One round: the model's legal proposals (plus the search's top-k in round 1)."""
        if state.get("degraded"):
            return self.offline.propose(state)
        job, tools = LayoutSpace(state["request"]), Toolbox.for_request(state["request"])
        step = _Step()
        anchored: list[dict[str, Any]] = []
        messages = [dict(m) for m in state.get("conversation") or []]
        if not messages:
            try:
                axes: LegalAxesOutput | None = tools.legal_axes(job.seq_len)
            except ToolFailed:
                axes = None
            messages = [{"role": "system", "content": render_prompt("propose", job=job_text(job, axes))}]
            if self.anchor_search and state.get("round") == 1 and state.get("search") is not None:
                search = state["search"]                       # the graph's search step ran the search
                anchored = (measured_proposals(state["request"]) if search.get("measured_candidates")
                            else search_proposals(search))
        messages.append({"role": "user", "content": history_table(state, anchored)})
        try:
            proposals = self._converse(job, tools, messages, step, round_start=len(messages) - 1)
        except LLMUnavailable as err:
            step.degraded_reason = self._fallen_back(err)
            step.tool_calls += tools.calls
            step.tool_errors += tools.failures_dump()
            return step.done(anchored + self._offline(state, step, skip_search=bool(anchored)), messages)
        step.tool_calls += tools.calls
        step.tool_errors += tools.failures_dump()
        return step.done(anchored + [{**p, "source": self.name, "search_rank": None} for p in proposals], messages)

    def _offline(self, state: dict[str, Any], step: _Step, *, skip_search: bool = False) -> list[dict[str, Any]]:
        """The offline policy's proposals (its neighbours only when the search's layouts are already proposed)."""
        fallback = self.offline.neighbours(state) if skip_search else self.offline.propose(state)
        step.tool_calls += fallback.tool_calls
        step.notes += fallback.notes
        step.tool_errors += fallback.tool_errors
        if fallback.search is not None:
            step.search = fallback.search
        return fallback.proposals

    def _converse(self, job: LayoutSpace, tools: Toolbox, messages: list[dict[str, Any]], step: _Step, *,
                  round_start: int) -> list[dict[str, Any]]:
        """Tool-call turns until the model puts forward legal layouts, says done, or runs out of turns.

        Each request is fitted to the context (fewer tools, earlier rounds left out: agent/prompt_budget.py);
        the whole conversation stays in the state.  A reply that cannot be read (no call, or arguments that
        are not JSON even after repair) is asked again once per round; a second one ends the round.
        """
        schemas = llm_tool_schemas()
        reasked = False
        for _ in range(self.max_turns):
            message = self._ask(messages, "propose", schemas, round_start, step.notes)
            calls = [(c["id"], c["function"]["name"], c["function"]["arguments"])
                     for c in message.get("tool_calls", [])]
            if calls:
                accepted, done, results = self._handle(job, tools, calls, step)
                message["tool_calls"] = [{**c, "function": {**c["function"], "arguments": json.dumps(r["args"])}}
                                         for c, r in zip(message["tool_calls"], results, strict=True)]
                messages.append(message)
                messages += [{"role": "tool", "tool_call_id": c["id"], "content": r["text"]}
                                  for c, r in zip(message["tool_calls"], results, strict=True)]
            else:
                messages.append(message)
                found = calls_in_text(message.get("content") or "")
                accepted, done, results = self._handle(job, tools, [(None, n, a) for n, a in found], step)
                nudge = f"Call {PROPOSE} with layouts, or with an empty list and done=true."
                texts = json.dumps([r["text"] for r in results])
                messages.append({"role": "user", "content": f"Tool results: {texts}" if found else nudge})
            if accepted or done:
                return accepted
            if not results or any(r.get("unreadable") for r in results):
                if reasked:
                    step.notes.append("the LLM's reply could not be read twice; round ended")
                    return []
                reasked = True
        step.notes.append(f"the LLM put forward no legal layout in {self.max_turns} turns")
        return []

    def _handle(self, job: LayoutSpace, tools: Toolbox, calls: list[tuple[str | None, str, Any]], step: _Step
                ) -> tuple[list[dict[str, Any]], bool, list[dict[str, Any]]]:
        """Run each call: validate proposals in code, run read-only tools; (accepted, done, per-call results)."""
        accepted: list[dict[str, Any]] = []
        done, results = False, []
        for _, name, raw in calls:
            args, note = parse_arguments(raw)
            if note and args is not None:
                step.notes.append(f"LLM tool call {name}: {note}")
            if args is None:
                results.append({"args": {}, "unreadable": True,
                                "text": tool_result_text({"ok": False, "error": note})})
            elif name == PROPOSE:
                payload, legal, stop = self._proposals(job, args)
                accepted += legal
                done = done or stop
                results.append({"args": args, "text": tool_result_text(payload)})
            elif name in READ_ONLY_TOOLS:
                if isinstance(args.get("layout"), dict):   # the job fixes batch and sequence (not in the schema)
                    args = {**args, "layout": {**args["layout"], "gbs": job.gbs, "seq_len": job.seq_len}}
                results.append({"args": args, "text": tool_result_text(tools.call_from_model(name, args))})
            else:
                error = {"ok": False, "error": f"unknown tool '{name}'; use {PROPOSE} or {', '.join(READ_ONLY_TOOLS)}"}
                results.append({"args": args, "text": tool_result_text(error)})
        return accepted, done, results

    def _proposals(self, job: LayoutSpace, args: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
        try:
            parsed = ProposeLayoutsArgs.model_validate(args)
        except ValidationError as err:
            first = err.errors()[0]
            return ({"ok": False, "error": f"{'.'.join(map(str, first['loc']))}: {first['msg']}"}, [], False)
        legal, rejected = [], []
        for item in parsed.layouts:
            checked = job.check(item.layout)
            if checked.status != "ok" or checked.config is None:
                rejected.append({"layout": item.layout, "status": checked.status, "reasons": checked.reasons})
                continue
            legal.append({"config": job.plain(checked.config), "reason": item.reason or parsed.hypothesis})
        payload = {"ok": True, "accepted": len(legal), "rejected": rejected,
                   "next": "accepted layouts are screened and projected; you see their scores next round"
                   if legal else "fix the rejected layouts (see reasons) and call propose_layouts again"}
        return payload, legal, parsed.done and not legal

    def explain(self, state: dict[str, Any]) -> Explained:
        """The model's explanation of the winner (offline text when degraded or the endpoint fails now): plain,
        bounded, without sentences addressed to the reader (:mod:`agent.text.plain_text`), and with every number no
        tool result of the same kind contains replaced by '[?]' and named (:mod:`agent.text.grounding`)."""
        facts = state.get("facts") or {}
        if state.get("degraded") or not facts.get("best"):
            return Explained(text=offline_explanation(facts))
        from agent.text.prompts_text import facts_text

        try:
            prompt = render_prompt("explain", facts=facts_text(facts))
            reply = self._ask([{"role": "user", "content": prompt}], "explain")
        except LLMUnavailable as err:
            return Explained(text=offline_explanation(facts), degraded_reason=self._fallen_back(err))
        text, notes = plain_text(reply.get("content") or "", EXPLANATION_MAX_CHARS, what="the LLM's explanation")
        if not text:
            return Explained(text=offline_explanation(facts), notes=notes, degraded_reason=(
                f"LLM endpoint {self.config.describe()} returned no usable explanation; the offline explanation "
                "is shown"))
        grounded, flagged = ground_numbers(text, facts)
        if flagged:
            more = f" and {len(flagged) - 8} more" if len(flagged) > 8 else ""
            notes.append(f"removed {len(flagged)} number(s) from the LLM's explanation that no tool result contains "
                         f"as that kind of number: {', '.join(flagged[:8])}{more}; they show as [?]")
        return Explained(text=grounded, notes=notes)


@dataclass(slots=True)
class _Step:
    """What one propose call gathers before it becomes a :class:`PolicyStep`."""

    tool_calls: int = 0
    notes: list[str] = field(default_factory=list)
    tool_errors: list[dict[str, Any]] = field(default_factory=list)
    search: dict[str, Any] | None = None
    degraded_reason: str | None = None

    def done(self, proposals: list[dict[str, Any]], conversation: list[dict[str, Any]]) -> PolicyStep:
        return PolicyStep(proposals=proposals, tool_calls=self.tool_calls, notes=self.notes, search=self.search,
                          degraded_reason=self.degraded_reason, conversation=conversation,
                          tool_errors=self.tool_errors)
