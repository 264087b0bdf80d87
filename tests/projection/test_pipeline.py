"""Tests for projection/pipeline.py, the pipeline-schedule simulator.

Golden values are the closed forms of Narayanan et al. 2021 (arXiv 2104.04473,
Sec. 2.2: 1F1B and interleaved bubbles), Qi et al. 2024 (arXiv 2401.10241:
ZB-H1, ZB-V) and the Primus-Pipeline blog (shared/notes/primus-projection.md,
Sec. 8.3), on uniform stages where they are exact.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projection.pipeline import (
    SCHEDULES,
    PipelineResult,
    Schedule,
    StageTimes,
    closed_form_bubble_fraction,
    peak_in_flight_closed_form,
    simulate_pipeline,
)
from projection.pipeline_plan import _rank_arrays

REL = 1e-9
VPP_OF: dict[str, int] = {"1f1b": 1, "zero-bubble": 1, "gpipe": 1, "zbv": 2, "interleaved": 2}


def uniform(pp: int, vpp: int, *, forward_s: float, backward_s: float) -> list[StageTimes]:
    """Return pp identical ranks whose backward splits 50/50 into B and W."""
    return [
        StageTimes(
            forward_s=(forward_s,) * vpp,
            backward_input_s=(backward_s / 2,) * vpp,
            backward_weight_s=(backward_s / 2,) * vpp,
        )
        for _ in range(pp)
    ]


def run(stages: list[StageTimes], m: int, schedule: Schedule, **kwargs: float) -> PipelineResult:
    """Call simulate_pipeline with keyword arguments."""
    return simulate_pipeline(stages, num_microbatches=m, schedule=schedule, **kwargs)


# --- Uniform stages against the closed forms ---------------------------------------


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("pp", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("m", [1, 2, 3, 8, 17, 64])
def test_1f1b_and_gpipe_makespan_is_m_plus_p_minus_1_slots(schedule: Schedule, pp: int,
                                                            m: int) -> None:
    f = 1.25
    result = run(uniform(pp, 1, forward_s=f, backward_s=2 * f), m, schedule)
    assert result.makespan_s == pytest.approx((m + pp - 1) * 3 * f, rel=REL)
    assert result.bubble_fraction == pytest.approx(
        closed_form_bubble_fraction(schedule, pp, 1, m), rel=REL, abs=1e-12
    )


@pytest.mark.parametrize("pp", [1, 2, 4, 8])
@pytest.mark.parametrize("vpp", [2, 3, 4])
@pytest.mark.parametrize("groups_per_step", [1, 2, 3, 5])
def test_interleaved_makespan_is_m_v_plus_p_minus_1_chunk_slots(pp: int, vpp: int,
                                                                 groups_per_step: int) -> None:
    # Chunk times f/v, b/v: makespan (m*v + p - 1) * (f + b) / v, i.e. the bubble
    # (p-1)/(m*v + p - 1) of Narayanan et al. 2021, Sec. 2.2.2.
    f = 0.75
    m = pp * groups_per_step
    stages = uniform(pp, vpp, forward_s=f / vpp, backward_s=2 * f / vpp)
    result = run(stages, m, "interleaved")
    assert result.makespan_s == pytest.approx((m * vpp + pp - 1) * 3 * f / vpp, rel=REL)
    assert result.bubble_fraction == pytest.approx(
        closed_form_bubble_fraction("interleaved", pp, vpp, m), rel=REL, abs=1e-12
    )


@pytest.mark.parametrize(("pp", "m", "group"), [(4, 10, 6), (4, 11, 7), (3, 14, 5), (2, 7, 7)])
def test_interleaved_with_larger_groups_keeps_the_bubble(pp: int, m: int, group: int) -> None:
    stages = uniform(pp, 2, forward_s=1.0, backward_s=2.0)
    result = run(stages, m, "interleaved", microbatch_group_size=group)
    assert result.makespan_s == pytest.approx((2 * m + pp - 1) * 3.0, rel=REL)


@pytest.mark.parametrize("pp", [2, 3, 4, 8])
@pytest.mark.parametrize("m_per_pp", [1, 2, 5])
def test_zero_bubble_beats_1f1b_and_matches_zb_h1(pp: int, m_per_pp: int) -> None:
    m = pp * m_per_pp
    stages = uniform(pp, 1, forward_s=1.0, backward_s=2.0)  # T_F = T_B = T_W
    zb = run(stages, m, "zero-bubble")
    one_f_one_b = run(stages, m, "1f1b")
    assert zb.bubble_fraction < one_f_one_b.bubble_fraction
    assert zb.bubble_fraction == pytest.approx(
        closed_form_bubble_fraction("zero-bubble", pp, 1, m), rel=REL
    )
    # Qi et al. 2024, Sec. 3.1: ZB-H1 bubble (p-1)(T_F + T_B - T_W) = (p-1) * T_F here.
    assert zb.makespan_s - 3 * m == pytest.approx(pp - 1, rel=REL)
    assert zb.peak_in_flight == one_f_one_b.peak_in_flight


@pytest.mark.parametrize(("forward_s", "backward_input_s", "backward_weight_s"),
                         [(1.0, 1.0, 1.0), (1.0, 1.2, 0.8), (1.0, 1.5, 0.5), (1.5, 2.0, 1.0)])
@pytest.mark.parametrize("pp", [2, 4, 8])
def test_zero_bubble_bubble_time_is_the_zb_h1_formula(forward_s: float, backward_input_s: float,
                                                      backward_weight_s: float, pp: int) -> None:
    # Qi et al. 2024, Sec. 3.1: ZB-H1 idles (p-1)(T_F + T_B - T_W); needs T_W <= T_F, T_B.
    m = 4 * pp
    stages = [StageTimes(forward_s=(forward_s,), backward_input_s=(backward_input_s,),
                         backward_weight_s=(backward_weight_s,)) for _ in range(pp)]
    busy_s = m * (forward_s + backward_input_s + backward_weight_s)
    assert run(stages, m, "zero-bubble").makespan_s - busy_s == pytest.approx(
        (pp - 1) * (forward_s + backward_input_s - backward_weight_s), rel=REL
    )


@pytest.mark.parametrize("pp", [2, 3, 4, 6, 8, 16])
@pytest.mark.parametrize("m_per_pp", [1, 2, 3])
@pytest.mark.parametrize("extra_m", [0, 1])
def test_zbv_beats_zero_bubble_and_matches_closed_form(pp: int, m_per_pp: int,
                                                       extra_m: int) -> None:
    m = pp * m_per_pp + extra_m
    f = 0.5
    zbv = run(uniform(pp, 2, forward_s=f / 2, backward_s=f), m, "zbv")
    zb = run(uniform(pp, 1, forward_s=f, backward_s=2 * f), m, "zero-bubble")
    assert zbv.bubble_fraction < zb.bubble_fraction
    assert zbv.bubble_fraction == pytest.approx(
        closed_form_bubble_fraction("zbv", pp, 2, m), rel=REL
    )


# --- Point-to-point latency ---------------------------------------------------------


@pytest.mark.parametrize("pp", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("p2p_s", [0.01, 0.3, 5.0])
def test_p2p_latency_on_the_critical_path(pp: int, p2p_s: float) -> None:
    stages = uniform(pp, 1, forward_s=1.0, backward_s=2.0)
    slot_s = 3.0

    def makespan_s(m: int, schedule: Schedule, latency_s: float) -> float:
        return run(stages, m, schedule, p2p_s=latency_s).makespan_s

    # One microbatch goes down p-1 links and back up p-1 links.
    assert makespan_s(1, "1f1b", p2p_s) - makespan_s(1, "1f1b", 0.0) == pytest.approx(
        2 * (pp - 1) * p2p_s, rel=REL, abs=1e-12
    )
    # GPipe pays the latency once in the fill and once in the drain, whatever m is.
    for m in (3, 4 * pp):
        assert makespan_s(m, "gpipe", p2p_s) - makespan_s(m, "gpipe", 0.0) == pytest.approx(
            2 * (pp - 1) * p2p_s, rel=REL, abs=1e-12
        )
    # In 1F1B steady state rank 0 holds pp microbatches, so every pp microbatches
    # take one round trip: pp slots plus 2(pp-1) sends.
    for m in (pp, 2 * pp + 1):
        assert makespan_s(m + pp, "1f1b", p2p_s) - makespan_s(m, "1f1b", p2p_s) == pytest.approx(
            pp * slot_s + 2 * (pp - 1) * p2p_s, rel=REL
        )


# --- Uneven stages ------------------------------------------------------------------


def ends_heavy(pp: int, slow_factor: float) -> list[StageTimes]:
    """Return ranks of f=1, b=2 with the first and last rank slower by slow_factor."""
    stages = []
    for r in range(pp):
        scale = slow_factor if r in (0, pp - 1) else 1.0
        stages.append(StageTimes(forward_s=(scale,), backward_input_s=(scale,),
                                 backward_weight_s=(scale,)))
    return stages


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "zero-bubble"])
@pytest.mark.parametrize("pp", [2, 4, 8])
@pytest.mark.parametrize("m", [1, 4, 32])
def test_uneven_stages_are_slower_than_uniform(schedule: Schedule, pp: int, m: int) -> None:
    uneven = run(ends_heavy(pp, 1.5), m, schedule)
    even = run(ends_heavy(pp, 1.0), m, schedule)
    assert uneven.makespan_s >= max(uneven.busy_s)
    assert uneven.makespan_s > even.makespan_s


@pytest.mark.parametrize("schedule", ["1f1b", "zero-bubble"])
@pytest.mark.parametrize("pp", [2, 4, 8])
def test_slowest_stage_dominates_for_large_m(schedule: Schedule, pp: int) -> None:
    m = 512
    stages = ends_heavy(pp, 1.7)
    slot_s = [s.forward_s[0] + s.backward_input_s[0] + s.backward_weight_s[0] for s in stages]
    makespan_s = run(stages, m, schedule).makespan_s
    # The slowest rank runs back to back after the fill; the fill is at most
    # one pass of every rank.
    assert m * max(slot_s) <= makespan_s <= (m - 1) * max(slot_s) + sum(slot_s) + 1e-9


# --- Activation memory --------------------------------------------------------------


@pytest.mark.parametrize("pp", [1, 2, 4, 8])
@pytest.mark.parametrize("m", [1, 3, 8, 20])
def test_1f1b_peak_in_flight_is_pp_minus_rank(pp: int, m: int) -> None:
    result = run(uniform(pp, 1, forward_s=1.0, backward_s=2.0), m, "1f1b")
    assert result.peak_in_flight == tuple(min(pp - r, m) for r in range(pp))
    assert run(uniform(pp, 1, forward_s=1.0, backward_s=2.0), m, "gpipe").peak_in_flight == (
        (m,) * pp
    )


def _grid() -> list[tuple[str, int, int, int, int | None]]:
    cases: list[tuple[str, int, int, int, int | None]] = []
    for pp in (1, 2, 3, 4, 8):
        for m in sorted({1, 2, pp - 1, pp, pp + 1, 2 * pp, 3 * pp + 1, 24}):
            if m < 1:
                continue
            cases += [(s, pp, 1, m, None) for s in ("1f1b", "gpipe", "zero-bubble")]
            cases.append(("zbv", pp, 2, m, None))
            for vpp in (2, 3, 4):
                if m % pp == 0:
                    cases.append(("interleaved", pp, vpp, m, None))
                if m >= pp + 1 and (m % (pp + 1) == 0 or m % (pp + 1) >= pp):
                    cases.append(("interleaved", pp, vpp, m, pp + 1))
    return cases


@pytest.mark.parametrize(("schedule", "pp", "vpp", "m", "group"), _grid())
def test_peak_in_flight_matches_closed_form(schedule: Schedule, pp: int, vpp: int, m: int,
                                            group: int | None) -> None:
    stages = uniform(pp, vpp, forward_s=1.0, backward_s=2.0)
    kwargs = {} if group is None else {"microbatch_group_size": group}
    result = run(stages, m, schedule, **kwargs)
    expected = tuple(
        peak_in_flight_closed_form(schedule, pp, vpp, m, r, microbatch_group_size=group)
        for r in range(pp)
    )
    assert result.peak_in_flight == expected


def _alive_peaks(schedule: Schedule, pp: int, vpp: int, m: int) -> list[tuple[int, int]]:
    """Per rank: peak of (F done, W not done) and of 2*(F done, B not done) + pending W."""
    peaks = []
    for order in _rank_arrays(schedule, pp, vpp, m, pp).tolist():
        forward_done = backward_done = weight_done = 0
        peak_f_to_w = peak_half_sets = 0
        for kind, _, _ in order:
            forward_done += kind == 0
            backward_done += kind in (1, 3)
            weight_done += kind in (2, 3)
            peak_f_to_w = max(peak_f_to_w, forward_done - weight_done)
            peak_half_sets = max(peak_half_sets, 2 * (forward_done - backward_done)
                                 + backward_done - weight_done)
        peaks.append((peak_f_to_w, peak_half_sets))
    return peaks


@pytest.mark.parametrize("pp", [1, 2, 4, 8])
@pytest.mark.parametrize("m", [1, 4, 8, 33])
def test_zero_bubble_memory_limits(pp: int, m: int) -> None:
    # ZB-H1 keeps 1F1B's peak of pp microbatches (F done, W not done) per rank.
    assert all(f_to_w <= pp for f_to_w, _ in _alive_peaks("zero-bubble", pp, 1, m))
    # ZB-V: 2 half sets per chunk activation, 1 per pending W, at most 4*pp.
    assert all(half_sets <= 4 * pp for _, half_sets in _alive_peaks("zbv", pp, 2, m))


# --- Argument checks ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "pp", "vpp", "m", "kwargs", "match"),
    [
        ("zbv", 4, 3, 8, {}, "zbv needs vpp=2, got vpp=3"),
        ("1f1b", 4, 2, 8, {}, "1f1b needs vpp=1, got vpp=2"),
        ("interleaved", 4, 1, 8, {}, "interleaved needs vpp >= 2"),
        ("interleaved", 4, 2, 3, {}, "interleaved needs num_microbatches >= pp"),
        ("interleaved", 4, 2, 10, {}, "remainder 2"),
        ("interleaved", 4, 2, 10, {"microbatch_group_size": 3}, "pp <= microbatch_group_size"),
        ("1f1b", 4, 1, 8, {"microbatch_group_size": 4}, "interleaved only"),
        ("1f1b", 4, 1, 0, {}, "num_microbatches must be >= 1"),
        ("1f1b", 4, 1, 8, {"p2p_s": -1.0}, "p2p_s must be finite"),
        ("pipedream", 4, 1, 8, {}, "schedule must be one of"),
    ],
)
def test_bad_arguments_raise(schedule: str, pp: int, vpp: int, m: int,
                             kwargs: dict[str, float], match: str) -> None:
    stages = uniform(pp, vpp, forward_s=1.0, backward_s=2.0)
    with pytest.raises(ValueError, match=match):
        simulate_pipeline(stages, num_microbatches=m, schedule=schedule,  # type: ignore[arg-type]
                          **kwargs)


def test_bad_stage_times_raise() -> None:
    with pytest.raises(ValueError, match="backward_input_s has 1 entries"):
        StageTimes(forward_s=(1.0, 1.0), backward_input_s=(1.0,), backward_weight_s=(1.0, 1.0))
    with pytest.raises(ValueError, match="forward_s must be finite and >= 0"):
        StageTimes(forward_s=(-1.0,), backward_input_s=(1.0,), backward_weight_s=(1.0,))
    mixed = [uniform(1, 2, forward_s=1.0, backward_s=2.0)[0],
             uniform(1, 1, forward_s=1.0, backward_s=2.0)[0]]
    with pytest.raises(ValueError, match=r"stages\[1\] has 1 chunks"):
        simulate_pipeline(mixed, num_microbatches=4, schedule="interleaved")
    with pytest.raises(ValueError, match="rank must be in"):
        peak_in_flight_closed_form("1f1b", 4, 1, 8, 4)


# --- Properties ---------------------------------------------------------------------


@st.composite
def pipelines(draw: st.DrawFn) -> tuple[list[StageTimes], int, Schedule, float]:
    """Draw random stages, a valid microbatch count, a schedule and a latency."""
    schedule: Schedule = draw(st.sampled_from(SCHEDULES))
    pp = draw(st.integers(1, 6))
    vpp = draw(st.integers(2, 3)) if schedule == "interleaved" else VPP_OF[schedule]
    if schedule == "interleaved":
        m = pp * draw(st.integers(1, 4))
    else:
        m = draw(st.integers(1, 20))
    times = st.floats(1e-3, 10.0, allow_nan=False, allow_infinity=False)
    stages = [
        StageTimes(
            forward_s=tuple(draw(times) for _ in range(vpp)),
            backward_input_s=tuple(draw(times) for _ in range(vpp)),
            backward_weight_s=tuple(draw(times) for _ in range(vpp)),
        )
        for _ in range(pp)
    ]
    p2p_s = draw(st.floats(0.0, 2.0, allow_nan=False))
    return stages, m, schedule, p2p_s


@settings(max_examples=300, deadline=None)
@given(pipelines())
def test_makespan_bounds_and_bubble_range(case: tuple[list[StageTimes], int, Schedule,
                                                      float]) -> None:
    stages, m, schedule, p2p_s = case
    result = run(stages, m, schedule, p2p_s=p2p_s)
    assert math.isfinite(result.makespan_s)
    tol = 1e-9 * max(1.0, result.makespan_s)
    assert all(result.makespan_s >= busy - tol for busy in result.busy_s)
    assert 0.0 <= result.bubble_fraction < 1.0
    # Microbatch 0 runs every F and every B one after the other.
    one_pass_s = sum(sum(s.forward_s) + sum(s.backward_input_s) for s in stages)
    assert result.makespan_s >= one_pass_s - tol
    # Max-plus makespans never shrink when a latency grows.
    assert run(stages, m, schedule, p2p_s=p2p_s + 0.5).makespan_s >= result.makespan_s - tol


@settings(max_examples=200, deadline=None)
@given(pipelines(), st.floats(1.0, 3.0))
def test_slower_op_never_speeds_up(case: tuple[list[StageTimes], int, Schedule, float],
                                   factor: float) -> None:
    stages, m, schedule, p2p_s = case
    slower = list(stages)
    s0 = stages[0]
    slower[0] = StageTimes(forward_s=tuple(x * factor for x in s0.forward_s),
                           backward_input_s=s0.backward_input_s,
                           backward_weight_s=s0.backward_weight_s)
    base_s = run(stages, m, schedule, p2p_s=p2p_s).makespan_s
    assert run(slower, m, schedule, p2p_s=p2p_s).makespan_s >= base_s * (1 - 1e-12)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("pp", [1, 2, 3, 4, 8])
def test_bubble_never_grows_with_more_microbatches(schedule: Schedule, pp: int) -> None:
    vpp = VPP_OF[schedule]
    stages = uniform(pp, vpp, forward_s=1.0 / vpp, backward_s=2.0 / vpp)
    if schedule == "interleaved":
        counts = [pp * k for k in range(1, 9)]
    else:
        counts = list(range(1, 4 * pp + 3))
    bubbles = [run(stages, m, schedule).bubble_fraction for m in counts]
    assert all(later <= earlier + 1e-12 for earlier, later in zip(bubbles, bubbles[1:]))
