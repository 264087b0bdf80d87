"""SKILL.md (the agent skill): every command and snippet it shows runs, and its front matter is well formed."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import anyio
import pytest
import yaml
from typer.testing import CliRunner

from projtune.cli import app

SKILL = Path(__file__).resolve().parents[2] / "SKILL.md"
runner = CliRunner()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", SKILL.read_text(), re.S)


def _commands() -> list[str]:
    return [line.strip() for block in _blocks("bash") for line in block.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def test_front_matter_names_the_skill_and_says_when_to_use_it() -> None:
    text = SKILL.read_text()
    assert text.startswith("---\n")
    front = yaml.safe_load(text.split("---\n")[1])
    assert front["name"] == "projtune" and len(front["description"]) > 100


def test_the_skill_shows_commands() -> None:
    commands = _commands()
    assert len(commands) >= 8 and all(c.startswith("projtune ") for c in commands)


@pytest.mark.parametrize("command", _commands())
def test_every_command_runs(command: str) -> None:
    argv = shlex.split(command)[1:]
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, (command, result.output)
    if "--json" in argv or argv[:2] in (["tools", "schema"], ["tools", "call"]):
        json.loads(result.stdout)


@pytest.mark.parametrize("snippet", _blocks("python"))
def test_every_python_snippet_runs(snippet: str) -> None:
    exec(compile(snippet, "SKILL.md", "exec"), {})  # noqa: S102 - the snippet is ours, shown to agents


def test_the_mcp_configuration_starts_a_server() -> None:
    from mcp import Client, StdioServerParameters

    config = json.loads(_blocks("json")[0])["mcpServers"]["projtune"]
    assert config == {"command": "projtune", "args": ["mcp"]}
    # the `projtune` console script of this environment, as the configuration starts it
    params = StdioServerParameters(command=sys.executable,
                                   args=["-c", "from projtune.cli import main; main()", *config["args"]])

    async def main() -> list[str]:
        with anyio.fail_after(30):
            async with Client(params) as client:
                return [t.name for t in (await client.list_tools()).tools]

    assert "tune" in anyio.run(main)
