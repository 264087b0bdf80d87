"""Shared pytest setup: keep caches and sessions of the code under test inside tmp dirs."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROJTUNE_CACHE", str(tmp_path_factory.mktemp("projtune-cache")))
