"""Keep the LLM honest: numbers in its text must come from tool results, constraints from the user's words.

:func:`ground_numbers` checks every number in an explanation against the numbers of the report's
facts (the scored trials, explain-tool lines, search counts, the request, the plan); a number found
nowhere, in any of the ways the tools print it (as is, rounded, as a percent of a fraction), is
replaced by ``[?]`` and listed, so the reader never takes an invented figure for a projected one.

:func:`stated_constraints` keeps the constraints an LLM read from a request only when the
request's own words name that axis ('tp', 'tensor parallel', 'fp8', 'headroom', ...): a model may
not add a rule the user did not give.  :func:`stated_number` does the same for batch and sequence
length: a value the text does not contain is dropped, and the default (said in the answer) applies;
:func:`stated_digits` for NIC counts and rates and the NVLink domain ('8x400G', 'NVL72').
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from agent.constraints_text import axis_of, extract_constraints

_NUMBER = re.compile(r"(?<![A-Za-z_#])[-+]?\d[\d,]*(?:\.\d+)?(?:\s*[kKmMbBtT](?![a-zA-Z]))?\s*%?")
_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
REL_TOLERANCE = 0.006        # rounding to 3 significant digits and '1,234' forms
SMALL_INTS = frozenset(range(0, 11))   # ordinals and counts in prose ("two layouts", "#1") are never flagged

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


def _values(node: Any) -> Iterable[float]:
    """Every number in a nested fact structure, including numbers written inside strings."""
    if isinstance(node, bool):
        return
    if isinstance(node, int | float):
        if math.isfinite(node):
            yield float(node)
    elif isinstance(node, str):
        for token in _NUMBER.findall(node):
            value = _read(token)
            if value is not None:
                yield value
    elif isinstance(node, dict):
        for v in node.values():
            yield from _values(v)
    elif isinstance(node, list | tuple):
        for v in node:
            yield from _values(v)


def _read(token: str) -> float | None:
    text = token.strip().rstrip("%").strip().replace(",", "")
    scale = 1.0
    if text and text[-1].lower() in _SCALE:
        scale, text = _SCALE[text[-1].lower()], text[:-1].strip()
    try:
        return float(text) * scale
    except ValueError:
        return None


def _decimals(token: str) -> int:
    digits = token.strip().rstrip("%").strip().rstrip("kKmMbBtT").strip()
    return len(digits.split(".")[1]) if "." in digits else 0


def _matches(token: str, value: float, known: list[float]) -> bool:
    """Whether ``value`` (as the token shows it) is some known number as printed: itself, rounded to the
    token's decimals or to 3 significant digits, or a fraction shown as a percent."""
    suffix = token.strip().rstrip("%").strip()[-1:].lower()
    rounding = 0.5 * 10 ** -_decimals(token) * _SCALE.get(suffix, 1.0)
    percent = "%" in token
    for k in known:
        for shown in ((k * 100.0, k) if percent else (k, k * 100.0)):
            if abs(value - shown) <= max(rounding, REL_TOLERANCE * abs(shown)) + 1e-9:
                return True
    return False


def ground_numbers(text: str, facts: Any) -> tuple[str, list[str]]:
    """``text`` with numbers absent from ``facts`` replaced by '[?]', and the list of those numbers."""
    known = sorted(set(_values(facts)))
    flagged: list[str] = []

    def check(m: re.Match[str]) -> str:
        token = m.group(0)
        value = _read(token)
        if value is None or (value in SMALL_INTS and "%" not in token):
            return token
        if _matches(token, value, known):
            return token
        flagged.append(token.strip())
        return "[?]" + (" " if token.endswith(" ") else "")

    return _NUMBER.sub(check, text), flagged


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
