"""run_search: ranking order, Pareto front, explicit candidates, and the nothing-satisfies explanations."""

from __future__ import annotations

import re

import pytest

from tools.candidates import TIE_TOLERANCE
from tools.constraints import Constraints
from tools.search import SearchRequest, SearchResult, run_search, what_if_gpus, what_if_summary

SMALL = {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8, "gbs": 32, "seq_len": 4096}


@pytest.fixture(scope="module")
def small() -> SearchResult:
    request = SearchRequest(**SMALL, top_k=100, constraints=Constraints(precision=["bf16", "fp8"], pp="<=2"))
    return run_search(request)


def test_ranked_by_throughput_then_headroom(small: SearchResult) -> None:
    ranked = small.ranked
    assert len(ranked) == min(100, small.projected)
    assert [c.rank for c in ranked] == list(range(1, len(ranked) + 1))
    for a, b in zip(ranked, ranked[1:], strict=False):
        # equally fast (within candidates.TIE_TOLERANCE of a tie run's head) may go simplest first
        tied = b.tokens_per_sec_per_gpu > a.tokens_per_sec_per_gpu * (1 - 2 * TIE_TOLERANCE)
        assert tied or (a.tokens_per_sec_per_gpu, a.headroom_fraction) >= (b.tokens_per_sec_per_gpu,
                                                                           b.headroom_fraction)
    assert ranked[0].reason.startswith("fastest")
    assert "slower than #1" in ranked[1].reason
    assert small.enumerated == small.screened_out + small.projected + small.pruned
    assert all(c.verdict != "out of memory" for c in ranked)


def test_top_k_keeps_the_best() -> None:
    request = SearchRequest(**SMALL, top_k=3, constraints=Constraints(precision="bf16", pp="<=2"))
    best3, all_ = run_search(request), run_search(request.model_copy(update={"top_k": 100}))
    assert [c.layout for c in best3.ranked] == [c.layout for c in all_.ranked[:3]]


def test_pareto_front_is_non_dominated(small: SearchResult) -> None:
    front = small.pareto
    assert front and front[0].tokens_per_sec_per_gpu == pytest.approx(small.ranked[0].tokens_per_sec_per_gpu)
    for a, b in zip(front, front[1:], strict=False):
        assert a.tokens_per_sec_per_gpu >= b.tokens_per_sec_per_gpu
        assert a.headroom_fraction < b.headroom_fraction


def test_constraints_and_headroom_apply(small: SearchResult) -> None:
    result = run_search(SearchRequest(**SMALL, constraints=Constraints.parse(["tp<=2", "precision=bf16",
                                                                              "headroom>=20%"])))
    assert result.ranked
    for c in result.ranked:
        assert c.config["tp"] <= 2 and c.config["precision"] == "bf16" and c.headroom_fraction >= 0.2


def test_explicit_candidates_are_ranked_and_illegal_ones_rejected() -> None:
    candidates = [{"tp": 2, "pp": 1, "mbs": 1, "zero": 1}, {"tp": 1, "pp": 2, "mbs": 1, "zero": 1},
                  {"tp": 3}, {"tp": 2, "bogus": 1}]
    result = run_search(SearchRequest(**SMALL, candidates=candidates))
    assert result.enumerated == 4 and len(result.rejected) == 2
    assert {tuple(sorted((k, v) for k, v in r["config"].items())) for r in result.rejected} == {
        (("tp", 3),), (("bogus", 1), ("tp", 2))}
    assert len(result.ranked) + result.screened_out == 2
    assert "illegal" in (result.message or "")


def test_constraint_that_excludes_everything_is_named() -> None:
    result = run_search(SearchRequest(**SMALL, constraints=Constraints.parse(["tp=16", "precision=bf16"])))
    assert not result.ranked
    assert "'tp=16' excludes every legal layout" in (result.message or "")


def test_too_few_gpus_says_how_many_are_needed() -> None:
    request = SearchRequest(model="llama3-70b", gpu="h100-sxm", num_gpus=8, gbs=64, seq_len=4096,
                            constraints=Constraints(precision="bf16"))
    result = run_search(request)
    assert not result.ranked
    match = re.search(r"the smallest layout that fits within the constraints needs (\d+) GPUs; you gave 8",
                      result.message or "")
    assert match, result.message
    needed = int(match.group(1))
    assert needed > 8 and needed % 8 == 0
    assert run_search(request.model_copy(update={"num_gpus": needed, "top_k": 1})).ranked


def test_unreachable_headroom_is_explained() -> None:
    result = run_search(SearchRequest(**SMALL, constraints=Constraints(min_headroom=0.95, precision="bf16")))
    assert not result.ranked
    assert "headroom" in (result.message or "")


def test_gbs_that_no_dp_divides_is_explained() -> None:
    # 1,024 GPUs: tp*pp*cp <= 8*32*2 (cp <= 2 at 4,096 tokens: 2,048 per CP rank) leaves dp >= 2, and an odd gbs
    # splits over no dp (on 512 GPUs TP8 PP32 CP2 DP1 takes gbs 3)
    result = run_search(SearchRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=1024, gbs=3, seq_len=4096))
    assert not result.ranked
    assert "gbs=3 is not divisible" in (result.message or "")


def test_what_if_more_gpus(small: SearchResult) -> None:
    base = small.request.model_copy(update={"top_k": 1, "constraints": Constraints(precision="bf16", pp=1)})
    other = what_if_gpus(base, 16)
    assert other.request.num_gpus == 16
    assert "16 x h100-sxm vs 8 x h100-sxm" in what_if_summary(small, other)


def test_progress_is_reported() -> None:
    calls: list[tuple[int, int]] = []
    run_search(SearchRequest(**SMALL, constraints=Constraints(precision="bf16", pp=1)),
               progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1][0] == calls[-1][1]
