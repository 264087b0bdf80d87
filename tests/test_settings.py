"""One settings model for every PROJTUNE_* variable (projection/settings.py): each reader goes through it."""

from __future__ import annotations

from pathlib import Path

import pytest

from projection.errors import ProjtuneError
from projection.settings import load_settings


def test_each_reader_takes_its_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from agent.text.session import sessions_path
    from bench.measurement import cache_dir
    from tools.registry import profile_dirs, tool_deadline_s

    monkeypatch.setenv("PROJTUNE_CACHE", str(tmp_path / "c"))
    monkeypatch.setenv("PROJTUNE_HOME", str(tmp_path / "h"))
    monkeypatch.setenv("PROJTUNE_TOOL_DEADLINE", "7.5")
    monkeypatch.setenv("PROJTUNE_PROFILE_DIR", str(tmp_path / "p"))
    assert cache_dir() == tmp_path / "c" / "bench"
    assert sessions_path() == tmp_path / "h" / "sessions.sqlite"
    assert tool_deadline_s() == 7.5
    assert profile_dirs()[-1] == (tmp_path / "p").resolve()


def test_defaults_and_empty_values(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PROJTUNE_TOOL_DEADLINE", "PROJTUNE_SESSION_LOCK_WAIT", "PROJTUNE_MCP_TOKEN"):
        monkeypatch.setenv(name, "")                       # empty = unset
    s = load_settings()
    assert (s.tool_deadline, s.session_lock_wait, s.mcp_token) == (120.0, 5.0, None)


def test_a_bad_value_is_an_error_not_a_silent_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.registry import tool_deadline_s

    monkeypatch.setenv("PROJTUNE_TOOL_DEADLINE", "0")
    with pytest.raises(ProjtuneError, match="PROJTUNE_TOOL_DEADLINE='0' is not valid"):
        tool_deadline_s()


def test_the_mcp_token_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROJTUNE_MCP_TOKEN", "s3cret-token")
    s = load_settings()
    assert s.mcp_token is not None and s.mcp_token.get_secret_value() == "s3cret-token"
    assert "s3cret-token" not in repr(s)


def test_a_misspelt_projtune_variable_is_refused_with_the_nearest(monkeypatch) -> None:
    """A misspelt endpoint variable was ignored (extra="ignore"): tune ran offline and said nothing of it."""
    import pytest

    from projection.errors import ProjtuneError
    from projection.settings import load_settings

    monkeypatch.setenv("PROJTUNE_LLM_BASEURL", "http://127.0.0.1:9/v1")
    with pytest.raises(ProjtuneError, match=r"^unknown setting 'PROJTUNE_LLM_BASEURL' \(allowed: PROJTUNE_CACHE, .*; "
                                            r"did you mean PROJTUNE_LLM_BASE_URL\?\)$"):
        load_settings()
