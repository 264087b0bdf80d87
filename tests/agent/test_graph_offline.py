"""The tuning graph with the offline policy: equal to the search, legal, budgeted, and clear when nothing fits."""

from __future__ import annotations

from typing import Any

import pytest
from agent_jobs import SMALL_8

from agent.graph import build_graph, recursion_limit
from agent.policies.offline import OfflinePolicy
from agent.text.request import TuneRequest, parse_request
from agent.routing import after_parse, after_reflect
from agent.run import trial_log_rows, tune
from agent.space import LayoutSpace
from projection.legality import layout_violations
from projection.training_config import TrainingConfig
from tools.candidates import TIE_TOLERANCE
from tools.candidate_columns import enumerate_candidates
from tools.constraints import Constraints
from tools.framework_rules import launch_framework_of
from tools.search import SearchRequest, run_search


def search_best(request: TuneRequest) -> dict[str, Any]:
    """The search's best for the request, within what its launch framework runs (tune's default: megatron)."""
    result = run_search(SearchRequest(model=request.model, gpu=request.gpu, num_gpus=request.num_gpus,
                                      gpus_per_node=request.gpus_per_node, gbs=request.gbs, seq_len=request.seq_len,
                                      constraints=Constraints.parse(request.constraints),
                                      framework=launch_framework_of(request.framework)))
    return result.ranked[0].config


@pytest.fixture(scope="module")
def small() -> Any:
    return tune(SMALL_8)


def test_best_equals_the_search_and_was_scored(small: Any) -> None:
    report = small.report
    request = TuneRequest.model_validate(report.request)
    assert report.status == "ok" and report.policy == "offline" and not report.degraded
    assert report.best is not None and report.best.config == search_best(request)
    scored = {t["id"]: t for t in small.trials if t["status"] == "scored"}
    assert all(row.trial in scored and scored[row.trial]["config"] == row.config for row in report.top5)
    rates = [row.tokens_per_sec_per_gpu for row in report.top5]
    # best first; equally fast layouts (within candidates.TIE_TOLERANCE) may go simplest first
    assert all(b <= a * (1 + 2 * TIE_TOLERANCE) for a, b in zip(rates, rates[1:], strict=False))
    assert len(report.top5) == 5


@pytest.mark.parametrize("text", [
    "tune llama3 8b on 4 h100 with gbs 64, zero=1, mbs<=2, use fp8",          # fp8 and fp8-blockwise tie exactly
    "tune mixtral 8x7b on 16 mi300x, gbs 64, precision=bf16, zero=1, mbs=1, pp<=2",   # MoE: EP in the space
])
def test_best_equals_the_search_on_ties_and_moe(text: str) -> None:
    report = tune(text).report
    assert report.best is not None and report.best.config == search_best(TuneRequest.model_validate(report.request))


def test_every_offline_trial_is_legal_and_inside_the_search_space(small: Any) -> None:
    job = LayoutSpace(small.report.request)
    for trial in small.trials:
        config = TrainingConfig(**trial["config"])
        assert layout_violations(job.model, job.hardware, job.cluster, config) == []
        assert job.in_space(config), trial
    assert {t["source"] for t in small.trials} == {"seed", "search", "offline"}
    assert any(t.get("baseline") for t in small.trials)


def test_report_has_why_launch_config_and_stop_reason(small: Any) -> None:
    report = small.report
    assert report.why and "faster" in report.why[0]
    assert report.launch_config is not None and "--tensor-model-parallel-size" in report.launch_config["text"]
    assert report.stop_reason and report.rounds >= 1 and report.trials == len(small.trials)
    assert report.search is not None and report.search["enumerated"] > 0
    rows = trial_log_rows(small.trials)
    assert {"config", "verdict", "tokens_per_sec_per_gpu", "source", "round"} <= rows[0].keys()


def test_round_budget_is_kept() -> None:
    out = tune(SMALL_8, budget={"max_rounds": 1})
    assert out.report.rounds == 1 and out.report.stop_reason.startswith("round budget spent")
    assert max(t["round"] for t in out.trials) == 1


def test_search_space_membership_matches_the_enumerator() -> None:
    request = parse_request("llama3 8b on 8 h100, gbs 64, seq 16k, tp<=4")
    job = LayoutSpace(request)
    enumerated = list(enumerate_candidates(job.model, job.hardware, job.cluster, job.constraints, job.gbs,
                                           job.seq_len))
    assert enumerated and all(job.in_space(c) for c in enumerated)
    keys = {job.key(c) for c in enumerated}
    for raw in ({"tp": 8}, {"tp": 2, "sequence_parallel": False}, {"tp": 1, "zero": 2}, {"tp": 1, "mbs": 3},
                {"tp": 1, "moe_dispatcher": "deepep"}):
        checked = job.check(raw)
        if checked.config is not None and checked.status == "ok":
            assert job.in_space(checked.config) == (job.key(checked.config) in keys)


def test_impossible_request_says_why() -> None:
    out = tune("tune llama3.1-405b on 8 a100-40gb")
    report = out.report
    assert report.status == "no_fit" and report.best is None and report.top5 == []
    assert "256 GPUs" in report.message and "fits" in report.message


def test_clarification_goes_straight_to_the_report() -> None:
    report = tune("tune llama on 8 h100").report
    assert report.status == "clarification" and "Which model" in report.message and report.trials == 0


def test_routers_reject_unexpected_state() -> None:
    with pytest.raises(ValueError, match="neither a request nor a clarification"):
        after_parse({})
    with pytest.raises(ValueError, match="reflect did not run"):
        after_reflect({})
    assert after_reflect({"stop_reason": None}) == "propose" and after_reflect({"stop_reason": "x"}) == "report"


def test_graph_compiles_with_the_documented_nodes() -> None:
    graph = build_graph(OfflinePolicy())
    assert set(graph.get_graph().nodes) >= {"parse", "seed", "propose", "evaluate", "rank", "reflect", "report"}
    assert recursion_limit(3) < 100
