"""Load the prompt files of this folder by name (see the package docstring)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

FOLDER = Path(__file__).resolve().parent
_HEADER = re.compile(r"^<!--\s*prompt:\s*([\w-]+),\s*version:\s*(\d+)\s*-->\s*$")


class UnknownPromptError(KeyError):
    """A prompt name with no file in ``prompts/``."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name, self.known = name, known
        super().__init__(f"unknown prompt '{name}' (known: {', '.join(known)})")

    def __str__(self) -> str:
        return str(self.args[0])


def prompt_names() -> list[str]:
    """Names of every prompt file (without ``.md``), sorted."""
    return sorted(p.name.removesuffix(".md") for p in FOLDER.iterdir() if p.name.endswith(".md"))


@cache
def load_prompt(name: str) -> str:
    """Return the text of ``prompts/NAME.md`` (header line included).

    Raises:
        UnknownPromptError: no such prompt; the message lists the known names.
    """
    known = prompt_names()
    if name not in known:
        raise UnknownPromptError(name, known)
    return (FOLDER / f"{name}.md").read_text(encoding="utf-8")


def prompt_version(name: str) -> int:
    """The version number in a prompt's header line."""
    first = load_prompt(name).splitlines()[0]
    match = _HEADER.match(first)
    if match is None:
        raise ValueError(f"prompt '{name}' has no header line '<!-- prompt: {name}, version: N -->'")
    return int(match.group(2))


def render_prompt(name: str, **values: object) -> str:
    """The prompt without its header line, with ``{{key}}`` placeholders replaced by ``values``."""
    text = load_prompt(name).split("\n", 1)[1].lstrip("\n")
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", str(value))
    return text
