"""One owner per search-space rule: the enumeration, its membership form and legality agree (issue 16 item 3)."""

from __future__ import annotations

import json

import pytest

from projection.hardware import load_hardware
from projection.legality import (
    MAX_CP,
    MICRO_BATCH_SIZES,
    cp_degrees,
    even_pp_splits,
    even_split,
    layout_violations,
    legal_axes,
    schedule_microbatch_violation,
    tp_degrees,
)
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from projection.vocabulary import DEFAULT_RECOMPUTE_MODULES, PIPELINE_SCHEDULES, RECOMPUTES
from tools.candidates import SearchSpace, in_space, schedule_fits
from tools.candidate_columns import enumerate_candidates
from tools.constraints import Constraints

JOBS = [
    ("llama3-8b", "h100-sxm", 8, 64, 8192, None),
    ("mixtral-8x7b", "mi300x", 16, 64, 4096, "sft"),
    ("llama3-8b", "h100-sxm", 16, 32, 32768, None),
]


def _space(model: str, gpu: str, n: int, gbs: int, seq: int) -> SearchSpace:
    m, h = load_model(model), load_hardware(gpu)
    return SearchSpace(model=m, hardware=h, cluster=Cluster(gpu=h.id, num_gpus=n), constraints=Constraints(),
                       gbs=gbs, seq_len=seq)


def _key(config: TrainingConfig, num_gpus: int) -> str:
    """Equal layouts, as in_space reads them: dp derived, schedule resolved, modules only with selective."""
    data = config.model_dump(mode="json")
    data["dp"] = config.dp or num_gpus // (config.tp * config.pp * config.cp)
    data["pp_schedule"] = config.schedule
    if config.recompute != "selective":
        data["recompute_modules"] = list(DEFAULT_RECOMPUTE_MODULES)
    for switch in ("comm_overlap", "cuda_graphs"):     # chosen per layout by the search (tools/switch_rules.py)
        data.pop(switch)
    return json.dumps(data, sort_keys=True)


_MOVES = {"tp": (1, 2, 4, 8, 16), "pp": (1, 2, 4, 3), "cp": (1, 2, 4), "ep": (1, 2, 4, 8), "etp": (1, 2),
          "vpp": (1, 2, 4), "mbs": (1, 2, 4, 32), "zero": (0, 1, 2, 3), "precision": ("bf16", "fp8", "nvfp4"),
          "recompute": RECOMPUTES, "recompute_num_layers": (None, 1, 2), "pp_schedule": PIPELINE_SCHEDULES,
          "moe_dispatcher": ("alltoall", "deepep"), "sequence_parallel": (True, False), "fsdp_size": (None, 8),
          "framework": (None, "megatron"), "finetune": (None, "sft"), "gbs": (32, 64), "dp": (None, 1, 2)}


@pytest.mark.parametrize(("model", "gpu", "n", "gbs", "seq", "finetune"), JOBS)
def test_in_space_is_the_enumeration(model: str, gpu: str, n: int, gbs: int, seq: int, finetune: str | None) -> None:
    space = _space(model, gpu, n, gbs, seq)
    configs = list(enumerate_candidates(space.model, space.hardware, space.cluster, space.constraints, gbs, seq,
                                        finetune))
    keys = {_key(c, n) for c in configs}
    assert configs and all(in_space(space, c, finetune) for c in configs)
    checked = 0
    for config in configs[:: max(1, len(configs) // 40)]:
        for name, values in _MOVES.items():
            for value in values:
                moved = config.model_copy(update={name: value})
                if moved == config:
                    continue
                try:   # copies skip validation: keep only the ones TrainingConfig accepts
                    moved = TrainingConfig(**moved.model_dump())
                except ValueError:
                    continue
                assert in_space(space, moved, finetune) == (_key(moved, n) in keys), (name, value, config)
                checked += 1
    assert checked > 100


@pytest.mark.parametrize("schedule", PIPELINE_SCHEDULES)
def test_schedule_microbatch_rule_is_shared(schedule: str) -> None:
    model, hardware = load_model("llama3-8b"), load_hardware("h100-sxm")
    cluster = Cluster(gpu=hardware.id, num_gpus=8)
    vpp = {"interleaved": 2, "zbv": 2}.get(schedule, 1)
    for pp in (2, 4):
        for gbs in (1, 2, 3, 4, 6, 8, 12):
            config = TrainingConfig(pp=pp, vpp=vpp, pp_schedule=schedule, gbs=gbs, dp=8 // pp)
            microbatches = gbs // (8 // pp)
            if not microbatches or gbs % (8 // pp):
                continue
            why = schedule_microbatch_violation(schedule, pp, microbatches)
            assert schedule_fits(schedule, pp, microbatches) == (why is None)
            assert (why in layout_violations(model, hardware, cluster, config)) == (why is not None)


def test_axis_helpers_are_what_legal_axes_and_the_search_use() -> None:
    model, hardware = load_model("llama3-70b"), load_hardware("h100-sxm")
    cluster = Cluster(gpu=hardware.id, num_gpus=64)
    axes = legal_axes(model, hardware, cluster, seq_len=8192)
    assert axes.tp == tuple(t for t in tp_degrees(model, 8) if 64 % t == 0)
    assert axes.cp == tuple(cp_degrees(64, 8192)) and max(axes.cp) <= MAX_CP
    assert axes.mbs == MICRO_BATCH_SIZES and axes.recompute == RECOMPUTES and axes.pp_schedule == PIPELINE_SCHEDULES
    assert even_pp_splits(80, 80) == [p for p in range(1, 81) if even_split(80, p)]
    assert even_split(80, 82) and not even_split(80, 3) and even_split(1, 1)
