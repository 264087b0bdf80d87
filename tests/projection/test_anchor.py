"""projection/anchor.py: the correction solve, its bounds, and an anchored projection (issue 27)."""

from __future__ import annotations

import math

import pytest

from projection.anchor import (
    COMPUTE_FACTOR_BOUNDS,
    MEMORY_OFFSET_BOUND_GIB,
    AnchorPoint,
    Corrections,
    StepParts,
    anchor_point,
    anchored_projection,
    solve_corrections,
    step_parts,
)
from projection.engine import project
from projection.job import resolve_job
from projection.memory import GIB
from projection.training_config import TrainingConfig
from projection.uncertainty import ANCHOR_CLASSES, AnchoredBand, AnchoredBandTable, anchor_class, anchored_band


def _point(label: str, compute: float, comm: float, fixed: float, c: float, k: float, gpus: int = 8) -> AnchorPoint:
    return AnchorPoint(label=label, parts=StepParts(compute, comm, fixed),
                       measured_time_s=c * compute + k * comm + fixed, num_gpus=gpus)


@pytest.fixture(scope="module")
def projection():
    job = resolve_job("llama3-8b", "h100-sxm", 16)
    config = TrainingConfig(tp=2, pp=2, vpp=2, mbs=1, gbs=64, seq_len=4096, sequence_parallel=True, zero=1)
    return project(job.model, job.cluster, config, hardware=job.hardware, profile=job.profile)


def test_no_anchor_is_the_identity(projection) -> None:
    corrections = solve_corrections([])
    assert corrections.identity and anchored_projection(projection, corrections) is projection


def test_one_anchor_reproduces_its_own_measurement(projection) -> None:
    measured = projection.iteration_time_s * 1.1
    corrections = solve_corrections([anchor_point("run", projection, measured)])
    assert corrections.comm_factor == 1.0 and not corrections.comm_solved
    parts = step_parts(projection.breakdown)
    assert corrections.compute_factor == pytest.approx(1 + 0.1 * projection.iteration_time_s / parts.compute_s)
    anchored = anchored_projection(projection, corrections)
    assert anchored.iteration_time_s == pytest.approx(measured, rel=1e-12)
    assert anchored.tokens_per_s_per_gpu == pytest.approx(projection.tokens_per_s_per_gpu / 1.1, rel=1e-12)
    assert sum(anchored.breakdown.as_dict().values()) == pytest.approx(measured, rel=1e-9)
    assert corrections.residuals == (pytest.approx(0.0, abs=1e-12),)


def test_the_compute_factor_scales_only_compute(projection) -> None:
    parts = step_parts(projection.breakdown)
    anchored = anchored_projection(projection, Corrections(compute_factor=1.3))
    assert anchored.iteration_time_s - projection.iteration_time_s == pytest.approx(0.3 * parts.compute_s, rel=1e-9)
    anchored = anchored_projection(projection, Corrections(comm_factor=2.0))
    assert anchored.iteration_time_s - projection.iteration_time_s == pytest.approx(parts.comm_s, rel=1e-9)
    assert parts.comm_s > 0


def test_a_far_anchor_is_clipped_and_says_so() -> None:
    corrections = solve_corrections([_point("far", 1.0, 0.1, 0.05, c=3.0, k=1.0)])
    assert corrections.compute_factor == COMPUTE_FACTOR_BOUNDS[1]
    assert corrections.residuals[0] < -0.2 and "clipped" in corrections.notes[0]


def test_two_anchors_that_differ_in_communication_solve_both_factors() -> None:
    points = [_point("low-comm", 1.0, 0.05, 0.02, c=0.9, k=1.5), _point("high-comm", 1.0, 0.6, 0.02, c=0.9, k=1.5)]
    corrections = solve_corrections(points)
    assert corrections.comm_solved
    assert corrections.compute_factor == pytest.approx(0.9, rel=0.02)
    assert corrections.comm_factor == pytest.approx(1.5, rel=0.05)


def test_two_alike_anchors_keep_communication_at_its_prior() -> None:
    points = [_point("a", 1.0, 0.10, 0.02, c=0.9, k=1.5), _point("b", 2.0, 0.21, 0.04, c=0.9, k=1.5)]
    corrections = solve_corrections(points)
    assert not corrections.comm_solved and corrections.comm_factor == 1.0 and "kept at 1" in corrections.notes[0]


def test_memory_offset_is_the_mean_gap_bounded(projection) -> None:
    peak = projection.memory.peak_bytes / GIB
    corrections = solve_corrections([anchor_point("a", projection, 1.0, measured_peak_gib=peak + 2.0),
                                     anchor_point("b", projection, 1.0, measured_peak_gib=peak + 4.0)])
    assert corrections.memory_offset_gib == pytest.approx(3.0)
    anchored = anchored_projection(projection, corrections)
    assert anchored.memory.peak_bytes / GIB == pytest.approx(peak + 3.0)
    far = solve_corrections([anchor_point("far", projection, 1.0, measured_peak_gib=peak + 100.0)])
    assert far.memory_offset_gib == MEMORY_OFFSET_BOUND_GIB


def test_anchored_band_by_anchor_class() -> None:
    assert anchor_class(8, (8,)) == ANCHOR_CLASSES[0]
    assert anchor_class(64, (8,)) == ANCHOR_CLASSES[1]
    assert anchor_class(1024, (8,)) == ANCHOR_CLASSES[2]
    table = AnchoredBandTable(method="test", min_runs=1,
                              cells=(AnchoredBand(anchor_class="same-scale", low=0.95, high=1.05, runs=10),))
    assert anchored_band("same-scale", (0.8, 1.2), table) == (0.95, 1.05)
    # beyond the anchors: what they inform at the same-scale width, what they never ran at the unanchored one
    assert anchored_band("scale-out-far", (0.8, 1.2), table) == (0.95, 1.05)
    low, high = anchored_band("scale-out-far", (0.8, 1.2), table, uninformed=1.0)
    assert low == pytest.approx(math.exp(-math.hypot(math.log(0.95), math.log(0.8))))
    assert high == pytest.approx(math.exp(math.hypot(math.log(1.05), math.log(1.2))))
    empty = AnchoredBandTable(method="test", min_runs=1)
    assert anchored_band("scale-out-far", (0.8, 1.2), empty) == (0.8, 1.2)    # no evidence: the unanchored band


def test_the_shipped_table_is_narrower_at_the_same_scale_than_far_out() -> None:
    from projection.uncertainty import anchored_band_table

    cells = {c.anchor_class: c for c in anchored_band_table().cells}
    assert "same-scale" in cells
    if "scale-out-far" in cells:
        assert cells["scale-out-far"].low < cells["same-scale"].low


def test_a_shared_weight_shrinks_the_factors_in_log_space(projection) -> None:
    from projection.anchor import pooled_weight, posterior_weight, step_parts, with_shared_weight

    measured = projection.iteration_time_s * 1.2
    full = solve_corrections([anchor_point("run", projection, measured)])
    half = solve_corrections([anchor_point("run", projection, measured)], 0.5)
    # by hand: lam = 0.5 / (1 - 0.5) = 1; one anchor of compute share s weighs s^2 / (1 + s^2)
    share = step_parts(projection.breakdown).compute_share
    assert 0.5 < share < 1.0 and half.anchor_compute_shares == (pytest.approx(share),)
    assert half.compute_factor == pytest.approx(full.compute_factor ** (share ** 2 / (1 + share ** 2)), rel=1e-12)
    assert half.raw_compute_factor == full.compute_factor
    assert half.shared_weight == pytest.approx(share ** 2 / (1 + share ** 2))
    assert 1.0 < half.compute_factor < full.compute_factor
    none = solve_corrections([anchor_point("run", projection, measured)], 0.0)
    assert none.compute_factor == 1.0 and none.comm_factor == 1.0
    assert anchored_projection(projection, none).iteration_time_s == pytest.approx(projection.iteration_time_s)
    # n anchors that each share w of their error: Spearman-Brown n w / (1 + (n - 1) w)
    assert pooled_weight(0.5, 1) == 0.5 and pooled_weight(0.5, 3) == pytest.approx(0.75)
    assert pooled_weight(1.0, 4) == 1.0 and pooled_weight(0.0, 4) == 0.0
    # an anchor partly communication says less about the compute error than an all-compute one; none says nothing
    assert posterior_weight(0.5, (1.0,)) == pytest.approx(0.5)
    assert posterior_weight(0.5, (0.3,)) == pytest.approx(0.09 / 1.09)
    assert posterior_weight(0.5, (0.3,)) < posterior_weight(0.5, (0.9,)) < 0.5
    assert posterior_weight(0.5, (0.0,)) == 0.0 and posterior_weight(1.0, (0.1,)) == 1.0
    again = with_shared_weight(half, 1.0)
    assert again.compute_factor == pytest.approx(full.compute_factor, rel=1e-12)


def test_what_a_one_node_anchor_cannot_inform_widens_the_band() -> None:
    from projection.anchor import band_uninformed, uninformed_share

    anchor = _point("node", 8.0, 1.0, 1.0, 1.0, 1.0)                 # 10% communication
    corrections = solve_corrections([anchor])
    target = StepParts(8.0, 4.0, 1.0)                                 # 4/13 ~ 31% communication
    assert uninformed_share(target, corrections) == pytest.approx(4 / 13 - 0.1)
    assert band_uninformed("same-scale", target, corrections) == 0.0
    table = AnchoredBandTable(method="test", min_runs=1,
                              cells=(AnchoredBand(anchor_class="same-scale", low=0.95, high=1.05, runs=10),))
    low, high = anchored_band("scale-out-far", (0.7, 1.3), table, uninformed=0.5)
    assert low < 0.95 and high > 1.05                                  # wider than what the anchor informs
    assert low > 0.7 and high < 1.3                                    # narrower than knowing nothing
