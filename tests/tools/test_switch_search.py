"""The search's per-layout switch choice (tools/switch_rules.switch_choices + the fallback pass of tools/search.py)
equals an exhaustive search over every switch combination megatron-core accepts: same top-k and Pareto front.

Exhaustive: every enumerated layout under every subset of comm_overlap (the expert overlap only where
megatron-core accepts it) and CUDA graphs on/off (on only where allowed), each screened and projected; a layout
keeps its fastest setting that fits (equal speed: more switches on), then layouts rank by throughput."""

from __future__ import annotations

from itertools import combinations

import pytest

from projection.engine import project
from projection.vocabulary import COMM_OVERLAPS
from tools.constraints import Constraints
from tools.search import SearchRequest, passes, resolve_request, run_search, screen_memory
from tools.candidates import break_ties
from tools.switch_rules import cuda_graphs_allowed
from projection.switches import ep_overlap_blockers

SWITCHES = ("comm_overlap", "cuda_graphs")


LAYOUT_KEYS = ("tp", "pp", "cp", "ep", "etp", "vpp", "dp", "mbs", "precision", "recompute", "recompute_num_layers",
               "zero", "fsdp_size", "moe_dispatcher", "pp_schedule")


def _bare(config: dict) -> tuple:
    return tuple(repr(config.get(k)) for k in LAYOUT_KEYS)


def _exhaustive(request: SearchRequest, layouts) -> list[tuple[tuple, float, float, object]]:
    job = resolve_request(request)
    best: list[tuple[tuple, float, float, object]] = []
    for layout in layouts:
        bare = layout.model_copy(update={"comm_overlap": None, "cuda_graphs": None})
        overlaps = [c for c in COMM_OVERLAPS if c != "ep" or not ep_overlap_blockers(bare)]
        graphs = [False, True] if cuda_graphs_allowed("megatron", job.model, bare) else [False]
        found = None
        for n in range(len(overlaps) + 1):
            for subset in combinations(overlaps, n):
                for g in graphs:
                    config = bare.model_copy(update={"comm_overlap": subset, "cuda_graphs": g})
                    memory = screen_memory(job, config)
                    if not passes(memory, request.constraints.min_headroom):
                        continue
                    p = project(job.model, job.cluster, config, hardware=job.hardware, profile=job.profile,
                                check=False)
                    key = (p.tokens_per_s_per_gpu, n + g)      # fastest; equal speed: more switches on
                    if found is None or key > found[0]:
                        found = (key, p.memory.headroom_fraction, config)
        if found is not None:
            best.append((_bare(bare.model_dump(mode="json")), found[0][0], found[1], found[2]))
    return best


REQUESTS = [
    SearchRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=16, gbs=64, seq_len=8192, top_k=5,
                  constraints=Constraints.parse(["pp<=2", "mbs<=2", "precision=bf16", "cp=1", "zero<=1", "vpp=1", "tp<=2",
                                                 "recompute=none,full"])),
    SearchRequest(model="qwen3-30b-a3b", gpu="h100-sxm", num_gpus=16, gbs=32, seq_len=4096, top_k=5,
                  constraints=Constraints.parse(["pp=1", "mbs<=4", "precision=bf16", "cp=1", "tp<=2", "zero<=1",
                                                 "moe_dispatcher=alltoall", "recompute=none,full"])),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=["dense-graphs", "moe-expert-overlap"])
def test_switch_choice_equals_exhaustive_search(request_: SearchRequest) -> None:
    from tools.candidate_columns import enumerate_candidates

    job = resolve_request(request_)
    layouts = list(enumerate_candidates(job.model, job.hardware, job.cluster, request_.constraints, request_.gbs,
                                        request_.seq_len))
    assert 4 <= len(layouts) <= 160
    reference = _exhaustive(request_, layouts)
    result = run_search(request_, workers=1)
    ordered = sorted(reference, key=lambda r: (-r[1], -r[2]))
    # the answer lists near-ties (tools.candidates.TIE_TOLERANCE) simplest first, as the search does
    top = break_ties(ordered, lambda r: r[1], lambda r: r[3])[:request_.top_k]
    got = [(_bare(c.config), c.tokens_per_sec_per_gpu, c.headroom_fraction) for c in result.ranked]
    assert [g[1:] for g in got] == [r[1:3] for r in top]
    assert {g[0] for g in got} == {r[0] for r in top}
    front, top = [], -1.0
    for r in ordered:
        if r[2] > top:
            front.append(r)
            top = r[2]
    pareto = sorted((_bare(c.config), c.tokens_per_sec_per_gpu, c.headroom_fraction) for c in result.pareto)
    assert pareto == sorted(r[:3] for r in front)
    # the switches matter here: some layout's best setting is not the framework default, and the answer says so
    assert any(c.config.get("cuda_graphs") or "ep" in (c.config.get("comm_overlap") or ()) for c in result.ranked)


def test_a_layout_that_fits_only_without_cuda_graphs_is_searched_without_them(monkeypatch) -> None:
    """A minimum headroom between a layout's headroom with and without CUDA graphs: the search takes its fallback
    (graphs off), and the answer still equals the exhaustive one."""
    import tools.search as search
    from tools.candidate_columns import enumerate_candidates

    base = SearchRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=16, gbs=64, seq_len=8192, top_k=5,
                         constraints=Constraints.parse(["pp<=2", "mbs<=2", "precision=bf16", "cp=1", "zero<=1",
                                                        "vpp=1", "tp<=2", "recompute=none,full"]))
    job = resolve_request(base)
    layouts = list(enumerate_candidates(job.model, job.hardware, job.cluster, base.constraints, base.gbs,
                                        base.seq_len))
    graphed = max((c for c in layouts if c.cuda_graphs), key=lambda c: screen_memory(job, c).headroom_fraction)
    on = screen_memory(job, graphed).headroom_fraction
    off = screen_memory(job, graphed.model_copy(update={"cuda_graphs": False})).headroom_fraction
    assert off > on
    request = base.model_copy(update={"constraints": base.constraints.model_copy(
        update={"min_headroom": (on + off) / 2})})
    searched: list[int] = []
    more = search._search_more
    monkeypatch.setattr(search, "_search_more", lambda *a: searched.append(len(a[7])) or more(*a))
    result = run_search(request, workers=1)
    assert searched and searched[0] >= 1
    reference = sorted(_exhaustive(request, layouts), key=lambda r: (-r[1], -r[2]))
    top = break_ties(reference, lambda r: r[1], lambda r: r[3])[:request.top_k]
    got = [(_bare(c.config), c.tokens_per_sec_per_gpu, c.headroom_fraction) for c in result.ranked]
    assert got == [r[:3] for r in top]
    assert any(not c.config.get("cuda_graphs") and _bare(c.config) == _bare(graphed.model_dump(mode="json"))
               for c in [*result.ranked, *result.pareto])


@pytest.mark.parametrize(("index", "flags"), [
    (0, ("--cuda-graph-impl local", "--overlap-grad-reduce", "--overlap-param-gather")),
    (1, ("--overlap-moe-expert-parallel-comm", "--overlap-grad-reduce")),
])
def test_searched_switches_reach_the_megatron_export_and_pass_its_checks(index: int, flags: tuple[str, ...]) -> None:
    pytest.importorskip("megatron.core")
    from projection.training_config import TrainingConfig
    from tools.exports import export_launch_config
    from tools.exports.checks import validate

    request = REQUESTS[index]
    job = resolve_request(request)
    result = run_search(request, workers=1)
    chosen = next(c for c in result.ranked if c.config.get("cuda_graphs") or "ep" in (c.config.get("comm_overlap") or ()))
    config = TrainingConfig(**chosen.config)
    launch = export_launch_config(job.model, job.cluster, config, "megatron")
    for flag in flags:
        assert flag in launch.text, flag
    assert validate(launch, job.model, job.cluster) == []
