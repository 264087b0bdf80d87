"""The search space as columns (tools/candidate_columns.py) is the scalar search space, structurally.

- the rows, in order, are the layouts a plain nested loop over the axis functions yields (the
  reference below: one TrainingConfig per layout, as the enumerator was written before the columns);
- the groups read off the blocks are :func:`tools.search_core.group_by_recompute`'s, and the visiting
  order of the groups is the scalar sort's;
- the batch memory screen read off the columns equals :func:`projection.memory.project_memory` on
  every layout (peak, static peak, capacity: equal bits);
- the whole search (top-k, Pareto front, counts) is the same with the fast paths off.
No figure is hard-coded: physics changes elsewhere move both sides alike.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from projection import fast_paths
from projection.layout import parallel_dims
from projection.memory import project_memory
from projection.memory_batch import MemoryBatcher
from projection.training_config import TrainingConfig
from tools.candidate_columns import enumerate_columns
from tools.candidates import SearchSpace, cp_values, dispatchers, expert_options, fsdp_sizes, job_template, mbs_values, pipeline_options, pp_values, precision_values, recompute_variants, schedule_fits, split_fields, tp_values, zero_values
from tools.candidate_columns import enumerate_candidates
from tools.constraints import Constraints
from tools.search import SearchRequest, resolve_request, run_search
from tools.search_core import Evaluator, group_by_recompute, group_order

SPACES = [
    # dense, deep pipelines with VPP, CP from a constraint (405B at scale, narrowed)
    SearchRequest(model="llama3.1-405b", gpu="h100-sxm", num_gpus=1024, gbs=512, seq_len=8192,
                  constraints=Constraints.parse(["cp<=4", "vpp<=8", "tp=8", "mbs=1", "precision in bf16,fp8"])),
    # MoE with EP, both dispatchers and the extended selective module set
    SearchRequest(model="mixtral-8x7b", gpu="mi300x", num_gpus=32, gbs=128, seq_len=4096,
                  constraints=Constraints(mbs="<=2")),
    # uneven pipeline splits (61 layers), MLA
    SearchRequest(model="deepseek-v3", gpu="h100-sxm", num_gpus=256, gbs=512, seq_len=4096,
                  constraints=Constraints(tp="<=4", mbs=1)),
    # long context (CP searched by default), LoRA, a recompute constraint
    SearchRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=32, gbs=64, seq_len=32768, finetune="lora",
                  constraints=Constraints(recompute="!=selective", mbs=1)),
]
IDS = ["405b-cp-vpp", "mixtral-ep", "deepseek-uneven", "8b-long-lora"]


def _space(request: SearchRequest) -> tuple[SearchSpace, TrainingConfig]:
    job = resolve_request(request)
    space = SearchSpace(model=job.model, hardware=job.hardware, cluster=job.cluster, constraints=request.constraints,
                        gbs=request.gbs, seq_len=request.seq_len)
    return space, job_template(space, request.finetune)


def _reference(space: SearchSpace, template: TrainingConfig) -> Iterator[TrainingConfig]:
    """The space as one nested loop over the axis functions, one typed config per layout."""
    n = space.cluster.num_gpus
    for cp in cp_values(space):
        for tp in tp_values(space, cp):
            for pp in pp_values(space, tp, cp):
                dp = n // (tp * cp * pp)
                if space.gbs % dp or not space.constraints.allows("dp", dp):
                    continue
                for ep, etp in expert_options(space, tp, cp, dp):
                    for vpp, schedule, split in pipeline_options(space, pp):
                        for mbs in mbs_values(space, dp, cp):
                            if not schedule_fits(schedule, pp, space.gbs // (mbs * dp)):
                                continue
                            for zero in zero_values(space, tp, pp):
                                for fsdp in fsdp_sizes(space, tp, cp, dp, zero):
                                    for dispatcher in dispatchers(space, ep, etp):
                                        for precision in precision_values(space):
                                            for recompute, rnl, modules in recompute_variants(space, pp):
                                                yield best_switches(space, template.model_copy(update=dict(
                                                    tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vpp=vpp, dp=dp, mbs=mbs,
                                                    precision=precision, recompute=recompute,
                                                    recompute_num_layers=rnl, recompute_modules=modules,
                                                    sequence_parallel=tp > 1, zero=zero, pp_schedule=schedule,
                                                    fsdp_size=fsdp, moe_dispatcher=dispatcher,
                                                    **split_fields(split))))


def best_switches(space, config):
    """The layout with the switches the search gives it (tools/switch_rules.switch_choices, best first)."""
    from tools.switch_rules import switch_variants

    return switch_variants(space.framework, space.model, config, ep_overlap_hides=space.ep_overlap_hides)[0]


@pytest.mark.parametrize("request_", SPACES, ids=IDS)
def test_rows_are_the_scalar_space_in_order(request_: SearchRequest) -> None:
    space, template = _space(request_)
    columns = enumerate_columns(space, template)
    reference = list(_reference(space, template))
    assert len(reference) > 100
    rows = [columns.config(i) for i in range(len(columns))]
    assert rows == reference
    assert len({r.model_dump_json() for r in rows}) == len(rows)          # each layout once
    assert rows == list(enumerate_candidates(space.model, space.hardware, space.cluster, space.constraints,
                                             space.gbs, space.seq_len, request_.finetune))
    for i in range(0, len(rows), 7):
        assert columns.dims(i) == parallel_dims(rows[i], space.cluster)


@pytest.mark.parametrize("request_", SPACES, ids=IDS)
def test_groups_and_their_order_are_the_scalar_ones(request_: SearchRequest) -> None:
    space, template = _space(request_)
    columns = enumerate_columns(space, template)
    rows = [columns.config(i) for i in range(len(columns))]
    groups = columns.groups()
    assert groups == group_by_recompute(rows)
    assert any(len(g) > 1 for g in groups)

    def order(g: int) -> tuple[object, ...]:      # tools.search_core._evaluate's scalar order
        config = rows[groups[g][0]]
        return (repr(Evaluator.sharding_key(config)), config.mbs, config.schedule, config.moe_dispatcher,
                config.sequence_parallel)
    assert group_order(columns, groups) == sorted(range(len(groups)), key=order)
    arrays = columns.group_arrays()            # the search's form: the same groups as flat arrays
    assert list(arrays) == groups
    assert group_order(columns, arrays) == group_order(columns, groups)


def test_group_arrays_keep_layouts_without_a_recompute_order_apart() -> None:
    """A pipeline depth whose recompute variants have no order (an unknown level) makes one group per layout, in
    :meth:`CandidateColumns.groups` and in its flat form alike."""
    space, template = _space(SPACES[0])
    columns = enumerate_columns(space, template)
    pp = next(iter(columns.variants))
    columns.recomputes[columns.variants[pp][0]] = ("unknown", None, ())
    groups = columns.groups()
    assert any(len(g) == 1 for g in groups)
    assert list(columns.group_arrays()) == groups


@pytest.mark.parametrize("request_", SPACES, ids=IDS)
def test_memory_screen_off_the_columns_equals_the_per_rank_model(request_: SearchRequest) -> None:
    job = resolve_request(request_)
    space, template = _space(request_)
    columns = enumerate_columns(space, template)
    batch = MemoryBatcher(job.model, job.hardware, job.profile).peaks_of_rows(columns, np.arange(len(columns)))
    for i in range(0, len(columns), max(1, len(columns) // 300)):
        config = columns.config(i)
        scalar = project_memory(job.model, job.hardware, config, parallel_dims(config, job.cluster), job.profile)
        assert (float(batch.peak_bytes[i]), float(batch.static_peak_bytes[i]), float(batch.capacity_bytes[i])) == (
            scalar.peak_bytes, scalar.static_peak_bytes, scalar.capacity_bytes), config


@pytest.mark.parametrize("request_", SPACES[1:3], ids=IDS[1:3])
def test_search_on_columns_equals_exact_search(request_: SearchRequest) -> None:
    fast = run_search(request_, workers=1)
    with fast_paths.disabled():
        exact = run_search(request_, workers=1)

    def view(result: object) -> tuple[object, ...]:
        return tuple((tuple(sorted(c.config.items())), c.tokens_per_sec_per_gpu, c.headroom_fraction,
                      c.iteration_time_s, c.peak_memory_gib)
                     for c in [*result.ranked, None, *result.pareto] if c is not None)  # type: ignore[attr-defined]
    assert fast.ranked and view(fast) == view(exact)
    assert (fast.enumerated, fast.screened_out, fast.projected, fast.pruned) == (
        exact.enumerated, exact.screened_out, exact.projected, exact.pruned)
