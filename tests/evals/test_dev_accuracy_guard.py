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
MAPE_MAX = 0.072            # measured 0.0693 (2026-12-02, session 9 refit: NeMo 24.07 packed documents and the
#                             Megatron-LM README rows' settings recorded, both fitted on); 0.0724 (session 8 refit:
#                             Narayanan's recorded recompute lets the six DeepSpeed rows be fitted on); 0.0799
#                             (session 7: Megatron-Bridge switches recorded, expert overlap off unless stated, CP ring
#                             as point-to-point steps); 0.0838 before (measured 0.085 on 2026-12-01, session 5 refit:
#                             the 21 runs with a documented record issue are no longer fitted on, so they sit at 0.40
#                             (were 0.22) while the other 248 improved to 0.058); 0.074, 0.078, 0.091 and 0.103 before
MEDIAN_APE_MAX = 0.046      # measured 0.039 (session 9); 0.041
KENDALL_TAU_MIN = 0.80      # measured 0.843
TOP1_MIN = 0.88             # measured 0.917 (33 of 36 sweeps; one more miss still passes)
MEMORY_MAPE_MAX = 0.05      # measured 0.009 on the runs that measured peak memory
COVERAGE_RANGE = (0.80, 0.97)  # measured 0.840 (0.877 before the novelty band): share inside the projected 80% interval
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


def test_the_eval_reports_band_reasons_and_coverage_per_file_and_novelty(summary: dict) -> None:
    scored = [r for r in summary["_runs"] if r["ape"] is not None]
    assert all(isinstance(r["band_reasons"], list) and len(r["band_reasons"]) == len(r["novelty"]) for r in scored)
    by_novelty = summary["interval_by_novelty"]
    assert "inside the evidence" in by_novelty and len(by_novelty) > 1      # the set has novel runs too (DeepSpeed)
    assert sum(g["runs"] for g in summary["interval_by_file"].values()) == len(scored)
    widened = [r for r in scored if r["novelty"]]
    assert widened and all(r["projected_high"] - r["projected_low"] > 0 for r in widened)
