"""The LLM policy: an OpenAI-compatible model proposes layouts through tool calls and writes the explanation.

Per round the model sees the job, the legal axes (computed in code) and every trial so far with
its scores, and answers with ``propose_layouts`` calls (it may check ideas with the read-only
tools first).  Each proposed layout is validated here, in code: an illegal one goes straight back
to the model as the tool result, with the reasons; legal ones go to the graph, which scores them.
Round 1 also carries the layout search's top-k (``anchor_search``), so the answer is never worse
than the search and the model's work is to beat it and to explain.

Degradation: malformed arguments are repaired (json_repair) or sent back as an error (the model
re-asks); a round without a legal proposal after ``max_turns`` ends the loop; an endpoint that
stays down or rejects requests switches the policy to :class:`OfflinePolicy` for the rest of the
run and marks it degraded (the report says why).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from agent.grounding import ground_numbers
from agent.llm_client import LLMClient, LLMConfig, LLMUnavailable
from agent.nodes import score_fields
from agent.policies.llm_tools import (
    PROPOSE,
    READ_ONLY_TOOLS,
    ProposeLayoutsArgs,
    calls_in_text,
    llm_tool_schemas,
    parse_arguments,
    tool_result_text,
)
from agent.policies.offline import OfflinePolicy, offline_explanation, run_request_search
from agent.prompts_text import history_table, job_text, parse_reply
from agent.request import Clarification, TuneRequest, parse_request
from agent.space import Job
from agent.toolbox import Toolbox
from prompts.loader import render_prompt

MAX_TURNS = 6


EXPLANATION_MAX_CHARS = 4000
"""Longest LLM explanation a report keeps (a few paragraphs); a longer reply is cut and the cut is noted, so a
prompt-injected or runaway reply cannot flood the answer."""


class LLMPolicy:
    """Proposals and explanations from an OpenAI-compatible endpoint (see the module docstring)."""

    name = "llm"

    def __init__(self, config: LLMConfig, *, client: LLMClient | None = None, anchor_search: bool = True,
                 max_turns: int = MAX_TURNS) -> None:
        self.config = config
        self.client = client or LLMClient(config)
        self.anchor_search, self.max_turns = anchor_search, max_turns
        self.messages: list[dict[str, Any]] = []
        self.fallback: OfflinePolicy | None = None
        self.degraded_reason: str | None = None
        self._run: str | None = None
        self._status: dict[str, Any] = {}

    def status(self) -> dict[str, Any]:
        """Tool calls, notes, the search summary (round 1) and the degraded reason of the last call."""
        return {**self._status, "degraded_reason": self.degraded_reason}

    def _go_offline(self, err: LLMUnavailable) -> None:
        self.degraded_reason = f"{err.reason}; fell back to the offline policy"
        self.fallback = self.fallback or OfflinePolicy()

    def parse(self, text: str, base: TuneRequest | dict[str, Any] | None = None) -> TuneRequest | Clarification:
        """Offline parser first; when it asks back, the LLM reads the text (names checked against the catalog)."""
        self._status = {"tool_calls": 0, "notes": []}
        offline = parse_request(text, base)
        if isinstance(offline, TuneRequest) or self.fallback is not None or not text.strip():
            return offline
        from agent.names import gpu_index, model_catalog

        prompt = render_prompt("parse", text=text, models=", ".join(sorted(model_catalog())),
                               gpus=", ".join(sorted(set(gpu_index().values()))))
        try:
            reply = self.client.complete([{"role": "user", "content": prompt}])
        except LLMUnavailable as err:
            self._go_offline(err)
            return offline
        return parse_reply(reply.get("content") or "", base, offline, text=text)

    def propose(self, state: dict[str, Any]) -> list[dict[str, Any]]:
        """One round: the model's legal proposals (plus the search's top-k in round 1)."""
        self._status = {"tool_calls": 0, "notes": []}
        if self.fallback is not None:
            return self._offline(state)
        job, tools = Job(state["request"]), Toolbox.for_request(state["request"])
        anchored: list[dict[str, Any]] = []
        run = state.get("run_id") or json.dumps(state["request"], sort_keys=True)
        if self._run != run:
            self._run = run
            axes = tools.call("legal_axes", seq_len=job.seq_len)
            self.messages = [{"role": "system", "content": render_prompt("propose", job=job_text(job, axes))}]
            if self.anchor_search and state.get("search") is None:
                anchored = self._anchor(state)
        self.messages.append({"role": "user", "content": history_table(state, anchored)})
        try:
            proposals = self._converse(job, tools)
        except LLMUnavailable as err:
            self._go_offline(err)
            self._status["tool_calls"] += tools.calls
            return anchored + self._offline(state, skip_search=bool(anchored))
        self._status["tool_calls"] += tools.calls
        return anchored + [{**p, "source": self.name, "search_rank": None} for p in proposals]

    def _anchor(self, state: dict[str, Any]) -> list[dict[str, Any]]:
        request = state["request"]
        summary, error = run_request_search(request, max(request.get("top_k", 5), 5))
        self._status["tool_calls"] += 1
        self._status["search"] = summary or {"enumerated": 0, "projected": 0, "ranked": [], "message": error}
        return [{"config": c["config"], "reason": c["reason"], "source": "search", "search_rank": c["rank"],
                 "scores": score_fields(c)} for c in (summary or {}).get("ranked", [])]

    def _offline(self, state: dict[str, Any], *, skip_search: bool = False) -> list[dict[str, Any]]:
        assert self.fallback is not None
        if skip_search and state.get("search") is None:
            state = {**state, "search": self._status.get("search")}
        proposals = self.fallback.propose(state)
        fallback_status = self.fallback.status()
        self._status["tool_calls"] += fallback_status.get("tool_calls", 0)
        self._status["notes"] += fallback_status.get("notes", [])
        if "search" in fallback_status:
            self._status["search"] = fallback_status["search"]
        return proposals

    def _converse(self, job: Job, tools: Toolbox) -> list[dict[str, Any]]:
        """Tool-call turns until the model puts forward legal layouts, says done, or runs out of turns.

        A reply that cannot be read (no call, or arguments that are not JSON even after repair) is
        asked again once per round; a second one ends the round.
        """
        schemas = llm_tool_schemas()
        reasked = False
        for _ in range(self.max_turns):
            message = self.client.complete(self.messages, schemas)
            calls = [(c["id"], c["function"]["name"], c["function"]["arguments"])
                     for c in message.get("tool_calls", [])]
            if calls:
                accepted, done, results = self._handle(job, tools, calls)
                message["tool_calls"] = [{**c, "function": {**c["function"], "arguments": json.dumps(r["args"])}}
                                         for c, r in zip(message["tool_calls"], results, strict=True)]
                self.messages.append(message)
                self.messages += [{"role": "tool", "tool_call_id": c["id"], "content": r["text"]}
                                  for c, r in zip(message["tool_calls"], results, strict=True)]
            else:
                self.messages.append(message)
                found = calls_in_text(message.get("content") or "")
                accepted, done, results = self._handle(job, tools, [(None, n, a) for n, a in found])
                nudge = f"Call {PROPOSE} with layouts, or with an empty list and done=true."
                texts = json.dumps([r["text"] for r in results])
                self.messages.append({"role": "user", "content": f"Tool results: {texts}" if found else nudge})
            if accepted or done:
                return accepted
            if not results or any(r.get("unreadable") for r in results):
                if reasked:
                    self._status["notes"].append("the LLM's reply could not be read twice; round ended")
                    return []
                reasked = True
        self._status["notes"].append(f"the LLM put forward no legal layout in {self.max_turns} turns")
        return []

    def _handle(self, job: Job, tools: Toolbox, calls: list[tuple[str | None, str, Any]]
                ) -> tuple[list[dict[str, Any]], bool, list[dict[str, Any]]]:
        """Run each call: validate proposals in code, run read-only tools; (accepted, done, per-call results)."""
        accepted: list[dict[str, Any]] = []
        done, results = False, []
        for _, name, raw in calls:
            args, note = parse_arguments(raw)
            if note and args is not None:
                self._status["notes"].append(f"LLM tool call {name}: {note}")
            if args is None:
                results.append({"args": {}, "unreadable": True,
                                "text": tool_result_text({"ok": False, "error": note})})
            elif name == PROPOSE:
                payload, legal, stop = self._proposals(job, args)
                accepted += legal
                done = done or stop
                results.append({"args": args, "text": tool_result_text(payload)})
            elif name in READ_ONLY_TOOLS:
                results.append({"args": args, "text": tool_result_text(tools.call_from_model(name, args))})
            else:
                error = {"ok": False, "error": f"unknown tool '{name}'; use {PROPOSE} or {', '.join(READ_ONLY_TOOLS)}"}
                results.append({"args": args, "text": tool_result_text(error)})
        return accepted, done, results

    def _proposals(self, job: Job, args: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
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

    def explain(self, state: dict[str, Any]) -> str:
        """The model's explanation of the winner (offline text when degraded or the endpoint fails now);
        numbers no tool result contains are replaced by '[?]' and noted (:mod:`agent.grounding`)."""
        self._status = {**self._status, "notes": list(self._status.get("notes") or [])}
        facts = state.get("facts") or {}
        if self.fallback is not None or not facts.get("best"):
            return offline_explanation(facts)
        from agent.prompts_text import facts_text

        try:
            prompt = render_prompt("explain", facts=facts_text(facts))
            reply = self.client.complete([{"role": "user", "content": prompt}])
        except LLMUnavailable as err:
            self._go_offline(err)
            return offline_explanation(facts)
        text = (reply.get("content") or "").strip()
        if not text:
            self._status["notes"].append("the LLM returned no explanation; the offline explanation is shown")
            return offline_explanation(facts)
        if len(text) > EXPLANATION_MAX_CHARS:
            self._status["notes"].append(f"the LLM's explanation was cut to {EXPLANATION_MAX_CHARS:,} of "
                                         f"{len(text):,} characters")
            text = text[:EXPLANATION_MAX_CHARS].rstrip() + " [cut]"
        grounded, flagged = ground_numbers(text, facts)
        if flagged:
            self._status.setdefault("notes", []).append(
                f"removed {len(flagged)} number(s) from the LLM's explanation that no tool result contains "
                f"({', '.join(flagged[:6])}); they show as [?]")
        return grounded
