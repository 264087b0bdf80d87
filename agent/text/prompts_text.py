"""The text the LLM reads (job, trial history, report facts) and the reading of its request-parse reply.

Numbers shown to the model come from the tools and the catalog; the model never sees a layout
the code has not checked, and its parse reply is re-read by the offline parser (names resolved
against the catalog) before it becomes a request.
"""

from __future__ import annotations

import re
from typing import Any

import json_repair

from agent.text.grounding import stated_constraints, stated_number, unstated_job
from agent.text.plain_text import plain_text
from agent.text.request import Clarification, TuneRequest, parse_request
from agent.space import LayoutSpace
from projection.memory import GIB
from projection.vocabulary import FINETUNES
from tools.schemas import LegalAxesOutput

HISTORY_ROWS = 30
QUESTION_MAX_CHARS = 300
"""Longest question back from the LLM shown to the user (one or two sentences; longer is cut and marked)."""


def job_text(job: LayoutSpace, axes: LegalAxesOutput | None) -> str:
    """The job for the proposal prompt: model shape, GPU, cluster, batch, constraints and legal axes (when the
    legal_axes tool answered)."""
    m, h, c = job.model, job.hardware, job.cluster
    moe = f", {m.num_experts} experts (top-{m.top_k})" if m.is_moe else " (dense)"
    lines = [
        f"- model {m.name}: {m.num_layers} layers, hidden {m.hidden_size}, {m.num_attention_heads} heads, "
        f"{m.num_kv_heads} KV heads{moe}",
        f"- GPU {h.id}: {h.hbm_capacity_bytes / GIB:.0f} GiB HBM, precisions {', '.join(h.supported_precisions)}",
        f"- cluster: {c.num_gpus} GPUs, {c.gpus_per_node} per node",
        f"- global batch {job.gbs} sequences of {job.seq_len} tokens",
        f"- constraints: {', '.join(job.constraints.describe()) or 'none'}",
    ]
    if axes is not None:
        r = axes.model_dump()
        legal = ", ".join(f"{k} {r[k]}" for k in ("tp", "pp", "cp", "ep", "mbs", "precision", "zero", "pp_schedule"))
        lines.append(f"- legal values per axis (each alone): {legal}")
        lines += [f"- rule: {note}" for note in r.get("notes", [])]
    return "\n".join(lines)


def _row(t: dict[str, Any]) -> str:
    head = f"#{t['id']} [{t['source']}] {t.get('layout') or t.get('config')}"
    if t["status"] == "scored":
        return (f"{head}: {t['tokens_per_sec_per_gpu']:,.0f} tok/s/GPU, MFU {t['mfu']:.1%}, "
                f"{t['peak_memory_gib']:.1f} GiB ({t['headroom_fraction']:.0%} headroom), bottleneck {t['bottleneck']}")
    if t["status"] == "screened_out":
        return f"{head}: does not fit ({t.get('peak_memory_gib', 0):.1f} GiB, {t.get('verdict')})"
    return f"{head}: {t['status']} ({'; '.join(t.get('violations') or [])})"


def history_table(state: dict[str, Any], anchored: list[dict[str, Any]]) -> str:
    """The round's user message: the trials so far (best first), the search's picks, and what to do."""
    trials = state.get("trials", [])
    order = {tid: i for i, tid in enumerate(state.get("ranking", []))}
    scored = sorted((t for t in trials if t["id"] in order), key=lambda t: order[t["id"]])
    others = [t for t in trials if t["id"] not in order][-HISTORY_ROWS:]
    lines = [f"Round {state.get('round', 1)} of {int(state['budget']['max_rounds'])}. "
             f"Trials so far ({len(trials)}), scored ones best first:"]
    lines += [_row(t) for t in scored[:HISTORY_ROWS]] or ["(none scored yet)"]
    if others:
        lines.append("Not scored:")
        lines += [_row(t) for t in others]
    if anchored:
        lines.append("The exhaustive layout search's top picks are being scored this round too:")
        lines += [f"- {a['scores']['layout']}: {a['scores']['tokens_per_sec_per_gpu']:,.0f} tok/s/GPU"
                  for a in anchored]
    lines.append("Propose layouts that could beat the best (call propose_layouts), or done=true if none can.")
    return "\n".join(lines)


def facts_text(facts: dict[str, Any]) -> str:
    """The numbers the explanation prompt may use."""
    lines = ["Ranked layouts (scored by the projection tools; 80% interval of the throughput in brackets; "
             "MFU against the BF16 peak):"]
    for i, t in enumerate(facts.get("top", []), 1):
        band = (f" [{t['tokens_per_sec_per_gpu_low']:,.0f}-{t['tokens_per_sec_per_gpu_high']:,.0f}]"
                if t.get("tokens_per_sec_per_gpu_low") else "")
        lines.append(f"{i}. {t['layout']}: {t['tokens_per_sec_per_gpu']:,.0f} tok/s/GPU{band}, MFU {t['mfu']:.1%}, "
                     f"{t['peak_memory_gib']:.1f} GiB ({t['headroom_fraction']:.0%} headroom), "
                     f"bottleneck {t['bottleneck']}, step terms (s): "
                     + ", ".join(f"{k.removesuffix('_s')} {v:.3f}" for k, v in (t.get("breakdown_s") or {}).items())
                     + ("; interval wide: " + "; ".join(t["band_reasons"]) if t.get("band_reasons") else ""))
    lines += ["Explain-tool comparisons:", *facts.get("why", [])]
    if facts.get("decision"):
        lines.append(f"Decision: {facts['decision']}")
    search = facts.get("search") or {}
    if search.get("enumerated"):
        lines.append(f"Search: {search['enumerated']} legal layouts, {search.get('screened_out', 0)} screened out "
                     f"for memory, {search.get('projected', 0)} projected.")
    return "\n".join(lines)


_EXTRA_KEYS = ("batch_tokens", "finetune", "packed_document_tokens", "framework", "nics_per_node", "nic_gbps",
               "nvlink_domain", "train_tokens", "deadline_days")
"""The request fields :func:`_extra_parts` reads from the LLM's parse."""


def _extra_parts(data: dict[str, Any], text: str) -> tuple[list[str], list[str]]:
    """(request phrases, dropped): the LLM's batch-in-tokens, fine-tuning (packed documents too), framework and
    network fields, each written the way the offline parser reads it, and only when the user's ``text`` states it
    (else dropped).

    Stated means: the offline reader finds the same value in the text (LoRA/SFT, packed documents, the framework
    name), or the number is written there ('1M tokens', '8x400G', 'NVL72'; :func:`agent.text.grounding.stated_digits`).
    """
    from agent.text.grounding import stated_digits
    from agent.text.request import (
        FRAMEWORKS,
        find_budget,
        find_deadline,
        find_finetune,
        find_framework,
        find_packed_documents,
        normalise,
    )

    said = normalise(text)[0] if text else ""
    parts: list[str] = []
    dropped: list[str] = []

    handled: set[str] = set()

    def keep(key: str, ok: bool, phrase: str) -> None:
        handled.add(key)
        if text and not ok:
            dropped.append(f"{key}={data[key]}")
        else:
            parts.append(phrase)

    if isinstance(tokens := data.get("batch_tokens"), int | float) and not isinstance(tokens, bool) and tokens >= 1:
        keep("batch_tokens", stated_number(int(tokens), text), f"global batch {int(tokens)} tokens")
    if (finetune := str(data.get("finetune") or "").lower()) in FINETUNES:
        keep("finetune", find_finetune(said) == finetune, finetune)
    if isinstance(packed := data.get("packed_document_tokens"), int) and not isinstance(packed, bool) and packed >= 1:
        keep("packed_document_tokens", find_packed_documents(said)[0] == packed, f"packed {packed}-token documents")
    if isinstance(data.get("framework"), str) and (framework := FRAMEWORKS.get(data["framework"].lower().strip())):
        keep("framework", find_framework(said) == framework, f"with {data['framework'].lower().strip()}")
    nics, rate = data.get("nics_per_node"), data.get("nic_gbps")
    if isinstance(nics, int) and not isinstance(nics, bool) and 1 <= nics <= 64:
        keep("nics_per_node", stated_digits(nics, _near(said, _NIC_WORDS)), f"{nics} NICs per node")
    if isinstance(rate, int | float) and not isinstance(rate, bool) and 10 <= rate <= 9999:
        keep("nic_gbps", stated_digits(rate, _near(said, _NIC_WORDS)), f"NICs at {rate:g} Gbps")
    if isinstance(domain := data.get("nvlink_domain"), int) and not isinstance(domain, bool) and 1 <= domain <= 576:
        keep("nvlink_domain", stated_digits(domain, _near(said, _DOMAIN_WORDS)), f"NVL{domain}")
    budget, days = data.get("train_tokens"), data.get("deadline_days")
    if isinstance(budget, int | float) and not isinstance(budget, bool) and 1e6 <= budget <= 1e18:
        keep("train_tokens", find_budget(said)[0] == float(budget) or stated_number(int(budget), text),
             f"train on {budget / 1e9:g}B tokens")
    if isinstance(days, int | float) and not isinstance(days, bool) and 0 < days <= 3650:
        keep("deadline_days", find_deadline(said)[0] == float(days) or stated_digits(days, _near(said, _DAY_WORDS)),
             f"in {days:g} days")
    # a field the LLM filled with a value of the wrong type or out of range is named too, never silently lost
    dropped += [f"{key}={data[key]!r} (not a valid value)" for key in _EXTRA_KEYS
                if data.get(key) not in (None, "") and key not in handled]
    return parts, dropped


_NIC_WORDS = re.compile(r"nics?\b|hcas?\b|infiniband|\bib\b|roce|ethernet|connectx|network|gbps|gb/s|gbit|\d\s?g\b",
                        re.I)
_DOMAIN_WORDS = re.compile(r"nvl|nvlink|domain|rack", re.I)
_DAY_WORDS = re.compile(r"days?\b|\d\s?d\b|deadline", re.I)
NEAR_CHARS = 24
"""How far from a NIC or NVLink word a number may be written to count as stated for it ('8 x 400G NICs')."""


def _near(text: str, words: re.Pattern[str]) -> str:
    """The parts of ``text`` within NEAR_CHARS of a word of ``words`` (joined; '' when none)."""
    return " | ".join(text[max(0, m.start() - NEAR_CHARS):m.end() + NEAR_CHARS] for m in words.finditer(text))


def parse_reply(content: str, base: TuneRequest | dict[str, Any] | None,
                offline: TuneRequest | Clarification, *, text: str = "") -> TuneRequest | Clarification:
    """Turn the LLM's JSON reply to the parse prompt into a request (re-read by the offline parser).

    With the user's ``text``, what the LLM read but the text does not say is dropped and noted
    (:mod:`agent.text.grounding`): constraints on axes the text never names (headroom included), and gbs /
    seq_len / GPUs per node, batch-in-tokens, LoRA/SFT, framework, NIC, NVLink-domain, token-budget and
    deadline values the text does not contain (the defaults then apply and are stated).  Every
    TuneRequest field the offline parser reads is carried (:func:`_extra_parts`).
    """
    data = json_repair.loads(content) if content.strip() else {}
    if not isinstance(data, dict) or not data:
        return offline
    if data.get("question"):
        options = offline.options if isinstance(offline, Clarification) else []
        partial = offline.partial if isinstance(offline, Clarification) else {}
        question, _ = plain_text(str(data["question"]), QUESTION_MAX_CHARS, what="the LLM's question")
        if not question and isinstance(offline, Clarification):
            return offline
        return Clarification(question=question or "Which model, GPU type and GPU count should I tune for?",
                             options=options, partial=partial)
    if text and isinstance(offline, Clarification):
        unstated = unstated_job(data, text)
        if unstated:     # the job is the user's: what the text does not say is asked back, never filled in
            return offline.model_copy(update={"question": f"{offline.question} (the request does not state "
                                                          f"{', '.join(unstated)})"})
    dropped: list[str] = []
    parts = [f"tune {data.get('model', '')} on {data.get('num_gpus', '')} {data.get('gpu', '')}"]
    for key, word in (("gbs", "gbs"), ("seq_len", "seq"), ("gpus_per_node", "gpus_per_node=")):
        if data.get(key):
            if text and not stated_number(data[key], text):
                dropped.append(f"{key}={data[key]}")
                continue
            parts.append(f"{word} {data[key]}" if not word.endswith("=") else f"{word}{data[key]}")
    extra, unstated = _extra_parts(data, text)
    parts += extra
    dropped += unstated
    rules = [str(c) for c in data.get("constraints") or [] if isinstance(c, str)]
    if text:
        rules, invented = stated_constraints(rules, text)
        dropped += invented
    parts += rules
    result = parse_request(", ".join(parts), base)
    if isinstance(result, TuneRequest):
        notes = [*result.notes, "request read by the LLM"]
        if dropped:
            notes.append(f"ignored what the LLM read but the request does not say: {', '.join(dropped)}")
        return result.model_copy(update={"notes": notes})
    return offline
