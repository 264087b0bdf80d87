"""Flash attention's softmax exponentials run on the SFUs (MUFU.EX2), 16 per clock per SM (projection/compute.py).

On B200 (2.25 PFLOP/s bf16, 148 SMs) the forward of head dim 64 (gpt-oss) is bound by the exponentials, not the
MMAs (FlashAttention-4's analysis); Blackwell Ultra doubles the SFU rate, Hopper's tensor cores are slow enough
that head dim 64 stays MMA-bound, and head dim 128 stays MMA-bound on every chip.  Zeroing the SFU rate (no
bound) must make the B200 head-dim-64 forward faster.
"""

from __future__ import annotations

import dataclasses

import pytest

from projection import compute
from projection.compute import SFU_EXP_PER_CLOCK_PER_SM, attention_fwd_bwd_s, device_rates
from projection.device_profile import DeviceProfile
from projection.hardware import load_hardware


def _rates(gpu: str):
    profile = DeviceProfile(hardware_id=gpu, gemm_efficiency=0.6, low_precision_gemm_efficiency=0.6,
                            attention_efficiency=0.5, moe_efficiency=0.6, kernel_overhead_s=0.0)
    return device_rates(load_hardware(gpu), profile, "bf16")


def _scores_and_flops(head_dim: int) -> tuple[float, float]:
    scores = 4 * 64 * 4096 * 2048.0               # mbs 4, 64 heads, seq 4096, causal
    return scores, 2.0 * scores * (head_dim + head_dim)


def test_rates_follow_sfu_table() -> None:
    b200, b300, h100 = _rates("b200"), _rates("b300"), _rates("h100-sxm")
    hw = load_hardware("b200")
    assert b200.exp_per_s == pytest.approx(16 * hw.num_compute_units * hw.boost_clock_ghz * 1e9)
    hw300 = load_hardware("b300")
    assert b300.exp_per_s == pytest.approx(32 * hw300.num_compute_units * hw300.boost_clock_ghz * 1e9)
    assert h100.exp_per_s > 0
    assert SFU_EXP_PER_CLOCK_PER_SM["blackwell-ultra"] == 2 * SFU_EXP_PER_CLOCK_PER_SM["blackwell"]
    assert _rates("mi300x").exp_per_s == 0.0        # no sourced CDNA rate: no bound


def test_head_dim_64_forward_is_exp_bound_on_b200() -> None:
    rates = _rates("b200")
    scores, flops = _scores_and_flops(64)
    fwd, bwd = attention_fwd_bwd_s(flops, rates, scores)
    no_bound = dataclasses.replace(rates, exp_per_s=0.0)
    fwd0, bwd0 = attention_fwd_bwd_s(flops, no_bound, scores)
    assert fwd == pytest.approx(scores / rates.exp_per_s / rates.attention_efficiency)
    assert fwd > 1.5 * fwd0                        # about 1.9x at 0.215 ps per exp vs 0.114 ps of MMA per score
    assert bwd == pytest.approx(bwd0)              # the backward's 5 MMAs per score outrun its one exponential


def test_mma_bound_cases_unchanged() -> None:
    for gpu, head_dim in (("b200", 128), ("b300", 64), ("h100-sxm", 128), ("a100-80gb", 64)):
        rates = _rates(gpu)
        scores, flops = _scores_and_flops(head_dim)
        assert attention_fwd_bwd_s(flops, rates, scores) == pytest.approx(
            attention_fwd_bwd_s(flops, dataclasses.replace(rates, exp_per_s=0.0), scores)), gpu


def test_term_zeroed_in_table(monkeypatch: pytest.MonkeyPatch) -> None:
    scores, flops = _scores_and_flops(64)
    with_term = attention_fwd_bwd_s(flops, _rates("b200"), scores)[0]
    monkeypatch.setattr(compute, "SFU_EXP_PER_CLOCK_PER_SM", {})
    assert attention_fwd_bwd_s(flops, _rates("b200"), scores)[0] < with_term


def test_gpt_oss_full_attention_layer_pays_the_bound() -> None:
    from projection.collectives import network_params_from_hardware, place_group
    from projection.layout import parallel_dims
    from projection.model_spec import load_model
    from projection.training_config import Cluster, TrainingConfig
    from projection.workload import CommGroups, layer_cost

    model = load_model("gpt-oss-120b")
    config = TrainingConfig(framework="megatron", mbs=4, gbs=512, seq_len=4096, ep=8, zero=1)
    dims = parallel_dims(config, Cluster(gpu="b200", num_gpus=64))
    net = network_params_from_hardware(load_hardware("b200"))
    groups = CommGroups(tp=place_group(1, 1, net), cp=place_group(1, 1, net), ep=place_group(8, 1, net))
    rates = _rates("b200")
    full = 1                                        # layer_types: sliding, full, sliding, ...
    with_term = layer_cost(model, full, config, dims, rates, net, groups)
    without = layer_cost(model, full, config, dims, dataclasses.replace(rates, exp_per_s=0.0), net, groups)
    assert with_term.attention_fwd_s > 1.5 * without.attention_fwd_s
