"""Domain errors of the projection engine: each carries a one-line, actionable message."""

from __future__ import annotations

import difflib


class ProjtuneError(ValueError):
    """Base of every user-facing error; str(err) is the one-line message."""


class UnknownNameError(ProjtuneError):
    """A catalog name that does not exist; suggests the nearest valid names."""

    def __init__(self, kind: str, name: str, choices: list[str]) -> None:
        self.kind, self.name, self.choices = kind, name, sorted(choices)
        near = difflib.get_close_matches(name.lower(), self.choices, n=3, cutoff=0.4)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        super().__init__(f"unknown {kind} '{name}'{hint} (known: {', '.join(self.choices)})")


class IllegalLayoutError(ProjtuneError):
    """A layout that breaks one or more framework rules; `reasons` holds one line per rule."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = list(reasons)
        super().__init__("illegal layout: " + "; ".join(self.reasons))


class ModelSpecError(ProjtuneError):
    """A model description that cannot be turned into a ModelSpec (missing or bad field)."""
