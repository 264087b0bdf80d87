"""gpt-oss's clamped gated activation runs its clamps eagerly in Megatron-core's TEGroupedMLP (projection/workload.py).

``weighted_bias_quick_geglu_impl`` (megatron/core/fusions/fused_bias_geglu.py) clamps the two halves of the fc1 output
and concatenates them before the compiled activation kernel: 16 B per routed token-copy x expert-FFN element and 3
kernels in the forward, the backward charged twice the forward as every element-wise pass; selective recompute of
``moe_act`` re-runs them.  Models without a clamp and frameworks that do not run TEGroupedMLP pay nothing.
"""

from __future__ import annotations

import pytest

from projection import workload
from projection.collectives import network_params_from_hardware, place_group
from projection.compute import device_rates
from projection.device_profile import DeviceProfile
from projection.errors import ModelSpecError
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.model_spec import load_model, model_from_hf_config
from projection.training_config import Cluster, TrainingConfig
from projection.workload import CommGroups, activation_clamp, layer_cost

GPT_OSS = load_model("gpt-oss-120b")
QWEN = load_model("qwen3-235b-a22b")
B200 = load_hardware("b200")
PROFILE = DeviceProfile(hardware_id="b200", gemm_efficiency=0.6, low_precision_gemm_efficiency=0.6,
                        attention_efficiency=0.5, moe_efficiency=0.6, kernel_overhead_s=1e-5)


def _config(framework: str, ep: int, **extra) -> TrainingConfig:
    return TrainingConfig(framework=framework, mbs=1, gbs=64, seq_len=4096, ep=ep, zero=1, **extra)


def _layer(model, framework: str, ep: int, **extra):
    cluster = Cluster(gpu="b200", num_gpus=64)
    config = _config(framework, ep, **extra)
    dims = parallel_dims(config, cluster)
    net = network_params_from_hardware(B200)
    groups = CommGroups(tp=place_group(1, 1, net), cp=place_group(1, 1, net), ep=place_group(ep, 1, net))
    return layer_cost(model, 0, config, dims, device_rates(B200, PROFILE, "bf16"), net, groups)


def test_gpt_oss_has_the_clamp_of_its_config() -> None:
    assert GPT_OSS.activation_clamp == 7.0          # openai/gpt-oss-120b config.json swiglu_limit
    assert QWEN.activation_clamp == 0.0
    base = {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 2, "num_attention_heads": 64,
            "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "vocab_size": 1000,
            "num_local_experts": 8, "num_experts_per_tok": 2}
    assert model_from_hf_config({**base, "swiglu_limit": 5.5}).activation_clamp == 5.5
    with pytest.raises(ModelSpecError, match="swiglu_limit"):
        model_from_hf_config({**base, "swiglu_limit": "seven"})


def test_bytes_and_kernels() -> None:
    routed = 4096 * 4.0                               # mbs 1, seq 4096, top-4
    assert activation_clamp(GPT_OSS, _config("megatron", 8), routed, 2880) == (pytest.approx(16.0 * routed * 2880), 3)
    assert activation_clamp(QWEN, _config("megatron", 8), routed, 1536) == (0.0, 0)
    assert activation_clamp(GPT_OSS, _config("jax", 8), routed, 2880) == (0.0, 0)
    assert activation_clamp(GPT_OSS, _config("torchtitan", 8), routed, 2880) == (0.0, 0)


def test_term_costs_time_in_gpt_oss_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    with_term = _layer(GPT_OSS, "megatron", 8)
    recomputed = _layer(GPT_OSS, "megatron", 8, recompute="selective", recompute_modules=["moe_act"])
    monkeypatch.setattr(workload, "ACTIVATION_CLAMP_BYTES", 0.0)
    monkeypatch.setattr(workload, "ACTIVATION_CLAMP_KERNELS", 0)
    without = _layer(GPT_OSS, "megatron", 8)
    recomputed_without = _layer(GPT_OSS, "megatron", 8, recompute="selective", recompute_modules=["moe_act"])
    rates = device_rates(B200, PROFILE, "bf16")
    fwd_extra = 16.0 * 4096 * 4 * 2880 / rates.hbm_bytes_per_s + 3 * PROFILE.kernel_overhead_s
    assert with_term.fwd_s - without.fwd_s == pytest.approx(fwd_extra, rel=1e-6)
    assert with_term.bwd_input_s - without.bwd_input_s == pytest.approx(2 * fwd_extra, rel=1e-6)
    assert (recomputed.recompute_s(("moe_act",)) - recomputed_without.recompute_s(("moe_act",))
            == pytest.approx(fwd_extra, rel=1e-6))


def test_no_term_without_a_clamp(monkeypatch: pytest.MonkeyPatch) -> None:
    with_term = _layer(QWEN, "megatron", 8)
    monkeypatch.setattr(workload, "ACTIVATION_CLAMP_BYTES", 0.0)
    monkeypatch.setattr(workload, "ACTIVATION_CLAMP_KERNELS", 0)
    assert _layer(QWEN, "megatron", 8).fwd_s == pytest.approx(with_term.fwd_s)
