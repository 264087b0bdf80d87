"""Agent evals (evals/agent_eval.py): who picks the layout, and how the pick is scored.

The sweep is made up for these tests: three llama3-8b layouts on 8 x H100 with invented
throughputs, so that the measured best (run 1) is known.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from evals import agent_eval
from evals.eval_run import EvalOptions, evaluate
from evals.scoring import rank_runs
from evals.sweep_file import load_sweep_files

SWEEP = """\
source: "made up for tests/evals/test_agent_eval.py"
sweeps:
  - name: agent-llama3-8b-8xh100
    model: llama3-8b
    cluster: {gpu: h100-sxm, num_gpus: 8}
    fixed: {gbs: 64, seq_len: 8192, mbs: 1, precision: bf16, zero: 1}
    runs:
      - config: {tp: 1, recompute: full}
        measured: {tokens_per_sec_per_gpu: 7000}
      - config: {tp: 2, recompute: selective}
        measured: {tokens_per_sec_per_gpu: 9000}
      - config: {tp: 4, recompute: selective}
        measured: {tokens_per_sec_per_gpu: 8000}
"""


@pytest.fixture
def scored(tmp_path: Path) -> tuple[Any, list[Any]]:
    (tmp_path / "s.yaml").write_text(SWEEP)
    sweep = load_sweep_files([tmp_path]).sweeps[0]
    result = evaluate([tmp_path], EvalOptions())
    _, ranked = rank_runs(result.runs)
    return sweep, ranked


def test_falls_back_to_projections_without_search(scored: tuple[Any, list[Any]],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    sweep, runs = scored
    monkeypatch.setitem(sys.modules, "tools.search", None)  # import raises ImportError
    monkeypatch.setitem(sys.modules, "agent.evaluate", None)
    index, source = agent_eval.choose_from_candidates(sweep, runs)
    assert source == "projection"
    assert runs[index].projected == max(r.projected for r in runs)


def test_uses_search_when_importable(scored: tuple[Any, list[Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    sweep, runs = scored
    monkeypatch.setitem(sys.modules, "agent.evaluate", None)
    pytest.importorskip("tools.search")
    index, source = agent_eval.choose_from_candidates(sweep, runs)
    assert source in ("search", "projection")  # projection when the search screens every candidate out
    assert 0 <= index < len(runs)


def test_agent_choose_wins_and_regret_is_scored(scored: tuple[Any, list[Any]],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    sweep, runs = scored
    fake = types.ModuleType("agent.evaluate")
    fake.choose = lambda sweep, runs, profile_path=None: (0, "agent")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "agent.evaluate", fake)
    block = agent_eval.agent_result(sweep, runs)
    assert block["source"] == "agent" and block["index"] == 0
    assert block["measured"] == 7000 and block["best_measured"] == 9000 and block["best_index"] == 1
    assert block["regret"] == pytest.approx(1 - 7000 / 9000)
    assert block["top1"] is False
    assert block["best_config"]["tp"] == 2
