"""Shared setup of the agent tests: no LLM from the environment, sessions in a tmp dir, small jobs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agent.llm_config import LLMConfig

LLM_ENV = ("PROJTUNE_LLM_BASE_URL", "PROJTUNE_LLM_API_KEY", "PROJTUNE_LLM_MODEL", "PROJTUNE_LLM_TIMEOUT",
           "PROJTUNE_LLM_DEADLINE", "PROJTUNE_LLM_MAX_ATTEMPTS", "PROJTUNE_LLM_RETRY_WAIT", "PROJTUNE_LLM_CONTEXT",
           "PROJTUNE_LLM_STREAM", "OPENAI_BASE_URL", "OPENAI_API_KEY")


@pytest.fixture(autouse=True)
def _no_llm_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    for name in LLM_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PROJTUNE_HOME", str(tmp_path_factory.mktemp("projtune-home")))


@pytest.fixture
def fast_llm() -> Callable[..., LLMConfig]:
    """An LLMConfig for the fake server: short timeout, quick retries."""

    def make(url: str, **changes: float) -> LLMConfig:
        values = {"base_url": url, "api_key": "test-key", "model": "fake-model", "timeout_s": 2.0,
                  "max_attempts": 3, "retry_wait_s": 0.01, "retry_wait_max_s": 0.05, **changes}
        return LLMConfig(**values)

    return make
