"""The cold steady-state shortcut of the one-pass simulation (projection/pipeline_direct.py) gives the compiled
plan's bits, takes the shortcut on long steps, and its reach bounds hold.

The reference is the exact simulator: the compiled op graph of the readable orders and its max-plus pass
(`_compile_plan`, `_run_plan`).  Layouts: random, near-equal (ties broken in the last bits: long transients,
cycles of several periods) and uniform stage times, with and without p2p latency, deep pipelines, interleaved
groups with a remainder (the shorter step's table is then not a prefix of the long one's).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from projection import pipeline_direct
from projection.pipeline import _validate_shape
from projection.pipeline_direct import simulate_direct
from projection.pipeline_period import REACH_BOUNDS, periodic_shape
from projection.pipeline_plan import _compile_plan, _run_plan
from projection.pipeline_steady import _reach


def _reference(schedule: str, pp: int, vpp: int, m: int, group: int, ints: list[int], p2p: int
               ) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    plan = _compile_plan(schedule, pp, vpp, m, group)
    fin = _run_plan(plan, ints, p2p)
    return max(fin[i] for i in plan.last_op), plan.peak_in_flight, plan.peak_pending_weight_grad


def _times(rng: random.Random, pp: int, vpp: int, mode: str) -> list[int]:
    """Op times as exact integers, (rank * vpp + chunk) * 4 + kind (F, B, W, B+W)."""
    def draw() -> int:
        if mode == "random":
            return rng.randrange(1 << 40, 1 << 42)
        if mode == "near-equal":     # every rank the same but for the last bits: long transients, long cycles
            return (1 << 50) + rng.choice((0, 1, 3, 1 << 12))
        return 1 << 50
    times: list[int] = []
    for _ in range(pp * vpp):
        f, b, w = draw(), draw(), draw() // 2
        times += [f, b, w, b + w]
    return times


def _layouts(seed: int, count: int) -> list[tuple[str, int, int, int, int, str, int]]:
    rng = random.Random(seed)
    layouts = []
    while len(layouts) < count:
        schedule = rng.choice(("1f1b", "interleaved"))
        pp = rng.choice((1, 2, 3, 4, 6, 8, 16, 32))
        if schedule == "1f1b":
            vpp, m, group = 1, rng.randint(1, 400), pp
        else:
            pp = max(pp, 2)
            vpp = rng.choice((2, 3, 4))
            group = rng.choice((pp, pp + 1, 2 * pp))
            m = group * rng.randint(1, 40) + rng.choice((0, pp, group - 1 if group - 1 >= pp else 0))
        try:
            _validate_shape(schedule, pp, vpp, m, None if schedule == "1f1b" else group)
        except ValueError:
            continue
        p2p = rng.choice((0, 1 << 38, 7))
        layouts.append((schedule, pp, vpp, m, group, rng.choice(("random", "near-equal", "uniform")), p2p))
    return layouts


@pytest.mark.parametrize("seed", range(4))
def test_cold_shortcut_equals_the_compiled_plan(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[bool] = []
    extrapolate = pipeline_direct._Shortcut.extrapolate

    def counted(self: pipeline_direct._Shortcut, *args: Any) -> int | None:
        result = extrapolate(self, *args)
        taken.append(result is not None)
        return result

    monkeypatch.setattr(pipeline_direct._Shortcut, "extrapolate", counted)
    monkeypatch.setattr(pipeline_direct, "_MIN_OPS", 0)     # short steps too: many more shapes take the shortcut
    rng = random.Random(100 + seed)
    for schedule, pp, vpp, m, group, mode, p2p in _layouts(seed, 30):
        ints = _times(rng, pp, vpp, mode)
        expected = _reference(schedule, pp, vpp, m, group, ints, p2p)
        assert simulate_direct(schedule, pp, vpp, m, group, ints, p2p) == expected, (schedule, pp, vpp, m, group)
        assert simulate_direct(schedule, pp, vpp, m, group, ints, p2p, shortcut=False) == expected
    assert sum(taken) >= 5      # the comparison exercised the shortcut, not only the plain pass


def test_deep_pipelines_take_the_shortcut_and_keep_the_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """PP 32 and 64 with m = 8 pp: near-equal ranks (cycles up to pp periods long) and a slower last rank."""
    taken: list[tuple[int, int, int]] = []
    pause = pipeline_direct._Shortcut.pause

    def seen(self: pipeline_direct._Shortcut, *args: Any) -> None:
        pause(self, *args)
        if self.taken is not None and self.taken[:3] not in taken:
            taken.append(self.taken[:3])

    monkeypatch.setattr(pipeline_direct._Shortcut, "pause", seen)
    rng = random.Random(5)
    for pp in (32, 64):
        for mode in ("near-equal", "random"):
            ints = _times(rng, pp, 1, mode)
            ints[-4:] = [x + (x >> 4) for x in ints[-4:]]          # the loss stage is slower
            for p2p in (0, 1 << 38):
                m = 8 * pp
                assert simulate_direct("1f1b", pp, 1, m, pp, ints, p2p) == _reference("1f1b", pp, 1, m, pp, ints, p2p)
    assert len(taken) >= 4


def test_interleaved_with_a_remainder_group_swaps_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """m % group != 0: the shorter step's forward table differs from the long one's after its full groups."""
    monkeypatch.setattr(pipeline_direct, "_MIN_OPS", 0)
    tables: list[int] = []
    table = pipeline_direct._one_f_one_b_table

    def counted(*args: Any) -> Any:
        tables.append(args[3])
        return table(*args)

    monkeypatch.setattr(pipeline_direct, "_one_f_one_b_table", counted)
    rng = random.Random(11)
    pp, vpp, group = 4, 2, 5
    for m in (5 * 30 + 4, 5 * 41 + 4):
        for mode in ("random", "near-equal", "uniform"):
            ints = _times(rng, pp, vpp, mode)
            for p2p in (0, 1 << 38):
                expected = _reference("interleaved", pp, vpp, m, group, ints, p2p)
                assert simulate_direct("interleaved", pp, vpp, m, group, ints, p2p) == expected
    assert sum(m not in (5 * 30 + 4, 5 * 41 + 4) for m in tables) >= 4   # shorter steps' tables were built


def test_a_failed_check_runs_the_long_step_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """Should the finished shorter step not repeat to its end, the long step runs again without the shortcut."""
    checks: list[int] = []
    monkeypatch.setattr(pipeline_direct._Shortcut, "extrapolate", lambda self, *args: checks.append(1))
    monkeypatch.setattr(pipeline_direct, "_MIN_OPS", 0)
    rng = random.Random(2)
    ints = _times(rng, 8, 1, "random")
    assert simulate_direct("1f1b", 8, 1, 300, 8, ints, 1 << 38) == _reference("1f1b", 8, 1, 300, 8, ints, 1 << 38)
    assert checks == [1]     # the shortcut was taken, its check refused, and the long step ran in full


def test_reach_bounds_hold_on_every_small_shape_and_deep_ones() -> None:
    """`REACH_BOUNDS` are upper bounds of the reach read off the op graph (`pipeline_steady._reach`)."""
    shapes = []
    for schedule, bound in REACH_BOUNDS.items():
        for pp in (*range(1, 9), 16, 32):
            for vpp in (1,) if schedule == "1f1b" else (2, 3):
                for m in (*range(1, 40), 4 * pp + 3):
                    for group in (pp,) if schedule == "1f1b" else range(pp, min(m, 2 * pp) + 1):
                        try:
                            _validate_shape(schedule, pp, vpp, m, None if schedule == "1f1b" else group)
                        except ValueError:
                            continue
                        if periodic_shape(schedule, pp, vpp, m, group) is None:
                            continue
                        reach = _reach(schedule, pp, vpp, m, group)
                        assert all(x <= y for x, y in zip(reach, bound, strict=True)), (schedule, pp, vpp, m, group)
                        shapes.append((schedule, pp))
    assert len(shapes) > 300
