"""Decisions under uncertainty, labelled MFU, job planning, the wider search space and the `tune` tool."""

from __future__ import annotations

import json

import anyio
import pytest
from typer.testing import CliRunner

from agent.decide import decision_text, differences, mfu_labels, near_ties
from agent.planning import PlanInputError, job_plan, parse_duration, parse_tokens
from agent.run import tune
from agent.state import RunOptions
from agent.tool import call_tool
from projection.hardware import load_hardware
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from projtune.cli import app
from tools.candidates import SearchSpace, break_ties, recompute_module_sets, simplicity
from tools.constraints import Constraints

runner = CliRunner()
SMALL = {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8, "gpus_per_node": 8, "gbs": 64, "seq_len": 4096}


def _trial(tid: int, tps: float, low: float, high: float, **config: object) -> dict[str, object]:
    return {"id": tid, "layout": f"L{tid}", "config": {"tp": 1, "pp": 1, **config}, "tokens_per_sec_per_gpu": tps,
            "tokens_per_sec_per_gpu_low": low, "tokens_per_sec_per_gpu_high": high}


def test_overlapping_intervals_are_near_ties_and_say_what_separates_them() -> None:
    best_first = [_trial(0, 100, 80, 120), _trial(1, 95, 76, 114, tp=2), _trial(2, 60, 48, 72, pp=2)]
    ties = near_ties(best_first)
    assert [t["trial"] for t in ties] == [1]                       # 72 < 80: #3 is clearly slower
    assert ties[0]["differs"] == "tp 1->2"
    text = decision_text(best_first, ties, None)
    assert text.startswith("near-tie") and "tp 1->2" in text and "benchmark" in text
    clear = decision_text([best_first[0], best_first[2]], near_ties([best_first[0], best_first[2]]), None)
    assert clear.startswith("clear")


def test_differences_name_recomputed_modules() -> None:
    a = {"recompute": "selective", "recompute_modules": ["core_attn"]}
    b = {"recompute": "selective", "recompute_modules": ["core_attn", "layernorm"]}
    assert differences(a, b) == "recompute_modules core_attn->core_attn+layernorm"


@pytest.mark.parametrize("gpu", ["h100-sxm", "mi300x", "b200"])
def test_fp8_mfu_is_against_the_fp8_peak_and_bf16_mfu_is_unchanged(gpu: str) -> None:
    hardware = load_hardware(gpu)
    ratio = hardware.peak_flops_for("bf16") / hardware.peak_flops_for("fp8")
    labels = mfu_labels(gpu, "fp8", 0.6)
    assert labels["mfu_bf16"] == 0.6 and labels["mfu_gemm"] == pytest.approx(0.6 * ratio)
    assert labels["mfu_gemm"] < labels["mfu_bf16"]                 # a bigger peak: a smaller fraction
    assert mfu_labels(gpu, "bf16", 0.4) == {"mfu_bf16": 0.4, "mfu_gemm": 0.4, "gemm_precision": "bf16"}


def test_token_and_duration_parsing() -> None:
    assert parse_tokens("15T") == 15e12 and parse_tokens("300B") == 3e11 and parse_tokens("2.5m") == 2.5e6
    assert parse_duration("30d") == 30 * 86400 and parse_duration("12h") == 12 * 3600
    assert parse_duration("2w") == 14 * 86400
    for bad in ("15X", "-3T", "", "T"):
        with pytest.raises(PlanInputError, match="--tokens"):
            parse_tokens(bad)
    with pytest.raises(PlanInputError, match="--deadline"):
        parse_duration("soon")


def test_plan_figures_follow_from_the_throughput() -> None:
    best = {"config": {"tp": 1, "pp": 1, "mbs": 1, "gbs": 64, "seq_len": 4096}, "tokens_per_sec_per_gpu": 10_000.0,
            "tokens_per_sec_per_gpu_low": 8_000.0, "tokens_per_sec_per_gpu_high": 12_000.0}
    plan = job_plan(best, {**SMALL, "num_gpus": 8}, tokens=1e12)
    assert plan["hours_per_billion_tokens"] == pytest.approx(1e9 / 80_000 / 3600)
    assert plan["days"] == pytest.approx(1e12 / 80_000 / 86400)
    assert plan["gpu_hours"] == pytest.approx(1e12 / 10_000 / 3600)
    lo, hi = plan["days_band"]
    assert lo < plan["days"] < hi                                   # the slow end of the band is the low throughput


def test_smallest_gpu_count_meets_the_deadline_at_the_slow_end() -> None:
    report = tune(request=SMALL, options=RunOptions(tokens=5e10, deadline_s=parse_duration("7d"))).report
    plan = report.plan
    assert plan["min_gpus"] is not None
    slow_days = plan["min_gpus_days_band"][1]
    assert slow_days <= 7.0
    # one DP step fewer would miss it (or does not exist): the answer is the smallest
    smaller = [n for n in range(1, plan["min_gpus"]) if 64 % n == 0]
    if smaller:
        n = smaller[-1]
        out = call_tool("project", {**{k: SMALL[k] for k in ("model", "gpu", "gpus_per_node")}, "num_gpus": n,
                                    "layout": {**report.best.config, "dp": None, "mbs": 1}})
        if out["ok"]:
            slow = out["result"]["tokens_per_sec_per_gpu_low"] * n
            assert 5e10 / slow / 86400 > 7.0


def test_report_states_its_assumptions_and_labels_mfu() -> None:
    report = tune("tune llama3 8b on 8 h100").report
    text = " ".join(report.assumptions).lower()
    for word in ("gbs", "seq", "precision", "framework", "per node"):
        assert word in text, (word, report.assumptions)
    assert report.best is not None and report.best.mfu_bf16 == report.best.mfu
    if report.best.config["precision"] != "bf16":
        assert report.best.mfu_gemm < report.best.mfu and report.best.gemm_precision == report.best.config["precision"]
    assert report.plan["hours_per_billion_tokens"] > 0 and report.decision


def test_module_sets_are_ones_the_framework_accepts() -> None:
    def sets(model: str) -> list[tuple[str, ...]]:
        space = SearchSpace(model=load_model(model), hardware=load_hardware("h100-sxm"),
                            cluster=Cluster(gpu="h100-sxm", num_gpus=64), constraints=Constraints(), gbs=64,
                            seq_len=4096)
        return recompute_module_sets(space)

    dense, moe, mla = sets("llama3-8b"), sets("mixtral-8x7b"), sets("deepseek-v3")
    assert dense == [("core_attn",), ("core_attn", "layernorm")]
    assert "moe_act" in moe[1] and "mla_up_proj" not in moe[1]       # moe_act needs MoE (grouped GEMM)
    assert {"moe_act", "mla_up_proj"} <= set(mla[1])                 # mla_up_proj needs MLA
    for chain in (dense, moe, mla):
        assert set(chain[0]) < set(chain[1])                         # each set extends the last (pruning chain)


def test_ties_go_to_the_simpler_layout_never_to_extreme_vpp() -> None:
    deep = TrainingConfig(pp=4, vpp=8, gbs=64)
    plain = TrainingConfig(pp=4, vpp=1, gbs=64)
    more = TrainingConfig(recompute="selective", recompute_modules=("core_attn", "layernorm"), gbs=64)
    less = TrainingConfig(recompute="selective", gbs=64)
    assert simplicity(plain) < simplicity(deep) and simplicity(less) < simplicity(more)
    items = [(1000.0, deep), (999.5, plain), (900.0, less)]
    ordered = break_ties(items, lambda i: i[0], lambda i: i[1])
    assert [i[1] for i in ordered] == [plain, deep, less]            # a 0.05% gap is a tie; 10% is not


def test_deepseek_search_considers_recompute_modules() -> None:
    out = call_tool("search", {"model": "deepseek-v3", "gpu": "h100-sxm", "num_gpus": 1024, "gbs": 1024,
                               "seq_len": 4096, "top_k": 20, "constraints": {"recompute": "selective"}})
    assert out["ok"], out.get("error")
    modules = {tuple(c["config"]["recompute_modules"]) for c in out["result"]["ranked"]}
    assert ("core_attn", "layernorm", "moe_act", "mla_up_proj") in modules   # the module variant was searched
    report = tune("DeepSeek-V3 on 1024 H100, 4k context").report
    assert report.best is not None
    if report.best.config["recompute"] == "selective":
        assert report.best.recompute_modules == list(report.best.config["recompute_modules"])
    # the answer names what the winner recomputes and the module variants the search enumerated
    rc = report.recompute
    assert rc["best"].startswith(report.best.config["recompute"])
    assert "selective: core_attn + layernorm + moe_act + mla_up_proj" in rc["considered"]
    assert "selective: core_attn" in rc["considered"] and "none" in rc["considered"]
    assert rc["best_selective"] is not None or "GiB per GPU" in rc["best_selective_note"]


def test_tune_tool_answers_the_whole_question() -> None:
    out = call_tool("tune", {"request": "tune llama3 8b on 8 h100, gbs 64", "max_rounds": 1, "tokens": "10B"})
    assert out["ok"], out.get("error")
    result = out["result"]
    assert result["status"] == "ok" and "tokens/s/GPU" in result["summary"]
    assert result["report"]["plan"]["days"] > 0 and result["report"]["assumptions"]
    asked = call_tool("tune", {"request": "make it fast"})
    assert asked["ok"] and asked["result"]["status"] == "clarification"
    bad = call_tool("tune", {"request": "tune llama3 8b on 8 h100", "tokens": "lots"})
    assert not bad["ok"] and "--tokens" in bad["error"]["message"]


def test_tune_tool_sends_progress_over_mcp() -> None:
    from mcp import Client

    from tools.mcp_server import build_server

    events: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        events.append((progress, message))

    async def main() -> dict[str, object]:
        with anyio.fail_after(60):
            async with Client(build_server(), raise_exceptions=True) as client:
                result = await client.call_tool("tune", {**SMALL, "max_rounds": 1}, progress_callback=on_progress)
                return result.structured_content

    payload = anyio.run(main)
    assert payload["ok"] and payload["result"]["status"] == "ok"
    assert len(events) >= 2 and any("round" in (m or "") for _, m in events)
    assert [p for p, _ in events] == sorted(p for p, _ in events)


def test_cli_plans_a_token_budget_and_a_deadline() -> None:
    result = runner.invoke(app, ["tune", "tune llama3 8b on 8 h100, gbs 64", "--offline", "--json", "--tokens", "50B",
                                 "--deadline", "7d", "--rounds", "1"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["plan"]
    assert plan["tokens"] == 5e10 and plan["deadline_days"] == 7 and "min_gpus" in plan
    bad = runner.invoke(app, ["tune", "tune llama3 8b on 8 h100", "--offline", "--tokens", "many"])
    assert bad.exit_code == 2 and "--tokens" in bad.output and "Traceback" not in bad.output


def test_measured_mode_benchmarks_the_near_ties_and_picks_the_fastest_measured(monkeypatch: pytest.MonkeyPatch
                                                                                ) -> None:
    from agent.toolbox import Toolbox

    offline = tune(request=SMALL, budget={"max_rounds": 1}).report
    assert offline.near_ties, "the small job has near-tied layouts"
    assert "benchmark" in offline.decision and any("would settle it" in n for n in offline.notes)
    runner_up = offline.near_ties[0]["config"]
    from tools.schemas import BenchmarkOutput

    def fake(self: Toolbox, config: dict[str, object]) -> BenchmarkOutput:
        measured = 9_000.0 if config == runner_up else 5_000.0       # the runner-up really is faster
        return BenchmarkOutput(available=True, message="fake GPU",
                               results={"projection": {"tokens_per_sec_per_gpu": measured}})

    monkeypatch.setattr(Toolbox, "run_benchmark", fake)
    measured = tune(request=SMALL, budget={"max_rounds": 1},
                    options=RunOptions(allow_benchmark=True, benchmark_top=1)).report
    assert measured.best is not None and measured.best.config == runner_up
    assert measured.decision.startswith("near-tie settled by benchmark")


def test_hsdp_and_deepep_are_searched_where_they_apply() -> None:
    from projection.legality import layout_violations
    from tools.candidate_columns import enumerate_candidates

    def space(model: str, n: int, gbs: int) -> tuple[object, object, Cluster, list[TrainingConfig]]:
        m, h = load_model(model), load_hardware("h100-sxm")
        cluster = Cluster(gpu=h.id, num_gpus=n)
        return m, h, cluster, list(enumerate_candidates(m, h, cluster, Constraints(), gbs, 4096))

    m, h, cluster, dense = space("llama3-8b", 64, 256)
    hsdp = [c for c in dense if c.fsdp_size is not None]
    assert hsdp and all(c.zero == 3 and c.fsdp_size == 8 // c.tp for c in hsdp)
    assert all(not layout_violations(m, h, cluster, c) for c in hsdp)
    assert {c.moe_dispatcher for c in dense} == {"alltoall"}
    *_, moe = space("deepseek-v3", 256, 512)
    deepep = [c for c in moe if c.moe_dispatcher == "deepep"]
    assert deepep and all(c.ep * c.etp > 8 for c in deepep)          # only where the EP group spans nodes
