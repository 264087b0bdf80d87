"""Constraints in free text: 'tp<=4', 'pp in 1,2,4', 'no FP8', 'use fp8', 'no recompute', 'TP 8', 'headroom 10%'.

Every rule found is checked with :meth:`tools.constraints.Constraints.parse` and kept in the
string form that method reads (``tp<=4``, ``precision=bf16``), so a request stays plain data.
A rule that does not parse is dropped with a note saying why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from projection.errors import is_near_miss
from projection.vocabulary import RECOMPUTE_MODULES, SEARCHED_FP8_RECIPES
from tools.constraints import CHOICE_AXES as _CHOICE_AXES
from tools.constraints import INT_AXES, ConstraintError, Constraints

CHOICE_AXES = (*_CHOICE_AXES, "schedule")   # the constraint axes with choices, and the alias 'schedule'
FP8_PRECISIONS = ",".join(SEARCHED_FP8_RECIPES)   # "fp8,fp8-blockwise,mxfp8" (projection/vocabulary.py)
_ALIASES = {"schedule": "pp_schedule", "headroom": "min_headroom", "fp8": "allow_fp8"}
_OPS = r"(<=|>=|!=|==|<|>|=)"
_INT_RULE = re.compile(rf"\b({'|'.join(INT_AXES)})\s*{_OPS}\s*(\d+)\b", re.I)
_INT_IN = re.compile(rf"\b({'|'.join(INT_AXES)})\s+in\s+(\d+(?:\s*,\s*\d+)*)", re.I)
_CHOICE_RULE = re.compile(rf"\b({'|'.join(CHOICE_AXES)})\s*(=|==|!=)\s*([a-z0-9-]+(?:\s*,\s*[a-z0-9-]+)*)", re.I)
_CHOICE_IN = re.compile(rf"\b({'|'.join(CHOICE_AXES)})\s+in\s+([a-z0-9-]+(?:\s*,\s*[a-z0-9-]+)*)", re.I)
_HEADROOM = re.compile(r"\b(?:min[_\s-]*)?headroom\s*(?:>=|=|of|at least)?\s*(\d+(?:\.\d+)?)\s*(%)?", re.I)
_HEADROOM_BEFORE = re.compile(r"(\d+(?:\.\d+)?)\s*%\s*(?:memory\s+|hbm\s+)?headroom", re.I)
_PIN = re.compile(r"\b(tp|pp|ep|cp|vpp|etp|mbs|zero)\s*[:]?\s*(\d+)\b", re.I)
_PHRASES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"\b(?:no|without|disable|not|avoid)\s+(?:any\s+)?fp8\b|\bbf16[\s-]only\b|\bonly\s+bf16\b", re.I),
     "precision=bf16", "'no FP8' read as precision=bf16"),
    (re.compile(r"\b(?:use|with|enable|try|allow|in|using)\s+fp8(?![\w-])|\bfp8[\s-]only\b", re.I),
     f"precision in {FP8_PRECISIONS}", "'fp8' read as an FP8 precision recipe"),
    (re.compile(r"\b(?:no|without|disable)\s+(?:activation\s+)?recompute|\bno\s+(?:activation\s+)?checkpointing",
                re.I), "recompute=none", ""),
    (re.compile(r"\bfull\s+(?:activation\s+)?recompute", re.I), "recompute=full", ""),
    (re.compile(r"\bselective\s+(?:activation\s+)?recompute", re.I), "recompute=selective", ""),
    (re.compile(r"\b(?:no|without)\s+(?:pipeline(?:\s+parallel(?:ism)?)?|pp)\b", re.I), "pp=1", ""),
    (re.compile(r"\b(?:no|without)\s+(?:tensor\s+parallel(?:ism)?|tp)\b", re.I), "tp=1", ""),
    (re.compile(r"\b(?:no|without)\s+(?:fsdp|zero[\s-]?3)\b", re.I), "zero!=3", ""),
    (re.compile(r"\b(?:use|with)\s+fsdp\b", re.I), "zero=3", ""),
    # run-time switches (issue 25): overlap, CUDA graphs, attention kernel, MoE dispatcher
    (re.compile(r"\b(?:no|without|disable[ds]?)\s+(?:any\s+)?(?:comm(?:unication)?\s+)?overlap(?:ping)?\b"
                r"|\boverlap(?:ping)?\s+(?:off|disabled)\b", re.I),
     "comm_overlap=none", "'no overlap' read as comm_overlap=none: every communication exposed"),
    (re.compile(r"\b(?:no|without|disable[ds]?)\s+cuda[\s-]?graphs?\b", re.I), "cuda_graphs=false",
     "'no CUDA graphs' read as cuda_graphs=false"),
    (re.compile(r"\b(?:with|using|use|enable[ds]?|plus|and)\s+(?:full[\s-]layer\s+)?cuda[\s-]?graphs?\b"
                r"|\bcuda[\s-]?graphs?\s+(?:on|enabled)\b", re.I),
     "cuda_graphs=true", "'with CUDA graphs' read as cuda_graphs=true"),
    (re.compile(r"\bunfused\s+attention\b|\b(?:no|without)\s+flash[\s-]?attention\b", re.I),
     "attention_backend=unfused", "'unfused attention' read as attention_backend=unfused (s x s scores)"),
    (re.compile(r"\btriton\s+(?:flash[\s-]?)?attention\b", re.I), "attention_backend=triton",
     "'Triton attention' read as attention_backend=triton"),
    (re.compile(r"\bhybrid[\s-]?ep\b", re.I), "moe_dispatcher=hybridep", "'HybridEP' read as moe_dispatcher=hybridep"),
    (re.compile(r"\bdeep[\s-]?ep\b", re.I), "moe_dispatcher=deepep", "'DeepEP' read as moe_dispatcher=deepep"),
)

# A value named after its setting ('recompute full', 'schedule zbv', '1f1b schedule', 'attention backend triton',
# 'dispatcher alltoall'): the value is group "v".  A near miss of a value is asked back (agent/text/request.py).
NAMED_VALUES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\brecompute\s*[:=]?\s*(?P<v>none|selective|full)\b", re.I), "recompute"),
    (re.compile(r"\b(?:pp\s+|pipeline\s+)?schedule\s*[:=]?\s*(?P<v>1f1b|interleaved|zero-bubble|zbv|gpipe)(?![\w-])"
                r"|(?<![\w-])(?P<w>1f1b|interleaved|zero-bubble|zbv|gpipe)\s+(?:pipeline\s+|pp\s+)?schedule\b", re.I),
     "pp_schedule"),
    (re.compile(r"\battention\s+(?:backend|kernel)\s*[:=]?\s*(?P<v>fused|triton|unfused)\b", re.I),
     "attention_backend"),
    (re.compile(r"\b(?:moe\s+)?dispatcher\s*[:=]?\s*(?P<v>alltoall|allgather|deepep|hybridep)\b", re.I),
     "moe_dispatcher"),
)

# Selective recompute's module set: 'recompute modules core_attn, mlp', 'recompute_modules=core_attn+layernorm',
# 'recompute core_attn and mlp' (without 'modules' only names of projection.vocabulary.RECOMPUTE_MODULES).
_JOIN = r"\s*(?:,|\+|&|\band\b)\s*"
_MODULES_SAID = re.compile(rf"\brecompute[\s_-]?modules?\s*[:=]?\s*([A-Za-z][\w-]*(?:{_JOIN}[A-Za-z][\w-]*)*)", re.I)
_KNOWN_MODULE = "(?:" + "|".join(RECOMPUTE_MODULES) + ")"
_MODULES_NAMED = re.compile(rf"\brecompute\s+({_KNOWN_MODULE}(?:{_JOIN}{_KNOWN_MODULE})*)(?![\w-])", re.I)


def _module_names(said: str) -> list[str]:
    """The module names of a 'recompute modules ...' phrase: the first word, then each joined word that is a module
    name or near one ('core_attn, mlp'), stopping at the first that is not ('core_attn, seq 8k')."""
    first, *rest = [w.lower() for w in re.split(_JOIN, said) if w]
    names = [first]
    for word in rest:
        if word not in RECOMPUTE_MODULES and not is_near_miss(word, RECOMPUTE_MODULES):
            break
        names.append(word)
    return names


@dataclass(slots=True)
class Rules:
    """Constraint strings found in a text, and notes on how they were read or why one was dropped."""

    rules: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    """(axis, why) of each rule the text states that is not valid ('headroom 150%'): a request asks it back."""


def axis_of(rule: str) -> str:
    """The axis a rule string is about ('tp<=4' -> 'tp', 'headroom>=10%' -> 'min_headroom')."""
    m = re.match(r"\s*([A-Za-z_]+)", rule)
    name = m.group(1).lower() if m else rule
    return _ALIASES.get(name, name)


def _add(found: Rules, rule: str, note: str = "") -> None:
    try:
        Constraints.parse([rule])
    except ConstraintError as err:
        found.notes.append(f"ignored constraint '{rule}': {err}")
        found.problems.append((axis_of(rule), f"The constraint '{rule}' is not valid: {err}."))
        return
    found.rules = [r for r in found.rules if axis_of(r) != axis_of(rule)] + [rule]
    if note:
        found.notes.append(note)


def extract_constraints(text: str, gpu: str | None = None) -> Rules:
    """Find the constraints a request states (see the module docstring); ``gpu`` is reserved for GPU-aware rules."""
    found = Rules()
    masked = text
    for pattern in (_INT_IN, _CHOICE_IN):
        for m in pattern.finditer(masked):
            items = ",".join(p.strip().lower() for p in m.group(2).split(","))
            _add(found, f"{m.group(1).lower()} in {items}")
        masked = pattern.sub(" ", masked)
    for m in _INT_RULE.finditer(masked):
        _add(found, f"{m.group(1).lower()}{m.group(2)}{m.group(3)}")
    masked = _INT_RULE.sub(" ", masked)
    for m in _CHOICE_RULE.finditer(masked):
        op = "!=" if m.group(2) == "!=" else "="
        values = [p.strip().lower() for p in m.group(3).split(",")]
        rule = f"{m.group(1).lower()}{op}{values[0]}" if len(values) == 1 else (
            f"{m.group(1).lower()} in {','.join(values)}" if op == "=" else f"{m.group(1).lower()}!={','.join(values)}")
        _add(found, rule)
    masked = _CHOICE_RULE.sub(" ", masked)
    for pattern in (_MODULES_SAID, _MODULES_NAMED):
        for m in pattern.finditer(masked):
            modules = _module_names(m.group(1))
            before = len(found.problems)
            _add(found, f"recompute_modules={','.join(modules)}",
                 f"'{m.group(0).strip()}' read as selective recompute of {' + '.join(modules)}")
            if len(found.problems) == before:       # a module set is selective recompute's (Megatron-core)
                _add(found, "recompute=selective")
            masked = masked.replace(m.group(0), " ")
    for pattern, axis in NAMED_VALUES:
        for m in pattern.finditer(masked):
            _add(found, f"{axis}={(m.group('v') or m.groupdict().get('w') or '').lower()}")
        masked = pattern.sub(" ", masked)
    for pattern, rule, note in _PHRASES:
        if pattern.search(masked):
            _add(found, rule, note)
            masked = pattern.sub(" ", masked)
    for m in list(_HEADROOM.finditer(masked)) + list(_HEADROOM_BEFORE.finditer(masked)):
        value = float(m.group(1))
        fraction = value / 100 if (m.lastindex and m.lastindex >= 2 and m.group(2)) or value >= 1 else value
        _add(found, f"headroom>={fraction:g}")
    masked = _HEADROOM.sub(" ", _HEADROOM_BEFORE.sub(" ", masked))
    for m in _PIN.finditer(masked):
        _add(found, f"{m.group(1).lower()}={m.group(2)}")
    return found


def merge_constraints(old: list[str], new: list[str]) -> list[str]:
    """``old`` with every axis ``new`` names replaced by the new rule."""
    replaced = {axis_of(r) for r in new}
    return [r for r in old if axis_of(r) not in replaced] + list(new)
