"""One reader per quantity for numbers that come from files, flags, logs and requests.

Every number a person or a tool hands in goes through one of these readers, so ``8,192``
means the same thing in a launch script, a training log, a sweep file and a chat request:

- :func:`read_count`: a whole count (GPUs, layers, degrees, batch sizes) -> ``int``;
- :func:`read_size`: a count that may carry a magnitude suffix (``8k``, ``1M``, ``2T``) -> ``int``;
- :func:`read_rate`: a positive finite rate (Gbit/s, TFLOP/s) -> ``float``.

Forms accepted (ASCII only): ``8192``; thousands separators used consistently (``8,192``,
``8 192``, ``8_192``, ``1,048,576``); scientific notation with a whole value (``1e3``,
``8.192e3``); powers of two or ten (``2^13``, ``2**13``, ``10^3``); with :func:`read_size`,
one suffix ``k``/``K``, ``M``, ``G``, ``T`` (binary: ``k`` = 1024, as sequence lengths are
written, unless ``decimal=True``).  A Python ``int`` (not ``bool``) or a whole, finite
``float`` is taken as is.  Everything else is refused with one line (:class:`QuantityError`):
Unicode digits (``٣``, ``①``, ``²``), signs (``-64``, ``+8``), ``NaN``/``inf``, hexadecimal
(``0x40``), fractions of a count (``8.5``), doubled suffixes (``8kk``), more than
:data:`MAX_TEXT` characters, values with more than :data:`MAX_DIGITS` digits, and values
outside the caller's range.  Work is bounded before any conversion (no 5,000-digit ``int()``,
no ``2^99999``).
"""

from __future__ import annotations

import math
import re
from typing import Any

from projection.errors import ProjtuneError, clip

MAX_TEXT = 40
"""Longest number text read, characters (``1,099,511,627,776`` is 17)."""
MAX_DIGITS = 15
"""Most digits of a value (10^15 is far beyond any count, size or rate the engine models)."""
MAX_EXPONENT = 60
"""Largest exponent of ``2^N`` / ``1eN`` forms (2^60 already exceeds every limit)."""

BINARY = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4}
DECIMAL = {"k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9, "t": 10 ** 12, "b": 10 ** 9}
WORD_SCALE = {"thousand": 10 ** 3, "million": 10 ** 6, "billion": 10 ** 9, "trillion": 10 ** 12}

_PLAIN = r"[0-9]{1,15}"
_GROUPED = r"[0-9]{1,3}(?:(?P<sep>[,_ ])[0-9]{3})(?:(?P=sep)[0-9]{3}){0,4}"
_DECIMAL = r"[0-9]{1,15}\.[0-9]{1,9}|\.[0-9]{1,9}"
_SCI = r"(?:[0-9]{1,15}(?:\.[0-9]{1,9})?)[eE][0-9]{1,3}"
_POWER = r"(?P<base>[0-9]{1,3})\s?(?:\^|\*\*)\s?(?P<exp>[0-9]{1,3})"
NUMBER_PATTERN = rf"(?:{_POWER}|{_SCI}|{_GROUPED}|{_DECIMAL}|{_PLAIN})"
"""A regular expression for one number in any accepted form (named groups ``sep``, ``base``, ``exp``)."""
_NUMBER = re.compile(rf"(?P<number>{NUMBER_PATTERN})\s?(?P<suffix>[kKmMgGtT])?", re.ASCII)

_HINT = "write e.g. 8192, 8,192, 8 192, 8k, 1e3 or 2^13"


class QuantityError(ProjtuneError):
    """A number that is not one of the accepted forms, or outside its range; the message is one line."""


def _problem(what: str, value: Any, why: str) -> QuantityError:
    return QuantityError(f"{what}: '{clip(value, 24)}' {why}")


def number_value(text: str, what: str = "value") -> float:
    """The value of one accepted number form (no suffix), bounded; :class:`QuantityError` otherwise."""
    m = re.fullmatch(NUMBER_PATTERN, text, re.ASCII)
    if m is None:
        raise _problem(what, text, f"is not a number ({_HINT})")
    if m.group("base") is not None:
        base, exp = int(m.group("base")), int(m.group("exp"))
        if exp > MAX_EXPONENT or base ** exp >= 10 ** MAX_DIGITS:
            raise _problem(what, text, f"is too large (more than {MAX_DIGITS} digits)")
        return float(base ** exp)
    if "e" in text.lower():
        mantissa, exponent = re.split("[eE]", text)
        if int(exponent) > MAX_DIGITS:
            raise _problem(what, text, f"is too large (more than {MAX_DIGITS} digits)")
        return float(mantissa) * 10.0 ** int(exponent)
    sep = m.group("sep")
    return float(text.replace(sep, "")) if sep else float(text)


def _scaled(text: str, what: str, scales: dict[str, int] | None) -> float:
    if not isinstance(text, str):
        raise _problem(what, text, "is not a number")
    raw = text.strip()
    if len(raw) > MAX_TEXT:
        raise _problem(what, raw, f"is too long for a number (at most {MAX_TEXT} characters)")
    if not raw:
        raise QuantityError(f"{what}: no value given ({_HINT})")
    lowered = raw.lower()
    if lowered.lstrip("+-") in ("nan", "inf", "infinity"):
        raise _problem(what, raw, "is not a finite number")
    if raw[0] in "+-":
        raise _problem(what, raw, "must be a positive number without a sign")
    if not raw.isascii():
        raise _problem(what, raw, f"holds non-ASCII characters; {_HINT}")
    if re.fullmatch(r"0[xXoObB][0-9a-fA-F]+", raw):
        raise _problem(what, raw, f"is not read as hexadecimal, octal or binary; {_HINT}")
    if re.fullmatch(r"[0-9]{%d,}" % (MAX_DIGITS + 1), raw):   # a number, only too long for the pattern
        raise _problem(what, raw, f"is too large (more than {MAX_DIGITS} digits)")
    m = _NUMBER.fullmatch(raw)
    if m is None or (m.group("suffix") and scales is None):
        hint = _HINT if scales is not None else "write e.g. 8192, 8,192, 8 192, 1e3 or 2^13; no k/M suffix here"
        raise _problem(what, raw, f"is not a number ({hint})")
    if re.fullmatch(r"0[0-9]+", m.group("number")):
        raise _problem(what, raw, "has a leading zero (octal in some readers); write it without")
    value = number_value(m.group("number"), what)
    suffix = m.group("suffix")
    if suffix:
        value *= (scales or {})[suffix.lower()]
    return value


def _bounded(value: float, text: Any, what: str, low: float, high: float | None) -> float:
    if not math.isfinite(value):
        raise _problem(what, text, "is not a finite number")
    if value < low or (high is not None and value > high):
        top = f"..{high:g}" if high is not None else " or more"
        raise _problem(what, text, f"is out of range (allowed {low:g}{top})")
    return value


def _whole(value: float, text: Any, what: str) -> int:
    if value != math.floor(value):
        raise _problem(what, text, "must be a whole number")
    return int(value)


def _direct(value: Any, what: str) -> float | None:
    """A Python number taken as is (None when ``value`` is text); bools and other types are refused."""
    if isinstance(value, bool) or value is None:
        raise _problem(what, value, "is not a number")
    if isinstance(value, int):
        if abs(value) >= 10 ** MAX_DIGITS:
            raise _problem(what, value, f"is too large (more than {MAX_DIGITS} digits)")
        return float(value)
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        return None
    raise _problem(what, value, f"is a {type(value).__name__}, not a number")


def read_count(value: Any, what: str, *, low: int = 1, high: int | None = None) -> int:
    """A whole count in ``low..high`` from an int, a whole float or text (no suffix).

    Raises:
        QuantityError: not an accepted form, not whole, or out of range (one line naming ``what``).
    """
    direct = _direct(value, what)
    number = direct if direct is not None else _scaled(value, what, None)
    return _whole(_bounded(number, value, what, low, high), value, what)


def read_size(value: Any, what: str, *, low: int = 1, high: int | None = None, decimal: bool = False) -> int:
    """A whole count that may carry one magnitude suffix (``8k`` = 8192, or 8000 with ``decimal``).

    Raises:
        QuantityError: not an accepted form, not whole after scaling, or out of range.
    """
    direct = _direct(value, what)
    number = direct if direct is not None else _scaled(value, what, DECIMAL if decimal else BINARY)
    return _whole(_bounded(number, value, what, low, high), value, what)


def read_rate(value: Any, what: str, *, low: float, high: float) -> float:
    """A finite rate in ``low..high`` (``low`` > 0 refuses zero and denormal values such as 1e-310).

    Raises:
        QuantityError: not an accepted form, not finite, or out of range.
    """
    direct = _direct(value, what)
    number = direct if direct is not None else _scaled(value, what, None)
    return _bounded(number, value, what, low, high)
