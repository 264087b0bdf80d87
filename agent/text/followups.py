"""Chat turns: a new request, a follow-up that changes the last one, or a question about its answer.

Handled follow-ups: "what if I only have 32?", "use fp8", "no fp8", "seq 16k", "on mi300x", "gbs
512" (re-tune with the change); "why not TP 8?" (the best layout under that pin, from the search,
explained against the winner by the ``explain`` tool); "show memory of #2" (``check_memory``);
"I ran it, here is the log: runs/" (the runs become anchors and the last request is re-tuned with them);
"export it for torchtitan" / "export #2 for primus" (``export_launch_config``; "... to run.yaml"
writes the file it names); "compare #1 and #3" / "why is #1 better than #3?"; "top" (the ranked
list again); "set gbs to 512" (read as "gbs 512"); "what if I had 128?"; "go back to the previous
one" (the run before, from the session history, not re-tuned); "what was the best on 64 GPUs?"
(answered from the history).  Anything else is read as a request (or a follow-up of the last one);
what cannot be read gets a question back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.text import names
from agent.text.constraints_text import FP8_PRECISIONS, extract_constraints, merge_constraints
from agent.decide import mfu_text
from agent.policies import Policy
from agent.search_step import run_request_search
from agent.text.replies import memory_text, report_text
from agent.report import TuneReport
from agent.text.request import (Clarification, TuneRequest, answer_clarification, find_framework,
                                misspelt_framework)
from agent.run import tune
from agent.state import RunOptions
from agent.toolbox import Toolbox, ToolFailed
from projection.framework import framework_record

HELP = ("Ask for a layout ('tune llama3 8b on 8 h100'), then follow up: 'what if I only have 4?', 'use fp8', "
        "'set gbs to 512', 'seq 16k', 'why not TP 8?', 'why is #1 better than #3?', 'show memory of #2', "
        "'export it for primus to run.yaml', 'go back to the previous one', 'what was the best on 8 GPUs?', "
        "'I ran it, here is the log: runs/'. "
        "'exit' ends the session; --session NAME resumes it later.")


def export_framework(text: str) -> str:
    """The launch framework an export follow-up names ('export #2 for primus', 'for MaxText'): the launch name of the
    framework it names (a framework projtune cannot export to keeps its name, so the export says so); megatron
    when it names none."""
    recipe = find_framework(text)
    return framework_record(recipe).launch or str(recipe)


_EXPORT_FOR = re.compile(r"\bfor\s+([A-Za-z][\w.-]{2,})", re.I)
_EXPORT_TO = re.compile(r"\b(?:to|as|into|in)\s+([\w./~-]+)")
_EXPORT_SUFFIXES = (".sh", ".yaml", ".yml", ".toml", ".txt", ".json", ".args", ".cfg")


def _export_target(text: str) -> Path | None:
    """Where an export follow-up says to write: a file with a launcher/config suffix ('to run.yaml') or a folder
    that exists ('to /tmp/out', 'to runs/'; it was shown in the chat instead); None = show the text in the chat."""
    for m in _EXPORT_TO.finditer(text):
        word = m.group(1).rstrip(".")
        path = Path(word).expanduser()
        if path.suffix.lower() in _EXPORT_SUFFIXES or (("/" in word or word.startswith("~")) and path.is_dir()):
            return path
    return None


@dataclass(slots=True)
class Turn:
    """What a chat turn produced: the reply and the session fields it changes."""

    reply: str
    request: dict[str, Any] | None = None
    report: dict[str, Any] | None = None
    pending: dict[str, Any] | None = None
    """The question left open (None: nothing pending after this turn)."""
    record: bool = True
    """Whether a new request/report goes into the session's history (False when going back to an old one)."""


def _pick(report: TuneReport, text: str) -> tuple[int, Any] | None:
    m = re.search(r"#\s*(\d+)|\bnumber\s+(\d+)|\b(\d+)(?:st|nd|rd|th)\b", text)
    index = int(next(g for g in m.groups() if g)) if m else 1
    if 1 <= index <= len(report.top5):
        return index, report.top5[index - 1]
    return None


def _bare_count(text: str, request: dict[str, Any]) -> str:
    """'what if I only have 32?' -> the same text with '32 gpus' (so the parser reads a GPU count)."""
    m = re.search(r"\b(?:have|had|only|with|use|using|on|to|try|get)\s+(\d+(?:\.\d+)?)\s*([kK])?\s*(gpus?|nodes?)?"
                  r"\s*\??\s*$", text, re.I)
    if not m or re.search(r"\b(seq|gbs|batch|tp|pp|ep|cp|mbs)\b", text, re.I):
        return text
    count = int(round(float(m.group(1)) * (1024 if m.group(2) else 1)))
    if m.group(3) and m.group(3).lower().startswith("node"):
        count *= int(request.get("gpus_per_node", 8))
    return f"{text[:m.start(1)]} {count} gpus"


def _setting(text: str) -> str:
    """'set gbs to 512' / 'change the sequence length to 16k' -> 'gbs 512' / 'seq 16k' (what the parser reads)."""
    words = {"global batch": "gbs", "batch size": "gbs", "batch": "gbs", "gbs": "gbs", "sequence length": "seq",
             "sequence": "seq", "seq len": "seq", "seq_len": "seq", "seq": "seq", "context": "seq",
             "micro batch": "mbs", "mbs": "mbs"}
    m = re.match(r"^\s*(?:set|change|make|use)\s+(?:the\s+)?(" + "|".join(sorted(words, key=len, reverse=True))
                 + r")\s+(?:to|=|at)\s+(\S+?)\s*[.!]?\s*$", text, re.I)
    if not m:
        return text
    key = words[m.group(1).lower()]
    return f"mbs<={m.group(2)}" if key == "mbs" else f"{key} {m.group(2)}"


_RUN_WORDS = re.compile(r"\b(i\s+ran|here\s+is|here'?s|log|logs|measured|anchor|runs?)\b", re.I)


def _run_paths(text: str) -> list[str]:
    """Paths of runs a line points at ('I ran it, here is the log: runs/a.log'): existing files or folders named
    in a line that talks about runs or logs."""
    if not _RUN_WORDS.search(text):
        return []
    words = [w.strip("'\"`,;:()") for w in text.split()]
    return [w for w in words if ("/" in w or "." in w) and len(w) > 1 and Path(w).exists()]


def _is_new_request(text: str) -> bool:
    """A line naming a model (and a GPU or count) starts over instead of changing the last request."""
    return names.find_model(text).kind != "missing" and (
        names.find_gpu(text).kind == "found" or re.search(r"\d+\s*gpus?", text, re.I) is not None)


class ChatTurns:
    """Answers chat lines against the session's last request and report."""

    def __init__(self, policy: Policy, options: RunOptions, budget: dict[str, float] | None = None) -> None:
        self.policy, self.options, self.budget = policy, options, budget

    def respond(self, line: str, request: dict[str, Any] | None, report: dict[str, Any] | None,
                pending: dict[str, Any] | None, history: list[dict[str, Any]] | None = None) -> Turn:
        """One turn (see the module docstring); ``history``: the session's earlier (request, report) pairs."""
        text = _setting(line.strip())
        last = TuneReport.model_validate(report) if report else None
        history = history or []
        if re.search(r"\b(go\s+back|previous\s+(one|run|answer|request)|undo)\b", text, re.I):
            return self._back(history, request)
        earlier = re.search(r"\bwhat\s+(?:was|were|is)\s+(?:the\s+)?best\b.*?\b(?:on|with|for)\s+(\d+)\s*gpus?\b",
                            text, re.I)
        if earlier:
            return Turn(self._from_history(history, int(earlier.group(1))))
        if not text or text.lower() in ("help", "?", "h"):
            return Turn(HELP)
        lowered = text.lower()
        if request and (paths := _run_paths(text)):
            return self._anchored(request, paths, last)
        if last is not None and last.best is not None:
            if re.match(r"^\s*why\s+(not|isn'?t|no|don'?t)\b", lowered):
                return Turn(self._why_not(text, last))
            if "memory" in lowered and re.search(r"\b(show|what|print|how much|memory of|memory for)\b", lowered):
                return Turn(self._memory(text, last))
            if re.search(r"\bexport\b|\blaunch config\b", lowered):
                return Turn(self._export(text, last))
            if re.search(r"\b(compare|explain|why|better|worse|faster|slower)\b", lowered) and \
                    len(re.findall(r"#\s*\d+", text)) >= 2:
                return Turn(self._compare(text, last))
            if re.fullmatch(r"(show\s+)?(the\s+)?(top|list|ranking|results?)(\s+\d+)?", lowered):
                return Turn(report_text(last))
        if pending:
            return self._answer(text, Clarification.model_validate(pending), request, last)
        if request and not _is_new_request(text):
            turn = self._change(text, request, last)
            return turn if turn is not None else Turn("I did not catch a change to the request. " + HELP)
        read = self.policy.read(text)
        return self._run(read.result, last, read.degraded_reason)

    def _change(self, text: str, request: dict[str, Any], last: TuneReport | None) -> Turn | None:
        """The line read as a change of the last request (re-tuned, or a question back); None = it changes nothing."""
        read = self.policy.read(_bare_count(text, request), TuneRequest.model_validate(request))
        changed = read.result
        if isinstance(changed, TuneRequest) and changed.model_dump(exclude={"notes", "assumed"}) == \
                TuneRequest.model_validate(request).model_dump(exclude={"notes", "assumed"}):
            return None
        return self._run(changed, last, read.degraded_reason)

    def _answer(self, text: str, question: Clarification, request: dict[str, Any] | None,
                last: TuneReport | None) -> Turn:
        """A line after a question was asked back: its answer when it answers it (or it is a new request); else, with
        a last request, the line as a change of that request (the rejected change is dropped: 'what if I only have
        0?' asked back, then 'what if I have 128 GPUs?' re-tunes on 128, it does not repeat the question); a line
        that does neither gets the open question again."""
        answer = answer_clarification(question, text)
        answered = isinstance(answer, TuneRequest) or not set(question.missing) <= set(answer.missing)
        if answered or not request or _is_new_request(text):
            return self._run(answer, last)
        turn = self._change(text, request, last)
        if turn is None:
            return Turn(question.question, pending=question.model_dump())
        if turn.request is not None:      # re-tuned: the question it leaves is said, not dropped silently
            turn.reply = f"(left the open question; read as a change of the last request)\n{turn.reply}"
        return turn

    def _run(self, parsed: TuneRequest | Clarification, last: TuneReport | None,
             degraded_reason: str | None = None) -> Turn:
        if isinstance(parsed, Clarification):
            # a question back after the LLM failed to read the line: the fallback is said, never silent
            said = f"(degraded: {degraded_reason})\n" if degraded_reason else ""
            return Turn(said + parsed.question, pending=parsed.model_dump())
        outcome = tune(request=parsed, policy=self.policy, budget=self.budget, options=self.options)
        report = outcome.report
        if report.status == "clarification":
            return Turn(report.message or "Could you say more?", pending=report.clarification)
        return Turn(report_text(report, previous=last), request=parsed.model_dump(),
                    report=report.model_dump(mode="json"))

    def _anchored(self, request: dict[str, Any], paths: list[str], last: TuneReport | None) -> Turn:
        """Re-tune the last request with the runs at ``paths`` as anchors (added to any given before)."""
        if self.options.read_anchors is None:
            return Turn("I cannot read run logs in this session; pass them with `projtune tune ... --anchor FILE`.")
        try:
            anchors = self.options.read_anchors(paths, request["gpu"])
        except ValueError as err:     # ProjtuneError: a path that is no log, sweep or measurement
            return Turn(f"error: {err}")
        known = {a["label"] for a in request.get("anchors") or []}
        merged = [*(request.get("anchors") or []), *(a for a in anchors if a["label"] not in known)]
        turn = self._run(TuneRequest.model_validate({**request, "anchors": merged}), last)
        if turn.report and turn.report.get("anchoring"):
            turn.reply = f"Anchored: {turn.report['anchoring']['summary']}\n" + turn.reply
        return turn

    def _why_not(self, text: str, last: TuneReport) -> str:
        assert last.best is not None and last.request is not None
        rest = re.sub(r"^\s*why\s+(not|isn'?t|no|don'?t)\s+(use\s+|it\s+|we\s+use\s+)?", "", text, flags=re.I)
        rules = extract_constraints(rest).rules
        if not rules and "fp8" in rest.lower():
            rules = [f"precision in {FP8_PRECISIONS}"]
        if not rules and "fsdp" in rest.lower():
            rules = ["zero=3"]
        if not rules:
            return (f"Which alternative? e.g. 'why not TP 8?', 'why not fp8?', 'why not pp 2?' "
                    f"(read nothing in '{rest}')")
        request = {**last.request, "constraints": merge_constraints(last.request.get("constraints", []), rules)}
        summary, error = run_request_search(request, 1)
        if summary is None or not summary["ranked"]:
            why = error or (summary or {}).get("message") or "nothing fits"
            return f"With {', '.join(rules)}: no layout works. {why}"
        alt = summary["ranked"][0]
        if alt["config"] == last.best.config:
            return f"The best layout already satisfies {', '.join(rules)}: {last.best.layout}."
        try:
            why = " " + Toolbox.for_request(last.request).explain(last.best.config, alt["config"]).summary
        except ToolFailed:
            why = ""
        slower = 1 - alt["tokens_per_sec_per_gpu"] / last.best.tokens_per_sec_per_gpu
        head = (f"The best layout with {', '.join(rules)} is {alt['layout']} at {alt['tokens_per_sec_per_gpu']:,.0f} "
                f"tok/s/GPU, {slower:.1%} slower than {last.best.layout}.")
        return head + why

    def _memory(self, text: str, last: TuneReport) -> str:
        picked = _pick(last, text)
        if picked is None:
            return f"There are {len(last.top5)} ranked layouts; say e.g. 'show memory of #2'."
        index, row = picked
        try:
            memory = Toolbox.for_request(last.request or {}).check_memory(row.config)
        except ToolFailed as err:
            return f"error: {err.failure.message}"
        return memory_text(f"#{index}", memory.model_dump(mode="json"))

    def _back(self, history: list[dict[str, Any]], request: dict[str, Any] | None) -> Turn:
        """Return to the run before the current one (history is the session's record of tuned runs)."""
        current = next((i for i in range(len(history) - 1, -1, -1) if history[i]["request"] == request), None)
        index = (current if current is not None else len(history)) - 1
        if index < 0:
            return Turn("There is no earlier run in this session to go back to.", record=False)
        entry = history[index]
        report = TuneReport.model_validate(entry["report"])
        return Turn("Back to the earlier run:\n" + report_text(report), request=entry["request"],
                    report=entry["report"], record=False)

    def _from_history(self, history: list[dict[str, Any]], gpus: int) -> str:
        """The best of the latest earlier run on ``gpus`` GPUs, from the session history (no new tuning)."""
        for entry in reversed(history):
            if entry["request"].get("num_gpus") == gpus:
                report = TuneReport.model_validate(entry["report"])
                if report.best is None:
                    return f"On {gpus} GPUs nothing fit: {report.message}"
                b = report.best
                return (f"On {gpus} x {entry['request'].get('gpu')} (from this session's history): {b.layout}, "
                        f"{b.tokens_per_sec_per_gpu:,.0f} tok/s/GPU projected, {mfu_text(b.model_dump())}.")
        return f"No earlier run on {gpus} GPUs in this session; say 'what if I had {gpus}?' to tune it."

    def _export(self, text: str, last: TuneReport) -> str:
        if find_framework(text) is None and (question := misspelt_framework(text, _EXPORT_FOR)) is not None:
            return question       # 'export it for torchtitn' was written for megatron (the default)
        framework = export_framework(text)
        picked = _pick(last, text)
        if picked is None:
            return f"There are {len(last.top5)} ranked layouts; say e.g. 'export #2 for primus'."
        index, row = picked
        try:
            exported = Toolbox.for_request(last.request or {}).export_launch_config(row.config, framework)
        except ToolFailed as err:
            return f"error: {err.failure.message}"
        out = {"result": exported.model_dump(mode="json")}
        warnings = "".join(f"\nwarning: {w}" for w in out["result"].get("warnings", []))
        target = _export_target(text)
        if target is not None:
            from tools.exports.files import write_export

            written = write_export(exported, target)
            first = written[0]
            runnable = ", executable: bash " + str(first) if first.suffix == ".sh" else ""
            others = f"; with {', '.join(str(p) for p in written[1:])}" if written[1:] else ""
            return (f"Wrote #{index} for {framework} to {first} ({first.stat().st_size} bytes{runnable}){others}."
                    f"{warnings}")
        return f"#{index} for {framework} ({out['result'].get('filename', '')}):\n{out['result']['text']}{warnings}"

    def _compare(self, text: str, last: TuneReport) -> str:
        picks = [int(n) for n in re.findall(r"#\s*(\d+)", text)][:2]
        if any(not 1 <= n <= len(last.top5) for n in picks):
            return f"There are {len(last.top5)} ranked layouts."
        a, b = (last.top5[n - 1] for n in picks)
        try:
            return Toolbox.for_request(last.request or {}).explain(a.config, b.config).summary
        except ToolFailed as err:
            return f"error: {err.failure.message}"
