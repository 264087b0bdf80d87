"""torchtitan's attention kernel on Hopper: PyTorch SDPA's FlashAttention-2, not Transformer Engine's cuDNN kernel.

The device profile's attention efficiency is fitted on Megatron-core runs, whose Transformer Engine prefers cuDNN
fused attention from sm90 on; PyTorch's SDPA (torchtitan) dispatches FlashAttention-2 there, which the
FlashAttention-3 paper (arXiv 2407.08608, Figs. 5-6, H100 SXM5, head dim 128, seq 16k) measures at 0.62 of cuDNN
forward and backward.  On Ampere both stacks run FlashAttention-2-class kernels (no entry).
"""

from __future__ import annotations

import typing

import pytest

from projection.compute import device_rates
from projection.device_profile import DeviceProfile
from projection.engine import project
from projection.framework import framework_profile
from projection.framework_profile import AttentionKernelSpeed
from projection.hardware import Family, load_hardware
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig

# FlashAttention-3 paper, H100 SXM5, head dim 128, seq 16k, TFLOP/s: FlashAttention-2 vs cuDNN.
FA2_VS_CUDNN = {"forward": 370 / 595, "causal forward": 335 / 539, "backward": 322 / 516}


def _pristine(name: str, **update: object):
    return framework_profile(name).model_copy(update={"compute_efficiency": 1.0, "dp_comm_efficiency": 1.0,
                                                      **update})


def _step(gpu: str, framework) -> float:
    model = load_model("llama3-8b")
    cluster = Cluster(gpu=gpu, num_gpus=8)
    config = TrainingConfig(framework="torchtitan", seq_len=32768, mbs=1, gbs=8, zero=3, recompute="full")
    return project(model, cluster, config, profile=DeviceProfile(hardware_id=gpu), framework=framework
                   ).iteration_time_s


def test_shipped_torchtitan_hopper_attention_speed_is_the_fa2_over_cudnn_ratio() -> None:
    speed = framework_profile("torchtitan").attention_speed("hopper")
    for ratio in FA2_VS_CUDNN.values():
        assert speed == pytest.approx(ratio, abs=0.005)
    assert framework_profile("torchtitan").attention_speed("ampere") == 1.0
    assert framework_profile("megatron").attention_speed("hopper") == 1.0


def test_every_family_has_an_entry() -> None:
    assert {name.replace("_", "-") for name in AttentionKernelSpeed.model_fields} == set(typing.get_args(Family))


def test_attention_efficiency_scales_by_the_kernel_speed() -> None:
    hardware = load_hardware("h100-sxm")
    profile = DeviceProfile(hardware_id="h100-sxm")
    base = device_rates(hardware, profile, "bf16").attention_efficiency
    slow = device_rates(hardware, profile, "bf16", attention_multiplier=0.62).attention_efficiency
    assert slow == pytest.approx(0.62 * base, rel=1e-12)


def test_torchtitan_h100_step_pays_the_slower_kernel_a100_does_not() -> None:
    shipped = _pristine("torchtitan")
    reference = _pristine("torchtitan", attention_kernel_speed=AttentionKernelSpeed())
    # 32K tokens of Llama 3 8B: attention is most of the step, so a 0.62x kernel costs well over 20%
    assert _step("h100-sxm", shipped) > 1.2 * _step("h100-sxm", reference)
    assert _step("a100-80gb", shipped) == _step("a100-80gb", reference)
