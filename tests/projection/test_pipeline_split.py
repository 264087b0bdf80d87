"""Uneven pipeline splits: published layout strings parse to the stages their frameworks build, the engine prices
each rank with its own layers, legality and the framework rules follow Megatron and torchtitan, the search reaches
PP for DeepSeek-V3 (61 layers) and the exports write the split."""

from __future__ import annotations

import pytest

from projection.engine import project
from projection.hardware import load_hardware
from projection.legality import layout_violations
from projection.model_spec import load_model
from projection.pipeline_split import (
    PipelineSplit,
    parse_layout,
    split_violations,
    stage_counts,
    stage_layers_of_rank,
    uneven_split,
)
from projection.training_config import Cluster, TrainingConfig
from tools.candidates import SearchSpace, in_space
from tools.candidate_columns import enumerate_candidates
from tools.constraints import Constraints
from tools.exports import export_launch_config
from tools.framework_rules import framework_violations, torchtitan_split

DSV3 = load_model("deepseek-v3")
H100 = load_hardware("h100-sxm")

# Megatron-Bridge 26.02 (v0.3.0) scripts/performance/configs/deepseek/deepseek_workload_base_configs.py, H100 preset;
# AMD-AGI/Primus examples/megatron/configs/MI355X/deepseek_v3-FP8-pretrain.yaml.
BRIDGE_H100 = "Et|(tt|)*30mL"
BRIDGE_B200 = "Et*4|(t*4|)*14tmL"
PRIMUS_MI355X = "Et*1|t*1|" + "t*2|" * 29 + "t*1,L"


def test_published_layouts_parse_to_their_stages() -> None:
    assert stage_counts(61, 8, 4, PipelineSplit(layout=BRIDGE_H100)) == (1, *(2,) * 30, 0)
    assert stage_counts(61, 16, 1, PipelineSplit(layout=BRIDGE_B200)) == (*(4,) * 15, 1)
    assert stage_counts(61, 16, 2, PipelineSplit(layout=PRIMUS_MI355X)) == (1, 1, *(2,) * 29, 1)
    for layout, pp, vpp in ((BRIDGE_H100, 8, 4), (BRIDGE_B200, 16, 1), (PRIMUS_MI355X, 16, 2)):
        assert split_violations(61, pp, vpp, PipelineSplit(layout=layout)) == []
    assert split_violations(61, 8, 2, PipelineSplit(layout=BRIDGE_H100))     # 32 stages are not pp 8 x vpp 2
    assert split_violations(60, 8, 4, PipelineSplit(layout=BRIDGE_H100))     # 61 't' on a 60-layer model
    with pytest.raises(ValueError, match="unknown character"):
        parse_layout("Et|x|L")


def test_first_last_stage_layers_follow_megatron() -> None:
    # Megatron get_num_layers_to_build: the rest splits evenly over the middle ranks, each rank's layers over vpp
    assert stage_counts(61, 16, 1, PipelineSplit(first=4, last=1)) == (*(4,) * 15, 1)
    assert stage_counts(62, 4, 2, PipelineSplit(first=14, last=16)) == (7, 8, 8, 8, 7, 8, 8, 8)
    assert split_violations(61, 16, 1, PipelineSplit(first=3, last=3))      # 55 layers on 14 middle ranks
    assert split_violations(61, 16, 2, PipelineSplit(first=3, last=2))      # 3 layers do not split into 2 chunks
    assert split_violations(61, 1, 1, PipelineSplit(first=3))               # needs pp > 1


def test_uneven_split_balances_the_ends() -> None:
    split = uneven_split(61, 16, 1)
    assert split == PipelineSplit(first=3, last=2)
    counts = stage_counts(61, 16, 1, split)
    assert sum(counts) == 61 and max(counts) == 4 and counts[0] < 4 and counts[-1] < 4
    assert uneven_split(61, 8, 4) == PipelineSplit(layout="Et|(t*2|)*30L")     # the Bridge H100 shape, without MTP
    assert uneven_split(64, 8, 1) is None and uneven_split(126, 16, 1) is None     # even already (126 + 2 = 128)


def _dsv3(first: int, last: int) -> TrainingConfig:
    return TrainingConfig(tp=1, pp=16, ep=8, mbs=1, gbs=4096, seq_len=4096, precision="fp8", zero=1,
                          recompute="selective", pp_first_stage_layers=first, pp_last_stage_layers=last)


def test_each_rank_is_priced_with_its_own_layers() -> None:
    cluster = Cluster(gpu="h100-sxm", num_gpus=1024)
    heavy_head = project(DSV3, cluster, _dsv3(1, 4))      # the last rank runs 4 layers and the LM head + loss
    light_head = project(DSV3, cluster, _dsv3(4, 1))
    assert light_head.tokens_per_s_per_gpu > heavy_head.tokens_per_s_per_gpu
    first_heavy = light_head.memory.stages[0]
    first_light = heavy_head.memory.stages[0]
    assert (first_heavy.layers, first_light.layers) == (4, 1)
    assert first_heavy.gradients_bytes > 2 * first_light.gradients_bytes
    assert first_heavy.activations_bytes > first_light.activations_bytes


def test_legality_reads_the_split() -> None:
    cluster = Cluster(gpu="h100-sxm", num_gpus=1024)
    assert layout_violations(DSV3, H100, cluster, _dsv3(4, 1)) == []
    assert any("middle pipeline ranks" in r for r in layout_violations(DSV3, H100, cluster, _dsv3(3, 3)))
    config = _dsv3(4, 1).model_copy(update={"recompute": "full", "recompute_num_layers": 4})
    assert layout_violations(DSV3, H100, cluster, config) == []
    assert layout_violations(DSV3, H100, cluster, config.model_copy(update={"recompute_num_layers": 5}))


def test_framework_rules_of_the_split() -> None:
    cluster = Cluster(gpu="h100-sxm", num_gpus=1024)
    default = _dsv3(4, 1).model_copy(update={"pp_first_stage_layers": None, "pp_last_stage_layers": None})
    assert any("--decoder-first" in r for r in framework_violations("megatron", DSV3, cluster, default))
    assert not framework_violations("megatron", DSV3, cluster, _dsv3(4, 1))
    # torchtitan: middle stages of 4, first stage 3 layers (1 less), last 2 (2 less)
    assert torchtitan_split(61, _dsv3(3, 2)) == (4, 1, 2)
    layout = TrainingConfig(pp=8, vpp=4, pp_layout=BRIDGE_H100)
    assert torchtitan_split(61, layout) == (2, 1, 2)
    primus = TrainingConfig(pp=16, vpp=2, pp_layout=PRIMUS_MI355X)
    assert torchtitan_split(61, primus) is None          # two short stages at the start: not torchtitan's shape


def test_the_search_reaches_pipeline_parallel_deepseek_v3() -> None:
    cluster = Cluster(gpu="h100-sxm", num_gpus=1024)
    constraints = Constraints(tp=2, ep=64, precision="fp8", zero=1, recompute="selective", mbs=1)
    configs = list(enumerate_candidates(DSV3, H100, cluster, constraints, gbs=8192, seq_len=4096))
    piped = [c for c in configs if c.pp > 1]
    assert {c.pp for c in piped} >= {2, 4, 8, 16}
    assert all(not c.pipeline_split.is_default for c in piped)
    assert any(c.pp == 8 and c.vpp == 4 and c.pp_layout == "Et|(t*2|)*30L" for c in piped)
    space = SearchSpace(model=DSV3, hardware=H100, cluster=cluster, constraints=constraints, gbs=8192, seq_len=4096)
    for c in piped[:50]:
        assert layout_violations(DSV3, H100, cluster, c) == []
        assert in_space(space, c)
    moved = piped[0].model_copy(update={"pp_last_stage_layers": None, "pp_first_stage_layers": None,
                                        "pp_layout": None})
    assert not in_space(space, moved)


def test_exports_write_the_split() -> None:
    cluster = Cluster(gpu="h100-sxm", num_gpus=1024)
    flat = _dsv3(4, 1).model_copy(update={"tp": 2, "pp": 16})
    text = export_launch_config(DSV3, cluster, flat, "megatron").text
    assert "--decoder-first-pipeline-num-layers 4" in text and "--decoder-last-pipeline-num-layers 1" in text
    layout = flat.model_copy(update={"pp": 8, "vpp": 4, "pp_first_stage_layers": None, "pp_last_stage_layers": None,
                                     "pp_layout": "Et|(t*2|)*30L", "gbs": 8192})
    text = export_launch_config(DSV3, cluster, layout, "megatron").text
    assert "--pipeline-model-parallel-layout 'Et|(t*2|)*30L'" in text          # shell-quoted: | ( * are special
    assert "--num-virtual-stages-per-pipeline-rank" not in text
    bridge = export_launch_config(DSV3, cluster, layout, "megatron-bridge").text
    assert """'model.pipeline_model_parallel_layout="Et|(t*2|)*30L"'""" in bridge   # a Hydra string, one shell word
    primus = export_launch_config(DSV3, cluster, flat, "primus").text
    assert "decoder_first_pipeline_num_layers: 4" in primus


def test_counts_per_rank_add_up() -> None:
    counts = stage_counts(61, 8, 4, PipelineSplit(layout=BRIDGE_H100))
    assert stage_layers_of_rank(counts, 8) == (7, 8, 8, 8, 8, 8, 8, 6)
