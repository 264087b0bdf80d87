"""Domain errors of the projection engine: each carries a one-line, actionable message; name suggestions.

Light on purpose (the standard library only): every CLI command's error edge imports it at start-up.
"""

from __future__ import annotations

import difflib
import re
from typing import Any


def nearest(name: str, choices: tuple[str, ...] | list[str]) -> str | None:
    """Return the closest of `choices` to `name` (a prefix match first), or None."""
    prefixed = [c for c in choices if name and c.startswith(name)]
    if prefixed:
        return prefixed[0]
    near = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return near[0] if near else None


NEAR_MISS_CUTOFF = 0.75
"""difflib similarity (0-1) above which a word of free text is taken as a misspelling of a known name and asked
back ('torchtitn', 'ful', 'core_atn'), and below which it is another word ('framework to use'); stricter than
:func:`nearest`'s 0.5, which only picks a suggestion for a name already known to be wrong."""


def is_near_miss(word: str, choices: tuple[str, ...] | list[str]) -> bool:
    """Whether ``word`` is close to one of ``choices`` (:data:`NEAR_MISS_CUTOFF`) without being one of them."""
    return word not in choices and bool(difflib.get_close_matches(word, list(choices), n=1, cutoff=NEAR_MISS_CUTOFF))


def literal_suggestion(item: dict[str, Any]) -> str:
    """``"; did you mean 'x'?"`` for one pydantic error item that refused a string outside a Literal's values
    (``type == "literal_error"``; its ``ctx.expected`` lists them as ``'a', 'b' or 'c'``), else ``""``.

    One place for the CLI's one-line errors (projtune/errors.py) and the tools' structured ones (tools/registry.py).
    """
    if item.get("type") != "literal_error" or not isinstance(item.get("input"), str):
        return ""
    allowed = re.findall(r"'([^']*)'", str(item.get("ctx", {}).get("expected", "")))
    near = nearest(item["input"].lower(), allowed)
    return f"; did you mean '{near}'?" if near else ""


def unknown_name_message(kind: str, name: object, choices: tuple[str, ...] | list[str]) -> str:
    """Format "unknown <kind> 'x' (allowed: a, b; did you mean y?)"."""
    near = nearest(str(name), choices)
    hint = f"; did you mean {near}?" if near else ""
    return f"unknown {kind} '{name}' (allowed: {', '.join(choices)}{hint})"


def validation_problems(err: Any, limit: int = 3) -> str:
    """``"loc: msg; loc: msg (and N more)"`` of a pydantic ValidationError's first ``limit`` items (``file`` for
    the whole input), so a file that is not the model it should be says which fields are wrong."""
    items = err.errors()
    text = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'file'}: {e['msg']}" for e in items[:limit])
    return text + (f" (and {len(items) - limit} more)" if len(items) > limit else "")


def not_a_file(kind: str, path: object) -> str:
    """``"<kind> '<path>' does not exist"``, or ``"... is a folder, not a file"`` for a folder (no kind: the path
    alone)."""
    from pathlib import Path

    where = f"{kind} '{path}'" if kind else f"'{path}'"
    return where + (" is a folder, not a file" if Path(str(path)).is_dir() else " does not exist")


class ProjtuneError(ValueError):
    """Base of every user-facing error; str(err) is the one-line message."""


class UnknownNameError(ProjtuneError):
    """A catalog name that does not exist; suggests the nearest valid names."""

    def __init__(self, kind: str, name: str, choices: list[str]) -> None:
        self.kind, self.name, self.choices = kind, name, sorted(choices)
        self.nearest = difflib.get_close_matches(name.lower(), self.choices, n=3, cutoff=0.4)
        hint = f"; did you mean {', '.join(self.nearest)}?" if self.nearest else ""
        super().__init__(f"unknown {kind} '{name}'{hint} (known: {', '.join(self.choices)})")


class IllegalLayoutError(ProjtuneError):
    """A layout that breaks one or more framework rules; `reasons` holds one line per rule."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = list(reasons)
        super().__init__("illegal layout: " + "; ".join(self.reasons))


class ModelSpecError(ProjtuneError):
    """A model description that cannot be turned into a ModelSpec (missing or bad field)."""


class DeadlineExceeded(ProjtuneError):
    """A long call (the ``tune`` tool) ran past its wall-clock limit and was stopped: no answer, only counts.

    ``field`` is the argument that set the limit; ``details`` (code ``deadline_exceeded``, the limit, the
    elapsed time, layouts searched and trials scored) go into the tool's structured error.
    """

    field = "deadline_s"

    def __init__(self, tool: str, limit_s: float, elapsed_s: float, layouts: int, trials: int) -> None:
        self.details = {"code": "deadline_exceeded", "deadline_s": limit_s, "elapsed_s": round(elapsed_s, 3),
                        "layouts": layouts, "trials": trials}
        super().__init__(
            f"{tool}: deadline exceeded after {layouts} layouts/{trials} trials ({elapsed_s:.2f} s of the "
            f"{limit_s:g} s deadline); the work was stopped and no answer is given (a partial search is not the "
            "best layout). Raise deadline_s, or ask for less (fewer GPUs, tighter constraints, fewer rounds)."
        )


def clip(value: object, limit: int = 80) -> str:
    """``value`` as quoted in a one-line message: at most ``limit`` characters plus a count of what was cut.

    Containers are rendered with :mod:`reprlib` (a few items per level, a few levels), so quoting a
    structure that YAML aliases expanded to millions of items costs a few hundred characters, not its size.
    """
    import reprlib

    if isinstance(value, str):
        text = value
    else:
        short = reprlib.Repr()
        short.maxlevel, short.maxlist, short.maxdict, short.maxstring, short.maxother = 3, 6, 6, limit, limit
        short.maxlong = 40
        text = short.repr(value)
    text = text.replace("\n", "\\n")
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters cut)"
