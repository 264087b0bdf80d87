"""Context parallelism through PyTorch's ring attention (torchtitan): unfused fp32 merges and repeated K/V heads.

torch/distributed/tensor/experimental/_attention.py runs one SDPA call per ring step and merges the partial
outputs (and, in the backward, accumulates dQ/dK/dV) in fp32 element-wise kernels outside the attention
kernel; torchtitan's Llama repeats K/V heads before SDPA, so the ring carries K/V at the query head count.
Megatron-core / Transformer Engine fuse the correction, so the same layout there pays none of it.
"""

from __future__ import annotations

import pytest

from projection.collectives import place_group
from projection.compute import device_rates, streaming_s
from projection.device_profile import DeviceProfile
from projection.engine import network_for
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from projection.workload import (
    RING_MERGE_BWD_BYTES_PER_KV,
    RING_MERGE_BWD_BYTES_PER_Q,
    RING_MERGE_FWD_BYTES_PER_KV,
    RING_MERGE_FWD_BYTES_PER_OUT,
    RING_MERGE_KERNELS_FWD,
    CommGroups,
    layer_cost,
    ring_merge_s,
)


def _layer(framework: str, cp: int, seq_len: int = 16384):
    model = load_model("llama3-8b")             # 32 query heads, 8 K/V heads, head dim 128
    hardware = load_hardware("h100-sxm")
    cluster = Cluster(gpu="h100-sxm", num_gpus=8)
    profile = DeviceProfile(hardware_id="h100-sxm")
    config = TrainingConfig(framework=framework, cp=cp, seq_len=seq_len, mbs=1, gbs=8 // cp, zero=3)
    net = network_for(hardware, cluster, profile)
    dims = parallel_dims(config, cluster)
    groups = CommGroups(tp=place_group(1, 1, net), cp=place_group(dims.cp, 1, net), ep=place_group(1, 1, net))
    rates = device_rates(hardware, profile, config.precision, 1.0, 0.0)
    return model, rates, layer_cost(model, 0, config, dims, rates, net, groups)


def test_ring_merge_is_zero_without_context_parallelism() -> None:
    *_, cost_tt = _layer("torchtitan", 1)
    *_, cost_mg = _layer("megatron", 1)
    assert cost_tt.attention_fwd_s == pytest.approx(cost_mg.attention_fwd_s)
    assert cost_tt.cp_comm_s == 0.0


def test_torchtitan_cp_attention_pays_the_unfused_merge_megatron_does_not() -> None:
    model, rates, tt = _layer("torchtitan", 4)
    _, _, mg = _layer("megatron", 4)
    tokens = 16384 / 4
    out_elems = tokens * 32 * 128
    kv_elems = 2 * tokens * 32 * 128            # repeated K/V heads: the query head count
    steps = 3
    expected_fwd = streaming_s(steps * (RING_MERGE_FWD_BYTES_PER_OUT * out_elems
                                        + RING_MERGE_FWD_BYTES_PER_KV * kv_elems),
                               steps * RING_MERGE_KERNELS_FWD, rates)
    assert tt.attention_fwd_s - mg.attention_fwd_s == pytest.approx(expected_fwd, rel=1e-9)
    fwd, bwd = ring_merge_s(tokens, 32 * 128, 32 * 128, 4, rates)
    assert fwd == pytest.approx(expected_fwd, rel=1e-9)
    # the backward moves more bytes per step than the forward (fp32 dK/dV accumulate and send buffer)
    assert RING_MERGE_BWD_BYTES_PER_KV * 2 + RING_MERGE_BWD_BYTES_PER_Q > RING_MERGE_FWD_BYTES_PER_KV * 2 + \
        RING_MERGE_FWD_BYTES_PER_OUT
    assert bwd > fwd
    # torchtitan's repeat_kv copy of K and V (GQA, projection.workload.REPEAT_KV_KERNELS) is the other difference
    repeat = streaming_s(2 * 2 * tokens * (model.kv_width + model.q_width), 2, rates)
    assert tt.bwd_input_s - mg.bwd_input_s == pytest.approx(bwd + repeat, rel=1e-6)


def test_merge_grows_with_ring_steps_at_fixed_tokens_per_gpu() -> None:
    """Same tokens per GPU (seq_len / cp fixed): the merge share of attention rises with cp (cp-1 merges)."""
    shares = []
    for cp in (2, 4, 8):
        _, _, tt = _layer("torchtitan", cp, seq_len=8192 * cp)
        _, _, mg = _layer("megatron", cp, seq_len=8192 * cp)
        shares.append((tt.attention_fwd_s - mg.attention_fwd_s) / mg.attention_fwd_s)
    assert 0.0 < shares[0]
    assert shares == sorted(shares)


def test_torchtitan_ring_exchanges_repeated_kv_heads() -> None:
    """GQA with 4 query heads per K/V head: the torchtitan ring carries 4x the K/V bytes of Megatron's."""
    _, _, tt = _layer("torchtitan", 2)
    _, _, mg = _layer("megatron", 2)
    latency = DeviceProfile(hardware_id="h100-sxm").scale_up_latency_s   # CP 2: one ring step, one latency
    assert tt.cp_comm_s - latency == pytest.approx(4.0 * (mg.cp_comm_s - latency), rel=1e-9)
