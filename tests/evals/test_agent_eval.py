"""Agent evals (evals/agent_eval.py): who picks the layout, and how the pick is scored.

The sweep is made up for these tests: three llama3-8b layouts on 8 x H100 with invented
throughputs, so that the measured best (run 1) is known.
"""

from __future__ import annotations

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


def test_the_agent_picks_and_says_what_made_the_pick(scored: tuple[Any, list[Any]]) -> None:
    sweep, runs = scored
    block = agent_eval.agent_result(sweep, runs)
    assert block["source"].startswith("agent/") and block["no_pick"] is False
    assert block["index"] in {r.index for r in runs}
    projected = {r.index: r.projected for r in runs}
    assert projected[block["index"]] == max(projected.values())   # the agent ranks by projected throughput


def test_a_no_pick_is_a_miss_with_its_reason(scored: tuple[Any, list[Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    sweep, runs = scored
    from agent.evaluate import Pick

    monkeypatch.setattr(agent_eval, "choose", lambda *a, **k: Pick(index=None, source="no pick", reason="why"))
    block = agent_eval.agent_result(sweep, runs)
    assert block["top1"] is False and block["no_pick"] is True and block["regret"] is None
    assert block["source"] == "no pick" and block["reason"] == "why"


def test_regret_is_scored_against_the_measured_best(scored: tuple[Any, list[Any]],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    sweep, runs = scored
    from agent.evaluate import Pick

    position = next(i for i, r in enumerate(runs) if r.measured == 7000)
    monkeypatch.setattr(agent_eval, "choose", lambda *a, **k: Pick(index=position, source="agent/candidates"))
    block = agent_eval.agent_result(sweep, runs)
    assert block["measured"] == 7000 and block["best_measured"] == 9000
    assert block["regret"] == pytest.approx(1 - 7000 / 9000)
    assert block["top1"] is False
    assert block["best_config"]["tp"] == 2


def test_eval_summary_counts_no_picks_and_sources(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SWEEP)
    summary = evaluate([tmp_path], EvalOptions(agent=True)).summary()["agent"]
    assert summary["sweeps"] == 1 and summary["no_pick"] == 0
    assert sum(summary["sources"].values()) == 1 and all(k.startswith("agent/") for k in summary["sources"])
