"""Megatron-core TEGroupedMLP applies the fc2 expert bias unfused, expert by expert (projection/workload.py).

gpt-oss has biases on its expert linears.  linear_fc2 is built with ``skip_bias_add=True`` and
``TEGroupedMLP._apply_bias`` adds ``bias * prob`` per local expert and concatenates the pieces: 12 B per routed
token-copy x hidden element in the forward and 2 kernels per local expert plus a cat; the backward is charged
twice the forward, as every element-wise pass.  Models without expert biases and frameworks that do not run
TEGroupedMLP pay nothing.
"""

from __future__ import annotations

import pytest

from projection import workload
from projection.collectives import network_params_from_hardware, place_group
from projection.compute import device_rates
from projection.device_profile import DeviceProfile
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from projection.workload import CommGroups, expert_bias_apply, layer_cost

GPT_OSS = load_model("gpt-oss-120b")
QWEN = load_model("qwen3-235b-a22b")
B200 = load_hardware("b200")
PROFILE = DeviceProfile(hardware_id="b200", gemm_efficiency=0.6, low_precision_gemm_efficiency=0.6,
                        attention_efficiency=0.5, moe_efficiency=0.6, kernel_overhead_s=1e-5)


def _config(framework: str, ep: int) -> TrainingConfig:
    return TrainingConfig(framework=framework, mbs=1, gbs=64, seq_len=4096, ep=ep, zero=1)


def _layer(model, framework: str, ep: int):
    cluster = Cluster(gpu="b200", num_gpus=64)
    config = _config(framework, ep)
    dims = parallel_dims(config, cluster)
    net = network_params_from_hardware(B200)
    groups = CommGroups(tp=place_group(1, 1, net), cp=place_group(1, 1, net), ep=place_group(ep, 1, net))
    return layer_cost(model, 0, config, dims, device_rates(B200, PROFILE, "bf16"), net, groups)


def test_bytes_and_kernels() -> None:
    assert GPT_OSS.expert_bias and not QWEN.expert_bias
    routed = 4096 * 4.0                               # mbs 1, seq 4096, top-4, balanced over the experts
    nbytes, kernels = expert_bias_apply(GPT_OSS, _config("megatron", 8), routed, 16)
    assert nbytes == pytest.approx(12.0 * routed * 2880)
    assert kernels == 2 * 16 + 1
    assert expert_bias_apply(QWEN, _config("megatron", 8), routed, 16) == (0.0, 0)
    assert expert_bias_apply(GPT_OSS, _config("jax", 8), routed, 16) == (0.0, 0)
    assert expert_bias_apply(GPT_OSS, _config("torchtitan", 8), routed, 16) == (0.0, 0)


def test_term_costs_time_in_gpt_oss_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    with_term = _layer(GPT_OSS, "megatron", 8)
    monkeypatch.setattr(workload, "EXPERT_BIAS_APPLY_BYTES", 0.0)
    monkeypatch.setattr(workload, "EXPERT_BIAS_APPLY_KERNELS", 0)
    without = _layer(GPT_OSS, "megatron", 8)
    rates = device_rates(B200, PROFILE, "bf16")
    routed = 4096 * 4.0 / 1                           # token copies on this GPU's experts (EP8, balanced)
    fwd_extra = 12.0 * routed * 2880 / rates.hbm_bytes_per_s + (2 * 16 + 1) * PROFILE.kernel_overhead_s
    # kernel overhead of the torch.cat survives zeroing the per-expert count
    fwd_extra_zeroed = 0.0 + 1 * PROFILE.kernel_overhead_s
    assert with_term.fwd_s - without.fwd_s == pytest.approx(fwd_extra - fwd_extra_zeroed, rel=1e-6)
    assert with_term.bwd_input_s - without.bwd_input_s == pytest.approx(2 * (fwd_extra - fwd_extra_zeroed),
                                                                        rel=1e-6)
    assert with_term.fwd_s > without.fwd_s


def test_no_term_without_expert_biases(monkeypatch: pytest.MonkeyPatch) -> None:
    with_term = _layer(QWEN, "megatron", 8)
    monkeypatch.setattr(workload, "EXPERT_BIAS_APPLY_BYTES", 0.0)
    monkeypatch.setattr(workload, "EXPERT_BIAS_APPLY_KERNELS", 0)
    assert _layer(QWEN, "megatron", 8).fwd_s == pytest.approx(with_term.fwd_s)
