"""Pure scoring of an eval (evals/scoring.py) on hand-made runs; expected values are computed by hand."""

from __future__ import annotations

from typing import Any

import pytest

from evals.scoring import RunScore, baseline_errors, errors, rank_runs, score_sweep, summarize


def _run(index: int, metric: str | None, measured: float | None, projected: float | None, **extra: Any) -> RunScore:
    ape = signed = None
    if metric is not None and measured is not None and projected is not None:
        ape, signed = errors(metric, measured, projected)
    fields: dict[str, Any] = {
        "sweep": "s", "index": index, "config": {"tp": index + 1}, "metric": metric, "measured": measured,
        "projected": projected, "ape": ape, "signed_error": signed, "memory_measured_gib": None,
        "memory_projected_gib": None, "oom_measured": None, "oom_projected": None, "filled": False,
        "skipped": None, "gpu": "h100-sxm", "family": "hopper", "file": "f.yaml",
    }
    fields.update(extra)
    return RunScore(**fields)


def test_errors_sign_follows_throughput() -> None:
    # Throughput metric: projecting 110 for 100 measured is optimistic by 10%.
    assert errors("tokens_per_sec_per_gpu", 100.0, 110.0) == pytest.approx((0.1, 0.1))
    # Time metric: projecting 0.9 s for 1.0 s measured is also optimistic (faster), 10%.
    assert errors("iteration_time_s", 1.0, 0.9) == pytest.approx((0.1, 0.1))
    assert errors("iteration_time_s", 1.0, 1.2) == pytest.approx((0.2, -0.2))


def test_sweep_ranks_on_throughput_for_iteration_time() -> None:
    # Times 1, 2, 4 s measured; projections keep the order, so tau = spearman = 1 and top-1 holds.
    runs = [_run(0, "iteration_time_s", 1.0, 1.1), _run(1, "iteration_time_s", 2.0, 1.8),
            _run(2, "iteration_time_s", 4.0, 4.4)]
    score = score_sweep(name="s", file="f", gpu="h100-sxm", num_gpus=8, runs=runs)
    assert score.rank_metric == "iteration_time_s"
    assert score.kendall_tau == pytest.approx(1.0) and score.spearman == pytest.approx(1.0)
    assert score.top1 is True and score.regret == pytest.approx(0.0)
    assert score.mape == pytest.approx((0.1 + 0.1 + 0.1) / 3)


def test_regret_of_wrong_pick() -> None:
    # Projected best is run 1 (120), measured 80 against the best 100: regret 1 - 80/100 = 0.2.
    runs = [_run(0, "tokens_per_sec_per_gpu", 100.0, 90.0), _run(1, "tokens_per_sec_per_gpu", 80.0, 120.0)]
    score = score_sweep(name="s", file="f", gpu="h100-sxm", num_gpus=8, runs=runs)
    assert score.top1 is False
    assert score.regret == pytest.approx(0.2)
    assert score.kendall_tau == pytest.approx(-1.0)


def test_tie_in_measured_best_counts_as_top1() -> None:
    runs = [_run(0, "mfu", 0.5, 0.4), _run(1, "mfu", 0.5, 0.45), _run(2, "mfu", 0.3, 0.2)]
    score = score_sweep(name="s", file="f", gpu="h100-sxm", num_gpus=8, runs=runs)
    assert score.top1 is True and score.regret == pytest.approx(0.0)


def test_not_rankable_without_two_scored_runs_of_one_metric() -> None:
    runs = [_run(0, "mfu", 0.5, 0.4), _run(1, "tokens_per_sec_per_gpu", 10.0, 11.0),
            _run(2, "mfu", 0.4, None, skipped="broken run: x")]
    assert rank_runs(runs) == (None, [])
    score = score_sweep(name="s", file="f", gpu="h100-sxm", num_gpus=8, runs=runs)
    assert (score.kendall_tau, score.spearman, score.top1, score.regret) == (None, None, None, None)


def test_constant_projection_gives_null_correlation() -> None:
    runs = [_run(0, "mfu", 0.5, 0.4), _run(1, "mfu", 0.4, 0.4)]
    score = score_sweep(name="s", file="f", gpu="h100-sxm", num_gpus=8, runs=runs)
    assert score.kendall_tau is None and score.spearman is None
    assert score.top1 is True  # argmax takes the first of tied projections, which is the measured best


def test_summary_nulls_oom_recall_and_baselines() -> None:
    oom_hit = _run(0, None, None, None, oom_measured=True, verdict="at risk")
    oom_miss = _run(1, None, None, None, oom_measured=True, verdict="fits")
    measured = {"tokens_per_sec_per_gpu": 100.0}
    base = baseline_errors("tokens_per_sec_per_gpu", measured, {"calc": {"tokens_per_sec_per_gpu": 95.0}})
    scored = _run(2, "tokens_per_sec_per_gpu", 100.0, 110.0, baselines=base,
                  memory_measured_gib=50.0, memory_projected_gib=55.0)
    skipped = _run(3, "mfu", 0.4, None, skipped="incomplete: missing mbs", missing_keys=["mbs"])
    summary = summarize(files=1, runs=[oom_hit, oom_miss, scored, skipped], sweeps=[])
    assert summary["oom_runs"] == 2 and summary["oom_recall"] == pytest.approx(0.5)
    assert summary["runs_scored"] == 3 and summary["runs_skipped"] == 1 and summary["runs_incomplete"] == 1
    assert summary["mape"] == pytest.approx(0.1) and summary["bias"] == pytest.approx(0.1)
    assert summary["memory_runs"] == 1 and summary["memory_mape"] == pytest.approx(0.1)
    assert summary["baselines"] == {"calc": {"runs": 1, "mape": pytest.approx(0.05),
                                             "ours_mape_same_runs": pytest.approx(0.1)}}
    for key in ("kendall_tau_mean", "spearman_mean", "top1_rate", "regret_mean", "agent"):
        assert summary[key] is None
