"""The typed tuning request, the clarification result, and the offline (regex + catalog) request parser.

``parse_request(text, base=None)`` turns "tune Mixtral 8x7B for 64 MI300X" or "Llama 3.1 405B on
2k H100s, seq 8k, no FP8" into a :class:`TuneRequest`, or into a :class:`Clarification` (a
question, never an exception) when the model, the GPU type or the GPU count is missing, unknown
or ambiguous.  Ambiguous names ("llama 70b": llama2-70b, llama3-70b or llama3.1-70b) are asked
back with the options rather than guessed: a wrong model silently gives a wrong answer.
Defaults (said in ``assumed``): gbs = the smallest multiple of the GPU count >= 256; seq_len =
4096 (less when the model's context is shorter); 8 GPUs per node.  With ``base`` (a chat
follow-up) whatever the text does not say is kept from the earlier request.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent import names
from agent.constraints_text import extract_constraints, merge_constraints

DEFAULT_GBS_FLOOR = 256
DEFAULT_GPUS_PER_NODE = 8
_NUM = r"(\d+(?:\.\d+)?)\s*([kK])?"


class TuneRequest(BaseModel):
    """A tuning job: which model on which GPUs, the batch, constraints and how many results."""

    model_config = ConfigDict(extra="forbid")

    model: str | dict[str, Any] = Field(description="Catalog model id, e.g. 'mixtral-8x7b' (or HF config fields).")
    gpu: str = Field(description="Catalog GPU id, e.g. 'mi300x'.")
    num_gpus: int = Field(ge=1, description="GPUs in the job.")
    gpus_per_node: int = Field(default=DEFAULT_GPUS_PER_NODE, ge=1, description="GPUs per node.")
    gbs: int = Field(ge=1, description="Global batch size, sequences.")
    seq_len: int = Field(ge=1, description="Sequence length, tokens.")
    constraints: list[str] = Field(default_factory=list, description="Rules like 'tp<=4', 'precision=bf16'.")
    top_k: int = Field(default=5, ge=1, le=50, description="How many ranked layouts to report.")
    candidates: list[dict[str, Any]] | None = Field(
        default=None, description="Restrict the agent to these layouts (sweep-format config dicts).")
    profile_path: str | None = Field(default=None, description="Device profile file; default: the shipped one.")
    assumed: list[str] = Field(default_factory=list, description="Fields filled by defaults (gbs, seq_len, ...).")
    notes: list[str] = Field(default_factory=list, description="How the text was read (defaults, name guesses).")

    def summary(self) -> str:
        """One line: model on N x GPU, gbs, seq, constraints."""
        rules = f", {', '.join(self.constraints)}" if self.constraints else ""
        model = self.model if isinstance(self.model, str) else self.model.get("id", "custom model")
        return (f"{model} on {self.num_gpus} x {self.gpu} ({self.gpus_per_node}/node), gbs {self.gbs}, "
                f"seq {self.seq_len}{rules}")


class Clarification(BaseModel):
    """A question back to the user instead of a request (something essential missing or ambiguous)."""

    model_config = ConfigDict(extra="forbid")

    question: str
    missing: list[str] = Field(default_factory=list, description="Fields that could not be read: model, gpu, ...")
    options: list[str] = Field(default_factory=list, description="Choices to pick from, when known.")
    partial: dict[str, Any] = Field(default_factory=dict, description="What was read so far (for a follow-up).")


def default_gbs(num_gpus: int) -> int:
    """The smallest multiple of the GPU count that is at least 256 (every DP degree then divides it)."""
    return num_gpus * -(-DEFAULT_GBS_FLOOR // num_gpus)


def _number(value: str, suffix: str | None) -> int:
    """'2' + 'k' -> 2048 ('k' is 1024 for GPU counts and sequence lengths alike)."""
    return int(round(float(value) * (1024 if suffix else 1)))


def find_gpu_count(text: str, gpu: names.Match) -> int | None:
    """The GPU count next to the GPU name ('64 MI300X', '2k H100s', 'MI300X x 64'), or 'N gpus' / 'N nodes'."""
    if gpu.kind != "missing" and gpu.start >= 0:
        before = re.search(_NUM + r"\s*(?:x|×|\*)?\s*(?:gpus?\s+(?:of\s+)?)?$", text[:gpu.start], re.I)
        if before and not re.search(r"(seq|gbs|batch|tp|pp|ep|cp|mbs)\W*$", text[:before.start()], re.I):
            return _number(before.group(1), before.group(2))
        after = re.match(r"^\s*(?:gpus?)?\s*(?:x|×|\*)\s*" + _NUM, text[gpu.end:], re.I)
        if after:
            return _number(after.group(1), after.group(2))
    plain = re.search(_NUM + r"\s*gpus?\b(?!\s*(?:per|/)\s*node)", text, re.I)
    if plain:
        return _number(plain.group(1), plain.group(2))
    return None


def find_nodes(text: str) -> int | None:
    """'on 4 nodes' -> 4."""
    m = re.search(r"(\d+)\s*(?:x\s*)?nodes?\b", text, re.I)
    return int(m.group(1)) if m else None


def find_seq_len(text: str) -> int | None:
    """'seq 8k', 'seq_len 8192', 'sequence length 16k', '8k context' -> tokens."""
    m = re.search(r"\b(?:seq(?:uence)?(?:[\s_-]*len(?:gth)?)?|context(?:[\s_-]*length)?|ctx)\s*(?:=|:|of|is)?\s*"
                  + _NUM, text, re.I)
    if m is None:
        m = re.search(_NUM + r"\s*(?:tokens?\s*)?(?:seq(?:uence)?s?|context|ctx)\b", text, re.I)
    return _number(m.group(1), m.group(2)) if m else None


def find_gbs(text: str) -> int | None:
    """'gbs 512', 'global batch 1024', 'batch size 512' -> sequences."""
    m = re.search(r"\b(?:gbs|global[\s_-]*batch(?:[\s_-]*size)?|(?<!micro[\s_-])batch[\s_-]*size)\s*(?:=|:|of|is)?\s*"
                  + _NUM, text, re.I)
    return _number(m.group(1), m.group(2)) if m else None


def find_gpus_per_node(text: str) -> int | None:
    """'4 gpus per node', 'gpus_per_node=4', '4/node' -> 4."""
    m = re.search(r"(\d+)\s*(?:gpus?\s*)?(?:per|/)\s*node", text, re.I) or re.search(
        r"gpus[\s_-]*per[\s_-]*node\s*(?:=|:)?\s*(\d+)", text, re.I)
    return int(m.group(1)) if m else None


def find_top_k(text: str) -> int | None:
    """'top 10' -> 10."""
    m = re.search(r"\btop[\s_-]*k?\s*=?\s*(\d+)\b", text, re.I)
    return int(m.group(1)) if m else None


def _name_question(kind: str, match: names.Match) -> tuple[str, list[str]]:
    label = "model" if kind == "model" else "GPU type"
    if match.kind == "ambiguous":
        return f"Which {label} do you mean by '{match.mention}': {', '.join(match.options)}?", match.options
    if match.kind == "unknown":
        near = f"; did you mean {', '.join(match.options)}?" if match.options else ""
        known = sorted(names.model_catalog()) if kind == "model" else sorted(set(names.gpu_index().values()))
        return f"Unknown {label} '{match.mention}'{near} (known: {', '.join(known)})", match.options
    examples = "llama3-8b, mixtral-8x7b, llama3.1-405b" if kind == "model" else "h100, mi300x, b200"
    return f"Which {label}? e.g. {examples}", []


def parse_request(text: str, base: TuneRequest | dict[str, Any] | None = None) -> TuneRequest | Clarification:
    """Read a tuning request from free text (offline); see the module docstring."""
    text = re.sub(r"(?<![A-Za-z.\d])(\d+)[x×](?=[A-Za-z])", r"\1 x ", text.strip())
    if not text:
        return Clarification(question="Empty request. Try: tune llama3 8b on 8 h100", missing=["model", "gpu",
                                                                                                 "num_gpus"])
    model, gpu = names.find_model(text), names.find_gpu(text)
    values: dict[str, Any] = dict(base.model_dump() if isinstance(base, TuneRequest) else base or {})
    notes = [n for n in (model.note, gpu.note) if n]
    assumed = set(values.get("assumed", []))
    questions, missing, options = [], [], []
    for kind, match in (("model", model), ("gpu", gpu)):
        if match.kind == "found":
            values[kind] = match.value
        elif kind not in values or match.kind in ("ambiguous", "unknown"):
            question, opts = _name_question(kind, match)
            questions.append(question)
            missing.append(kind)
            options += opts
    count = find_gpu_count(text, gpu)
    per_node = find_gpus_per_node(text)
    if per_node:
        values["gpus_per_node"] = per_node
        assumed.discard("gpus_per_node")
    if count is None and (nodes := find_nodes(text)):
        count = nodes * values.get("gpus_per_node", DEFAULT_GPUS_PER_NODE)
        notes.append(f"{nodes} nodes x {values.get('gpus_per_node', DEFAULT_GPUS_PER_NODE)} GPUs = {count} GPUs")
    if count is not None:
        values["num_gpus"] = count
    elif "num_gpus" not in values and "gpu" not in missing:
        questions.append("How many GPUs? e.g. 'on 64 mi300x'")
        missing.append("num_gpus")
    for field_name, found in (("seq_len", find_seq_len(text)), ("gbs", find_gbs(text)), ("top_k", find_top_k(text))):
        if found is not None:
            values[field_name] = found
            assumed.discard(field_name)
    rules = extract_constraints(text, values.get("gpu"))
    values["constraints"] = merge_constraints(values.get("constraints", []), rules.rules)
    notes += rules.notes
    if questions:
        partial = {k: v for k, v in values.items() if k in ("model", "gpu", "num_gpus", "gpus_per_node", "gbs",
                                                             "seq_len", "constraints", "top_k")}
        partial["assumed"] = sorted(assumed)
        return Clarification(question=" ".join(questions), missing=missing, options=options, partial=partial)
    _fill_defaults(values, assumed, notes)
    values["assumed"], values["notes"] = sorted(assumed), notes
    return TuneRequest.model_validate(values)


def _fill_defaults(values: dict[str, Any], assumed: set[str], notes: list[str]) -> None:
    """Fill gbs, seq_len and gpus_per_node when missing or assumed before (they depend on GPUs and model)."""
    if "gpus_per_node" not in values:
        values["gpus_per_node"] = DEFAULT_GPUS_PER_NODE
        assumed.add("gpus_per_node")
        notes.append(f"assumed {DEFAULT_GPUS_PER_NODE} GPUs per node")
    if "gpus_per_node" in assumed:   # a job smaller than a node uses what it has
        values["gpus_per_node"] = min(DEFAULT_GPUS_PER_NODE, values["num_gpus"])
    if "gbs" not in values or "gbs" in assumed:
        values["gbs"] = default_gbs(values["num_gpus"])
        assumed.add("gbs")
        notes.append(f"assumed gbs={values['gbs']} (smallest multiple of {values['num_gpus']} GPUs >= "
                     f"{DEFAULT_GBS_FLOOR}); say 'gbs N' to change it")
    if "seq_len" not in values or "seq_len" in assumed:
        values["seq_len"] = names.typical_seq_len(values["model"]) if isinstance(values["model"], str) else 4096
        assumed.add("seq_len")
        notes.append(f"assumed seq_len={values['seq_len']}; say 'seq 8k' to change it")


def pick_option(options: list[str], answer: str) -> str | None:
    """The option an answer names: its number ('2'), or the only option whose key contains the answer's."""
    text = answer.strip()
    if re.fullmatch(r"#?\d+", text) and 1 <= int(text.lstrip("#")) <= len(options):
        return options[int(text.lstrip("#")) - 1]
    k = names.key(text)
    hits = [o for o in options if k and k in names.key(o)]
    exact = [o for o in options if names.key(o) == k]
    return exact[0] if exact else hits[0] if len(hits) == 1 else None


def answer_clarification(clarification: Clarification, answer: str) -> TuneRequest | Clarification:
    """Read the answer to a clarification: an option pick, or more of the request (merged with what was read)."""
    picked = pick_option(clarification.options, answer) if clarification.options else None
    if picked is not None:
        answer = picked
    return parse_request(answer, base=clarification.partial)
