"""Reduction of target layouts to the local GPUs: PP first, then EP (experts per GPU kept), then TP, then CP."""

from __future__ import annotations

from bench.reduction import bench_num_experts, gpus_needed, reduce_layout
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig


def _reduce(model: str, num_gpus: int, local: int, **config):
    return reduce_layout(load_model(model), Cluster(gpu="h100-sxm", num_gpus=num_gpus), TrainingConfig(**config),
                         local)


def test_dense_pp_goes_first_and_tp_is_kept_when_it_fits() -> None:
    r = _reduce("llama3-70b", 64, 8, tp=8, pp=4, vpp=2, gbs=128)
    assert (r.bench_config.tp, r.bench_config.pp, r.bench_config.vpp, r.bench_config.dp) == (8, 1, 1, 1)
    assert r.removed_axes() == ("pp", "vpp", "dp")
    assert r.bench_cluster.num_gpus == 8 and r.bench_model is None


def test_dense_tp_shrinks_only_after_pp() -> None:
    r = _reduce("llama3-70b", 64, 2, tp=8, pp=4, gbs=128)
    assert (r.bench_config.tp, r.bench_config.pp) == (2, 1)
    assert r.removed_axes() == ("pp", "tp", "dp")
    tp = next(f for f in r.removed if f.axis == "tp")
    assert (tp.target, tp.bench) == (8, 2)


def test_moe_ep_shrinks_before_tp_and_keeps_experts_per_gpu() -> None:
    r = _reduce("qwen3-30b-a3b", 64, 4, tp=2, pp=2, ep=8, gbs=256)   # 128 experts, top-8, 16 per GPU
    assert (r.bench_config.tp, r.bench_config.ep, r.bench_config.pp) == (2, 4, 1)
    assert r.removed_axes() == ("pp", "ep", "dp")
    assert r.bench_model is not None and r.bench_model.num_experts == 64
    assert r.bench_model.num_experts // r.bench_config.ep == 128 // 8
    assert r.bench_cluster.num_gpus <= 4


def test_moe_tp_shrinks_after_ep_is_gone() -> None:
    r = _reduce("mixtral-8x7b", 64, 1, tp=2, ep=8, gbs=256)
    assert (r.bench_config.tp, r.bench_config.ep) == (1, 1)
    assert r.removed_axes() == ("ep", "tp", "dp")


def test_experts_never_fall_below_top_k() -> None:
    model = load_model("mixtral-8x7b")                                  # 8 experts, top-2
    assert bench_num_experts(model, target_ep=8, bench_ep=1) == 2
    r = _reduce("mixtral-8x7b", 8, 1, ep=8, gbs=64)
    assert r.bench_model.num_experts == 2
    assert "top_k" in next(f for f in r.removed if f.axis == "ep").note


def test_bench_layout_fits_and_is_legal_for_every_local_size() -> None:
    for local in (1, 2, 4, 8):
        r = _reduce("deepseek-v3", 256, local, tp=2, pp=8, ep=32, gbs=512)
        assert gpus_needed(r.bench_config.tp, r.bench_config.cp, r.bench_config.ep, r.bench_config.etp) <= local
        assert r.bench_config.gbs == r.bench_config.mbs * r.bench_config.dp


def test_cp_is_reduced_only_when_it_alone_does_not_fit() -> None:
    r = _reduce("llama3-8b", 16, 4, cp=4, tp=2, seq_len=8192, gbs=16)
    assert (r.bench_config.cp, r.bench_config.tp) == (4, 1)          # TP goes first
    r = _reduce("llama3-8b", 16, 2, cp=4, seq_len=8192, gbs=16)
    assert r.bench_config.cp == 2 and "cp" in r.removed_axes()
    assert r.removed_axes().index("cp") > r.removed_axes().index("pp") if "pp" in r.removed_axes() else True


def test_reduction_round_trips_through_json() -> None:
    r = _reduce("mixtral-8x7b", 16, 2, ep=8, pp=2, gbs=64)
    assert type(r).model_validate_json(r.model_dump_json()) == r


def test_a_different_local_gpu_is_named_in_the_bench_layout() -> None:
    model, cluster = load_model("llama3-8b"), Cluster(gpu="mi300x", num_gpus=16)
    r = reduce_layout(model, cluster, TrainingConfig(tp=2, gbs=64), 2, local_gpu="NVIDIA H200")
    assert (r.bench_cluster.gpu, r.target_cluster.gpu) == ("h200", "mi300x")
