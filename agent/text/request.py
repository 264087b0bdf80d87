"""The typed tuning request, the clarification result, and the offline (regex + catalog) request parser.

``parse_request(text, base=None)`` turns "tune Mixtral 8x7B for 64 MI300X" or "Llama 3.1 405B on
2k H100s, seq 8k, no FP8" into a :class:`TuneRequest`, or into a :class:`Clarification` (a
question, never an exception) when the model, the GPU type or the GPU count is missing, unknown,
ambiguous or out of range.  Ambiguous names ("llama 70b": llama2-70b, llama3-70b or llama3.1-70b)
are asked back with the options rather than guessed: a wrong model silently gives a wrong answer.

What it reads besides names and counts: sequence length ("seq 8k", "8k context"), the global
batch in sequences ("gbs 512") or in tokens ("1M tokens per step" -> gbs = tokens / seq_len;
k = 1024, M = 1024^2 as for sequence lengths), precisions (constraints: "no FP8", "bf16 only",
"with fp8", "mxfp8", "fp4"/"nvfp4", "fp16"; checked against the GPU), fine-tuning ("LoRA",
"SFT"), packed fine-tuning documents ("packed 200-token documents", "examples of ~200 tokens packed"),
a token budget and a deadline for the plan ("train on 15T tokens in 30 days"), a Hugging
Face ``config.json`` path (its fields are the model; an unsupported ``model_type`` or a bad field
is asked back by name), a launch framework ("with torchtitan"), NICs ("8x400G NICs per node",
"RoCE 400G"), the NVLink domain ("NVL72", "NVLink domain of 36"), GPUs per node ("4 gpus per
node"; default: the GPU's catalog node, e.g. a GB200 compute tray holds 4 in a 72-GPU NVLink
domain) and headroom ("must fit with 20% headroom").  Defaults (listed in ``assumed`` and said in
``notes``): gbs = a token count scaled to the model, in sequences (:mod:`agent.batch_default`); seq_len = 4096 (less when the
model's context is shorter); GPUs per node from the catalog; precision and framework unpinned.  With ``base`` (a chat
follow-up) whatever the text does not say is kept from the earlier request.

Bounded work: the text is cut to :data:`MAX_REQUEST_CHARS`, whitespace runs are folded and
numbers are at most 9 digits before any pattern runs, so every pattern does constant work per
position (linear time); values beyond the engine's limits
(:mod:`projection.training_config`) are asked back with the allowed range.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.text import names
from agent.batch_default import default_gbs
from agent.sizing_guess import first_guess
from agent.text.constraints_text import axis_of, extract_constraints, merge_constraints
from agent.text.request_numbers import BAD_COUNT, canonical_numbers, count_problem
from projection.errors import UnknownNameError, is_near_miss
from projection.framework import framework_words
from projection.model_spec import load_model
from projection.quantities import QuantityError, read_size
from projection.training_config import (MAX_GBS, MAX_GPUS, MAX_GPUS_PER_NODE, MAX_SEQ_LEN, HostOpSeconds,
                                         NicGbps, PackedDocumentTokens)
from projection.vocabulary import (ATTENTION_BACKENDS, FINETUNES, MOE_DISPATCHERS, PIPELINE_SCHEDULES, PRECISIONS,
                                   RECOMPUTES)

DEFAULT_GPUS_PER_NODE = 8
MAX_REQUEST_CHARS = 4000
MAX_DIGITS = 9
MAX_TOP_K = 50
# A number of a request (after agent.text.request_numbers.canonical_numbers): never the tail of a name or of a longer
# number (H100, GB200, Qwen3-235B, 8,192), never followed by more word characters (8kk, 8.5.3).
_NUM = (r"(?<![\w.,^*+\-−])([0-9]{1,9}(?:\.[0-9]{1,6})?)\s?(?:([kKmM])(?![A-Za-z0-9])|(thousand|million)\b)?"
        r"(?![\w]|\.[0-9])")
_MULTIPLIER = {"k": 1024, "m": 1024 ** 2, "thousand": 1000, "million": 1_000_000}
FRAMEWORKS = framework_words()   # every word naming a framework -> its recipe name (projection/framework.py)
_FRAMEWORK = re.compile(r"\b(megatron[\s-]?(?:lm|core|bridge)|megatron|mcore|nemo|torchtitan|titan|primus|deepspeed|"
                        r"maxtext|jax|llm-foundry)\b", re.I)
_CONFIG_PATH = re.compile(r"(?<![\w.~/-])((?:~|\.{1,2})?/?(?:[\w.~-]+/){0,16}[\w.-]+\.(?:json|ya?ml))(?![\w/])")
_FRAMEWORK_SAID = re.compile(r"\bframework\s*(?:is\s+|=\s*|:\s*)?([A-Za-z][\w.-]{2,})", re.I)
_LORA = re.compile(r"\bq?lora\b", re.I)
# "fine-tuning" (the noun) means SFT; "fine-tune the layout" (the verb) does not.
_SFT = re.compile(r"\b(?:sft|supervised[\s-]?fine[\s-]?tun\w*|full[\s-]?fine[\s-]?tun\w*|fine[\s-]?tuning)\b", re.I)
# Packed fine-tuning documents: "packed 200-token documents", "packed documents of ~200 tokens", "documents of
# ~200 tokens packed (into 4k)", "200-token examples packed into 4096"; the number is the mean document length.
_DOC = r"(?:documents?|docs?|examples?|samples?)"
_ABOUT = r"(?:~\s?|about |around |roughly |approx\.? |approximately )?"
_PACKED = tuple(re.compile(p, re.I) for p in (
    rf"\bpacked {_ABOUT}{_NUM}[\s-]?tokens?[\s-]{_DOC}\b",
    rf"\bpacked {_DOC} of {_ABOUT}{_NUM}\s?tokens?\b",
    rf"\b{_DOC} of {_ABOUT}{_NUM}\s?tokens?(?: each)?,? packed\b",
    rf"(?<![\w.]){_ABOUT}{_NUM}[\s-]?tokens?[\s-]{_DOC},? packed\b",
))
_SPEED = r"(\d{2,4}(?:\.\d)?)\s?(?:gbit/s|gb/s|gbps|gbe|gbit|gb|g)\b"
_NIC_WORD = r"(?:nics?|hcas?|infiniband|ib|roce|ethernet|connectx-?\d|cx-?\d|network(?:ing)?|links?)\b"
_NIC_SPEED = re.compile(rf"(?:(\d{{1,2}})\s?[x×*]\s?)?{_SPEED}\s?(?:x\s?)?{_NIC_WORD}(?:\s?(?:per|/|a)\s?node)?",
                        re.I)
_NIC_COUNT = re.compile(rf"(\d{{1,2}})\s?(?:x\s?)?{_NIC_WORD}(?:\s?(?:per|/|a)\s?node)?"
                        rf"(?:\s?(?:of|at|@|with)\s?{_SPEED})?", re.I)
# The rate after the word: "RoCE 400G", "IB @ 200 Gb/s", "NICs at 400 Gbps" (no "links": "NVLink 900 GB/s" is scale-up).
_NIC_RATE_AFTER = re.compile(r"\b(?:nics?|hcas?|infiniband|ib|roce(?:\s?v2)?|ethernet|connectx-?\d|cx-?\d|network)\b"
                             rf"\s?(?:(?:of|at|@|with|is|=|:)\s?)?{_SPEED}", re.I)
_NVL = re.compile(r"\bnvl\s?(\d{1,3})\b|\bnvlink[\s-]?domains?\s?(?:of|=|:|is)?\s?(\d{1,3})\b(?!\s?(?:nodes?|trays?))|"
                  r"(\d{1,3})[\s-]?gpus?\s?nvlink[\s-]?domains?\b", re.I)
# Positive precision mentions not handled by agent.text.constraints_text (which reads "no fp8", "bf16 only", "use fp8").
_PRECISION_WORDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b(?:nv[\s_-]?fp4|fp4|4[\s-]?bit)\b", re.I), "nvfp4"),
    (re.compile(r"\bmx[\s_-]?fp4\b", re.I), "mxfp4"),
    (re.compile(r"\bmx[\s_-]?fp8\b", re.I), "mxfp8"),
    (re.compile(r"\b(?:fp8[\s_-]?block[\s_-]?wise|block[\s_-]?wise[\s_-]?fp8|block[\s_-]?scaled[\s_-]?fp8)\b", re.I),
     "fp8-blockwise"),
    (re.compile(r"(?<![a-z])fp16\b", re.I), "fp16"),
    (re.compile(r"\b(?:in|with|use|using|train(?:ing)?\s+in)\s+bf16\b", re.I), "bf16"),
)
# A token budget: "train on 15T tokens", "a 300B-token budget", "budget of 2 trillion tokens".  T and B
# (trillion, billion) are never batch sizes; with a budget word K and M count too.  Decimal, as --tokens.
_BUDGET_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "thousand": 1e3, "million": 1e6,
                 "billion": 1e9, "trillion": 1e12}
_PER_STEP = r"(?!\s?(?:per|/|a|each|every)\s?(?:step|batch|iteration|iter|update))"
_BUDGET = re.compile(
    r"(?:\b(?:train(?:ing|ed)?\s(?:on|for|over)|budget\s(?:of\s)?|total\s(?:of\s)?)\s?(?:a\s)?"
    r"(\d{1,9}(?:\.\d{1,6})?)\s?([kmbgt]|thousand|million|billion|trillion)\b[\s-]?tokens?\b" + _PER_STEP + "|"
    r"(?<![\w.])(\d{1,9}(?:\.\d{1,6})?)\s?([bgt]|billion|trillion)\b[\s-]?tokens?\b" + _PER_STEP + ")", re.I)
# A deadline: "in 30 days", "within 2 weeks", "deadline 30d", "finish in 12 hours", "by 1 month".
_DAYS = {"h": 1 / 24, "hour": 1 / 24, "hours": 1 / 24, "d": 1.0, "day": 1.0, "days": 1.0, "w": 7.0, "week": 7.0,
         "weeks": 7.0, "month": 30.0, "months": 30.0}
_DEADLINE = re.compile(r"\b(?:in|within|by|under|deadline(?:\sof)?|finish(?:ed)?\s(?:in|within))\s?(?:a\s)?"
                       r"(\d{1,4}(?:\.\d{1,3})?)\s?(h|hours?|d|days?|w|weeks?|months?)\b", re.I)
_NEGATED = re.compile(r"\b(?:no|not|without|avoid|disable|never)\s+(?:any\s+)?$", re.I)


class TuneRequest(BaseModel):
    """A tuning job: which model on which GPUs, the batch, constraints and how many results."""

    model_config = ConfigDict(extra="forbid")

    model: str | dict[str, Any] = Field(description="Catalog model id, e.g. 'mixtral-8x7b', a config.json path, "
                                                    "or HF config fields.")
    gpu: str = Field(description="Catalog GPU id, e.g. 'mi300x'.")
    num_gpus: int = Field(ge=1, le=MAX_GPUS, description="GPUs in the job.")
    gpus_per_node: int = Field(default=DEFAULT_GPUS_PER_NODE, ge=1, le=MAX_GPUS_PER_NODE, description="GPUs per node.")
    gbs: int = Field(ge=1, le=MAX_GBS, description="Global batch size, sequences.")
    seq_len: int = Field(ge=1, le=MAX_SEQ_LEN, description="Sequence length, tokens.")
    constraints: list[str] = Field(default_factory=list, description="Rules like 'tp<=4', 'precision=bf16'.")
    top_k: int = Field(default=5, ge=1, le=MAX_TOP_K, description="How many ranked layouts to report.")
    candidates: list[dict[str, Any]] | None = Field(
        default=None, description="Restrict the agent to these layouts (sweep-format config dicts).")
    profile_path: str | None = Field(default=None, description="Device profile file; default: the shipped one.")
    finetune: str | None = Field(default=None, pattern=f"^({'|'.join(FINETUNES)})$",
                                 description="'lora' (frozen base weights) or 'sft'; None = pretraining.")
    packed_document_tokens: PackedDocumentTokens = None
    framework: str | None = Field(default=None, description="The framework the user named, as its recipe name "
                                                            "(megatron, nemo, torchtitan, primus, deepspeed, jax): "
                                                            "its record prices the layouts; None = not said.")
    batch_tokens: int | None = Field(default=None, ge=1, description="The global batch in tokens, when given so.")
    nic_gbps: NicGbps = Field(default=None, description="Line rate of one NIC, Gbit/s (if said).")
    nics_per_node: int | None = Field(default=None, ge=1, le=64, description="NICs per node (if said).")
    nvlink_domain: int | None = Field(default=None, ge=1, le=MAX_GPUS_PER_NODE,
                                      description="GPUs in one NVLink domain when said (NVL72 -> 72).")
    host_op_s: HostOpSeconds = None
    train_tokens: float | None = Field(default=None, gt=0, le=1e18, allow_inf_nan=False,
                                       description="Token budget of the whole run when said ('train on 15T tokens'): "
                                                   "the answer's plan gives days and GPU-hours.")
    deadline_days: float | None = Field(default=None, gt=0, le=3650, allow_inf_nan=False,
                                        description="Deadline when said ('in 30 days'): the plan's smallest GPU "
                                                    "count that meets it (with a token budget).")
    anchors: list[dict[str, Any]] = Field(
        default_factory=list, description="Measured runs of this job (projection.anchor.AnchorRun as data, read by "
                                          "`--anchor FILE`): every layout is corrected by them (tools/anchoring.py).")
    size_cluster: bool = Field(default=False, description="The GPU count was asked, not given: a token budget and a "
                                                          "deadline size it (agent/sizing.py) before tuning.")
    sizing: dict[str, Any] | None = Field(default=None, description="The sizing table: GPU counts searched, their "
                                                                     "days and GPU-hours with the band, the count chosen.")
    assumed: list[str] = Field(default_factory=list, description="Fields filled by defaults (gbs, seq_len, ...).")
    notes: list[str] = Field(default_factory=list, description="How the text was read (defaults, name guesses).")

    def summary(self) -> str:
        """One line: model on N x GPU, gbs, seq, constraints."""
        rules = f", {', '.join(self.constraints)}" if self.constraints else ""
        model = self.model if isinstance(self.model, str) else self.model.get("id", "custom model")
        extra = f", {self.finetune}" if self.finetune else ""
        if self.packed_document_tokens:
            extra += f", packed {self.packed_document_tokens}-token documents"
        return (f"{model} on {self.num_gpus} x {self.gpu} ({self.gpus_per_node}/node), gbs {self.gbs}, "
                f"seq {self.seq_len}{extra}{rules}")


class Clarification(BaseModel):
    """A question back to the user instead of a request (something essential missing or ambiguous)."""

    model_config = ConfigDict(extra="forbid")

    question: str
    missing: list[str] = Field(default_factory=list, description="Fields that could not be read: model, gpu, ...")
    options: list[str] = Field(default_factory=list, description="Choices to pick from, when known.")
    partial: dict[str, Any] = Field(default_factory=dict, description="What was read so far (for a follow-up).")


_PARTIAL_KEYS = ("model", "gpu", "num_gpus", "gpus_per_node", "gbs", "seq_len", "constraints", "top_k", "finetune",
                 "packed_document_tokens", "framework", "batch_tokens", "nic_gbps", "nics_per_node", "nvlink_domain", "host_op_s",
                 "profile_path", "candidates", "train_tokens", "deadline_days")
_LIMITS = {"num_gpus": (1, MAX_GPUS), "gbs": (1, MAX_GBS), "seq_len": (1, MAX_SEQ_LEN), "top_k": (1, MAX_TOP_K),
           "gpus_per_node": (1, MAX_GPUS_PER_NODE)}


NETWORK_KEYS = ("nics_per_node", "nic_gbps", "nvlink_domain", "host_op_s")
"""Request fields that override the GPU catalog's network (projection.training_config.Cluster fields)."""


def network_fields(request: Any) -> dict[str, Any]:
    """The network overrides a request (TuneRequest or its dict) gives: only those said, so the defaults stay."""
    get = request.get if isinstance(request, dict) else lambda k: getattr(request, k, None)
    return {k: v for k in NETWORK_KEYS if (v := get(k)) is not None}


def _number(value: str, suffix: str | None, word: str | None = None, what: str = "number") -> int:
    """'2' + 'k' -> 2048 ('k' is 1024 and 'M' 1024^2 for counts, lengths and tokens alike; 'million' is 10^6).

    Raises:
        QuantityError: the value is not whole ('8.5 GPUs'), asked back by the caller.
    """
    scale = _MULTIPLIER.get((suffix or word or "").lower(), 1)
    return read_size(float(value) * scale, what, low=0)


def _num(m: re.Match[str], at: int = 1, what: str = "number") -> int:
    try:
        return _number(m.group(at), m.group(at + 1), m.group(at + 2), what)
    except QuantityError as err:
        raise QuantityError(f"{what} '{m.group(0).strip()}' is not a whole number; say e.g. 64") from err


def normalise(text: str) -> tuple[str, str | None]:
    """The text with whitespace folded and ``x`` split off counts ('16xMI300X'), and a problem that stops parsing."""
    if len(text) > MAX_REQUEST_CHARS:
        return "", (f"The request is {len(text)} characters long; at most {MAX_REQUEST_CHARS} are read. "
                    "Say the model, GPU type and count, e.g. 'tune llama3 8b on 8 h100'.")
    text = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", " ", text)
    text = re.sub(r"\s+", " ", text).strip()
    text, problem = canonical_numbers(text)
    if problem:
        return "", problem
    long_number = re.search(rf"\d{{{MAX_DIGITS + 1},}}", text)
    if long_number:
        shown = long_number.group(0)
        return "", (f"The number {shown[:12]}{'...' if len(shown) > 12 else ''} is too large (more than {MAX_DIGITS} "
                    f"digits); allowed: GPUs 1..{MAX_GPUS}, gbs 1..{MAX_GBS}, seq_len 1..{MAX_SEQ_LEN}.")
    text = re.sub(r"(?<![A-Za-z.\d])(\d+)[x×](?=[A-Za-z]|\s)", r"\1 x ", text)      # '16xMI300X', '8x h100'
    text = re.sub(r"(?<=\s)[x×]([0-9]+)(?![\w.])", r"x \1", text)                  # 'h100 x8'
    text = re.sub(r"(?<=[A-Za-z0-9])\*(?=[0-9])", " x ", text)                     # 'MI300X*16'
    return re.sub(r"\s+", " ", text), None


def _mask(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each span blanked (same length, so other spans stay valid)."""
    for start, end in spans:
        text = text[:start] + " " * (end - start) + text[end:]
    return text


def find_gpu_count(text: str, gpu: names.Match) -> int | None:
    """The GPU count next to the GPU name ('64 MI300X', '2k H100s', 'MI300X x 64'), or 'N gpus'."""
    counts = gpu_counts(text, gpu)
    return counts[0] if counts else None


_NOT_A_COUNT = r"(seq|gbs|batch|tp|pp|ep|cp|mbs)\W*$"
_CORRECTION = (r"^\s?(?:gpus?)?\s?[,;:]?\s?(?:actually|rather|or rather|i mean|make (?:it|that)|no,?|sorry,?|"
               r"correction:?|or)\s")
_PLAIN_COUNT = _NUM + r"\s?(?:gpus?|accelerators?|devices?)\b(?!\s?(?:per|/|a) ?node)"


def gpu_counts(text: str, gpu: names.Match) -> list[int]:
    """Every distinct GPU count the text gives, in order: next to each mention of the GPU name ('64 MI300X',
    'MI300X x 64'), else 'N gpus'.  Two different counts are a contradiction the caller asks back.

    Raises:
        QuantityError: a count that is not a whole positive number ('-64 h100', 'NaN GB200 GPUs', '8.5 GPUs').
    """
    found: list[int] = []
    spans = []
    if gpu.kind != "missing" and gpu.start >= 0 and gpu.mention:
        spans = [m.span() for m in re.finditer(re.escape(gpu.mention), text, re.I)] or [(gpu.start, gpu.end)]
    for start, end in spans:
        if problem := count_problem(text[:start], "GPU count", f"on 64 {gpu.mention}"):
            raise QuantityError(problem)
        before = re.search(_NUM + r"\s?(?:x|×|\*)?\s?(?:gpus? (?:of )?)?$", text[:start], re.I)
        if before and not re.search(_NOT_A_COUNT, text[max(0, before.start() - 12):before.start()], re.I):
            found.append(_num(before, what="GPU count"))
        elif after := re.match(r"^\s?(?:gpus?)?\s?(?:x|×|\*)\s?" + _NUM, text[end:], re.I):
            found.append(_num(after, what="GPU count"))
        if again := re.match(_CORRECTION + _NUM, text[end:], re.I):   # '64 h100, actually 128': two counts
            found.append(_num(again, what="GPU count"))
    if not found:
        for plain in re.finditer(_PLAIN_COUNT, text, re.I):
            found.append(_num(plain, what="GPU count"))
        if not found and (bad := re.search(BAD_COUNT + r"\s?(?:gpus?|accelerators?|devices?)\b", text, re.I)):
            raise QuantityError(f"'{bad.group('bad')}' is not a GPU count (a whole number of at least 1); "
                                "say e.g. 'on 64 gpus'.")
    return list(dict.fromkeys(found))


def find_nodes(text: str) -> int | None:
    """'on 4 nodes' -> 4."""
    m = re.search(r"(?<![\w.,^*+\-−])([0-9]{1,9})\s?(?:x\s?)?(?:nodes?|servers?|trays?)\b", text, re.I)
    return int(m.group(1)) if m else None


_SEQ_WORD = r"\b(?:seq(?:uence)?(?:[\s_-]?len(?:gth)?)?|context(?:[\s_-]?(?:length|len|window))?|ctx)"
_VALUE_AFTER = r"\s?(?:=|:|of|is)?\s?(?P<token>[-+−]?[0-9A-Za-z.^*]+)(?:\s?(?P<word>thousand|million)\b)?"


def _keyword_values(keyword: str, text: str, what: str, exclude: str = "") -> list[int]:
    """Every value written after ``keyword`` ('seq 8k', 'gbs=4096'), read by projection.quantities.read_size
    ('k' = 1024, 'M' = 1024^2; 'thousand'/'million' decimal); text that is not a number ('sequence parallel')
    is not a value.

    Raises:
        QuantityError: a number-like value that is not one ('seq 8kk', 'gbs -64', 'seq NaN').
    """
    values = []
    for m in re.finditer(keyword + _VALUE_AFTER + exclude, text, re.I):
        token = m.group("token").rstrip(".")
        if not re.match(r"[-+−]?(?:[0-9.]|nan\b|inf)", token, re.I):
            continue
        value = read_size(token.replace("−", "-"), what, low=1)
        values.append(value * (_MULTIPLIER[m.group("word").lower()] if m.group("word") else 1))
    return list(dict.fromkeys(values))


def seq_lens(text: str) -> list[int]:
    """Every distinct sequence length the text gives: 'seq 8k', 'seq_len 8192', 'sequence length 16k', '8k
    context'."""
    found = _keyword_values(_SEQ_WORD, text, "seq_len")
    if not found:
        found = [_num(m, what="seq_len") for m in
                 re.finditer(_NUM + r"\s?(?:tokens? )?(?:seq(?:uence)?s?|context|ctx)\b", text, re.I)]
    return list(dict.fromkeys(found))


def find_seq_len(text: str) -> int | None:
    """'seq 8k', 'seq_len 8192', 'sequence length 16k', '8k context' -> tokens (the first one given)."""
    found = seq_lens(text)
    return found[0] if found else None


_BATCH_WORD = r"(?:gbs|global[\s_-]?batch(?:[\s_-]?size)?|(?<!micro[\s_-])batch(?:[\s_-]?size)?)"


def find_batch_tokens(text: str) -> int | None:
    """'global batch 1M tokens', '1M tokens per step', '4M-token batches' -> tokens per step."""
    m = (re.search(_BATCH_WORD + r"\s?(?:=|:|of|is)?\s?" + _NUM + r"\s?[-\s]?tokens?\b", text, re.I)
         or re.search(_NUM + r"\s?[-\s]?tokens? ?(?:(?:per|/|a|each|every) ?(?:step|batch|iteration|iter|update)|"
                      r"(?:global )?batch(?:es)?)\b", text, re.I))
    return _num(m, what="batch tokens") if m else None


def batch_sizes(text: str) -> list[int]:
    """Every distinct global batch in sequences the text gives ('gbs 512', 'global batch 1024', 'batch size 512')."""
    return _keyword_values(r"\b" + _BATCH_WORD, text, "gbs", exclude=r"(?!\s?[-\s]?tokens?\b)")


def find_gbs(text: str) -> int | None:
    """'gbs 512', 'global batch 1024', 'batch size 512' -> sequences (not a batch given in tokens)."""
    found = batch_sizes(text)
    return found[0] if found else None


def find_gpus_per_node(text: str) -> int | None:
    """'4 gpus per node', 'gpus_per_node=4', '4/node' -> 4."""
    m = re.search(r"(?<![\w.,^*+\-−])([0-9]{1,9})\s?(?:gpus? ?)?(?:per|/|a) ?node\b", text, re.I) or re.search(
        r"gpus[\s_-]?per[\s_-]?node\s?(?:=|:)?\s?([0-9]{1,9})\b", text, re.I)
    return int(m.group(1)) if m else None


def find_top_k(text: str) -> int | None:
    """'top 10' -> 10."""
    m = re.search(r"\btop[\s_-]?k?\s?=?\s?([0-9]{1,9})\b(?!\.[0-9])", text, re.I)
    return int(m.group(1)) if m else None


def find_nics(text: str) -> tuple[int | None, float | None, list[tuple[int, int]]]:
    """(NICs per node, Gbit/s per NIC, spans read): '8x400G NICs', '8 NICs of 400 Gb/s', '400Gbps InfiniBand',
    'RoCE 400G'."""
    count: int | None = None
    speed: float | None = None
    spans: list[tuple[int, int]] = []
    for m in _NIC_SPEED.finditer(text):
        count = int(m.group(1)) if m.group(1) else count
        speed = float(m.group(2))
        spans.append(m.span())
    masked = _mask(text, spans)
    for m in _NIC_COUNT.finditer(masked):
        count = int(m.group(1))
        speed = float(m.group(2)) if m.group(2) else speed
        spans.append(m.span())
    if speed is None:
        for m in _NIC_RATE_AFTER.finditer(_mask(text, spans)):
            speed = float(m.group(1))
            spans.append(m.span())
    return count, speed, spans


def find_budget(text: str) -> tuple[float | None, tuple[int, int] | None]:
    """('train on 15T tokens' -> 1.5e13, its span): the run's token budget, decimal suffixes (as --tokens)."""
    m = _BUDGET.search(text)
    if m is None:
        return None, None
    value, suffix = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    return float(value) * _BUDGET_SCALE[suffix.lower()], m.span()


def find_deadline(text: str) -> tuple[float | None, tuple[int, int] | None]:
    """('in 30 days' -> 30.0, its span): the deadline in days (hours, weeks, months = 30 days)."""
    m = _DEADLINE.search(text)
    return (float(m.group(1)) * _DAYS[m.group(2).lower()], m.span()) if m else (None, None)


def find_framework(text: str) -> str | None:
    """'with torchtitan', 'Megatron-LM', 'on Primus' -> a framework id."""
    m = _FRAMEWORK.search(text)
    return FRAMEWORKS.get(re.sub(r"\s", "-", m.group(1).lower())) if m else None


def misspelt_value(text: str, said: re.Pattern[str], choices: list[str], kind: str) -> str | None:
    """The question for a word ``said`` captures that is close to one of ``choices`` but none of them
    ('framework torchtitn', 'recompute ful'), else None: the word would otherwise be dropped without a word."""
    for m in said.finditer(text):
        if is_near_miss(m.group(1).lower(), choices):   # 'framework to use': no name at all
            message = str(UnknownNameError(kind, m.group(1), choices))
            return message[0].upper() + message[1:]     # a question to the user: a sentence
    return None


def misspelt_framework(text: str, said: re.Pattern[str] = _FRAMEWORK_SAID) -> str | None:
    """The question for 'framework torchtitn' (see :func:`misspelt_value`); the request would otherwise be priced
    as the default framework."""
    return misspelt_value(text, said, list(FRAMEWORKS), "framework")


_SAID_VALUES: tuple[tuple[re.Pattern[str], tuple[str, ...], str, str], ...] = (
    (re.compile(r"\brecompute\s*[:=]?\s*([A-Za-z][\w-]{2,})", re.I), RECOMPUTES, "recompute", "recompute"),
    (re.compile(r"\bschedule\s*[:=]?\s*([A-Za-z0-9][\w-]{2,})", re.I), PIPELINE_SCHEDULES, "pipeline schedule",
     "pp_schedule"),
    (re.compile(r"\battention\s+(?:backend|kernel)\s*[:=]?\s*([A-Za-z][\w-]{2,})", re.I), ATTENTION_BACKENDS,
     "attention backend", "attention_backend"),
    (re.compile(r"\bdispatcher\s*[:=]?\s*([A-Za-z][\w-]{2,})", re.I), MOE_DISPATCHERS, "MoE dispatcher",
     "moe_dispatcher"),
)
"""A setting's value said after its name ('recompute ful'): pattern, allowed values, what it is, its field."""


# A word shaped like a number format ('fp9', 'bf61', 'mxfp9'): a near miss of a training precision is asked back.
_PRECISION_SHAPED = re.compile(r"(?<![\w.-])((?:mx|nv)?(?:fp|bf)\d{1,2})(?![\w-]|\.\w)", re.I)   # 'fp9.' ends a line
_OTHER_FORMATS = frozenset({"fp4", "mxfp4", "fp32", "tf32"})   # read elsewhere, or not a training precision


def misspelt_precision(text: str) -> str | None:
    """The question for 'with fp9' / 'using bf61' (close to a training precision but none of them, nor another
    number format), else None: the word was dropped and every precision searched."""
    for m in _PRECISION_SHAPED.finditer(text):
        word = m.group(1).lower()
        if word in PRECISIONS or word in _OTHER_FORMATS:
            continue
        near = difflib.get_close_matches(word, list(PRECISIONS), n=2, cutoff=0.6)
        if near:
            return (f"Unknown precision '{m.group(1)}'; did you mean {' or '.join(near)}? "
                    f"(known: {', '.join(PRECISIONS)})")
    return None


def find_finetune(text: str) -> str | None:
    """'LoRA' -> 'lora'; 'SFT', 'fine-tune' -> 'sft'."""
    if _LORA.search(text):
        return "lora"
    return "sft" if _SFT.search(text) else None


def find_packed_documents(text: str) -> tuple[int | None, tuple[int, int] | None]:
    """('packed 200-token documents' -> 200, its span): the mean tokens per packed fine-tuning document."""
    for pattern in _PACKED:
        if m := pattern.search(text):
            return _num(m), m.span()
    return None, None


def find_precision(text: str) -> str | None:
    """A precision the text asks for that agent.text.constraints_text does not read (fp4, mxfp8, blockwise, fp16)."""
    for pattern, precision in _PRECISION_WORDS:
        for m in pattern.finditer(text):
            if not _NEGATED.search(text[max(0, m.start() - 16):m.start()]):
                return precision
    return None


def find_config_path(text: str) -> tuple[str | None, tuple[int, int] | None]:
    """A config.json (or .yaml) path in the text, and its span."""
    m = _CONFIG_PATH.search(text)
    return (m.group(1), m.span(1)) if m else (None, None)


def _name_question(kind: str, match: names.Match) -> tuple[str, list[str]]:
    label = "model" if kind == "model" else "GPU type"
    if match.kind == "ambiguous":
        return f"Which {label} do you mean by '{match.mention}': {', '.join(match.options)}?", match.options
    if match.kind == "unknown":
        near = f"; did you mean {', '.join(match.options)}?" if match.options else ""
        known = sorted(names.model_catalog()) if kind == "model" else sorted(set(names.gpu_index().values()))
        hint = f"; {match.hint}" if match.hint else ""
        return f"Unknown {label} '{match.mention}'{near}{hint} (known: {', '.join(known)})", match.options
    examples = "llama3-8b, mixtral-8x7b, llama3.1-405b" if kind == "model" else "h100, mi300x, b200"
    return f"Which {label}? e.g. {examples}", []


def _read_config(path_text: str) -> tuple[str | None, str | None, str]:
    """(path to use, problem, note) for a config.json the request names: checked by loading it field by field."""
    from projection.errors import ProjtuneError
    from projection.model_spec import load_model

    path = Path(path_text).expanduser()
    if not path.is_file():
        return None, f"The model config '{path_text}' does not exist (give the path of a Hugging Face config.json).", ""
    try:
        spec = load_model(str(path.resolve()))
    except ProjtuneError as err:
        return None, f"The model config '{path_text}' cannot be used: {err}", ""
    return (str(path.resolve()), None, f"model read from '{path_text}': model_type {spec.model_type}, "
            f"{spec.num_layers} layers, hidden {spec.hidden_size}")


def _gpu_spec(gpu: str | None) -> Any:
    from projection.hardware import load_hardware

    try:
        return load_hardware(gpu) if gpu else None
    except Exception:   # noqa: BLE001 - an unknown id was asked back already
        return None


def _check_precision(rules: list[str], wanted: str | None, hardware: Any) -> tuple[list[str], str | None, str]:
    """(rules, problem, note): the precision the text names, pinned when the GPU runs it, else a question."""
    note = ""
    if wanted is not None and not any(axis_of(r) == "precision" for r in rules):
        if wanted == "mxfp4":
            return rules, (f"MXFP4 training is not modelled (precisions: {', '.join(PRECISIONS)}); "
                           "say which of those to use."), ""
        rules = merge_constraints(rules, [f"precision={wanted}"])
        note = f"'{wanted}' read as precision={wanted}"
    if hardware is None:
        return rules, None, note
    supported = list(hardware.supported_precisions)
    for rule in rules:
        if axis_of(rule) != "precision":
            continue
        m = re.match(r"\s*precision\s*(?:=|in)\s*(.+)$", rule)
        if m and "!=" not in rule:
            asked = [p.strip() for p in m.group(1).split(",")]
            if not any(p in supported for p in asked):
                return rules, (f"{'/'.join(asked)} is not supported on {hardware.id} (supported: "
                               f"{', '.join(supported)}); pick one of those or another GPU."), note
    return rules, None, note


def _range_problem(field_name: str, value: int) -> str | None:
    low, high = _LIMITS[field_name]
    if low <= value <= high:
        return None
    return f"{field_name} {value} is out of range (allowed {low}..{high})."


def parse_request(text: str, base: TuneRequest | dict[str, Any] | None = None) -> TuneRequest | Clarification:
    """Read a tuning request from free text (offline); see the module docstring.  Never raises."""
    try:
        return _parse(text if isinstance(text, str) else str(text), base)
    except Exception as err:  # noqa: BLE001 - a request is answered with a question, never a traceback
        return Clarification(question=f"Could not read the request ({type(err).__name__}: {str(err)[:200]}). "
                                      "Try: tune llama3 8b on 8 h100, seq 8k, gbs 256", missing=["request"])


def _base_values(base: TuneRequest | dict[str, Any] | None) -> dict[str, Any]:
    if isinstance(base, TuneRequest):
        return base.model_dump()
    return dict(base) if isinstance(base, dict) else {}


def _parse(raw: str, base: TuneRequest | dict[str, Any] | None) -> TuneRequest | Clarification:
    text, problem = normalise(raw)
    values = _base_values(base)
    values.pop("sizing", None)       # a follow-up of a sized request is sized again (agent/sizing.py), or given a count
    if problem:
        return Clarification(question=problem, missing=["request"], partial=_partial(values, set()))
    if not text:
        return Clarification(question="Empty request. Try: tune llama3 8b on 8 h100",
                             missing=["model", "gpu", "num_gpus"])
    assumed = set(values.get("assumed", []))
    notes: list[str] = []
    questions, missing, options = [], [], []

    config_path, config_span = find_config_path(text)
    nic_count, nic_speed, nic_spans = find_nics(text)
    nvl = _NVL.search(_mask(text, nic_spans))
    if nvl is not None:
        nic_spans.append(nvl.span())     # masked like the NIC phrases: '72-GPU NVLink domain' is not a GPU count
    packed, packed_span = find_packed_documents(_mask(text, nic_spans))
    if packed_span is not None:
        nic_spans.append(packed_span)    # masked too: '200-token documents' is neither a sequence length nor a count
    budget, budget_span = find_budget(_mask(text, nic_spans))
    deadline, deadline_span = find_deadline(_mask(text, nic_spans))
    nic_spans += [span for span in (budget_span, deadline_span) if span is not None]
    names_text = _mask(text, nic_spans + ([config_span] if config_span else []))   # "4 NICs" is no GPU
    gpu = names.find_gpu(names_text)
    model = names.find_model(_mask(names_text, [(gpu.start, gpu.end)] if gpu.kind == "found" else []))
    if config_path is not None:
        path, problem, note = _read_config(config_path)
        if problem:
            questions.append(problem)
            missing.append("model")
        else:
            values["model"] = path
            notes.append(note)
        model = names.Match("found", path)
    notes += [n for n in (model.note, gpu.note) if n]
    for kind, match in (("model", model), ("gpu", gpu)):
        if match.kind == "found":
            if match.value is not None:
                values[kind] = match.value
        elif kind not in values or match.kind in ("ambiguous", "unknown"):
            question, opts = _name_question(kind, match)
            questions.append(question)
            missing.append(kind)
            options += opts
    hardware = _gpu_spec(values.get("gpu")) if "gpu" not in missing else None
    rest = _mask(text, nic_spans + ([config_span] if config_span else []))

    per_node = find_gpus_per_node(rest)
    if per_node is not None:
        values["gpus_per_node"] = per_node
        assumed.discard("gpus_per_node")
    node_size = values.get("gpus_per_node") or (hardware.gpus_per_node if hardware else DEFAULT_GPUS_PER_NODE)
    count = _said_once("num_gpus", "GPU counts", lambda: gpu_counts(rest, gpu), questions, missing)
    if count is None and "num_gpus" not in missing and (nodes := find_nodes(rest)):
        count = nodes * node_size
        notes.append(f"{nodes} nodes x {node_size} GPUs = {count} GPUs")
    if count is not None:
        values["num_gpus"] = count
        values["size_cluster"] = False
        assumed.discard("num_gpus")
    elif ("num_gpus" not in values and "gpu" not in missing and "num_gpus" not in missing and (budget or values.get("train_tokens"))
          and (deadline or values.get("deadline_days"))):
        values["size_cluster"] = True        # 'how many GPUs to train on 15T tokens in 60 days': sized (agent/sizing)
        assumed.add("num_gpus")
    elif "num_gpus" not in values and "gpu" not in missing and "num_gpus" not in missing:
        questions.append("How many GPUs? e.g. 'on 64 mi300x' (or give a token budget and a deadline, "
                         "'on 15T tokens in 60 days', to size the cluster)")
        missing.append("num_gpus")
    tokens = _said_once("batch_tokens", "global batches in tokens", lambda: _listed(find_batch_tokens(rest)),
                        questions, missing)
    said = (("seq_len", "sequence lengths", lambda: seq_lens(rest)),
            ("gbs", "global batch sizes", lambda: [] if tokens else batch_sizes(rest)),
            ("top_k", "top-k values", lambda: _listed(find_top_k(rest))))
    for field_name, label, read in said:
        found = _said_once(field_name, label, read, questions, missing)
        if found is not None:
            values[field_name] = found
            assumed.discard(field_name)
    if tokens is not None:
        values["batch_tokens"] = tokens
        values.pop("gbs", None)
        assumed.discard("gbs")
    for field_name in _LIMITS:
        if isinstance(values.get(field_name), int) and (why := _range_problem(field_name, values[field_name])):
            questions.append(why)
            missing.append(field_name)

    if nic_count is not None:
        values["nics_per_node"] = nic_count
    if nic_speed is not None:
        values["nic_gbps"] = nic_speed
    if nic_count is not None or nic_speed is not None:
        notes.append(f"network: {nic_count or 'catalog count of'} NICs per node at "
                     f"{nic_speed if nic_speed is not None else 'the catalog rate of'} Gbit/s (as said)")
    if nvl is not None:
        domain = next(g for g in nvl.groups() if g is not None)
        values["nvlink_domain"] = int(domain)
        notes.append(f"NVL{domain}: one NVLink domain of {domain} GPUs"
                     + (f" ({hardware.gpus_per_node} GPUs per node/tray)" if hardware else ""))
    if budget is not None:
        values["train_tokens"] = budget
        notes.append(f"token budget {budget:.3g} tokens (as said): the plan gives days and GPU-hours")
    if deadline is not None:
        values["deadline_days"] = deadline
        notes.append(f"deadline {deadline:g} days (as said)" + ("" if budget or values.get("train_tokens") else
                                                               "; give a token budget to size the job for it"))
    if (finetune := find_finetune(rest)) is not None:
        values["finetune"] = finetune
        notes.append("LoRA: frozen base weights, no weight gradients or optimizer state for them"
                     if finetune == "lora" else "SFT: full fine-tuning (trains like pretraining)")
    if packed is not None:
        values["packed_document_tokens"] = packed
        notes.append(f"packed documents of {packed} tokens (as said): attention is per document (cu_seqlens / THD)")
    if (framework := find_framework(rest)) is not None:
        values["framework"] = framework
        assumed.discard("framework")
    elif (question := misspelt_framework(rest)) is not None:
        questions.append(question)
        missing.append("framework")
    if (question := misspelt_precision(rest)) is not None:
        questions.append(question)
        missing.append("precision")
    for said, choices, kind, field_name in _SAID_VALUES:
        if (question := misspelt_value(rest, said, list(choices), kind)) is not None:
            questions.append(question)
            missing.append(field_name)

    rules = extract_constraints(rest, values.get("gpu"))
    for axis, why in rules.problems:   # 'headroom 150%' was dropped with a note and the search ran without it
        if axis not in missing:        # 'precision=fp9' is asked once, by misspelt_precision
            questions.append(why)
            missing.append(axis)
    merged = merge_constraints(values.get("constraints", []), rules.rules)
    merged, problem, note = _check_precision(merged, find_precision(rest), hardware)
    values["constraints"] = merged
    notes += rules.notes + ([note] if note else [])
    if problem:
        questions.append(problem)
        missing.append("precision")
    if questions:
        return Clarification(question=" ".join(questions), missing=missing, options=options,
                             partial=_partial(values, assumed))
    _fill_defaults(values, assumed, notes, hardware)
    values["assumed"], values["notes"] = sorted(assumed), notes
    try:
        return TuneRequest.model_validate(values)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "request"
        message = first["msg"].removeprefix("Value error, ")
        return Clarification(question=f"{where}: {message} (got {str(first.get('input'))[:40]!r}).",
                             missing=[where], partial=_partial(values, assumed))


def _listed(value: int | None) -> list[int]:
    return [] if value is None else [value]


def _said_once(field_name: str, label: str, read: Any, questions: list[str], missing: list[str]) -> int | None:
    """The one value the text gives for a field; a number that is not one, or two different values ('64 h100,
    actually 128 h100'), is asked back (a question and the field in ``missing``), never resolved silently."""
    try:
        found = read()
    except QuantityError as err:
        questions.append(str(err))
        missing.append(field_name)
        return None
    if len(found) > 1:
        shown = " and ".join(str(v) for v in found[:3])
        questions.append(f"The request gives two {label} ({shown}); which one do you mean?")
        missing.append(field_name)
        return None
    return found[0] if found else None


def _partial(values: dict[str, Any], assumed: set[str]) -> dict[str, Any]:
    partial = {k: v for k, v in values.items() if k in _PARTIAL_KEYS and v is not None}
    partial["assumed"] = sorted(assumed)
    return partial


def _fill_defaults(values: dict[str, Any], assumed: set[str], notes: list[str], hardware: Any) -> None:
    """Fill gbs, seq_len, gpus_per_node (from the GPU's catalog node) and say what precision/framework are assumed."""
    node = hardware.gpus_per_node if hardware is not None else DEFAULT_GPUS_PER_NODE
    if values.get("size_cluster") and "num_gpus" not in values:
        values["num_gpus"] = first_guess(load_model(values["model"]), hardware, values["train_tokens"],
                                         values["deadline_days"], values.get("gpus_per_node") or node)
        notes.append(f"GPU count not given: sizing the cluster for {values['train_tokens']:.3g} tokens in "
                     f"{values['deadline_days']:g} days (first guess {values['num_gpus']} GPUs)")
    if "gpus_per_node" not in values or "gpus_per_node" in assumed:
        values["gpus_per_node"] = min(node, values["num_gpus"])   # a job smaller than a node uses what it has
        if "gpus_per_node" not in assumed:
            notes.append(f"assumed {node} GPUs per node (the {values['gpu']} catalog node)")
        assumed.add("gpus_per_node")
    if "seq_len" not in values or "seq_len" in assumed:
        values["seq_len"] = names.typical_seq_len(values["model"]) if isinstance(values["model"], str) else 4096
        assumed.add("seq_len")
        notes.append(f"assumed seq_len={values['seq_len']}; say 'seq 8k' to change it")
    tokens = values.get("batch_tokens")
    if tokens and ("gbs" not in values or "gbs" in assumed):
        gbs = max(1, round(tokens / values["seq_len"]))
        values["gbs"] = gbs
        exact = "" if gbs * values["seq_len"] == tokens else f" (rounded; {gbs * values['seq_len']} tokens)"
        notes.append(f"global batch {tokens} tokens / seq_len {values['seq_len']} = gbs {gbs}{exact}")
    elif "gbs" not in values or "gbs" in assumed:
        values["gbs"], note = default_gbs(load_model(values["model"]), values["num_gpus"], values["seq_len"])
        assumed.add("gbs")
        notes.append(note)
    if not any(axis_of(r) == "precision" for r in values.get("constraints", [])):
        if "precision" not in assumed:
            supported = ", ".join(hardware.supported_precisions) if hardware is not None else "bf16 and FP8"
            notes.append(f"precision not pinned: the search tries what the GPU runs ({supported}); "
                         "say 'bf16 only' or 'with fp8' to pin it")
        assumed.add("precision")
    else:
        assumed.discard("precision")
    if not values.get("framework") and values.get("finetune") == "lora":
        # Megatron-LM trains no adapters (the framework record's trains_lora): the Megatron-core trainer with
        # LoRA is Megatron-Bridge (NeMo)
        values["framework"] = "nemo"
        notes.append("framework not said: LoRA layouts are Megatron-Bridge (NeMo) style, the Megatron-core trainer "
                     "with LoRA adapters (export with --framework)")
        assumed.add("framework")
    if not values.get("framework"):
        if "framework" not in assumed:
            notes.append("framework not said: layouts are priced and launched as Megatron-LM runs them (the default; "
                         "say 'with torchtitan' or pass --framework)")
        assumed.add("framework")


def size_when_planned(result: TuneRequest | Clarification, text: str, tokens: float | None,
                      deadline_s: float | None) -> TuneRequest | Clarification:
    """A request that asks only for the GPU count, read again with the plan's token budget and deadline (``--tokens``,
    ``--deadline``): the cluster is then sized for them (agent/sizing.py) instead of asked."""
    if not (isinstance(result, Clarification) and result.missing == ["num_gpus"] and tokens and deadline_s):
        return result
    return parse_request(text, base={**result.partial, "train_tokens": tokens, "deadline_days": deadline_s / 86400.0})


def pick_option(options: list[str], answer: str) -> str | None:
    """The option an answer names: its number ('2'), or the only option whose key contains the answer's."""
    text = answer.strip()[:MAX_REQUEST_CHARS]
    if re.fullmatch(r"#?\d{1,4}", text) and 1 <= int(text.lstrip("#")) <= len(options):
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
