"""TP all-reduce and EP all-to-all over 2 spawned gloo ranks, in bounded time."""

from __future__ import annotations


import pytest

from bench.collectives import CollectiveSpec, measure_collectives
from projection.errors import ProjtuneError


def test_all_reduce_and_all_to_all_over_two_gloo_ranks() -> None:
    specs = [CollectiveSpec(op="all_reduce", group_size=2, message_bytes=64 * 1024),
             CollectiveSpec(op="all_to_all", group_size=2, message_bytes=64 * 1024)]
    timings = measure_collectives(specs, backend="gloo", warmup=1, iters=3, timeout_s=25)   # bounded by its timeout
    assert [t.op for t in timings] == ["all_reduce", "all_to_all"]
    for t in timings:
        assert t.group_size == 2 and t.backend == "gloo"
        assert t.message_bytes == 64 * 1024 and 0 < t.time_ms < 10_000


def test_a_run_past_its_timeout_is_stopped() -> None:
    with pytest.raises(ProjtuneError, match="did not finish"):   # the timeout stopped it (the error says so)
        measure_collectives([CollectiveSpec(op="all_reduce", group_size=2, message_bytes=1024)], backend="gloo",
                            timeout_s=0.2)
