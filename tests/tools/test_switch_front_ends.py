"""The run-time switches reach every front end: constraints, request phrases, search, exports, launch import,
diagnose (issue 25)."""

from __future__ import annotations

import pytest

from agent.text.constraints_text import extract_constraints
from projection.engine import project
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from tools.constraints import ConstraintError, Constraints
from tools.diagnose import switch_gains
from tools.exports import export_launch_config
from tools.launch_import import import_launch_config
from tools.search import SearchRequest, run_search
from tools.switch_rules import cuda_graphs_allowed, switch_variants

LLAMA = load_model("llama3-8b")
CLUSTER = Cluster(gpu="h100-sxm", num_gpus=64)
LAYOUT = TrainingConfig(tp=2, pp=2, vpp=2, mbs=1, gbs=256, seq_len=8192, sequence_parallel=True, zero=1)


@pytest.mark.parametrize(("text", "rule"), [
    ("tune it with CUDA graphs", "cuda_graphs=true"), ("no CUDA graphs please", "cuda_graphs=false"),
    ("run it with no overlap", "comm_overlap=none"), ("use HybridEP", "moe_dispatcher=hybridep"),
    ("with unfused attention", "attention_backend=unfused"), ("Triton attention", "attention_backend=triton"),
])
def test_request_phrases_become_constraints(text: str, rule: str) -> None:
    assert rule in extract_constraints(text).rules


def test_switch_constraints_parse_and_describe() -> None:
    c = Constraints.parse(["overlap=dp,tp", "cuda_graphs=true", "dispatcher=hybridep", "attention=unfused"])
    assert (c.comm_overlap, c.cuda_graphs) == (["dp", "tp"], True)
    assert c.allows("moe_dispatcher", "hybridep") and not c.allows("moe_dispatcher", "alltoall")
    assert c.allows("attention_backend", "unfused") and not c.allows("attention_backend", "fused")
    assert Constraints.parse(["comm_overlap=none"]).describe() == ["comm_overlap=none"]
    with pytest.raises(ConstraintError, match="not a communication"):
        Constraints.parse(["comm_overlap=dp,xp"])


def test_search_carries_pinned_switches() -> None:
    request = SearchRequest(model="mixtral-8x7b", gpu="h100-sxm", num_gpus=64, gbs=256, seq_len=4096, top_k=2,
                            constraints=Constraints.parse(["moe_dispatcher=hybridep", "overlap=none", "tp<=2",
                                                           "pp=1", "precision=bf16"]))
    ranked = run_search(request, workers=1).ranked
    assert ranked and all(c.config["moe_dispatcher"] == "hybridep" and c.config.get("comm_overlap") == []
                          for c in ranked)


def test_search_turns_on_cuda_graphs_where_megatron_allows_them() -> None:
    assert cuda_graphs_allowed("megatron", LLAMA, LAYOUT)
    assert not cuda_graphs_allowed("megatron", LLAMA, LAYOUT.model_copy(update={"recompute": "full"}))
    assert not cuda_graphs_allowed("torchtitan", LLAMA, LAYOUT)
    variants = switch_variants("megatron", LLAMA, LAYOUT)
    assert variants[0].cuda_graphs is True and not variants[-1].cuda_graphs     # best first, then the fallback
    fast = project(LLAMA, CLUSTER, variants[0]).tokens_per_s_per_gpu
    assert fast >= project(LLAMA, CLUSTER, LAYOUT).tokens_per_s_per_gpu
    assert switch_variants("maxtext", LLAMA, LAYOUT) == [LAYOUT]


def test_search_overlaps_the_expert_exchange_only_where_megatron_core_accepts_it() -> None:
    moe = load_model("mixtral-8x7b")
    interleaved = TrainingConfig(tp=1, pp=2, vpp=2, ep=8, mbs=1, gbs=64, seq_len=4096, framework="megatron")
    assert "ep" in switch_variants("megatron", moe, interleaved)[0].comm_overlap
    plain_pp = interleaved.model_copy(update={"vpp": 1})        # PP without VPP: overlap_moe_expert_parallel_comm refused
    assert "ep" not in (switch_variants("megatron", moe, plain_pp)[0].comm_overlap or ())   # None: the default
    # a device profile that hides none of the expert exchange (ep_overlap_fraction 0): the switch would only cost its
    # buffers, so the search leaves it off (and tune's seeds, projected without it, agree with the search)
    assert "ep" not in (switch_variants("megatron", moe, interleaved, ep_overlap_hides=False)[0].comm_overlap or ())


def test_megatron_export_emits_the_switches_and_reads_them_back() -> None:
    config = LAYOUT.model_copy(update={"comm_overlap": ("dp", "tp", "cp"), "cuda_graphs": True})
    launch = export_launch_config(LLAMA, CLUSTER, config, "megatron")
    for flag in ("--overlap-grad-reduce", "--overlap-param-gather", "--tp-comm-overlap",
                 "--no-overlap-p2p-communication", "--cuda-graph-impl local"):
        assert flag in launch.text, flag
    back = import_launch_config(launch.text, "megatron")
    assert back["comm_overlap"] == ["dp", "tp", "cp"] and back["cuda_graphs"] is True
    plain = export_launch_config(LLAMA, CLUSTER, LAYOUT.model_copy(update={"comm_overlap": ()}), "megatron")
    assert "--overlap-grad-reduce" not in plain.text and "--cuda-graph-impl" not in plain.text


def test_megatron_export_with_overlap_and_graphs_passes_megatron_core() -> None:
    pytest.importorskip("megatron.core")
    from tools.exports.checks import validate

    config = LAYOUT.model_copy(update={"comm_overlap": ("dp", "tp", "pp", "cp"), "cuda_graphs": True})
    assert validate(export_launch_config(LLAMA, CLUSTER, config, "megatron"), LLAMA, CLUSTER) == []


def test_diagnose_says_what_switching_would_gain() -> None:
    bare = LAYOUT.model_copy(update={"comm_overlap": ("pp", "cp"), "cuda_graphs": False})
    base = project(LLAMA, CLUSTER, bare).tokens_per_s_per_gpu
    gains = switch_gains(LLAMA, CLUSTER, bare, "megatron", base)
    assert any(g.startswith("overlapping dp, tp, ep") for g in gains)
    assert switch_gains(LLAMA, CLUSTER, bare, "torchtitan", base) == []
