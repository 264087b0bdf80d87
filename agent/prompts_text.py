"""The text the LLM reads (job, trial history, report facts) and the reading of its request-parse reply.

Numbers shown to the model come from the tools and the catalog; the model never sees a layout
the code has not checked, and its parse reply is re-read by the offline parser (names resolved
against the catalog) before it becomes a request.
"""

from __future__ import annotations

from typing import Any

import json_repair

from agent.grounding import stated_constraints, stated_number
from agent.request import Clarification, TuneRequest, parse_request
from agent.space import Job
from projection.memory import GIB
from tools.schemas import LegalAxesOutput

HISTORY_ROWS = 30


def job_text(job: Job, axes: LegalAxesOutput | None) -> str:
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
                     + ", ".join(f"{k.removesuffix('_s')} {v:.3f}" for k, v in (t.get("breakdown_s") or {}).items()))
    lines += ["Explain-tool comparisons:", *facts.get("why", [])]
    if facts.get("decision"):
        lines.append(f"Decision: {facts['decision']}")
    search = facts.get("search") or {}
    if search.get("enumerated"):
        lines.append(f"Search: {search['enumerated']} legal layouts, {search.get('screened_out', 0)} screened out "
                     f"for memory, {search.get('projected', 0)} projected.")
    return "\n".join(lines)


def parse_reply(content: str, base: TuneRequest | dict[str, Any] | None,
                offline: TuneRequest | Clarification, *, text: str = "") -> TuneRequest | Clarification:
    """Turn the LLM's JSON reply to the parse prompt into a request (re-read by the offline parser).

    With the user's ``text``, what the LLM read but the text does not say is dropped and noted
    (:mod:`agent.grounding`): constraints on axes the text never names, and gbs / seq_len / GPUs per
    node values the text does not contain (the defaults then apply and are stated).
    """
    data = json_repair.loads(content) if content.strip() else {}
    if not isinstance(data, dict) or not data:
        return offline
    if data.get("question"):
        options = offline.options if isinstance(offline, Clarification) else []
        partial = offline.partial if isinstance(offline, Clarification) else {}
        return Clarification(question=str(data["question"]), options=options, partial=partial)
    dropped: list[str] = []
    parts = [f"tune {data.get('model', '')} on {data.get('num_gpus', '')} {data.get('gpu', '')}"]
    for key, word in (("gbs", "gbs"), ("seq_len", "seq"), ("gpus_per_node", "gpus_per_node=")):
        if data.get(key):
            if text and not stated_number(data[key], text):
                dropped.append(f"{key}={data[key]}")
                continue
            parts.append(f"{word} {data[key]}" if not word.endswith("=") else f"{word}{data[key]}")
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
