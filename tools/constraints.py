"""Search constraints: pins and bounds on layout axes, parsed from strings like ``tp<=8`` or ``pp in 1,2,4``.

A constraint names an axis (a sweep-format config key) and a rule: a value (``precision=bf16``),
a set (``pp in 1,2,4``, or a JSON list), a bound (``tp<=8``, ``mbs>1``), a range (``tp=2..8``)
or an exclusion (``zero!=3``).  Two special keys: ``min_headroom`` (``headroom>=10%``) and
``allow_fp8`` (``fp8=false``).  Every error names the axis, what was wrong and the allowed values.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from projection.errors import ProjtuneError
from projection.training_config import known_recompute_modules
from projection.vocabulary import (ATTENTION_BACKENDS, COMM_OVERLAPS, MOE_DISPATCHERS, PIPELINE_SCHEDULES, PRECISIONS,
                                   RECOMPUTE_MODULES, RECOMPUTES, ZERO_LEVELS, CommOverlap, RecomputeModule)

INT_AXES: tuple[str, ...] = ("tp", "pp", "vpp", "cp", "ep", "etp", "dp", "mbs", "zero", "recompute_num_layers")
CHOICE_AXES: dict[str, tuple[str, ...]] = {
    "precision": PRECISIONS,
    "recompute": RECOMPUTES,
    "pp_schedule": PIPELINE_SCHEDULES,
    "moe_dispatcher": MOE_DISPATCHERS,
    "attention_backend": ATTENTION_BACKENDS,
}
SWITCH_PINS: tuple[str, ...] = ("comm_overlap", "cuda_graphs", "compile")
"""Run-time switches a search can be told to hold fixed (``comm_overlap=none``, ``cuda_graphs=true``): every layout
carries the pinned value (tools/candidates.py job_template)."""
AXES: tuple[str, ...] = (*INT_AXES, *CHOICE_AXES)
_ALIASES = {
    "schedule": "pp_schedule", "headroom": "min_headroom", "memory_headroom": "min_headroom",
    "fp8": "allow_fp8", "micro_batch_size": "mbs", "microbatch": "mbs", "zero_level": "zero",
    "dispatcher": "moe_dispatcher", "overlap": "comm_overlap", "cuda_graph": "cuda_graphs", "attention": "attention_backend",
}
_OPERATORS = ("<=", ">=", "!=", "==", "<", ">", "=")
_STRING_RULE = re.compile(r"^\s*(<=|>=|!=|==|<|>|=|in\b)?\s*(.*?)\s*$")

AxisValue = int | str | list[int | str] | None


class ConstraintError(ProjtuneError):
    """A constraint that cannot be parsed or names an unknown axis or value."""

    def __init__(self, field: str, message: str, allowed: Iterable[Any] = ()) -> None:
        self.field, self.allowed = field, [str(a) for a in allowed]
        hint = f" (allowed: {', '.join(self.allowed)})" if self.allowed else ""
        super().__init__(f"constraint {field}: {message}{hint}")


@dataclass(frozen=True, slots=True)
class AxisRule:
    """A compiled rule on one axis: an allowed set, bounds and exclusions (all must hold)."""

    allowed: frozenset[int | str] | None = None
    low: float | None = None
    high: float | None = None
    excluded: frozenset[int | str] = frozenset()

    def __call__(self, value: int | str) -> bool:
        """Whether ``value`` satisfies the rule."""
        if self.allowed is not None and value not in self.allowed:
            return False
        if value in self.excluded:
            return False
        if isinstance(value, int) and not isinstance(value, bool):
            if self.low is not None and value < self.low:
                return False
            if self.high is not None and value > self.high:
                return False
        return True


def _atom(axis: str, text: str) -> int | str:
    """Parse one value of an axis (an integer, or one of the axis's choices)."""
    text = str(text).strip().strip("'\"")
    if axis in CHOICE_AXES:
        choices = CHOICE_AXES[axis]
        if text.lower() not in choices:
            near = difflib.get_close_matches(text.lower(), choices, n=1, cutoff=0.4)
            hint = f"'{text}' is not a known value" + (f"; did you mean {near[0]}?" if near else "")
            raise ConstraintError(axis, hint, choices)
        return text.lower()
    try:
        value = int(text)
    except ValueError:
        raise ConstraintError(axis, f"'{text}' is not an integer") from None
    if value < 0:
        raise ConstraintError(axis, f"{value} is negative")
    if value == 0 and axis not in ("zero", "recompute_num_layers"):   # a degree or size: 'tp<=0' meant no layout
        raise ConstraintError(axis, "0 is not a value of this axis (it is at least 1)")
    if axis == "zero" and value > max(ZERO_LEVELS):
        raise ConstraintError(axis, f"{value} is not a ZeRO level (allowed: {', '.join(map(str, ZERO_LEVELS))})")
    return value


def _list(axis: str, text: str) -> list[int | str]:
    items = [part for part in re.split(r"[,\s]+", text.strip().strip("[](){}")) if part]
    if not items:
        raise ConstraintError(axis, "empty list of values")
    return [_atom(axis, item) for item in items]


def compile_rule(axis: str, value: AxisValue) -> AxisRule | None:
    """Compile a rule given as an int, a list, or a string (``"<=8"``, ``"in 1,2,4"``, ``"2..8"``, ``"bf16"``)."""
    if value is None:
        return None
    if isinstance(value, list):
        if not value:
            raise ConstraintError(axis, "empty list of values")
        return AxisRule(allowed=frozenset(_atom(axis, str(v)) for v in value))
    if isinstance(value, bool):
        raise ConstraintError(axis, f"{value} is not a value of this axis")
    if isinstance(value, int):
        return AxisRule(allowed=frozenset({_atom(axis, str(value))}))
    rules = [part for part in str(value).split(";") if part.strip()] or [""]
    if len(rules) > 1:  # 'tp' : '>=2; <=8' means both
        compiled = [compile_rule(axis, part) for part in rules]
        return _merge([c for c in compiled if c is not None])
    match = _STRING_RULE.match(rules[0])
    op, rest = (match.group(1) or "="), match.group(2) if match else ""
    if not rest:
        raise ConstraintError(axis, f"no value after '{op}'")
    if op in ("<=", ">=", "<", ">"):
        if axis in CHOICE_AXES:
            raise ConstraintError(axis, f"'{op}' needs a numeric axis; use '=' or 'in'", CHOICE_AXES[axis])
        bound = _atom(axis, rest)
        assert isinstance(bound, int)
        low = bound + (op == ">") if op in (">=", ">") else None
        high = bound - (op == "<") if op in ("<=", "<") else None
        return AxisRule(low=low, high=high)
    if op == "!=":
        return AxisRule(excluded=frozenset(_list(axis, rest)))
    if ".." in rest and axis not in CHOICE_AXES:
        low_text, _, high_text = rest.partition("..")
        low, high = _atom(axis, low_text), _atom(axis, high_text)
        return AxisRule(low=float(low), high=float(high))
    return AxisRule(allowed=frozenset(_list(axis, rest)))


def _merge(rules: list[AxisRule]) -> AxisRule:
    allowed: frozenset[int | str] | None = None
    low = high = None
    excluded: frozenset[int | str] = frozenset()
    for rule in rules:
        if rule.allowed is not None:
            allowed = rule.allowed if allowed is None else allowed & rule.allowed
        low = rule.low if low is None else max(low, rule.low) if rule.low is not None else low
        high = rule.high if high is None else min(high, rule.high) if rule.high is not None else high
        excluded |= rule.excluded
    return AxisRule(allowed=allowed, low=low, high=high, excluded=excluded)


def _axis_field(description: str) -> Any:
    return Field(default=None, description=description)


_RULE_HELP = " Rule: an integer, a list, or a string like '<=8', '>=2', '2..8', 'in 1,2,4', '!=3'."


class Constraints(BaseModel):
    """Pins and bounds on layout axes, plus the memory headroom and FP8 switches of a search."""

    model_config = ConfigDict(extra="forbid")

    tp: AxisValue = _axis_field("Tensor-parallel degree." + _RULE_HELP)
    pp: AxisValue = _axis_field("Pipeline-parallel degree." + _RULE_HELP)
    vpp: AxisValue = _axis_field("Virtual pipeline chunks per rank." + _RULE_HELP)
    cp: AxisValue = _axis_field("Context-parallel degree (searched only when seq_len >= 16384 or set here)."
                                + _RULE_HELP)
    ep: AxisValue = _axis_field("Expert-parallel degree (MoE)." + _RULE_HELP)
    etp: AxisValue = _axis_field("Expert tensor-parallel degree (MoE)." + _RULE_HELP)
    dp: AxisValue = _axis_field("Data-parallel degree." + _RULE_HELP)
    mbs: AxisValue = _axis_field("Micro-batch size (sequences)." + _RULE_HELP)
    zero: AxisValue = _axis_field("ZeRO level: 0 DDP, 1 distributed optimizer, 3 FSDP." + _RULE_HELP)
    recompute_num_layers: AxisValue = _axis_field(
        "With full recompute: layers per stage that recompute (all layers counts as the stage size)." + _RULE_HELP)
    precision: AxisValue = _axis_field(f"Precision recipe, one or a list of {', '.join(PRECISIONS)}.")
    recompute: AxisValue = _axis_field(f"Activation recompute: {', '.join(RECOMPUTES)} (one or a list).")
    pp_schedule: AxisValue = _axis_field("Pipeline schedule: 1f1b, interleaved, zero-bubble (one or a list).")
    moe_dispatcher: AxisValue = _axis_field(f"MoE token dispatcher: {', '.join(MOE_DISPATCHERS)} (one or a list).")
    attention_backend: AxisValue = _axis_field(f"Attention kernel: {', '.join(ATTENTION_BACKENDS)} (one value pins it "
                                               "on every layout; unset = the framework's).")
    comm_overlap: list[CommOverlap] | None = Field(
        default=None, description=f"Pin the overlapped communications on every layout: a list of "
                                  f"{', '.join(COMM_OVERLAPS)}, [] = none; unset = searched.")
    cuda_graphs: bool | None = Field(default=None, description="Pin CUDA graphs on (true) or off (false); unset = "
                                                               "searched where the framework supports them.")
    compile: bool | None = Field(default=None, description="Pin torch.compile / XLA fusion; unset = the framework's.")
    recompute_modules: list[RecomputeModule] | None = Field(
        default=None, description=f"Selective recompute of exactly these modules ({', '.join(RECOMPUTE_MODULES)}; "
                                  "Megatron-core --recompute-modules): only selective layouts with this set are "
                                  "searched; unset = the searched sets.")
    min_headroom: float = Field(default=0.10, ge=0.0, lt=1.0,
                                description="Least free HBM fraction a layout must leave; default 0.10 = the "
                                            "'fits' verdict (Primus tuning agent memory_safety_margin 0.10).")
    allow_fp8: bool = Field(default=True, description="Search FP8 recipes the GPU supports (else bf16 only).")

    @field_validator(*AXES, mode="after")
    @classmethod
    def _check_rule(cls, value: AxisValue, info: ValidationInfo) -> AxisValue:
        compile_rule(str(info.field_name), value)
        return value

    def rule(self, axis: str) -> AxisRule | None:
        """The compiled rule of ``axis`` (None when the axis is free)."""
        return compile_rule(axis, getattr(self, axis))

    def allows(self, axis: str, value: Any) -> bool:
        """Whether ``value`` of ``axis`` passes its rule (a pinned switch: equal to the pin, or left unset)."""
        if axis in SWITCH_PINS:
            pinned = getattr(self, axis)
            if pinned is None or value is None:
                return True
            return set(pinned) == set(value) if axis == "comm_overlap" else pinned == value
        if axis == "recompute_modules":
            return self.recompute_modules is None or set(self.recompute_modules) == set(value or ())
        rule = self.rule(axis)
        return rule is None or rule(value)

    def active(self) -> dict[str, Any]:
        """The constraints that are set (name -> value), in field order."""
        data = self.model_dump(exclude_defaults=True)
        return {k: v for k, v in data.items() if v is not None}

    def describe(self) -> list[str]:
        """One readable string per active constraint, e.g. ``tp<=8``, ``pp in 1,2,4``, ``min_headroom>=10%``."""
        out = []
        for name, value in self.active().items():
            if name == "min_headroom":
                out.append(f"min_headroom>={value:.0%}")
            elif name in ("allow_fp8", "cuda_graphs", "compile"):
                out.append(f"{name}={str(value).lower()}")
            elif name == "comm_overlap":
                out.append(f"comm_overlap={','.join(value) or 'none'}")
            elif name == "recompute_modules":
                out.append(f"recompute_modules={','.join(value)}")
            elif isinstance(value, list):
                out.append(f"{name} in {','.join(str(v) for v in value)}")
            elif isinstance(value, str) and value.strip().startswith(("in ", "in\t")):
                out.append(f"{name} {value.strip()}")
            elif isinstance(value, str) and value.strip().startswith(_OPERATORS):
                out.append(f"{name}{value.strip()}")
            else:
                out.append(f"{name}={value}")
        return out

    def without(self, name: str) -> Constraints:
        """A copy with one constraint reset to its default."""
        return self.model_copy(update={name: type(self).model_fields[name].default})

    @classmethod
    def parse(cls, items: Iterable[str], *, base: Constraints | None = None) -> Constraints:
        """Build constraints from strings like ``tp<=8``, ``precision=bf16``, ``pp in 1,2,4``, ``headroom>=10%``.

        Raises:
            ConstraintError: unknown axis (with the nearest name) or a malformed rule.
        """
        values: dict[str, Any] = dict(base.active()) if base else {}
        for item in items:
            name, rule = _split(item)
            if name == "min_headroom":
                values[name] = _fraction(rule)
            elif name in ("allow_fp8", "cuda_graphs", "compile"):
                values[name] = _boolean(name, rule)
            elif name == "comm_overlap":
                values[name] = _overlaps(rule)
            elif name == "recompute_modules":
                values[name] = recompute_module_list(rule)
            else:
                compile_rule(name, rule)
                previous = values.get(name)
                values[name] = f"{previous};{rule}" if isinstance(previous, str) else rule
        return cls(**values)


def _split(item: str) -> tuple[str, str]:
    """Split ``'tp<=8'`` into ``('tp', '<=8')`` and resolve aliases; unknown names get a suggestion."""
    text = item.strip()
    match = re.match(r"^([A-Za-z_][A-Za-z0-9_\-]*)\s*(.*)$", text)
    if not match or not match.group(2):
        raise ConstraintError(text or "<empty>", "expected AXIS OP VALUE, e.g. tp<=8, precision=bf16, pp in 1,2,4")
    name, rule = match.group(1).lower().replace("-", "_"), match.group(2).strip()
    name = _ALIASES.get(name, name)
    known = (*AXES, "min_headroom", "allow_fp8", *SWITCH_PINS, "recompute_modules")
    if name not in known:
        near = difflib.get_close_matches(name, known, n=1)
        raise ConstraintError(name, "unknown axis" + (f"; did you mean {near[0]}?" if near else ""), known)
    if not rule.startswith(("in ", "in\t")) and not rule.startswith(_OPERATORS):
        raise ConstraintError(name, f"'{rule}' has no operator; use one of {', '.join(_OPERATORS)} or 'in'")
    return name, rule


def _overlaps(rule: str) -> list[str]:
    """``comm_overlap=dp,tp`` / ``=none``: the pinned list of overlapped communications."""
    text = rule.lstrip("=").strip().strip("[](){}").lower()
    names = [n for n in re.split(r"[,\s]+", text) if n]
    if names in ([], ["none"]):
        return []
    unknown = [n for n in names if n not in COMM_OVERLAPS]
    if unknown:
        raise ConstraintError("comm_overlap", f"'{unknown[0]}' is not a communication", (*COMM_OVERLAPS, "none"))
    return names


def recompute_module_list(rule: str) -> list[str]:
    """``recompute_modules=core_attn,mlp`` (also ``+``-joined): the module set, each name checked by
    :func:`projection.training_config.known_recompute_modules` (an unknown one named with the nearest)."""
    text = rule.lstrip("=").strip().strip("[](){}").lower()
    names = [n for n in re.split(r"[,+\s]+", text) if n]
    if not names:
        raise ConstraintError("recompute_modules", "empty list of modules", RECOMPUTE_MODULES)
    try:
        known_recompute_modules(names)
    except ValueError as err:
        raise ConstraintError("recompute_modules", str(err)) from None
    return list(dict.fromkeys(names))


def _fraction(rule: str) -> float:
    text = rule.lstrip("<>=").strip()
    try:
        value = float(text.rstrip("%")) / (100.0 if text.endswith("%") else 1.0)
    except ValueError:
        raise ConstraintError("min_headroom", f"'{text}' is not a fraction like 0.1 or 10%") from None
    if not 0.0 <= value < 1.0:
        raise ConstraintError("min_headroom", f"{value} is outside [0, 1)")
    return value


def _boolean(name: str, rule: str) -> bool:
    text = rule.lstrip("=").strip().lower()
    if text in ("true", "yes", "1", "on"):
        return True
    if text in ("false", "no", "0", "off"):
        return False
    raise ConstraintError(name, f"'{text}' is not a boolean", ("true", "false"))
