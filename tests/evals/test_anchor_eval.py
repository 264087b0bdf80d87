"""`projtune eval --anchor-one`: anchored vs unanchored, in-sweep and restore from the smallest scale (issue 27)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from evals.anchor_eval import evaluate_anchored
from projtune.cli import app

FILE = "evals/data/megatron-bridge-26.02.yaml"


@pytest.fixture(scope="module")
def result():
    return evaluate_anchored([FILE])


def test_every_in_sweep_pair_anchors_on_another_run_of_the_same_sweep(result) -> None:
    pairs = [p for p in result.pairs if p.kind == "in-sweep"]
    assert pairs
    for p in pairs:
        assert p.anchor is not p.target and p.anchor.sweep == p.target.sweep and p.anchor.series == p.target.series
        assert p.anchor_class == "same-scale"


def test_an_anchored_run_reproduces_its_anchor(result) -> None:
    """The anchored projection of the anchor itself is its measurement (unless the prior clips the factor)."""
    from evals.anchor_eval import _pair

    p = result.pairs[0]
    own = _pair("in-sweep", p.anchor, p.anchor)
    if not own.corrections.notes:
        assert own.anchored == pytest.approx(p.anchor.measured, rel=1e-9)


def test_restore_pairs_anchor_on_the_smallest_scale(result) -> None:
    for p in (p for p in result.pairs if p.kind == "restore"):
        assert p.anchor.num_gpus < p.target.num_gpus and p.anchor.series == p.target.series


def test_json_reports_both_figures_and_the_series() -> None:
    out = CliRunner().invoke(app, ["eval", FILE, "--anchor-one", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    for key in ("mape_anchored", "mape_unanchored", "coverage_anchored", "top1_anchored", "top1_unanchored",
                "rankable_sweeps"):
        assert key in data["in_sweep"]
    assert {"mape_anchored", "mape_unanchored"} <= data["restore_from_smallest"].keys()
    assert data["series"] >= 1 and "scaling_series" in data and data["by_source"]["in_sweep"]


def test_bands_out_needs_anchor_one(tmp_path) -> None:
    out = CliRunner().invoke(app, ["eval", FILE, "--bands-out", str(tmp_path / "b.yaml")])
    assert out.exit_code == 2 and "--anchor-one" in out.output


def test_the_held_out_setting_is_the_main_figure_and_in_sample_is_beside_it(result) -> None:
    data = result.to_dict()
    assert data["main_setting"] == "held-out" and set(data["settings"]) == {"held-out", "in-sample"}
    assert "top1_regret_anchored" in data["in_sweep"] and "mape_unanchored_pairs" in data["in_sweep"]
    held, inside = data["settings"]["held-out"], data["settings"]["in-sample"]
    assert data["in_sweep"]["pairs"] == held["in_sweep"]["pairs"] > 0
    # one file: nothing else to fit on, so held out means the priors, not the shipped (fitted) profiles
    assert held["in_sweep"]["mape_unanchored"] != inside["in_sweep"]["mape_unanchored"]


def test_the_shared_error_weight_is_the_regression_of_target_errors_on_the_anchor_correction() -> None:
    from types import SimpleNamespace

    from evals.anchor_eval import estimate_weight, shared_weights
    from projection.uncertainty import MIN_WEIGHT_PAIRS

    from projection.anchor import posterior_weight

    def pair(r, g, cls="same-scale", alike=True, share=1.0):
        return SimpleNamespace(anchor_class=cls, target_residual=r, full_shift=g, alike=alike,
                               anchor_compute_share=share)

    half = [pair(0.05, 0.10), pair(-0.02, -0.04), pair(0.03, 0.06), pair(0.01, 0.02)] * 2    # r = g / 2
    assert len(half) == MIN_WEIGHT_PAIRS
    assert estimate_weight(half, "same-scale").weight == pytest.approx(0.5)
    assert estimate_weight(half[:-1], "same-scale").weight == 0.0                # too few pairs: no evidence
    assert estimate_weight([pair(-0.1, 0.1)] * 8, "same-scale").weight == 0.0   # anti-correlated: no trust
    assert estimate_weight([pair(0.2, 0.1, "scale-out-8x")] * 8, "scale-out").weight == 1.0   # clipped
    # anchors half compute: the same target errors need a larger weight of an all-compute anchor to be explained
    h = posterior_weight(0.6, (0.5,))
    assert h == pytest.approx(0.375 / 1.375)
    shared = [pair(h * g, g, share=0.5) for g in (0.1, -0.04, 0.06, 0.02)] * 2
    assert estimate_weight(shared, "same-scale").weight == pytest.approx(0.6)
    # targets that differ from their anchor in communication share have their own cell; scale-out has one
    differ = [pair(0.0, 0.1, alike=False)] * 8
    weights = shared_weights(half + differ + [pair(0.1, 0.1, "scale-out-far", alike=False)] * 8)
    assert weights["same-scale"].weight == pytest.approx(0.5)
    assert weights["same-scale, comm differs"].weight == 0.0
    # scale-out estimated 1.0, capped by the comm-differs cell (0): a target beyond its anchor shares no more
    assert weights["scale-out"].weight == 0.0 and weights["scale-out"].pairs == 8
    differ = [pair(0.03, 0.1, alike=False)] * 8                                    # comm differs: 0.3
    weights = shared_weights(half + differ + [pair(0.1, 0.1, "scale-out-far", alike=False)] * 8)
    assert weights["same-scale, comm differs"].weight == pytest.approx(0.3)
    assert weights["scale-out"].weight == pytest.approx(0.3)
    capped = shared_weights(half + [pair(0.1, 0.1, alike=False)] * 8)              # comm differs 1.0, capped
    assert capped["same-scale, comm differs"].weight == pytest.approx(0.5)


def test_each_source_is_scored_with_weights_estimated_without_it() -> None:
    from evals.anchor_eval import evaluate_anchored

    data = evaluate_anchored([FILE, "evals/data/megatron-bridge-25.09.yaml"], settings=("in-sample",)).to_dict()
    by_source = data["shared_weights_by_source"]
    assert set(by_source) == {"megatron-bridge-26.02.yaml", "megatron-bridge-25.09.yaml"}
    assert by_source["megatron-bridge-26.02.yaml"] != by_source["megatron-bridge-25.09.yaml"]


def test_top1_ranks_the_anchor_layout_at_its_anchored_projection(result) -> None:
    """Top-1 ranks as ``search --anchor`` does: the anchor's layout competes at its own anchored projection (its
    cell's weight), not at its measured value against the others' shrunk corrections."""
    from evals.anchor_eval import _pair, top1_outcomes
    from evals.scoring import throughput

    p = next(p for p in result.pairs if p.kind == "in-sweep" and p.anchor.measured != p.target.measured)
    again = _pair(p.kind, p.target, p.anchor, 0.5, 0.3)
    assert again.anchor_self == pytest.approx(_pair(p.kind, p.anchor, p.anchor, 0.3).anchored, rel=1e-12)
    best = max(throughput(r.metric, r.measured) for r in (p.anchor, p.target))
    slow, fast = (1e30, 1e-30) if p.target.metric == "iteration_time_s" else (1e-30, 1e30)
    for value, picked in ((fast, p.anchor), (slow, p.target)):       # the anchor's ranked value decides the pick
        again.anchor_self = value
        regret = top1_outcomes([again])[0][3]
        assert regret == pytest.approx(1 - throughput(picked.metric, picked.measured) / best, abs=1e-12)


def test_the_one_factor_floor_is_the_hindsight_median_factor_of_each_sweep() -> None:
    """By hand: a sweep whose runs err by +10%, 0 and -10% in log; the median factor (0) leaves |e^-0.1 - 1| and
    |e^0.1 - 1| on the outer two, 0 on the middle one; a sweep off by one factor everywhere leaves nothing."""
    import math
    from types import SimpleNamespace

    from evals.anchor_eval import one_factor_floor

    def pair(sweep, label, r):
        return SimpleNamespace(target=SimpleNamespace(sweep=sweep, label=label), target_residual=r)

    spread = [pair("a", "a#0", 0.1), pair("a", "a#1", 0.0), pair("a", "a#2", -0.1)]
    expected = (abs(math.exp(-0.1) - 1) + 0 + abs(math.exp(0.1) - 1)) / 3
    assert one_factor_floor(spread) == pytest.approx(expected, rel=1e-12)
    assert one_factor_floor([pair("b", "b#0", 0.2), pair("b", "b#1", 0.2)]) == pytest.approx(0.0, abs=1e-12)
    assert one_factor_floor([]) is None


def test_a_top1_miss_names_its_pick_its_best_and_their_gaps(result) -> None:
    from evals.anchor_eval import top1_misses
    from evals.scoring import throughput

    import copy

    p = copy.copy(next(p for p in result.pairs if p.kind == "in-sweep" and p.anchor.measured != p.target.measured))
    worse, better = sorted((p.anchor, p.target), key=lambda r: throughput(r.metric, r.measured))
    fast = 1e30 if p.target.metric != "iteration_time_s" else 1e-30
    slow = 1e-30 if p.target.metric != "iteration_time_s" else 1e30
    p.band = (0.9, 1.1)
    if worse is p.target:          # the worse layout ranked first: a miss
        p.anchored, p.anchor_self = fast, slow
    else:
        p.anchored, p.anchor_self = slow, fast
    (miss,) = top1_misses([p])
    assert miss["pick"] == worse.label and miss["best"] == better.label and miss["bands_overlap"] is False
    assert miss["measured_gap"] == pytest.approx(1 - throughput(worse.metric, worse.measured)
                                                 / throughput(better.metric, better.measured), rel=1e-12)
    if worse is p.target:
        p.anchored, p.anchor_self = slow, fast
    else:
        p.anchored, p.anchor_self = fast, slow
    assert top1_misses([p]) == []
