"""The steady-state fast path of projection/pipeline.py gives the full simulation's bits.

The fast path simulates a shorter step, finds where every op finishes a fixed time after the
same op some periods earlier (checked on exact integers) and extrapolates; the full path runs
every op. Both must return identical makespans and memory peaks, also on near-equal stage times
(long transients, or a repetition period above one) and with p2p latency.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projection import fast_paths, pipeline_steady
from projection.pipeline import PipelineResult, Schedule, StageTimes, _duration_table, simulate_pipeline
from projection.pipeline_plan import _exact_ints
from projection.pipeline_steady import _steady_makespan

FAST_SCHEDULES: tuple[Schedule, ...] = ("1f1b", "zero-bubble", "interleaved")


def _both(stages: list[StageTimes], m: int, schedule: Schedule, p2p_s: float
          ) -> tuple[PipelineResult, PipelineResult]:
    fast = simulate_pipeline(stages, num_microbatches=m, schedule=schedule, p2p_s=p2p_s)
    with fast_paths.disabled():
        full = simulate_pipeline(stages, num_microbatches=m, schedule=schedule, p2p_s=p2p_s)
    return fast, full


def _took_shortcut(stages: list[StageTimes], m: int, schedule: Schedule, p2p_s: float, group: int) -> bool:
    ints, p2p, _ = _exact_ints(_duration_table(stages), p2p_s)
    return _steady_makespan(schedule, len(stages), len(stages[0].forward_s), m, group, ints, p2p) is not None


def _stages(rng: random.Random, pp: int, vpp: int, mode: str) -> list[StageTimes]:
    def draw() -> float:
        if mode == "random":
            return rng.uniform(0.05, 3.0)
        if mode == "near-equal":   # ties broken in the last bits: long transients
            return 1.0 + rng.choice((0.0, 1e-12, 1e-9, 3e-7)) * rng.random()
        return 1.0                 # exactly uniform: every tie exact
    return [StageTimes(forward_s=tuple(draw() for _ in range(vpp)),
                       backward_input_s=tuple(draw() for _ in range(vpp)),
                       backward_weight_s=tuple(0.7 * draw() for _ in range(vpp))) for _ in range(pp)]


@pytest.mark.parametrize("seed", range(6))
def test_fast_path_equals_full_simulation_on_random_layouts(seed: int) -> None:
    rng = random.Random(seed)
    shortcuts = 0
    for _ in range(40):
        schedule = rng.choice(FAST_SCHEDULES)
        pp = rng.choice((1, 2, 3, 4, 5, 8))
        vpp = rng.choice((2, 3, 4)) if schedule == "interleaved" else 1
        m = pp * rng.randint(1, 40) if schedule == "interleaved" else rng.randint(1, 300)
        stages = _stages(rng, pp, vpp, rng.choice(("random", "near-equal", "uniform")))
        p2p_s = rng.choice((0.0, 0.0137, 1e-6))
        fast, full = _both(stages, m, schedule, p2p_s)
        assert fast == full, (schedule, pp, vpp, m)
        shortcuts += _took_shortcut(stages, m, schedule, p2p_s, pp)
    assert shortcuts >= 10   # the comparison above exercised the fast path, not only the fallback


@pytest.mark.parametrize("schedule", FAST_SCHEDULES)
@pytest.mark.parametrize("epsilon", [1e-15, 1e-11, 1e-6, 1e-3])
def test_near_tied_stages_with_long_transients(schedule: Schedule, epsilon: float) -> None:
    """Two ranks slower than the rest by nearly the same amount: the max-plus transient lasts ~gap/epsilon."""
    pp, m = 6, 240
    vpp = 2 if schedule == "interleaved" else 1
    stages = [StageTimes(forward_s=(1.0 + (0.3 if r == 1 else 0.3 + epsilon if r == 4 else 0.0),) * vpp,
                         backward_input_s=(1.0 + (epsilon if r == 2 else 0.0),) * vpp,
                         backward_weight_s=(0.5,) * vpp) for r in range(pp)]
    for p2p_s in (0.0, 0.01):
        fast, full = _both(stages, m, schedule, p2p_s)
        assert fast == full


def test_repetition_period_above_one_is_found_and_exact() -> None:
    """1F1B where F and B alternate as bottleneck between ranks repeats every several microbatches."""
    stages = [StageTimes(forward_s=(f,), backward_input_s=(b,), backward_weight_s=(0.0,))
              for f, b in ((1.0, 3.0), (3.0, 1.0), (1.0, 3.0), (3.0, 1.0))]
    for m in range(40, 140, 7):
        fast, full = _both(stages, m, "1f1b", 0.25)
        assert fast == full


def test_fast_path_pays_on_long_steps() -> None:
    """m = 1024 on 8 ranks: the shortcut applies (what makes large-batch searches cheap)."""
    rng = random.Random(7)
    stages = _stages(rng, 8, 1, "random")
    for schedule in ("1f1b", "zero-bubble"):
        assert _took_shortcut(stages, 1024, schedule, 1e-5, 8)
        fast, full = _both(stages, 1024, schedule, 1e-5)
        assert fast == full


@st.composite
def _cases(draw: st.DrawFn) -> tuple[list[StageTimes], int, Schedule, float]:
    schedule: Schedule = draw(st.sampled_from(FAST_SCHEDULES))
    pp = draw(st.integers(1, 6))
    vpp = draw(st.integers(2, 3)) if schedule == "interleaved" else 1
    m = pp * draw(st.integers(1, 30)) if schedule == "interleaved" else draw(st.integers(1, 150))
    base = draw(st.floats(0.1, 2.0))
    jitter = st.sampled_from((0.0, 1e-13, 1e-9, 1e-4, 0.5))
    stages = [StageTimes(forward_s=tuple(base + draw(jitter) for _ in range(vpp)),
                         backward_input_s=tuple(base + draw(jitter) for _ in range(vpp)),
                         backward_weight_s=tuple(draw(jitter) for _ in range(vpp))) for _ in range(pp)]
    return stages, m, schedule, draw(st.sampled_from((0.0, 1e-6, 0.05)))


@settings(max_examples=150, deadline=None)
@given(_cases())
def test_fast_path_equals_full_simulation_property(case: tuple[list[StageTimes], int, Schedule, float]) -> None:
    stages, m, schedule, p2p_s = case
    fast, full = _both(stages, m, schedule, p2p_s)
    assert fast == full


@pytest.mark.parametrize("hits_on_try", [None, 2])
def test_a_shape_that_keeps_missing_stops_trying_the_shortcut(hits_on_try: int | None,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Two misses and no hit: later runs of the shape simulate at once (same bits); a shape that hit keeps trying."""
    monkeypatch.setattr(pipeline_steady, "_SHAPES_SEEN_CACHE", {("other", i): True for i in range(8)})
    monkeypatch.setattr(pipeline_steady, "_RESULT_CACHE", {})
    monkeypatch.setattr(pipeline_steady, "_STEADY_MISSES_CACHE", {})
    real = pipeline_steady._steady_makespan
    tries: list[int] = []

    def shortcut(*args: object) -> object:
        tries.append(1)
        return real(*args) if len(tries) == hits_on_try else None   # type: ignore[arg-type]

    monkeypatch.setattr(pipeline_steady, "_steady_makespan", shortcut)
    rng = random.Random(11)
    for _ in range(6):    # one shape, new stage times each run
        fast, full = _both(_stages(rng, 8, 1, "random"), 1024, "1f1b", 1e-5)
        assert fast == full
    assert len(tries) == (pipeline_steady._GIVE_UP_MISSES if hits_on_try is None else 6)


def _fresh_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process past its first few shapes (a search), with empty memos and shortcut records."""
    monkeypatch.setattr(pipeline_steady, "_SHAPES_SEEN_CACHE", {("other", i): True for i in range(8)})
    monkeypatch.setattr(pipeline_steady, "_RESULT_CACHE", {})
    monkeypatch.setattr(pipeline_steady, "_STEADY_MISSES_CACHE", {})
    monkeypatch.setattr(pipeline_steady, "_STEADY_FAMILY_CACHE", {})


@pytest.mark.parametrize("family_hit", [False, True])
def test_a_family_that_gave_up_on_a_longer_step_skips_the_shortcut_on_shorter_ones(
        family_hit: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """zero-bubble m = 600 gave up after trying: m = 300 and 200 of the same family never try the compiled-plan
    shortcut (same bits as the full simulation); with a hit at m <= theirs recorded, they try it."""
    _fresh_search(monkeypatch)
    tries: list[int] = []
    real = pipeline_steady._steady_makespan

    def shortcut(*args: object) -> object:
        tries.append(args[3])   # type: ignore[arg-type]
        return None if args[3] == 600 else real(*args)   # type: ignore[arg-type]

    monkeypatch.setattr(pipeline_steady, "_steady_makespan", shortcut)
    rng = random.Random(5)
    if family_hit:
        pipeline_steady._STEADY_FAMILY_CACHE[("zero-bubble", 8, 1, 8)] = ([100], [])
    for m in (600, 600, 600, 300, 300, 200):
        fast, full = _both(_stages(rng, 8, 1, "random"), m, "zero-bubble", 1e-5)
        assert fast == full
    expected = [600, 600] + ([300, 300, 200] if family_hit else [])
    assert tries == expected


@pytest.mark.parametrize("found", [False, True])
def test_what_the_first_one_pass_run_found_decides_whether_later_runs_try_the_shortcut(
        found: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A search's first run of a long 1f1b step takes the one pass that tests for a repetition: none found (as on
    near-equal stage times whose ties break in the last bits), later runs of the shape simulate at once; one
    found, they try the compiled-plan shortcut.  Same bits either way."""
    _fresh_search(monkeypatch)
    tries: list[tuple[object, ...]] = []
    real_steady, real_direct = pipeline_steady._steady_makespan, pipeline_steady._simulate_direct

    def shortcut(*args: object) -> object:
        tries.append(args[:4])
        return real_steady(*args)   # type: ignore[arg-type]

    def one_pass(*args: object, repeated: list[bool] | None = None, **options: object) -> object:
        result = real_direct(*args, repeated=repeated, **options)   # type: ignore[arg-type]
        if repeated:
            repeated[:] = [found]    # what the test found, as this case wants it
        return result

    monkeypatch.setattr(pipeline_steady, "_steady_makespan", shortcut)
    monkeypatch.setattr(pipeline_steady, "_simulate_direct", one_pass)
    rng = random.Random(9)
    pp, m = 16, 640                  # 20,480 ops: the one pass tests for a repetition
    for _ in range(3):
        fast, full = _both(_stages(rng, pp, 1, "random"), m, "1f1b", 1e-5)
        assert fast == full
    assert pipeline_steady._STEADY_MISSES_CACHE[("1f1b", pp, 1, m, pp)] == (
        -1 if found else pipeline_steady._GIVE_UP_MISSES)
    assert len(tries) == (2 if found else 0)
