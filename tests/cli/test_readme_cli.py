"""The README's command lines stay true: every `projtune` command and flag they show exists, and the concrete
ones (no placeholder, optional `[...]` parts left out) run with exit code 0.

The README's CLI block and "Bring your own run" block list each command with its flags; a flag renamed or
removed in projtune/commands would leave the README wrong without failing any other test.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from projtune.app import build_app

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def _command_lines() -> list[str]:
    """Each `projtune ...` line of the README's plain code blocks, with its indented continuation lines joined
    and its trailing `# comment` removed."""
    lines: list[str] = []
    fence: str | None = None            # the open block's language ("" for a plain block), None outside blocks
    for raw in README.read_text(encoding="utf-8").splitlines():
        if raw.startswith("```"):
            fence = raw[3:].strip() if fence is None else None
            continue
        if fence != "":
            continue
        text = re.split(r"\s+#\s", raw, maxsplit=1)[0].rstrip()
        if text.removeprefix("$ ").startswith("projtune "):
            lines.append(text.removeprefix("$ "))
        elif lines and raw.startswith(" ") and text.strip().startswith("["):
            lines[-1] += " " + text.strip()
    return lines


LINES = _command_lines()
ROOT = typer.main.get_command(build_app())


def _words(line: str) -> list[str]:
    return re.sub(r"\s*\|\s*", "|", line.removeprefix("projtune ")).split()


def _commands(line: str) -> list[Any]:
    """The click commands a line names (`project|memory`, `bench run|project`, `tools schema | list | call`)."""
    words = _words(line)
    found = []
    for name in words[0].split("|"):
        command = ROOT.commands[name]            # KeyError: the README names a command projtune lacks
        if hasattr(command, "commands"):     # a group (typer's own click): its subcommands
            found += [command.commands[sub] for sub in words[1].split("|")]
        else:
            found.append(command)
    return found


def _options(command: Any) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts)}


def test_the_readme_shows_the_commands() -> None:
    assert len(LINES) >= 25, LINES
    shown = {name for line in LINES for name in _words(line)[0].split("|")}
    assert set(ROOT.commands) <= shown, set(ROOT.commands) - shown


@pytest.mark.parametrize("line", LINES)
def test_every_flag_the_readme_shows_exists(line: str) -> None:
    commands = _commands(line)
    known = set().union(*(_options(c) for c in commands))
    flags = {f for f in FLAG.findall(line) if f != "--"}
    assert flags <= known, f"{line}\n  unknown: {sorted(flags - known)}"


PLACEHOLDER = re.compile(r"(?<![\w.-])[A-Z][A-Z_]*(?![\w.-])")     # F, FILE, ID, DIR


def _concrete(line: str) -> list[str] | None:
    """The line as arguments with its optional `[...]` parts removed, or None when it keeps a placeholder or
    names a file of the reader's own (`runs/`, `my_run.sh`)."""
    args = shlex.split(re.sub(r"\[[^\]]*\]", " ", line))[1:]
    if any("..." in a or "|" in a or PLACEHOLDER.fullmatch(a) for a in args):
        return None
    paths = [i for i, a in enumerate(args) if "/" in a or re.search(r"\.(sh|toml|ya?ml|log)$", a)]
    if not all((REPO / args[i]).exists() for i in paths):
        return None
    return [str(REPO / a) if i in paths else a for i, a in enumerate(args)]


SLOW = ("chat", "mcp", "tune", "bench")      # interactive, a server, the agent (tests/agent), torch timing
CONCRETE = [args for line in LINES if (args := _concrete(line)) and args[0] not in SLOW
            and "--anchor-one" not in args]  # --anchor-one fits 13 folds the first time (~20 min)


def test_the_concrete_lines_are_found() -> None:
    assert {args[0] for args in CONCRETE} >= {"project", "search"}, CONCRETE


@pytest.mark.parametrize("args", CONCRETE, ids=[" ".join(a[:2]).replace(f"{REPO}/", "") for a in CONCRETE])
def test_a_concrete_readme_command_runs(args: list[str]) -> None:
    from projtune.cli import app

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
