"""Per-layer workload: FP8 cast traffic follows the GEMM inputs actually cast (routed copies in MoE layers)."""

from __future__ import annotations

import pytest

from projection.model_spec import load_model
from projection.workload import fp8_cast_elements


def test_dense_layer_casts_qkv_proj_fc1_fc2_inputs() -> None:
    model = load_model("llama3-8b")  # h 4096, 32 query heads x 128, FFN 14336
    tokens, tp = 8192.0, 2
    expected = tokens * (4096 + 4096 / tp) + tokens * (4096 + 14336 / tp)
    assert fp8_cast_elements(model, tokens, tp, routed=0.0) == pytest.approx(expected)


def test_moe_layer_casts_each_routed_copy_at_the_expert_width() -> None:
    model = load_model("qwen3-30b-a3b")  # top-8 of 128 experts, expert FFN 768, dense FFN 6144 unused
    tokens = 4096.0
    routed = tokens * model.top_k
    attention = tokens * (model.hidden_size + model.q_width)
    got = fp8_cast_elements(model, tokens, 1, routed=routed)
    assert got == pytest.approx(attention + routed * (model.hidden_size + model.moe_ffn_hidden_size))
    # eight routed copies cost more casting than one dense MLP input of the same tokens would
    assert got > fp8_cast_elements(model, tokens, 1, routed=0.0)
    # expert tensor parallelism splits the expert width
    assert fp8_cast_elements(model, tokens, 1, routed=routed, etp=2) == pytest.approx(
        attention + routed * (model.hidden_size + model.moe_ffn_hidden_size / 2))


# ---- physics added for issue 11: capacity padding, einsum dispatch, host-bound floor, FSDP gathers ----------

from projection.collectives import place_group  # noqa: E402
from projection.compute import device_rates  # noqa: E402
from projection.device_profile import DeviceProfile  # noqa: E402
from projection.engine import network_for, project  # noqa: E402
from projection.hardware import load_hardware  # noqa: E402
from projection.layout import parallel_dims  # noqa: E402
from projection.training_config import Cluster, TrainingConfig  # noqa: E402
from projection.workload import CommGroups, capacity_factor, layer_cost  # noqa: E402


def _moe_layer(config: TrainingConfig, *, gpus: int = 8, host_launch_s: float = 0.0, model_id: str = "deepseek-v3"):
    model = load_model(model_id)
    hardware = load_hardware("mi355x")
    cluster = Cluster(gpu="mi355x", num_gpus=gpus)
    profile = DeviceProfile(hardware_id="mi355x")
    net = network_for(hardware, cluster, profile)
    dims = parallel_dims(config, cluster)
    groups = CommGroups(tp=place_group(dims.tp, 1, net), cp=place_group(1, 1, net),
                        ep=place_group(dims.ep, dims.etp, net))
    layer = next(i for i, moe in enumerate(model.moe_layers) if moe)
    return layer_cost(model, layer, config, dims, device_rates(hardware, profile, config.precision, 1.0, host_launch_s),
                      net, groups)


def test_capacity_factor_pads_only_token_drop_routing() -> None:
    assert capacity_factor(TrainingConfig(moe_routing="dropless")) == 1.0
    assert capacity_factor(TrainingConfig(moe_routing="token-drop")) == 1.0
    assert capacity_factor(TrainingConfig(moe_routing="token-drop", moe_capacity_factor=2.0)) == 2.0


def test_padded_capacity_costs_expert_compute_and_all_to_all() -> None:
    base = {"ep": 8, "mbs": 2, "gbs": 16, "seq_len": 4096, "framework": "megatron"}
    dropless = _moe_layer(TrainingConfig(**base))
    padded = _moe_layer(TrainingConfig(**base, moe_routing="token-drop", moe_capacity_factor=2.0))
    assert padded.ep_comm_s == pytest.approx(2 * dropless.ep_comm_s, rel=0.05)  # padded buffers go over the wire
    assert padded.fwd_s > 1.3 * dropless.fwd_s                                   # experts compute on capacity
    assert padded.flops_fwd > dropless.flops_fwd


def test_maxtext_token_drop_pays_quadratic_einsum_dispatch() -> None:
    # MaxText dense_matmul: dispatch/combine einsums cost 2 * S * (S * k * cf) * h per sequence each, so
    # doubling the sequence length more than doubles the MoE layer's forward; Megatron's permute does not.
    def fwd(framework: str, seq: int) -> float:
        config = TrainingConfig(ep=8, mbs=1, gbs=8, seq_len=seq, framework=framework, moe_routing="token-drop",
                                moe_capacity_factor=1.25)
        return _moe_layer(config).fwd_s
    jax_growth = fwd("jax", 8192) / fwd("jax", 4096)
    megatron_growth = fwd("megatron", 8192) / fwd("megatron", 4096)
    assert jax_growth > megatron_growth + 0.2
    assert fwd("jax", 4096) > 1.15 * fwd("megatron", 4096)  # although its batched expert GEMMs run faster


def test_maxtext_dispatch_einsum_backward_is_one_gemm_combine_two(monkeypatch: pytest.MonkeyPatch,
                                                                  without_te_grouped_mlp) -> None:
    # MaxText generate_masks: dispatch_mask = combine_mask.astype(bool) carries no gradient (the dispatch
    # einsum's backward is the input gradient only), combine_mask carries the router weights (both operand
    # gradients).  Against a Megatron layer whose grouped GEMMs run at the same (dense) efficiency, the jax layer
    # adds the two einsums to the forward, their three backward GEMMs to the backward, and drops the permute.
    import projection.workload as workload
    from projection.compute import gemm_fwd_bwd_s, streaming_s

    monkeypatch.setattr(workload, "GROUPED_GEMM_HALF_M", 0.0)
    without_te_grouped_mlp()  # one grouped kernel on both sides
    model = load_model("deepseek-v3")
    hardware = load_hardware("mi355x")
    cluster = Cluster(gpu="mi355x", num_gpus=8)
    profile = DeviceProfile(hardware_id="mi355x", moe_efficiency=1.0)
    rates = device_rates(hardware, profile, "bf16")
    net = network_for(hardware, cluster, profile)
    groups = CommGroups(tp=place_group(1, 1, net), cp=place_group(1, 1, net), ep=place_group(8, 1, net))
    layer = next(i for i, moe in enumerate(model.moe_layers) if moe)
    seq, cf = 4096, 1.25

    def cost(framework: str):
        config = TrainingConfig(ep=8, mbs=1, gbs=8, seq_len=seq, framework=framework, moe_routing="token-drop",
                                moe_capacity_factor=cf)
        return layer_cost(model, layer, config, parallel_dims(config, cluster), rates, net, groups)
    jax, megatron = cost("jax"), cost("megatron")
    h, slots = model.hidden_size, seq * model.top_k * cf
    f_d, di_d, dw_d = gemm_fwd_bwd_s(slots, h, seq, rates)    # dispatch: (slots x S) mask @ (S x h) inputs
    f_c, di_c, dw_c = gemm_fwd_bwd_s(seq, h, slots, rates)    # combine: (S x slots) weights @ (slots x h)
    permute = streaming_s(4 * 2 * slots * h, 0, rates)        # the permute/unpermute the einsums replace
    assert jax.fwd_s - megatron.fwd_s == pytest.approx(f_d + f_c - permute, rel=0.02)
    assert jax.bwd_input_s - megatron.bwd_input_s == pytest.approx(dw_d + di_c + dw_c - 2 * permute, rel=0.02)
    assert jax.bwd_weight_s == pytest.approx(megatron.bwd_weight_s)  # no weight gradient for a mask


def test_maxtext_token_drop_experts_run_as_batched_dense_gemms() -> None:
    # The dense_matmul expert einsums ("EBCM,EMH -> EBCH") are one batched GEMM over equal capacity-padded
    # shapes: the grouped-GEMM efficiency (moe_efficiency) of a ragged dropless grouped GEMM does not apply.
    config = TrainingConfig(ep=8, mbs=1, gbs=8, seq_len=4096, framework="jax", moe_routing="token-drop",
                            moe_capacity_factor=1.25)
    model = load_model("deepseek-v3")
    hardware = load_hardware("mi355x")
    cluster = Cluster(gpu="mi355x", num_gpus=8)
    dims = parallel_dims(config, cluster)

    def fwd(moe_efficiency: float) -> float:
        profile = DeviceProfile(hardware_id="mi355x", moe_efficiency=moe_efficiency)
        net = network_for(hardware, cluster, profile)
        groups = CommGroups(tp=place_group(1, 1, net), cp=place_group(1, 1, net), ep=place_group(8, 1, net))
        layer = next(i for i, moe in enumerate(model.moe_layers) if moe)
        return layer_cost(model, layer, config, dims, device_rates(hardware, profile, "bf16"), net, groups).fwd_s
    assert fwd(0.4) == pytest.approx(fwd(1.0))
    dropless = _moe_layer(TrainingConfig(ep=8, mbs=1, gbs=8, seq_len=4096, framework="jax"))
    assert dropless.fwd_s > 0


def test_host_bound_layers_do_not_shrink_with_tp() -> None:
    # A tiny per-GPU workload: the eager host launches dominate, and TP that halves the GPU work leaves
    # the launch count (so the layer time) unchanged.  Same EP in both, so the same local experts and the same
    # per-expert grouped-GEMM launches (projection/workload.py grouped_gemm_kernels).
    base = {"mbs": 1, "gbs": 8, "seq_len": 256, "framework": "megatron"}
    slow_host = 4e-5  # a slow host (40 us per launch) makes the floor visible at this size
    tp1 = _moe_layer(TrainingConfig(**base, ep=4), host_launch_s=slow_host, model_id="qwen3-30b-a3b")
    tp2 = _moe_layer(TrainingConfig(**base, ep=4, tp=2), host_launch_s=slow_host, model_id="qwen3-30b-a3b")
    gpu_only = _moe_layer(TrainingConfig(**base, ep=4), host_launch_s=0.0, model_id="qwen3-30b-a3b")
    assert tp1.fwd_s > 1.5 * gpu_only.fwd_s
    assert tp2.fwd_s == pytest.approx(tp1.fwd_s, rel=0.15)


def test_xla_fsdp_gathers_twice_with_full_remat_deepspeed_three_times() -> None:
    model = load_model("llama3-70b")
    cluster = Cluster(gpu="h100-sxm", num_gpus=64)
    config = {"mbs": 1, "gbs": 64, "seq_len": 4096, "zero": 3, "recompute": "full"}
    from projection.framework import framework_profile

    def dp(framework: str) -> float:
        # same buckets and overlap for both: only the gather count differs
        fw = framework_profile(framework).model_copy(update={"dp_overlap_fraction": 0.0, "compute_efficiency": 1.0,
                                                            "dp_comm_efficiency": 1.0, "grad_bucket_elements": None,
                                                            "fsdp_bucket_elements": None, "host_launch_s": 0.0,
                                                            "grad_reduce_bytes": None})
        return project(model, cluster, TrainingConfig(**config, framework=framework), framework=fw).breakdown.dp_comm_s
    # per micro-batch: gathers x 2 B + reduce-scatter 4 B per parameter -> (2*2+4) / (3*2+4) = 0.8
    assert dp("jax") == pytest.approx(0.8 * dp("deepspeed"), rel=0.05)
