"""The busiest rank's work the search bounds with (projection/busiest_work.py) is the stage times' own sum.

- Per layout, :func:`busiest_work` equals the largest per-rank sum of the engine's stage times (forward +
  backward-input + backward-weight, embedding and LM head included) to 1e-12: every term of the stage times
  counts (a term zeroed on either side breaks this), and the bound is tight where the pipeline has no bubble;
- the search's batched bounds over the columns (keys built from column codes, tools/search_core.py) equal the
  one-layout bound of :func:`projection.engine.iteration_time_lower_bound` bit for bit, on MoE spaces where the
  framework's default switches depend on the pipeline (EP overlap rules) and with full and selective recompute.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from projection import engine
from projection.busiest_work import FLOAT_SLACK, busiest_work, stage_layers
from projection.engine import iteration_time_lower_bound, layer_work
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.model_spec import load_model
from projection.switches import resolve_switches
from projection.training_config import Cluster
from tools.candidate_columns import enumerate_candidates, enumerate_columns
from tools.candidates import SearchSpace, job_template
from tools.constraints import Constraints
from tools.search import SearchRequest, resolve_request
from tools import search_core
from tools.search_core import Evaluator

_JOBS = [("llama3-8b", "h100-sxm", 16, 64, 4096, Constraints()),
         ("mixtral-8x7b", "mi300x", 16, 64, 4096, Constraints(pp="<=4")),
         ("qwen3-30b-a3b", "mi355x", 32, 64, 8192, Constraints(mbs="<=2"))]


@pytest.mark.parametrize(("model_id", "gpu", "n", "gbs", "seq", "constraints"), _JOBS, ids=[j[0] for j in _JOBS])
def test_busiest_work_is_the_stage_times_sum(model_id: str, gpu: str, n: int, gbs: int, seq: int,
                                             constraints: Constraints) -> None:
    model, hardware = load_model(model_id), load_hardware(gpu)
    cluster = Cluster(gpu=gpu, num_gpus=n)
    checked = set()
    for config in itertools.islice(enumerate_candidates(model, hardware, cluster, constraints, gbs, seq), 0, None, 11):
        prep = engine._prepare(model, cluster, config, hardware, None, None, False, None)
        expected = max(sum(s.forward_s) + sum(s.backward_input_s) + sum(s.backward_weight_s) for s in prep.stages)
        dims = parallel_dims(config, cluster)
        work = busiest_work([layer_work(model, cluster, config, hardware=hardware)], [0],
                            [stage_layers(model.num_layers, config, dims)], [0])[0]
        assert work <= expected
        assert work == pytest.approx(expected, rel=10 * FLOAT_SLACK), config
        checked.add((config.recompute, config.recompute_num_layers is not None, config.pp > 1, config.vpp > 1))
    assert len(checked) >= 6      # none / selective / full / partial full, with and without PP and VPP


@pytest.mark.parametrize("request_", [
    SearchRequest(model="mixtral-8x7b", gpu="mi300x", num_gpus=32, gbs=64, seq_len=4096,
                  constraints=Constraints(pp="<=4", mbs="<=2")),
    SearchRequest(model="qwen3-30b-a3b", gpu="mi355x", num_gpus=16, gbs=16, seq_len=32768,
                  constraints=Constraints(precision="bf16", pp="<=2", tp="<=2", cp="<=2", mbs=1)),
], ids=["mixtral", "qwen3-32k"])
def test_batched_bounds_over_the_columns_equal_the_one_layout_bound(request_: SearchRequest) -> None:
    job = resolve_request(request_)
    space = SearchSpace(model=job.model, hardware=job.hardware, cluster=job.cluster, constraints=request_.constraints,
                        gbs=request_.gbs, seq_len=request_.seq_len)
    columns = enumerate_columns(space, job_template(space, None, None))
    evaluator = Evaluator(job, columns, columns.groups(), 0.0, keep_projections=False, columns=columns)
    indices = list(range(0, len(columns), max(1, len(columns) // 600)))
    assert len(indices) > 100
    batched = evaluator.throughput_bounds(indices)
    for index, bound in zip(indices, batched, strict=True):
        config = columns.config(index)
        seconds = iteration_time_lower_bound(job.model, job.cluster, config, hardware=job.hardware,
                                             profile=job.profile)
        assert bound == config.gbs * config.seq_len / seconds / job.cluster.num_gpus, config



def test_bounds_follow_switches_that_depend_on_recompute_and_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a framework whose default overlaps include EP's (and a profile that hides part of EP's exchange),
    megatron-core's rules keep it off with full recompute and with PP without VPP (projection/switches.py
    ep_overlap_blockers): layouts equal in every per-layer work field but those get different per-layer work, so
    the search shares the work only where the switches in effect agree (tools/search_core.py
    Evaluator._layer_work_of), and its bounds still equal the one-layout bound bit for bit."""
    shipped = engine.framework_profile

    def with_ep_overlap(name: str | None):
        profile = shipped(name)
        return profile.model_copy(update={"default_comm_overlap": (*profile.default_comm_overlap, "ep")})

    monkeypatch.setattr(engine, "framework_profile", with_ep_overlap)
    monkeypatch.setattr(search_core, "framework_profile", with_ep_overlap)
    request_ = SearchRequest(model="mixtral-8x7b", gpu="mi300x", num_gpus=32, gbs=64, seq_len=4096,
                             constraints=Constraints(pp="<=4", mbs="<=2"))
    job = resolve_request(request_)
    job = dataclasses.replace(job, profile=job.profile.model_copy(update={"ep_overlap_fraction": 0.5}))
    space = SearchSpace(model=job.model, hardware=job.hardware, cluster=job.cluster, constraints=request_.constraints,
                        gbs=request_.gbs, seq_len=request_.seq_len)
    columns = enumerate_columns(space, job_template(space, None, None))
    base = next(c for c in map(columns.config, range(len(columns)))
                if c.ep > 1 and c.pp > 1 and c.vpp > 1 and c.recompute == "none")
    allowed = base.model_copy(update={"comm_overlap": None})          # the framework's defaults: EP overlap on
    configs = [allowed, allowed.model_copy(update={"vpp": 1}), allowed.model_copy(update={"recompute": "full"})]
    assert [resolve_switches(c, with_ep_overlap(c.framework)).overlapped("ep") for c in configs] == [True, False, False]
    evaluator = Evaluator(job, configs, [[0], [1], [2]], 0.0, keep_projections=False)
    bounds = evaluator.throughput_bounds([0, 1, 2])
    for config, bound in zip(configs, bounds, strict=True):
        seconds = iteration_time_lower_bound(job.model, job.cluster, config, hardware=job.hardware,
                                             profile=job.profile)
        assert bound == config.gbs * config.seq_len / seconds / job.cluster.num_gpus, config
    assert bounds[0] > bounds[1]          # the overlap counts in the bound (else this test could not fail)
