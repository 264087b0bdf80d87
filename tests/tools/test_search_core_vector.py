"""The search's fast paths (vectorised throughput bound, pipeline steady state and memo) change no bit.

Small jobs with the shapes of the benchmark cases (dense with pipeline depth and many micro-batches,
MoE with expert parallelism): the batched bound equals the scalar one on every candidate, and the
whole search, top-k and Pareto front with their numbers, is the same with the fast paths off.
"""

from __future__ import annotations

import pytest

from projection import fast_paths, pipeline_steady
from tools import search_core
from tools.candidate_columns import enumerate_candidates
from tools.constraints import Constraints
from tools.search import SearchRequest, SearchResult, resolve_request, run_search
from tools.search_core import Evaluator, default_workers, group_by_recompute

CASES = [
    # many micro-batches per pipeline (llama3-70b on 64 GPUs with gbs 2048, scaled down)
    SearchRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=16, gbs=512, seq_len=4096, top_k=5,
                  constraints=Constraints(tp="<=2", mbs="<=2")),
    # MoE with EP (mixtral-8x22b on MI300X / deepseek-v3 on H100, scaled down)
    SearchRequest(model="mixtral-8x7b", gpu="mi300x", num_gpus=16, gbs=64, seq_len=4096, top_k=5,
                  constraints=Constraints(pp="<=4", mbs=1)),
    # MoE at long context with FSDP groups (qwen3-235b-a22b on 256 MI355X at 32k, scaled down)
    SearchRequest(model="qwen3-30b-a3b", gpu="mi355x", num_gpus=16, gbs=16, seq_len=32768, top_k=5,
                  constraints=Constraints(precision="bf16", pp="<=2", tp="<=2", cp="<=2", mbs=1)),
]
CASE_IDS = ["dense-deep", "moe", "qwen3-moe-32k"]


def _view(result: SearchResult) -> tuple[object, ...]:
    def rows(candidates: list) -> tuple[object, ...]:
        return tuple((tuple(sorted(c.config.items())), c.tokens_per_sec_per_gpu, c.headroom_fraction,
                      c.iteration_time_s, c.peak_memory_gib) for c in candidates)
    return rows(result.ranked), rows(result.pareto), result.enumerated


@pytest.mark.parametrize("request_", CASES, ids=CASE_IDS)
def test_batched_bound_equals_scalar_bound_on_every_candidate(request_: SearchRequest) -> None:
    job = resolve_request(request_)
    configs = list(enumerate_candidates(job.model, job.hardware, job.cluster, request_.constraints, request_.gbs,
                                        request_.seq_len))
    evaluator = Evaluator(job, configs, group_by_recompute(configs), 0.0, keep_projections=False)
    indices = list(range(0, len(configs), max(1, len(configs) // 400)))
    assert len(indices) > 50
    batched = evaluator.throughput_bounds(indices)
    scalar = [evaluator.throughput_bound(i) for i in indices]
    assert batched == scalar        # bit for bit, not approximately


@pytest.mark.parametrize("request_", CASES, ids=CASE_IDS)
def test_search_with_fast_paths_equals_exact_search(request_: SearchRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    shortcuts = []
    steady = pipeline_steady._steady_makespan

    def counted(*args: object) -> object:
        result = steady(*args)
        shortcuts.append(result is not None)
        return result

    monkeypatch.setattr(pipeline_steady, "_steady_makespan", counted)
    fast = run_search(request_, workers=1)
    if request_.model == "llama3-8b":
        assert sum(shortcuts) > 20     # the comparison covers the steady-state shortcut, not only the memo
    with fast_paths.disabled():
        exact = run_search(request_, workers=1)
    assert fast.ranked and fast.pareto
    assert _view(fast) == _view(exact)
    assert (fast.screened_out, fast.projected, fast.pruned) == (exact.screened_out, exact.projected, exact.pruned)


def test_one_worker_unless_the_space_is_large_and_a_core_is_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_core, "idle_cores", lambda: 0.4)
    assert default_workers(10**6) == 1          # loaded machine: a second worker would only compete
    monkeypatch.setattr(search_core, "idle_cores", lambda: 3.0)
    assert default_workers(100) == 1            # small space: forking costs more than it saves
    assert default_workers(10**6) == 2
