"""The evals hook: the agent picks from a given candidate set (both call forms)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agent.evaluate import choose
from tools.search import SearchRequest, run_search

CANDIDATES = [{"tp": 1, "pp": 2, "mbs": 1}, {"tp": 2, "pp": 1, "mbs": 1, "sequence_parallel": True},
              {"tp": 8, "pp": 1, "mbs": 1, "sequence_parallel": True}, {"tp": 3}]


def test_choose_returns_the_search_pick_among_candidates() -> None:
    index = choose("llama3-8b", "h100", 8, 8, 64, 4096, CANDIDATES)
    ranked = run_search(SearchRequest(model="llama3-8b", gpu="h100", num_gpus=8, gbs=64, seq_len=4096,
                                      candidates=CANDIDATES)).ranked
    assert 0 <= index < len(CANDIDATES) - 1           # the illegal tp=3 is never chosen
    assert all(ranked[0].config[k] == v for k, v in CANDIDATES[index].items())


def test_choose_accepts_the_eval_harness_form() -> None:
    sweep = SimpleNamespace(sweep=SimpleNamespace(model="llama3-8b", cluster=SimpleNamespace(
        gpu="h100-sxm", num_gpus=8, gpus_per_node=8)))
    runs = [SimpleNamespace(config=c, fill={"gbs": 64, "seq_len": 4096}) for c in CANDIDATES[:3]]
    index, source = choose(sweep, runs, profile_path=None)
    assert source == "agent" and index == choose("llama3-8b", "h100", 8, 8, 64, 4096, CANDIDATES[:3])


def test_choose_needs_candidates() -> None:
    with pytest.raises(ValueError, match="no candidates"):
        choose("llama3-8b", "h100", 8, 8, 64, 4096, [])
