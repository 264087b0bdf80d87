"""Numbers in request text as people write them, rewritten to plain digits before any pattern reads the text.

:func:`canonical_numbers` turns ``8,192`` / ``8 192`` / ``8_192`` into ``8192`` (thousands groups,
one separator used throughout; a comma list after ``in`` such as ``pp in 64,128`` stays a list),
``1e3`` / ``8.192e3`` into ``1000`` / ``8192``, ``2^13`` / ``2**13`` into ``8192``, and number
words for small counts (``eight``, ``sixty-four``, ``one hundred twenty-eight``; ``one`` only
before a count noun such as ``one node``) into digits.  Suffixes (``8k``, ``1M``) are left for
the request patterns, which read them with :data:`agent.text.request._MULTIPLIER`.

It also reports forms that must be asked back rather than read: hexadecimal (``0x40``), digits
outside ASCII (``٣``, ``①``), and values that are not whole, positive and finite where a count
stands (``-64 h100``, ``NaN GB200 GPUs``, ``8.5 GPUs``) — see :func:`count_problem`.  Every value
goes through :mod:`projection.quantities`, the one reader per quantity.
"""

from __future__ import annotations

import re

from projection.quantities import QuantityError, number_value

_UNITS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
          "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
          "seventeen": 17, "eighteen": 18, "nineteen": 19}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
         "ninety": 90}
_UNIT = "|".join(sorted(_UNITS, key=len, reverse=True))
_TEN = "|".join(_TENS)
_ONES = "|".join(list(_UNITS)[:9])
_BELOW_100 = rf"(?:(?:{_TEN})(?:[\s-](?:{_ONES}))?|{_UNIT})"
_WORDS = re.compile(rf"\b(?:(?P<hundreds>{_ONES}|a)\shundred(?:\s(?:and\s)?"
                    rf"(?P<rest>{_BELOW_100}))?|(?P<small>{_BELOW_100}))\b", re.I)
_COUNT_NOUN = r"\s(?:nodes?|servers?|trays?|gpus?|racks?|nics?)\b"
# Thousands groups: one separator throughout, not inside a longer digit/decimal run, not a list after "in".
_GROUPED = re.compile(r"(?<![\w.,^*])(?<!\bin )(?<!\bin)([0-9]{1,3})(?P<sep>[,_ ])([0-9]{3})((?:(?P=sep)[0-9]{3}){0,4})"
                      r"(?![0-9]|,[0-9]|\.[0-9])")
_SCIENTIFIC = re.compile(r"(?<![\w.])([0-9]{1,9}(?:\.[0-9]{1,6})?[eE][0-9]{1,2})(?![\w.])")
_POWER = re.compile(r"(?<![\w.])([0-9]{1,3})\s?(?:\^|\*\*)\s?([0-9]{1,3})(?![\w.])")
_HEX = re.compile(r"(?<![\w.])0[xX][0-9a-fA-F]+(?![\w.])")
_NON_ASCII_DIGIT = re.compile(r"[^\x00-\x7f]", re.U)
# A value where a count stands that is not a whole positive finite number: a sign, NaN/inf, a fraction.
BAD_COUNT = (r"(?<![\w.])(?P<bad>[-−]\s?[0-9][0-9.]*[kKmM]?|nan|inf(?:inity)?|"
             r"[0-9]{1,9}\.[0-9]{1,6}(?![0-9]*[kKmM]\b))")


def _words_value(m: re.Match[str]) -> int:
    if m.group("small") is not None:
        return _below_100(m.group("small"))
    hundreds = 1 if m.group("hundreds").lower() == "a" else _UNITS[m.group("hundreds").lower()]
    return hundreds * 100 + (_below_100(m.group("rest")) if m.group("rest") else 0)


def _below_100(text: str) -> int:
    parts = re.split(r"[\s-]", text.lower())
    return sum(_TENS.get(p, 0) or _UNITS.get(p, 0) for p in parts)


def _word_number(m: re.Match[str]) -> str:
    text = m.group(0)
    if text.lower() in ("one", "a") and not re.match(_COUNT_NOUN, m.string[m.end():], re.I):
        return text   # "one of", "a hundred" needs the noun; "one node" reads
    return str(_words_value(m))


def _plain(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def _scientific(m: re.Match[str]) -> str:
    try:
        return _plain(number_value(m.group(1)))
    except QuantityError:
        return m.group(0)


def _power(m: re.Match[str]) -> str:
    base, exponent = int(m.group(1)), int(m.group(2))
    if exponent > 40 or base ** exponent >= 10 ** 12:
        return m.group(0)        # left as written: the digit limit then asks it back
    return str(base ** exponent)


def canonical_numbers(text: str) -> tuple[str, str | None]:
    """(text with numbers as plain digits, a problem to ask back or None); see the module docstring."""
    if (hexa := _HEX.search(text)) is not None:
        return text, (f"'{hexa.group(0)}' is hexadecimal; write the number in decimal (e.g. "
                      f"{int(hexa.group(0), 16) if len(hexa.group(0)) < 12 else 64}).")
    digit = next((c for c in text if not c.isascii() and c.isdigit()), None) if _NON_ASCII_DIGIT.search(text) \
        else None
    if digit is not None:
        return text, f"'{digit}' is not a digit 0-9; write numbers with the digits 0-9 (e.g. 'on 64 h100')."
    text = _GROUPED.sub(lambda m: m.group(1) + m.group(3) + m.group(4).replace(m.group("sep"), ""), text)
    text = _SCIENTIFIC.sub(_scientific, text)
    text = _POWER.sub(_power, text)
    return _WORDS.sub(_word_number, text), None


def count_problem(before: str, what: str, example: str) -> str | None:
    """The question for a bad value ending ``before`` (the text up to a count's noun), e.g. '-64' before 'h100'."""
    m = re.search(BAD_COUNT + r"\s?(?:x|×|\*)?\s?(?:gpus? (?:of )?)?$", before, re.I)
    if m is None:
        return None
    return f"'{m.group('bad')}' is not a {what} (a whole number of at least 1); say e.g. '{example}'."
