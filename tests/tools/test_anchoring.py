"""Anchors through the tools (inline data, never server paths) and the one reader of anchor files (issue 27)."""

from __future__ import annotations

from typing import Any

import pytest

from projection.errors import ProjtuneError
from projection.job import resolve_job
from tools.anchoring import anchoring_for, proxy_reason
from tools.registry import call_tool

JOB = {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 16}
LAYOUT = {"tp": 2, "pp": 2, "mbs": 1, "gbs": 64, "seq_len": 4096, "sequence_parallel": True, "zero": 1}


def _anchor(**update: Any) -> dict[str, Any]:
    run = {"label": "yesterday", "model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8,
           "config": {"tp": 1, "pp": 1, "mbs": 1, "gbs": 32, "seq_len": 4096, "zero": 1}, "iteration_time_s": 5.0,
           "peak_memory_gib": 40.0}
    return {**run, **update}


def test_project_tool_shows_anchored_and_unanchored() -> None:
    out = call_tool("project", {**JOB, "layout": LAYOUT, "anchors": [_anchor()]})
    assert out["ok"], out
    result = out["result"]
    assert result["anchoring"]["anchors"][0]["label"] == "yesterday"
    assert result["unanchored"]["iteration_time_s"] != pytest.approx(result["iteration_time_s"])
    factor = result["anchoring"]["corrections"]["compute_factor"]
    assert (result["iteration_time_s"] > result["unanchored"]["iteration_time_s"]) == (factor > 1)
    plain = call_tool("project", {**JOB, "layout": LAYOUT})["result"]
    assert plain["anchoring"] is None and plain["iteration_time_s"] == result["unanchored"]["iteration_time_s"]


def test_explain_tool_compares_the_anchored_projections() -> None:
    """tune's "Why it wins" line (explain) quotes the numbers its anchored table ranks, not the unanchored ones."""
    other = {**LAYOUT, "tp": 1, "pp": 4}
    out = call_tool("explain", {**JOB, "a": LAYOUT, "b": other, "anchors": [_anchor()]})
    assert out["ok"], out
    result = out["result"]
    for side, layout in (("a", LAYOUT), ("b", other)):
        anchored = call_tool("project", {**JOB, "layout": layout, "anchors": [_anchor()]})["result"]
        assert result[side]["tokens_per_sec_per_gpu"] == pytest.approx(anchored["tokens_per_sec_per_gpu"], rel=1e-9)
        assert result[side]["tokens_per_sec_per_gpu"] != pytest.approx(
            anchored["unanchored"]["tokens_per_sec_per_gpu"], rel=1e-6)
    assert f"{result['a']['tokens_per_sec_per_gpu']:,.0f}" in result["summary"]


def test_check_memory_tool_adds_the_measured_offset() -> None:
    out = call_tool("check_memory", {**JOB, "layout": LAYOUT, "anchors": [_anchor()]})["result"]
    assert out["peak_gib"] == pytest.approx(out["unanchored_peak_gib"] + out["memory_offset_gib"], rel=1e-9)
    assert out["memory_offset_gib"] != 0


def test_anchors_are_data_not_paths() -> None:
    out = call_tool("project", {**JOB, "layout": LAYOUT, "anchors": ["/etc/passwd"]})
    assert not out["ok"] and out["error"]["field"].startswith("anchors")


def test_an_anchor_of_another_gpu_or_model_is_refused() -> None:
    job = resolve_job("llama3-8b", "h100-sxm", 16)
    from projection.anchor import AnchorRun

    with pytest.raises(ProjtuneError, match="measured on mi300x"):
        anchoring_for(job, [AnchorRun.model_validate(_anchor(gpu="mi300x"))])
    with pytest.raises(ProjtuneError, match="not a run of llama3-8b"):
        anchoring_for(job, [AnchorRun.model_validate(_anchor(model="llama3-70b"))])


def test_a_reduced_layer_proxy_is_an_anchor() -> None:
    from projection.model_spec import load_model

    full = load_model("llama3-70b")
    proxy = full.model_copy(update={"num_layers": 40, "name": "llama3-70b-40l"})
    assert proxy_reason(proxy, full) is None
    assert "more layers" in proxy_reason(full, proxy)


def test_search_tool_takes_anchors() -> None:
    out = call_tool("search", {**JOB, "gbs": 64, "seq_len": 4096, "top_k": 2, "anchors": [_anchor()]})
    assert out["ok"], out
    ranked = out["result"]["ranked"]
    assert ranked and all(c["unanchored_tokens_per_sec_per_gpu"] for c in ranked)
    assert out["result"]["anchoring"]["summary"].startswith("anchored on 1 measured run")


def test_sweep_file_anchors_and_selection(tmp_path) -> None:
    from evals.anchor_read import read_anchors

    sweep = "evals/data/megatron-bridge-26.02.yaml#megatron-bridge-26.02-llama3-70b-gb200-64g-gbs256-s8k"
    every = read_anchors([sweep])
    one = read_anchors([sweep + "#1"])
    assert len(every) >= 2 and len(one) == 1 and one[0].label.endswith("#1")
    assert one[0].iteration_time_s == pytest.approx(every[1].iteration_time_s)
    with pytest.raises(ProjtuneError, match="no run 99"):
        read_anchors([sweep + "#99"])
    with pytest.raises(ProjtuneError, match="no sweep named"):
        read_anchors(["evals/data/megatron-bridge-26.02.yaml#megatron-bridge-26.02-llama3-70b"])
    with pytest.raises(ProjtuneError, match="does not exist"):
        read_anchors([str(tmp_path / "missing.log")])


def test_a_measured_mode_result_anchors_through_the_restore(tmp_path) -> None:
    """An analytic measurement restores to the engine's own projection, so its corrections are the identity."""
    from bench.measurement import write_measurement
    from bench.reduction import reduce_layout
    from bench.restore import analytic_measurement
    from evals.anchor_read import read_anchors
    from projection.training_config import TrainingConfig

    job = resolve_job("llama3-8b", "h100-sxm", 16)
    config = TrainingConfig(**LAYOUT)
    reduction = reduce_layout(job.model, job.cluster, config, local_gpus=8)
    path = tmp_path / "m.json"
    write_measurement(analytic_measurement(reduction), path)
    anchors = read_anchors([path])
    assert "measured mode" in anchors[0].label and anchors[0].num_gpus == 16
    corrections = anchoring_for(job, anchors).corrections
    assert corrections.compute_factor == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("seconds, peak", [(1.0, 10.0), (9.0, 60.0)])   # c < 1, offset < 0; c > 1, offset > 0
def test_pruning_changes_no_anchored_result(monkeypatch: pytest.MonkeyPatch, seconds: float, peak: float) -> None:
    """The anchored search bounds throughput by the smallest factor and screens with the memory offset, so pruning
    still changes neither its top-k nor its Pareto front."""
    from projection.anchor import AnchorRun
    from tools.constraints import Constraints
    from tools.search import SearchRequest, run_search
    from tools.search_core import Bounds

    anchor = AnchorRun.model_validate(_anchor(iteration_time_s=seconds, peak_memory_gib=peak))
    request = SearchRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=8, gbs=32, seq_len=4096, top_k=5,
                            constraints=Constraints(precision=["bf16", "fp8"], pp="<=2"), anchors=[anchor])
    pruned = run_search(request, workers=1)
    assert pruned.anchoring.corrections.compute_factor != 1.0 and pruned.anchoring.corrections.memory_offset_gib
    monkeypatch.setattr(Bounds, "dominated", lambda self, tps, headroom: False)
    full = run_search(request, workers=1)
    assert pruned.pruned > 0 and full.pruned == 0
    assert [c.layout for c in pruned.ranked] == [c.layout for c in full.ranked]
    assert [c.layout for c in pruned.pareto] == [c.layout for c in full.pareto]


def test_anchored_throughput_bounds_hold() -> None:
    """Every anchored projection stays under its throughput bound (what pruning relies on), for c < 1 and c > 1."""
    from projection.anchor import AnchorRun
    from tools.candidate_columns import enumerate_candidates
    from tools.constraints import Constraints
    from tools.search_core import Evaluator, Tally, group_by_recompute

    job = resolve_job("llama3-8b", "h100-sxm", 8)
    configs = list(enumerate_candidates(job.model, job.hardware, job.cluster, Constraints(pp="<=2"), 32, 4096))[::7]
    for seconds in (1.0, 9.0):
        corrections = anchoring_for(job, [AnchorRun.model_validate(_anchor(iteration_time_s=seconds))]).corrections
        evaluator = Evaluator(job, configs, group_by_recompute(configs), 0.0, keep_projections=False,
                              corrections=corrections)
        indices = list(range(len(configs)))
        for index, bound in zip(indices, evaluator.throughput_bounds(indices), strict=True):
            assert evaluator.project(index, Tally()).tokens_per_s_per_gpu <= bound * (1 + 1e-9)


def test_a_one_node_anchor_says_what_it_cannot_inform_at_scale() -> None:
    """1,024 GPUs from one 8-GPU node: the band names the communication share the anchor never ran and is wider than
    the same-scale anchored band; a same-scale target gets no such reason."""
    from projection.uncertainty import anchored_band_table

    far = call_tool("project", {**JOB, "num_gpus": 1024, "layout": {**LAYOUT, "gbs": 1024},
                                "anchors": [_anchor()]})["result"]
    reasons = " ".join(far["band_reasons"])
    assert "did not exercise" in reasons and "1024 GPUs" in reasons
    same = next(c for c in anchored_band_table().cells if c.anchor_class == "same-scale")
    low = far["tokens_per_sec_per_gpu_low"] / far["tokens_per_sec_per_gpu"]
    high = far["tokens_per_sec_per_gpu_high"] / far["tokens_per_sec_per_gpu"]
    assert high - low > same.high - same.low
    near = call_tool("project", {**JOB, "num_gpus": 8, "layout": {**LAYOUT, "gbs": 32},
                                 "anchors": [_anchor()]})["result"]
    assert not any("did not exercise" in r for r in near["band_reasons"])
