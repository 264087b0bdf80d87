"""The LLM path is opt-in through projtune's own settings, and every PROJTUNE_* variable is one settings field.

Issue: an OPENAI_API_KEY set in the shell for another program switched the LLM path on against
a remote service the user never chose.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from agent_jobs import SMALL
from typer.testing import CliRunner

from agent.llm_config import LLMConfig
from agent.policies import make_policy
from projection.errors import ProjtuneError
from projection.settings import ProjtuneSettings, env_name, load_settings
from projtune.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_a_generic_openai_key_or_url_never_turns_the_llm_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-for-another-program")
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.openai.com/v1")
    assert make_policy().name == "offline"
    result = runner.invoke(app, ["tune", SMALL, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["policy"] == "offline" and report["llm_endpoint"] is None and not report["degraded"]


def test_projtune_setting_turns_it_on_and_the_answer_names_the_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    from fake_openai_server import closed_port

    url = f"http://127.0.0.1:{closed_port()}/v1"
    monkeypatch.setenv("PROJTUNE_LLM_BASE_URL", url)
    monkeypatch.setenv("PROJTUNE_LLM_MODEL", "smollm2-135m")
    monkeypatch.setenv("PROJTUNE_LLM_MAX_ATTEMPTS", "1")
    policy = make_policy()
    assert policy.name == "llm" and policy.endpoint == f"smollm2-135m at {url}"
    result = runner.invoke(app, ["tune", SMALL, "--json", "--llm-timeout", "0.5"])
    report = json.loads(result.stdout)
    assert report["policy"] == "llm" and report["llm_endpoint"] == f"smollm2-135m at {url}"
    assert report["degraded"] and url in report["degraded_reason"]       # down: said, with the endpoint
    text = runner.invoke(app, ["tune", SMALL, "--llm-timeout", "0.5"]).stdout
    assert f"LLM: smollm2-135m at {url}" in text


def test_flags_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROJTUNE_LLM_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("PROJTUNE_LLM_TIMEOUT", "7")
    monkeypatch.setenv("PROJTUNE_LLM_CONTEXT", "4096")
    config = LLMConfig.from_settings(llm_base_url="http://127.0.0.1:2/v1", llm_context=16384)
    assert config is not None
    assert (config.base_url, config.timeout_s, config.context_tokens) == ("http://127.0.0.1:2/v1", 7.0, 16384)


def test_a_key_without_an_endpoint_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROJTUNE_LLM_API_KEY", "sk-secret-value")
    with pytest.raises(ProjtuneError, match="no LLM endpoint: set PROJTUNE_LLM_BASE_URL"):
        make_policy()
    assert make_policy(offline=True).name == "offline"
    result = runner.invoke(app, ["tune", SMALL])
    assert result.exit_code == 2 and "PROJTUNE_LLM_BASE_URL" in result.output and "Traceback" not in result.output
    assert "sk-secret-value" not in result.output


@pytest.mark.parametrize(("name", "value", "says"), [
    ("PROJTUNE_LLM_TIMEOUT", "soon", "PROJTUNE_LLM_TIMEOUT='soon' is not valid"),
    ("PROJTUNE_LLM_CONTEXT", "512", "PROJTUNE_LLM_CONTEXT='512' is not valid"),
    ("PROJTUNE_LLM_BASE_URL", "localhost:8080", "http:// or https:// URL"),
    ("PROJTUNE_SESSION_LOCK_WAIT", "-1", "PROJTUNE_SESSION_LOCK_WAIT='-1' is not valid"),
])
def test_a_bad_setting_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ProjtuneError, match=re.escape(says)):
        load_settings()
    if name.startswith("PROJTUNE_LLM"):
        result = runner.invoke(app, ["tune", SMALL])
        assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output


def test_a_bad_flag_names_the_flag() -> None:
    with pytest.raises(ProjtuneError, match="--llm-context=100 is not valid"):
        load_settings(llm_context=100)


def test_every_projtune_variable_in_the_code_is_a_settings_field_listed_in_the_readme() -> None:
    used: set[str] = set()
    for folder in ("projection", "bench", "tools", "prompts", "agent", "evals", "projtune"):
        for path in (ROOT / folder).rglob("*.py"):
            used |= set(re.findall(r"PROJTUNE_[A-Z_]*[A-Z](?![A-Z_*])", path.read_text(encoding="utf-8")))
    fields = {env_name(f) for f in ProjtuneSettings.model_fields}
    assert used - fields == set(), "PROJTUNE_* variables read outside projection/settings.py's model"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert {f for f in fields if f"`{f}`" not in readme} == set(), "settings missing from the README table"
