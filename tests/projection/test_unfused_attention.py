"""Attention without a flash kernel (DeepSpeed 2021's Megatron CoreAttention): score GEMMs + score passes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from projection.collectives import place_group
from projection.compute import (UNFUSED_DROPOUT_FWD_BYTES, UNFUSED_SOFTMAX_BWD_BYTES, UNFUSED_SOFTMAX_FWD_BYTES,
                                attention_fwd_bwd_s, device_rates, gemm_s, streaming_s,
                                unfused_attention_fwd_bwd_s)
from projection.device_profile import DeviceProfile
from projection.engine import network_for
from projection.framework import framework_profile
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.model_spec import load_model
from projection.switches import resolve_switches
from projection.training_config import Cluster, TrainingConfig
from projection.workload import CommGroups, layer_cost


def _rates():
    hardware = load_hardware("a100-80gb")
    return hardware, device_rates(hardware, DeviceProfile(hardware_id="a100-80gb"), "fp16")


def test_unfused_attention_pays_full_score_gemms_and_score_passes() -> None:
    _, rates = _rates()
    bh, s, d = 4 * 96, 2048, 128
    fwd, bwd = unfused_attention_fwd_bwd_s(bh, s, s, d, d, rates, dropout=False)
    gemms_fwd = gemm_s(s, s, d, rates, groups=bh) + gemm_s(s, d, s, rates, groups=bh)
    scores = bh * s * s
    assert fwd == pytest.approx(gemms_fwd + streaming_s(UNFUSED_SOFTMAX_FWD_BYTES * scores, 1, rates))
    assert bwd > 2 * gemms_fwd + streaming_s(UNFUSED_SOFTMAX_BWD_BYTES * scores, 1, rates) * 0.99
    with_dropout, _ = unfused_attention_fwd_bwd_s(bh, s, s, d, d, rates, dropout=True)
    assert with_dropout - fwd == pytest.approx(streaming_s(UNFUSED_DROPOUT_FWD_BYTES * scores, 1, rates)
                                               - streaming_s(0, 0, rates))
    # the score passes are a real share of the layer's attention, not rounding
    assert fwd > 1.2 * gemms_fwd


def test_deepspeed_layer_runs_unfused_attention_megatron_flash() -> None:
    hardware, rates = _rates()
    model = load_model("gpt3-175b")
    cluster = Cluster(gpu="a100-80gb", num_gpus=8)
    profile = DeviceProfile(hardware_id="a100-80gb")
    net = network_for(hardware, cluster, profile)
    groups = CommGroups(tp=place_group(1, 1, net), cp=place_group(1, 1, net), ep=place_group(1, 1, net))

    def attention(framework: str) -> float:
        config = TrainingConfig(mbs=4, gbs=32, seq_len=2048, precision="fp16", framework=framework)
        backend = resolve_switches(config, framework_profile(framework)).attention_backend   # deepspeed: unfused
        layer_rates = replace(rates, unfused_attention=backend == "unfused")
        return layer_cost(model, 0, config, parallel_dims(config, cluster), layer_rates, net, groups).attention_fwd_s
    bh = 4 * model.num_attention_heads
    unfused, _ = unfused_attention_fwd_bwd_s(bh, 2048, 2048, model.head_dim, model.v_head_dim, rates,
                                             dropout=True)
    assert attention("deepspeed") == pytest.approx(unfused)
    flash_flops = 2.0 * bh * 2048 * 1024 * (model.head_dim + model.v_head_dim)
    assert attention("megatron") == pytest.approx(attention_fwd_bwd_s(flash_flops, rates)[0])
    assert attention("deepspeed") > attention("megatron")
