"""CI guard: the development-set eval with the shipped profiles stays at today's accuracy.

`projtune eval evals/data --json` takes a few seconds; a change to the engine, the catalogs or the
profiles that breaks the projection shows up here as a figure past its limit.  The limits sit
slightly above the figures of the last refit (README "Accuracy"); tighten them when a change
improves the figures, loosen them only with a reason in the commit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evals.eval_run import evaluate

DATA = Path(__file__).resolve().parents[2] / "evals" / "data"

# Figures of the shipped profiles on the development set (in-sample), and the limits guarded here.
MAPE_MAX = 0.090            # measured 0.085 (2026-12-01, session 5 refit: the 21 runs with a documented record
#                             issue are no longer fitted on; 0.059 on the other 248, was 0.062; the 21 at 0.390,
#                             were 0.216); 0.074, 0.078, 0.091 and 0.103 before
MEDIAN_APE_MAX = 0.050      # measured 0.045
KENDALL_TAU_MIN = 0.76      # measured 0.787: the 2-run megatron-bridge-25.09 Qwen3-235B B200 sweep flips (regret 4%)
#                             as it did in session 3; 0.843 in session 4
TOP1_MIN = 0.88             # measured 0.889 (32 of 36 sweeps); the agent picks 33 of 36
MEMORY_MAPE_MAX = 0.05      # measured 0.009 on the runs that measured peak memory
COVERAGE_RANGE = (0.80, 0.97)  # measured 0.874: share of measured values inside the projected 80% interval
# (in-sample: the bands come from held-out residuals, so on the runs they were taken from they cover more than 80%)
MIN_RUNS_SCORED = 270


@pytest.fixture(scope="module")
def summary() -> dict:
    result = evaluate([DATA])
    data = result.to_dict()
    data["summary"]["_runs"] = data["runs"]
    return data["summary"]


def test_throughput_error_stays_within_limits(summary: dict) -> None:
    assert summary["runs_scored"] >= MIN_RUNS_SCORED
    assert summary["mape"] <= MAPE_MAX, summary["mape"]
    assert summary["median_ape"] <= MEDIAN_APE_MAX, summary["median_ape"]


def test_ranking_stays_within_limits(summary: dict) -> None:
    assert summary["kendall_tau_mean"] >= KENDALL_TAU_MIN, summary["kendall_tau_mean"]
    assert summary["top1_rate"] >= TOP1_MIN, summary["top1_rate"]


def test_memory_stays_within_limits(summary: dict) -> None:
    assert summary["memory_runs"] >= 1
    assert summary["memory_mape"] <= MEMORY_MAPE_MAX, summary["memory_mape"]


def test_every_scored_run_carries_its_interval(summary: dict) -> None:
    scored = [r for r in summary["_runs"] if r["ape"] is not None]
    assert scored
    for run in scored:
        assert run["projected_low"] <= run["projected"] <= run["projected_high"]
    low, high = COVERAGE_RANGE
    assert low <= summary["interval_coverage"] <= high, summary["interval_coverage"]
