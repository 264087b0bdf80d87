"""Keep the LLM honest: numbers in its text must come from tool results, constraints from the user's words.

:func:`ground_numbers` checks what every number in an explanation means, not only that it appears:
each is read with its kind (throughput, step time, percentage gain, MFU, headroom, GiB, a
parallel degree of one axis, a rank, a count: :mod:`agent.text.number_kinds`) and must match, within
the rounding it is written with, a number of the same kind in the report's facts (the scored
trials and their pairwise gains, explain-tool lines and terms, the decision, search counts, the
request).  '8.33% faster' does not pass because a step of 8.335 s exists; 'DP7' does not pass
because 7 is some other number; small integers and number words are checked too.  A number that
fails is replaced by ``[?]`` and named with its kind, so the reader never takes an invented or
misattributed figure for a projected one.

:func:`stated_constraints` keeps the constraints an LLM read from a request only when the
request's own words name that axis ('tp', 'tensor parallel', 'fp8', 'headroom', ...): a model may
not add a rule the user did not give.  :func:`stated_number` does the same for batch and sequence
length: a value the text does not contain is dropped, and the default (said in the answer) applies;
:func:`stated_digits` for NIC counts and rates and the NVLink domain ('8x400G', 'NVL72').
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from agent.text.constraints_text import axis_of, extract_constraints
from agent.text.number_kinds import PERCENT_KINDS, Number, normalise, read_numbers

_NUMBER = re.compile(r"(?<![A-Za-z_#])[-+]?\d[\d,]*(?:\.\d+)?(?:\s*[kKmMbBtT](?![a-zA-Z]))?\s*%?")
_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}

_AXIS_WORDS: dict[str, str] = {
    "tp": r"\btp\b|tensor[\s-]*parallel",
    "pp": r"\bpp\b|pipeline",
    "vpp": r"\bvpp\b|virtual|interleav",
    "cp": r"\bcp\b|context[\s-]*parallel",
    "ep": r"\bep\b|expert[\s-]*parallel",
    "etp": r"\betp\b|expert[\s-]*tensor",
    "dp": r"\bdp\b|data[\s-]*parallel",
    "mbs": r"\bmbs\b|micro[\s-]*batch",
    "zero": r"\bzero\b|fsdp|distributed[\s-]*optimi",
    "precision": r"fp8|fp16|bf16|fp4|mxfp8|precision|blockwise|16[\s-]*bit|8[\s-]*bit",
    "allow_fp8": r"fp8",
    "recompute": r"recompute|checkpoint",
    "recompute_num_layers": r"recompute",
    "pp_schedule": r"schedule|1f1b|interleav|zero[\s-]*bubble|zbv|gpipe",
    "min_headroom": r"headroom|fit|memory",
}


_TRIAL_FIELDS: dict[str, tuple[str, float]] = {
    "tokens_per_sec_per_gpu": ("throughput", 1.0), "tokens_per_sec_per_gpu_low": ("throughput", 1.0),
    "tokens_per_sec_per_gpu_high": ("throughput", 1.0), "mfu": ("mfu", 100.0), "mfu_gemm": ("mfu", 100.0),
    "mfu_bf16": ("mfu", 100.0), "headroom_fraction": ("headroom", 100.0), "peak_memory_gib": ("memory", 1.0),
    "iteration_time_s": ("time", 1.0), "iteration_time_s_low": ("time", 1.0), "iteration_time_s_high": ("time", 1.0),
}
"""What each number of a scored trial measures, and the factor from its stored unit to how prose writes it."""
_CONFIG_AXES = {"tp": "tp", "pp": "pp", "vpp": "vpp", "cp": "cp", "ep": "ep", "etp": "etp", "dp": "dp", "mbs": "mbs",
                "gbs": "gbs", "zero": "zero", "fsdp_size": "fsdp", "seq_len": "s"}
REL_TOLERANCE = 0.005
"""Relative slack of a measured kind: a number rounded to 3 significant digits ('6.95k', '42.4')."""
EXACT_KINDS = ("degree", "rank")
"""Kinds that must match exactly (a parallel degree, a rank)."""


class Known:
    """The numbers the tools gave, by kind (see :mod:`agent.text.number_kinds`): what an explanation may quote."""

    def __init__(self) -> None:
        self.by_kind: dict[str, set[float]] = {}

    def add(self, kind: str, value: Any, axis: str | None = None) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return
        key = f"degree:{axis}" if kind == "degree" else kind
        self.by_kind.setdefault(key, set()).add(abs(float(value)))
        self.by_kind.setdefault("plain", set()).add(abs(float(value)))

    def of(self, number: Number) -> set[float]:
        """The facts a number of this kind may match."""
        k = self.by_kind
        if number.kind == "degree":
            return k.get(f"degree:{number.axis}", set())
        if number.kind == "percent":
            return set().union(*(k.get(x, set()) for x in PERCENT_KINDS))
        if number.kind == "count":
            return k.get("count", set()) | {v for v in k.get("plain", set()) if v == int(v)}
        return k.get(number.kind, set())


def _trial(known: Known, t: dict[str, Any], num_gpus: float | None) -> None:
    for key, (kind, factor) in _TRIAL_FIELDS.items():
        if isinstance(t.get(key), int | float):
            known.add(kind, t[key] * factor)
    if isinstance(t.get("tokens_per_sec_per_gpu"), int | float) and num_gpus:
        known.add("throughput", t["tokens_per_sec_per_gpu"] * num_gpus)      # the whole cluster's
    for value in (t.get("breakdown_s") or {}).values():
        known.add("time", value)
    for key, axis in _CONFIG_AXES.items():
        known.add("degree", (t.get("config") or {}).get(key), axis)


def _pairs(known: Known, trials: list[dict[str, Any]]) -> None:
    """Gains, ratios and step-time differences between any two scored layouts the facts name."""
    for a in trials:
        for b in trials:
            ta, tb = a.get("tokens_per_sec_per_gpu"), b.get("tokens_per_sec_per_gpu")
            if a is b or not (isinstance(ta, int | float) and isinstance(tb, int | float)) or ta <= 0 or tb <= 0:
                continue
            known.add("gain", (ta / tb - 1) * 100)
            known.add("ratio", ta / tb)
            sa, sb = a.get("iteration_time_s"), b.get("iteration_time_s")
            if isinstance(sa, int | float) and isinstance(sb, int | float) and sb > 0:
                known.add("time", sa - sb)
                known.add("gain", (sa / sb - 1) * 100)
            for term, value in (a.get("breakdown_s") or {}).items():
                other = (b.get("breakdown_s") or {}).get(term)
                if isinstance(value, int | float) and isinstance(other, int | float):
                    known.add("time", value - other)


def _each_leaf(node: Any) -> Iterator[Any]:
    """Every value of a nest of dicts, lists and tuples that is none of them, depth first."""
    if isinstance(node, dict):
        for v in node.values():
            yield from _each_leaf(v)
    elif isinstance(node, list | tuple):
        for v in node:
            yield from _each_leaf(v)
    else:
        yield node


def _strings(known: Known, node: Any) -> None:
    """Numbers written in the tools' strings (explain lines, decision, reasons, layouts), with their kinds."""
    for leaf in _each_leaf(node):
        if not isinstance(leaf, str):
            continue
        for n in read_numbers(normalise(leaf)):
            known.add(n.kind if n.kind != "plain" else "plain", n.value, n.axis)
            if n.kind in PERCENT_KINDS or n.kind == "plain":
                known.add("percent" if n.kind == "plain" else n.kind, n.value)


def _leaves(known: Known, node: Any) -> None:
    for leaf in _each_leaf(node):
        known.add("plain", leaf)


def known_numbers(facts: dict[str, Any]) -> Known:
    """Every number of the report's facts, by kind: scored trials (their fields, configs and pairwise gains), the
    explain tool's terms, the tools' strings, search counts and the request."""
    known = Known()
    request = facts.get("request") or {}
    num_gpus = request.get("num_gpus")
    trials = [t for t in (facts.get("best"), facts.get("runner_up"), *(facts.get("top") or []),
                          *((facts.get("search") or {}).get("ranked") or [])) if isinstance(t, dict)]
    for t in trials:
        _trial(known, t, num_gpus)
    _pairs(known, trials)
    for term in facts.get("why_terms") or []:
        for key in ("a", "b", "b_minus_a"):
            known.add("time", term.get(key))
    for key in ("num_gpus", "gpus_per_node", "gbs", "seq_len", "top_k"):
        known.add("count", request.get(key))
    for key, axis in (("gbs", "gbs"), ("seq_len", "s")):
        known.add("degree", request.get(key), axis)
    for key, value in (facts.get("search") or {}).items():
        if key != "ranked":
            known.add("count", value)
    for key in ("trials_scored", "rounds"):
        known.add("count", facts.get(key))
    for rank in range(1, len(facts.get("top") or []) + 1):
        known.add("rank", rank)
        known.add("count", rank)
    _strings(known, facts)
    _leaves(known, facts)
    return known


def _matches(number: Number, candidates: set[float]) -> bool:
    if number.kind in EXACT_KINDS:
        return number.value in candidates
    v = abs(number.value)
    return any(abs(v - k) <= max(number.rounding, REL_TOLERANCE * k) + 1e-9 for k in candidates)


_KIND_NAMES = {"throughput": "throughput", "time": "time", "gain": "gain", "mfu": "MFU", "headroom": "headroom",
               "percent": "percentage", "memory": "GiB", "ratio": "ratio", "count": "count", "rank": "rank",
               "plain": "number"}


def ground_numbers(text: str, facts: Any) -> tuple[str, list[str]]:
    """``text`` (normalised) with each number that no tool result *of the same kind* contains replaced by '[?]',
    and those numbers named with their kind, e.g. '8.33% (gain)', 'DP7 (dp degree)'.

    A gain must be a gain the tools computed (not a step time that happens to read alike), a degree a
    degree of that axis in a scored layout, a small integer a count or value the tools gave; number
    words and digits split by invisible characters are read too (:mod:`agent.text.number_kinds`).
    """
    text = normalise(text)
    known = known_numbers(facts if isinstance(facts, dict) else {"values": facts})
    flagged: list[str] = []
    out, last = [], 0
    for number in read_numbers(text):
        if _matches(number, known.of(number)):
            continue
        shown = (f"{number.axis.upper()}{number.text}" if number.axis and number.axis != "s" else number.text)
        shown += "%" if number.kind in PERCENT_KINDS and not number.text.endswith("%") else ""
        kind = f"{number.axis} degree" if number.kind == "degree" else _KIND_NAMES.get(number.kind, number.kind)
        flagged.append(f"{shown.strip()} ({kind})")
        out += [text[last:number.start], "[?]"]
        last = number.end
    out.append(text[last:])
    return "".join(out), flagged


def _read(token: str) -> float | None:
    """The value of a request number as the offline parser writes it ('8k' = 8,000 before the 1024 rule)."""
    text = token.strip().rstrip("%").strip().replace(",", "")
    scale = 1.0
    if text and text[-1].lower() in _SCALE:
        scale, text = _SCALE[text[-1].lower()], text[:-1].strip()
    try:
        return float(text) * scale
    except ValueError:
        return None


NAME_CUTOFF = 0.8
"""difflib ratio at which a word of the request names a catalog word ('mistral' ~ 'mixtral' 0.86, 'h100s' ~
'h100' 0.89)."""


def stated_name(name: str, aliases: list[str], text: str) -> bool:
    """Whether the request's words name a catalog entry (or its family): a word of 3+ characters of its id or an
    alias equals, or is close to, a word of the text."""
    import difflib

    said = {w for w in re.findall(r"[a-z0-9.]+", normalise(text).lower()) if len(w) >= 3}
    names = {w for n in [name, *aliases] for w in re.findall(r"[a-z0-9.]+", n.lower().split("/")[-1])
             if len(w) >= 3 and not w.replace(".", "").isdigit()}
    return bool(said & names) or any(difflib.get_close_matches(w, list(said), n=1, cutoff=NAME_CUTOFF)
                                     for w in names if len(w) <= 40)


def stated_count(value: Any, text: str) -> bool:
    """Whether a count the LLM read is written in the request, as digits or words ('64', 'sixty-four')."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return False
    return any(n.value == number for n in read_numbers(normalise(text)))


def unstated_job(data: dict[str, Any], text: str) -> list[str]:
    """What of the job (model, GPU type, GPU count) the LLM read that the request's words do not state."""
    from agent.text.names import gpu_index, model_catalog

    missing = []
    entry = model_catalog().get(str(data.get("model") or ""))
    if entry is None or not stated_name(str(entry["id"]), [str(a) for a in entry.get("aliases") or []]
                                        + [str(entry.get("display_name") or "")], text):
        missing.append("the model")
    gpu = str(data.get("gpu") or "")
    aliases = [k for k, v in gpu_index().items() if v == gpu]
    if not aliases or not stated_name(gpu, aliases, text):
        missing.append("the GPU type")
    if not stated_count(data.get("num_gpus"), text):
        missing.append("the GPU count")
    return missing


def stated_constraints(rules: list[str], text: str) -> tuple[list[str], list[str]]:
    """(kept, dropped): rules whose axis the request's words name, and the invented ones."""
    offline = {axis_of(r) for r in extract_constraints(text).rules}
    kept, dropped = [], []
    for rule in rules:
        axis = axis_of(rule)
        words = _AXIS_WORDS.get(axis)
        if axis in offline or (words and re.search(words, text, re.I)):
            kept.append(rule)
        else:
            dropped.append(rule)
    return kept, dropped


def stated_number(value: Any, text: str) -> bool:
    """Whether an integer the LLM read (gbs, seq_len, GPUs per node) is written in the request ('8192' or '8k')."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return False
    for token in _NUMBER.findall(text):
        read = _read(token)
        if read is None:
            continue
        suffix = token.strip()[-1:].lower()
        if read == number or (suffix == "k" and abs(read / 1000 * 1024 - number) < 1) or (
                suffix == "m" and abs(read / 1e6 * 1024 ** 2 - number) < 1):
            return True
    return False


def stated_digits(value: Any, text: str) -> bool:
    """Whether a number the LLM read is written as digits anywhere in the request, even glued to a word
    ('8x400G NICs' states 8 and 400, 'NVL72' states 72): for counts and rates named by a unit word."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return False
    return any(float(d) == number for d in re.findall(r"\d{1,9}(?:\.\d{1,6})?", text))
