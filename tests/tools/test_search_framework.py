"""`search --framework F` prices every layout with F's record (issue 24): its top layouts' numbers equal `project`
of the same layouts run on F, and a search that names no framework says it priced with the default."""

from __future__ import annotations

import pytest

from projection.engine import project
from projection.job import resolve_job
from projection.training_config import TrainingConfig
from tools.search import SearchRequest, run_search

# (launch name, the recipe framework it runs: the sweep format's `framework`, written out here, not looked up;
#  model, GPU, GPUs, gbs, seq_len) - small jobs each launch framework can run
CASES = [
    ("torchtitan", "torchtitan", "llama3-8b", "h100-sxm", 16, 64, 4096),
    ("maxtext", "jax", "mixtral-8x7b", "mi300x", 16, 64, 4096),
    ("megatron-bridge", "nemo", "mixtral-8x7b", "h100-sxm", 16, 64, 4096),
    ("primus", "primus", "llama3-8b", "mi300x", 16, 64, 4096),
]


@pytest.mark.parametrize(("launch", "recipe", "model", "gpu", "n", "gbs", "seq"), CASES, ids=[c[0] for c in CASES])
def test_search_top5_equals_project_with_the_framework(launch: str, recipe: str, model: str, gpu: str, n: int,
                                                       gbs: int, seq: int) -> None:
    result = run_search(SearchRequest(model=model, gpu=gpu, num_gpus=n, gbs=gbs, seq_len=seq, framework=launch),
                        workers=1)
    assert result.framework == recipe and not result.framework_default
    assert len(result.ranked) == 5
    job = resolve_job(model, gpu, n)
    for c in result.ranked:
        assert c.config["framework"] == recipe
        config = TrainingConfig(**{k: v for k, v in c.config.items() if k != "dp" and v is not None})
        p = project(job.model, job.cluster, config, hardware=job.hardware, profile=job.profile)
        assert c.tokens_per_sec_per_gpu == pytest.approx(p.tokens_per_s_per_gpu, rel=1e-12)
        assert c.peak_memory_gib * 2**30 == pytest.approx(p.memory.peak_bytes, rel=1e-12)
        assert c.verdict == p.memory.verdict


def test_a_framework_changes_the_price_of_the_same_layout() -> None:
    """The same layout costs differently under torchtitan than under Megatron-core (FSDP2 fp32 shards, unfused loss,
    its profile): what the search priced before issue 24 was megatron's number for every framework."""
    request = SearchRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=16, gbs=64, seq_len=4096,
                            framework="torchtitan", top_k=1)
    best = run_search(request, workers=1).ranked[0]
    job = resolve_job("llama3-8b", "h100-sxm", 16)
    config = TrainingConfig(**{k: v for k, v in best.config.items() if k not in ("dp", "framework") and v is not None})
    megatron = project(job.model, job.cluster, config, hardware=job.hardware, profile=job.profile)
    assert abs(best.tokens_per_sec_per_gpu / megatron.tokens_per_s_per_gpu - 1) > 0.02


def test_the_default_framework_is_stated() -> None:
    result = run_search(SearchRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=8, gbs=32, seq_len=4096, top_k=1),
                        workers=1)
    assert result.framework == "megatron" and result.framework_default
    assert "framework" not in result.ranked[0].config or result.ranked[0].config["framework"] is None


def test_a_recipe_name_or_alias_reads_as_its_framework() -> None:
    base = dict(model="llama3-8b", gpu="h100-sxm", num_gpus=8, gbs=32, seq_len=4096, top_k=1)
    by_launch = run_search(SearchRequest(**base, framework="maxtext"), workers=1)
    by_recipe = run_search(SearchRequest(**base, framework="jax"), workers=1)
    assert by_launch.framework == by_recipe.framework == "jax"
    assert by_launch.ranked[0].config == by_recipe.ranked[0].config


def test_the_tool_api_and_a_tune_price_with_the_named_framework() -> None:
    """The search tool (the registry that MCP and the OpenAI schemas serve) and a tune that names the framework
    give the same numbers as the search with it."""
    from agent.run import tune
    from tools.registry import call_tool

    base = dict(model="llama3-8b", gpu="h100-sxm", num_gpus=16, gbs=64, seq_len=4096)
    direct = run_search(SearchRequest(**base, framework="torchtitan", top_k=1), workers=1).ranked[0]
    out = call_tool("search", {**base, "framework": "torchtitan", "top_k": 1})
    assert out["ok"] and out["result"]["framework"] == "torchtitan"
    assert out["result"]["ranked"][0]["tokens_per_sec_per_gpu"] == direct.tokens_per_sec_per_gpu
    report = tune("tune llama3 8b on 16 h100 with torchtitan, gbs 64, seq 4096", budget={"max_rounds": 1}).report
    assert report.best is not None and report.best.config["framework"] == "torchtitan"
    assert report.best.tokens_per_sec_per_gpu == pytest.approx(direct.tokens_per_sec_per_gpu, rel=1e-12)
