"""Numbers in prose with what they measure: throughput, step time, a percentage gain, MFU, headroom, GiB, a
parallel degree (inside layout names too: 'DP7', 'TP=999', '8-way tensor parallel'), a rank, a count.

Used twice by :mod:`agent.text.grounding`: on the tools' own strings (explain lines, decision, reasons),
to learn the kind of every fact, and on the LLM's explanation, to check each number against facts
of the same kind.  The text is normalised first (NFKC, so full-width or super-script digits read
as digits; format characters such as zero-width spaces removed, so '6\u200b953' reads 6953).
Number words ('ninety-nine thousand', 'eight') are read as numbers.  A number glued to letters
that is not a degree or a unit ('H100', '1F1B', '8x7B', 'BF16') is a name and not read.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

AXES = ("etp", "vpp", "tp", "pp", "cp", "ep", "dp", "mbs", "gbs", "zero", "fsdp")
AXIS_WORDS = {"tensor": "tp", "pipeline": "pp", "data": "dp", "expert": "ep", "context": "cp"}
PERCENT_KINDS = ("gain", "mfu", "headroom", "percent")

_WORD_VALUES = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
_WORD_VALUES.update({w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty "
                                                           "ninety".split())})
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_WORD = "|".join(sorted([*_WORD_VALUES, *_SCALES], key=len, reverse=True))

_DEGREE = (rf"(?<![\w.])(?P<axis>{'|'.join(AXES)})\s*(?:=|:|\bof\b)?\s*(?P<deg>\d[\d,]*)(?!\w|\.\d)"
           rf"|(?P<word_axis>tensor|pipeline|data|expert|context)[\s-]*parallel(?:ism)?(?:\s+(?:degree|size))?"
           rf"\s*(?:of|=|:|at)?\s*(?P<deg2>\d[\d,]*)(?!\w|\.\d)"
           rf"|(?<![\w.])(?P<deg3>\d+)[\s-]*way\s+(?P<way_axis>tensor|pipeline|data|expert|context)"
           rf"|(?<![\w.])s(?P<seq>\d+)(?!\w|\.\d)")
_TOKEN = re.compile(
    rf"{_DEGREE}"
    rf"|#(?P<rank>\d+)(?!\w|\.\d)"
    rf"|\b(?P<words>(?:{_WORD})(?:[\s-]+(?:and[\s-]+)?(?:{_WORD}))*)\b"
    rf"|(?<![\w.#])(?P<num>[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?)(?P<scale>\s?[kmbt](?![a-z]))?(?P<glue>[a-z%×]*)",
    re.I)
_UNITS = [
    ("throughput", re.compile(r"(?:tok(?:en)?s?\s*/\s*s|tokens?\s+per\s+second|tok/s)", re.I)),
    ("time_ms", re.compile(r"(?:ms|milli-?seconds?)\b", re.I)),
    ("time", re.compile(r"(?:s|secs?|seconds?)\b", re.I)),
    ("memory", re.compile(r"(?:gib|gb|gigabytes?)\b", re.I)),
    ("ratio", re.compile(r"(?:x|×|times)(?![a-z0-9])", re.I)),
    ("percent", re.compile(r"(?:%|percent\b|per\s+cent\b)", re.I)),
    ("count", re.compile(r"(?:gpus?|nodes?|layouts?|trials?|rounds?|candidates?|layers?|experts?|heads?|"
                         r"micro-?batch(?:es)?|sequences?|tokens?)\b", re.I)),
]
_GLUED_UNITS = {"s", "ms", "x", "×", "gib", "gb", "%"}
_CUES = [("mfu", re.compile(r"mfu|utili[sz]ation|flops|of\s+(?:the\s+)?peak", re.I)),
         ("headroom", re.compile(r"headroom|free|spare", re.I)),
         ("gain", re.compile(r"faster|slower|speed-?up|gain|better|worse|quicker|ahead|behind|improv|more|less|"
                             r"higher|lower|increase|decrease|advantage|lead|cut|sav", re.I))]
_WAY = re.compile(r"[\s-]*way\s+(tensor|pipeline|data|expert|context)", re.I)
_CLAUSE = re.compile(r"[,;()\[\]:]|\.\s|\n")


@dataclass(frozen=True, slots=True)
class Number:
    """One number read from text: where its digits are, what it measures and how precisely it is written."""

    start: int
    end: int
    text: str
    value: float
    rounding: float
    kind: str
    axis: str | None = None


def normalise(text: str) -> str:
    """NFKC, with format characters (zero-width spaces and joiners, soft hyphens, BOM) removed."""
    text = unicodedata.normalize("NFKC", text)
    return "".join(c for c in text if unicodedata.category(c) != "Cf")


def _digits(token: str) -> tuple[float, float]:
    """(value, rounding) of digits as written: '6,953' -> (6953, 0.5); '1.53' -> (1.53, 0.005); '7,000' -> 500."""
    plain = token.replace(",", "").lstrip("+-")
    value = float(plain)
    mantissa = plain.lower().split("e")[0]
    exponent = float(plain.lower().split("e")[1]) if "e" in plain.lower() else 0.0
    if "." in mantissa:
        rounding = 0.5 * 10 ** -len(mantissa.split(".")[1])
    else:
        zeros = len(mantissa) - len(mantissa.rstrip("0")) if value >= 1000 else 0
        rounding = 0.5 * 10 ** zeros
    return value, rounding * 10 ** exponent


def _words_value(words: str) -> float:
    total, current = 0, 0
    for w in re.split(r"[\s-]+", words.lower()):
        if w in _WORD_VALUES:
            current += _WORD_VALUES[w]
        elif w == "hundred":
            current = max(current, 1) * 100
        elif w in _SCALES:
            total += max(current, 1) * _SCALES[w]
            current = 0
    return float(total + current)


def _percent_kind(before: str, after: str) -> str:
    """gain, mfu or headroom: the cue word closest to the number inside its clause; 'percent' when none."""
    best, distance = "percent", 10**6
    for kind, cue in _CUES:
        for m in cue.finditer(after):
            if m.start() < distance:
                best, distance = kind, m.start()
        for m in cue.finditer(before):
            if len(before) - m.end() < distance:
                best, distance = kind, len(before) - m.end()
    return best


def _kind(text: str, start: int, end: int, glue: str) -> tuple[str, float]:
    """The kind of a bare number from the unit after it and the words around it; (kind, unit factor)."""
    after = _CLAUSE.split(glue + text[end:end + 40], maxsplit=1)[0]
    before = _CLAUSE.split(text[max(0, start - 40):start])[-1]
    if text[max(0, start - 1):start] == "#":
        return "rank", 1.0
    for kind, unit in _UNITS:
        if unit.match(after.lstrip()):
            if kind == "percent":
                return _percent_kind(before, after), 1.0
            return ("time", 1e-3) if kind == "time_ms" else (kind, 1.0)
    return "plain", 1.0


def read_numbers(text: str) -> list[Number]:
    """Every number in (normalised) ``text`` with its kind (see the module docstring), in order."""
    out: list[Number] = []
    for m in _TOKEN.finditer(text):
        if m.group("deg") or m.group("deg2") or m.group("deg3") or m.group("seq"):
            group = next(g for g in ("deg", "deg2", "deg3", "seq") if m.group(g))
            axis = ("s" if group == "seq" else (m.group("axis") or "").lower()
                    or AXIS_WORDS[(m.group("word_axis") or m.group("way_axis")).lower()])
            value, _ = _digits(m.group(group))
            out.append(Number(m.start(group), m.end(group), m.group(group), value, 0.0, "degree", axis))
        elif m.group("rank"):
            out.append(Number(m.start("rank"), m.end("rank"), m.group("rank"), float(m.group("rank")), 0.0, "rank"))
        elif m.group("words"):
            way = _WAY.match(text, m.end())
            if way:                 # 'eight-way tensor parallel'
                out.append(Number(m.start("words"), m.end("words"), m.group("words"), _words_value(m.group("words")),
                                  0.0, "degree", AXIS_WORDS[way.group(1).lower()]))
                continue
            kind, factor = _kind(text, m.start(), m.end(), "")
            out.append(Number(m.start("words"), m.end("words"), m.group("words"),
                              _words_value(m.group("words")) * factor, 0.5 * factor, kind))
        elif m.group("num"):
            glue = (m.group("glue") or "").lower()
            nxt = text[m.end():m.end() + 1]
            if (glue and glue not in _GLUED_UNITS) or (glue and nxt.isalnum()):
                continue            # a name: H100, 1F1B, 8x7B, BF16
            value, rounding = _digits(m.group("num"))
            scale = (m.group("scale") or "").strip().lower()
            factor = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}.get(scale, 1.0)
            kind, unit = _kind(text, m.start(), m.end(), glue)
            if scale and kind in ("time", "memory"):
                continue            # '2 m' / '5 b' next to a unit word: not a scaled number
            end = m.end("scale") if scale else m.end("num")
            out.append(Number(m.start("num"), end, m.group(0)[:end - m.start("num")], value * factor * unit,
                              rounding * factor * unit, kind))
    return out
