"""The one-pass pipeline simulation (a shape's first run) equals the compiled plan's max-plus pass bit for bit.

Every schedule, random shapes and op times (random, near-equal: ties broken in the last bits, exactly
uniform), with and without a p2p latency: makespan (exact integers), peak in flight and peak pending W
are equal; and through ``simulate_pipeline``, the first call of a shape (direct pass) and a later one
(compiled plan) give the same result as the full simulation with the fast paths off.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projection import fast_paths, pipeline_steady
from projection.pipeline import Schedule, StageTimes, _duration_table, _validate_shape, simulate_pipeline
from projection.pipeline_direct import simulate_direct as _simulate_direct
from projection.pipeline_plan import _compile_plan, _exact_ints, _run_plan

SCHEDULES: tuple[Schedule, ...] = ("1f1b", "zero-bubble", "interleaved", "zbv", "gpipe")


def _shape(draw: st.DrawFn, schedule: Schedule) -> tuple[int, int, int]:
    if schedule == "zbv":
        pp = draw(st.integers(1, 6))
        return pp, 2, draw(st.integers(1, 3 * pp))
    pp = draw(st.integers(1, 8))
    if schedule == "interleaved":
        pp = max(pp, 2)
        return pp, draw(st.integers(2, 4)), pp * draw(st.integers(1, 6))
    return pp, 1, draw(st.integers(1, 60))


@st.composite
def _cases(draw: st.DrawFn) -> tuple[list[StageTimes], int, Schedule, float]:
    schedule: Schedule = draw(st.sampled_from(SCHEDULES))
    pp, vpp, m = _shape(draw, schedule)
    base = draw(st.floats(0.05, 3.0))
    jitter = st.sampled_from((0.0, 1e-13, 1e-9, 1e-4, 0.5, 2.0))
    weight = 0.0 if schedule in ("1f1b", "interleaved", "gpipe") and draw(st.booleans()) else None
    stages = [StageTimes(forward_s=tuple(base + draw(jitter) for _ in range(vpp)),
                         backward_input_s=tuple(base + draw(jitter) for _ in range(vpp)),
                         backward_weight_s=tuple(weight if weight is not None else draw(jitter) for _ in range(vpp)))
              for _ in range(pp)]
    return stages, m, schedule, draw(st.sampled_from((0.0, 1e-6, 0.05, 1.3)))


@settings(max_examples=200, deadline=None)
@given(_cases())
def test_direct_pass_equals_compiled_plan(case: tuple[list[StageTimes], int, Schedule, float]) -> None:
    stages, m, schedule, p2p_s = case
    pp, vpp = len(stages), len(stages[0].forward_s)
    group = _validate_shape(schedule, pp, vpp, m, None)
    ints, p2p, _ = _exact_ints(_duration_table(stages), p2p_s)
    plan = _compile_plan(schedule, pp, vpp, m, group)
    fin = _run_plan(plan, ints, p2p)
    expected = (max(fin[i] for i in plan.last_op), plan.peak_in_flight, plan.peak_pending_weight_grad)
    assert _simulate_direct(schedule, pp, vpp, m, group, ints, p2p) == expected


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_first_and_later_runs_of_a_shape_equal_the_full_simulation(schedule: Schedule,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline_steady, "_SHAPES_SEEN_CACHE", {})
    monkeypatch.setattr(pipeline_steady, "_RESULT_CACHE", {})
    direct_runs = []
    real = pipeline_steady._simulate_direct

    def counted(*args: object, **options: object) -> object:
        direct_runs.append(args[:4])
        return real(*args, **options)   # type: ignore[arg-type]

    monkeypatch.setattr(pipeline_steady, "_simulate_direct", counted)
    rng = random.Random(3)
    pp, vpp, m = (4, 2, 12) if schedule == "zbv" else (4, 3, 8) if schedule == "interleaved" else (4, 1, 9)
    for _ in range(3):   # same shape, new times: the first run one-pass, the rest on the compiled plan
        stages = [StageTimes(forward_s=tuple(rng.uniform(0.5, 2) for _ in range(vpp)),
                             backward_input_s=tuple(rng.uniform(0.5, 2) for _ in range(vpp)),
                             backward_weight_s=tuple(rng.uniform(0, 1) for _ in range(vpp))) for _ in range(pp)]
        fast = simulate_pipeline(stages, num_microbatches=m, schedule=schedule, p2p_s=0.01)
        with fast_paths.disabled():
            full = simulate_pipeline(stages, num_microbatches=m, schedule=schedule, p2p_s=0.01)
        assert fast == full
    assert len(direct_runs) == 1



def test_one_f_one_b_generators_equal_the_compiled_plan_on_every_small_shape() -> None:
    """1f1b and interleaved run as per-rank generators in the direct pass (`_direct_one_f_one_b`): on every
    small shape (group sizes included), with random and tied times and with and without p2p, the makespan and
    the closed-form peaks equal the compiled plan's."""
    rng = random.Random(7)
    checked = 0
    for schedule in ("1f1b", "interleaved"):
        for pp in range(1, 6):
            for vpp in (1,) if schedule == "1f1b" else (2, 3):
                for m in range(1, 19):
                    for group in (pp,) if schedule == "1f1b" else range(pp, m + 1):
                        try:
                            _validate_shape(schedule, pp, vpp, m, None if schedule == "1f1b" else group)
                        except ValueError:
                            continue
                        for tied, p2p in ((False, 0), (True, 3), (False, 1 << 40)):
                            size = pp * vpp * 4
                            ints = [1 << 50] * size if tied else [rng.randrange(1, 1 << 70) for _ in range(size)]
                            plan = _compile_plan(schedule, pp, vpp, m, group)
                            fin = _run_plan(plan, ints, p2p)
                            expected = (max(fin[i] for i in plan.last_op), plan.peak_in_flight,
                                        plan.peak_pending_weight_grad)
                            assert _simulate_direct(schedule, pp, vpp, m, group, ints, p2p) == expected
                            checked += 1
    assert checked > 1000
