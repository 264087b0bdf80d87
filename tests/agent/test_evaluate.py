"""The evals hook: the agent picks from a given candidate set (both call forms), never by a silent fallback."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agent.evaluate import NO_PICK, choose
from tools.registry import call_tool

CANDIDATES = [{"tp": 1, "pp": 2, "mbs": 1}, {"tp": 2, "pp": 1, "mbs": 1, "sequence_parallel": True},
              {"tp": 8, "pp": 1, "mbs": 1, "sequence_parallel": True}, {"tp": 3}]


def test_choose_returns_the_best_projected_candidate() -> None:
    pick = choose("llama3-8b", "h100", 8, 8, 64, 4096, CANDIDATES)
    projected = [call_tool("project", {"model": "llama3-8b", "gpu": "h100", "num_gpus": 8,
                                       "layout": {**c, "gbs": 64, "seq_len": 4096}})["result"]["tokens_per_sec_per_gpu"]
                 for c in CANDIDATES[:3]]
    assert pick.index is not None and 0 <= pick.index < len(CANDIDATES) - 1   # the illegal tp=3 is never chosen
    assert pick.source == "agent/candidates" and pick.scored_by == "project"
    assert projected[pick.index] == max(projected)


def test_measured_runs_are_ranked_even_when_projected_over_memory() -> None:
    # llama3-70b on 8 x H100 without sharding cannot fit in the memory model; the runs "ran", so the
    # agent still picks one and says the memory model disagrees
    runs = [{"tp": 8, "pp": 1, "mbs": 1, "sequence_parallel": True, "zero": 0},
            {"tp": 4, "pp": 2, "mbs": 1, "sequence_parallel": True, "zero": 0}]
    pick = choose("llama3-70b", "h100", 8, 8, 64, 8192, runs)
    assert pick.index in (0, 1)
    assert pick.memory_warning and "measured to run" in pick.memory_warning


def test_nothing_legal_is_a_no_pick_with_the_reason() -> None:
    pick = choose("llama3-8b", "h100", 8, 8, 64, 4096, [{"tp": 3}, {"tp": 5}])
    assert pick.index is None and pick.source == NO_PICK and pick.reason


def test_choose_accepts_the_eval_harness_form() -> None:
    sweep = SimpleNamespace(sweep=SimpleNamespace(model="llama3-8b", cluster=SimpleNamespace(
        gpu="h100-sxm", num_gpus=8, gpus_per_node=8)))
    runs = [SimpleNamespace(config=c, fill={"gbs": 64, "seq_len": 4096}) for c in CANDIDATES[:3]]
    pick = choose(sweep, runs, profile_path=None)
    assert pick.source.startswith("agent/") and pick.index == choose("llama3-8b", "h100", 8, 8, 64, 4096,
                                                                      CANDIDATES[:3]).index


def test_choose_needs_candidates() -> None:
    with pytest.raises(ValueError, match="no candidates"):
        choose("llama3-8b", "h100", 8, 8, 64, 4096, [])
