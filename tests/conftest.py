"""Shared pytest setup: deterministic hypothesis, and caches and sessions of the code under test inside tmp dirs.

Hypothesis never reads or writes an example database (``database=None``: a failure saved in
``.hypothesis/`` by one run must not replay forever in the next).  Without ``--hypothesis-seed``
the "ci" profile derandomizes (every run draws the same examples, so CI never flakes); with a
seed the "seeded" profile draws from that seed (to explore; the suite passes for any seed).
``HYPOTHESIS_PROFILE`` picks a profile by name ("ci", "seeded", "dev").
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings

# No "explain" phase: its line tracing slows examples ~10x on Python 3.11 (flaky time bounds).
_PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)
_COMMON = {"database": None, "deadline": None, "print_blob": True, "phases": _PHASES,
           "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]}
settings.register_profile("ci", derandomize=True, **_COMMON)
settings.register_profile("seeded", derandomize=False, **_COMMON)
settings.register_profile("dev", derandomize=False, **{**_COMMON, "max_examples": 20})


def pytest_configure(config: pytest.Config) -> None:
    """Load the hypothesis profile: the named one, else "seeded" with --hypothesis-seed, else "ci"."""
    seed = config.getoption("hypothesis_seed", default=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("seeded" if seed is not None else "ci"))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROJTUNE_CACHE", str(tmp_path_factory.mktemp("projtune-cache")))
    monkeypatch.setenv("PROJTUNE_HOME", str(tmp_path_factory.mktemp("projtune-home")))
