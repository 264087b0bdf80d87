"""Transformer Engine's grouped GEMM is one cuBLAS GEMM per local expert on 4 streams (projection/workload.py).

TE GroupedLinear (Megatron-core moe_grouped_gemm) launches ``local_experts`` GEMMs round-robin on 4 compute
streams, so a grouped GEMM pays ceil(experts / 4) kernel overheads on the GPU and one host launch per expert;
frameworks with a single-kernel grouped GEMM (MaxText, torchtitan) pay one.  With the same routed tokens a
GPU holding 16 experts (EP8 of 128) therefore runs its MoE GEMMs slower than one holding 4 (EP32).
"""

from __future__ import annotations

import pytest

from projection import workload
from projection.compute import device_rates
from projection.device_profile import DeviceProfile
from projection.hardware import load_hardware
from projection.model_spec import load_model
from projection.workload import grouped_gemm_kernels

QWEN = load_model("qwen3-235b-a22b")
B200 = load_hardware("b200")
PROFILE = DeviceProfile(hardware_id="b200", gemm_efficiency=0.6, low_precision_gemm_efficiency=0.6,
                        attention_efficiency=0.5, moe_efficiency=0.6, kernel_overhead_s=1e-5)


def test_kernel_counts_follow_te_streams() -> None:
    assert grouped_gemm_kernels("megatron", 16) == (3, 15)   # 16 GEMMs on 4 streams: 4 deep, 1 already charged
    assert grouped_gemm_kernels("megatron", 4) == (0, 3)     # one per stream: the tails overlap
    assert grouped_gemm_kernels("nemo", 5) == (1, 4)
    assert grouped_gemm_kernels("megatron", 1) == (0, 0)
    assert grouped_gemm_kernels("jax", 16) == (0, 0)
    assert grouped_gemm_kernels("torchtitan", 16) == (0, 0)


@pytest.fixture
def moe_layer(b200_moe_layer):
    rates = device_rates(B200, PROFILE, "bf16")
    return lambda framework, ep: b200_moe_layer(QWEN, framework, ep, rates, mbs=1, gbs=64)


def test_per_expert_gemms_cost_kernel_overheads(moe_layer, without_te_grouped_mlp) -> None:
    with_term = moe_layer("megatron", 8)
    without_te_grouped_mlp()
    without = moe_layer("megatron", 8)
    extra = 2 * 3 * PROFILE.kernel_overhead_s     # fc1 + fc2, 3 more kernel overheads each (16 experts, 4 streams)
    assert with_term.fwd_s - without.fwd_s == pytest.approx(extra)
    assert with_term.bwd_input_s - without.bwd_input_s == pytest.approx(extra)
    assert with_term.bwd_weight_s - without.bwd_weight_s == pytest.approx(extra)


def test_fewer_local_experts_pay_less(moe_layer) -> None:
    # EP32 holds 4 of the 128 experts: no extra kernel overheads beyond the one of every GEMM
    ep8, ep32 = moe_layer("megatron", 8), moe_layer("megatron", 32)
    gap8 = ep8.bwd_weight_s - moe_layer("jax", 8).bwd_weight_s
    gap32 = ep32.bwd_weight_s - moe_layer("jax", 32).bwd_weight_s
    assert gap8 == pytest.approx(2 * 3 * PROFILE.kernel_overhead_s)
    assert gap32 == pytest.approx(0.0, abs=1e-12)
