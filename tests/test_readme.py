"""The README's Python snippets run as written (the tool API section), so the documented calls stay true."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import agent.tool
import tools.registry

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_snippets_run_and_every_tool_call_succeeds(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "the README shows the tool API in a ```python block"
    results: list[dict[str, Any]] = []
    real = tools.registry.call_tool

    def recording(name: str, args: Any) -> dict[str, Any]:
        results.append(out := real(name, args))
        return out

    monkeypatch.setattr(tools.registry, "call_tool", recording)   # what `from ... import call_tool` picks up
    monkeypatch.setattr(agent.tool, "call_tool", recording)
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})  # noqa: S102 - the project's own README
    expected = sum(len(re.findall(r"^call_tool\(", b, flags=re.M)) for b in blocks)
    assert len(results) == expected >= 2
    assert all(r["ok"] for r in results), [r.get("error") for r in results]
