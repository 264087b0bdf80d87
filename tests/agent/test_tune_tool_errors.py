"""The `tune` tool's bad token budget or deadline: a structured error naming the field (was field None and the
CLI's flag name in the message)."""

from __future__ import annotations

import pytest

from agent.tool import call_tool


@pytest.mark.parametrize(("field", "value", "says"), [
    ("tokens", "10Q", "tokens '10Q' (--tokens): expected a positive number with an optional suffix K, M, B or T"),
    ("deadline", "30x", "deadline '30x' (--deadline): expected a positive duration like 30d, 12h or 2w"),
])
def test_bad_budget_names_its_field(field: str, value: str, says: str) -> None:
    out = call_tool("tune", {"request": "tune llama3 8b on 8 h100", field: value})
    assert out["ok"] is False
    assert out["error"]["field"] == field
    assert out["error"]["message"].startswith(says)
