"""torchtitan runs a Llama block's element-wise code as eager PyTorch (torch.compile off by default).

``FrameworkProfile.eager_elementwise`` (projection/workload.py EAGER_NORM_BYTES): the two RMSNorms (float upcast, pow,
mean, rsqrt multiply, type_as, weight multiply: 36 B per token x hidden element forward, 92 B backward), the rotary
embedding of q and k (float, complex multiply, type_as: 20 B per element each way) and the SwiGLU product (10 B / 18 B
per FFN element) replace the fused-kernel bytes every framework is charged; torchtitan's repeat_kv copies K and V to
the query head count under GQA.  Each is an HBM pass at the achievable bandwidth plus one kernel overhead per op.
"""

from __future__ import annotations

import pytest

from projection.compute import device_rates, streaming_s
from projection.device_profile import DeviceProfile
from projection.engine import _comm_groups, network_for, project
from projection.framework import framework_profile
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from projection.workload import (
    EAGER_NORM_BYTES,
    EAGER_ROPE_BYTES,
    EAGER_SWIGLU_BYTES,
    NO_EAGER_PASSES,
    OP_SAC,
    eager_elementwise_bytes,
    layer_cost,
)

A100 = load_hardware("a100-80gb")
PROFILE = DeviceProfile(hardware_id="a100-80gb", gemm_efficiency=0.75, low_precision_gemm_efficiency=0.75,
                        attention_efficiency=0.5, memory_efficiency=0.8, kernel_overhead_s=5e-6)
CLUSTER = Cluster(gpu="a100-80gb", num_gpus=64)
BASE = {"framework": "torchtitan", "mbs": 2, "gbs": 128, "seq_len": 4096, "zero": 3}


def _layer(model_id: str, *, eager: bool, **config: object):
    model = load_model(model_id)
    cfg = TrainingConfig(**{**BASE, **config})
    dims = parallel_dims(cfg, CLUSTER)
    net = network_for(A100, CLUSTER, PROFILE)
    rates = device_rates(A100, PROFILE, cfg.precision, eager_elementwise=eager)
    return model, cfg, rates, layer_cost(model, 0, cfg, dims, rates, net, _comm_groups(dims, net))


def test_bytes_per_element_from_the_op_counts() -> None:
    assert EAGER_NORM_BYTES == (6 + 8 + 4 + 8 + 6 + 4, 12 + 6 + 24 + 4 + 28 + 12 + 6)
    assert EAGER_ROPE_BYTES == (6 + 8 + 6, 6 + 8 + 6)
    assert EAGER_SWIGLU_BYTES == (4 + 6, 6 + 6 + 6)


def test_small_case_bytes_and_kernels() -> None:
    model = load_model("llama2-13b")                 # MHA: no repeat_kv copy
    rates = device_rates(A100, PROFILE, "bf16", eager_elementwise=True)
    config = TrainingConfig(**BASE)
    passes = eager_elementwise_bytes(model, config, rates, norm_elements=2 * 10.0, rope_elements=3.0,
                                     act_elements=5.0, repeat_elements=0.0)
    assert passes.norm_fwd == pytest.approx((36 - 4) * 20.0)
    assert passes.rope_fwd == pytest.approx((20 - 4) * 3.0)
    assert passes.act_fwd == pytest.approx((10 - 6) * 5.0)
    assert passes.bwd == pytest.approx((92 - 8) * 20.0 + (20 - 8) * 3.0 + (18 - 12) * 5.0)
    assert (passes.kernels_fwd, passes.kernels_bwd) == (2 * 7 + 5 + 1, 2 * 13 + 4 + 1)
    off = device_rates(A100, PROFILE, "bf16")
    assert eager_elementwise_bytes(model, config, off, 20.0, 3.0, 5.0, 0.0) is NO_EAGER_PASSES
    megatron = TrainingConfig(**{**BASE, "framework": "megatron"})
    assert eager_elementwise_bytes(model, megatron, off, 20.0, 3.0, 5.0, 7.0) is NO_EAGER_PASSES


def test_layer_pays_the_passes_at_hbm_bandwidth_and_fails_when_zeroed() -> None:
    model, cfg, rates, eager = _layer("llama2-13b", eager=True)
    _, _, _, fused = _layer("llama2-13b", eager=False)
    tokens, h, f = cfg.mbs * cfg.seq_len, model.hidden_size, model.ffn_hidden_size
    fwd_bytes = 32 * 2 * tokens * h + 16 * tokens * (model.q_width + model.kv_width) + 4 * tokens * f
    bwd_bytes = 84 * 2 * tokens * h + 12 * tokens * (model.q_width + model.kv_width) + 6 * tokens * f
    assert eager.fwd_s - fused.fwd_s == pytest.approx(streaming_s(fwd_bytes, 20, rates))
    assert eager.bwd_input_s - fused.bwd_input_s == pytest.approx(streaming_s(bwd_bytes, 31, rates))
    assert eager.bwd_weight_s == fused.bwd_weight_s
    # a few ms a layer on an A100 for Llama 2 13B at 2 x 4096 tokens: about a tenth of the layer
    total = eager.fwd_s + eager.bwd_input_s + eager.bwd_weight_s
    assert 0.06 < total / (fused.fwd_s + fused.bwd_input_s + fused.bwd_weight_s) - 1 < 0.2


def test_op_sac_reruns_the_eager_forward() -> None:
    _, _, _, eager = _layer("llama2-13b", eager=True, recompute="selective")
    _, _, _, fused = _layer("llama2-13b", eager=False, recompute="selective")
    extra_fwd = eager.fwd_s - fused.fwd_s
    assert eager.recompute_s((OP_SAC,)) - fused.recompute_s((OP_SAC,)) == pytest.approx(extra_fwd, rel=0.02)


def test_repeat_kv_copies_k_and_v_under_gqa_only() -> None:
    model, cfg, rates, titan = _layer("llama2-70b", eager=False)
    _, _, _, megatron = _layer("llama2-70b", eager=False, framework="megatron")
    tokens = cfg.mbs * cfg.seq_len
    copy = streaming_s(2 * 2 * tokens * (model.kv_width + model.q_width), 2, rates)
    assert model.num_kv_heads < model.num_attention_heads
    assert titan.fwd_s - megatron.fwd_s == pytest.approx(copy, rel=1e-6)
    _, _, _, mha = _layer("llama2-13b", eager=False)
    _, _, _, mha_megatron = _layer("llama2-13b", eager=False, framework="megatron")
    assert mha.fwd_s == pytest.approx(mha_megatron.fwd_s)


def test_shipped_profiles_and_engine() -> None:
    titan = framework_profile("torchtitan")
    assert titan.eager_elementwise
    assert not any(framework_profile(name).eager_elementwise for name in ("megatron", "jax", "deepspeed",
                                                                          "llm-foundry"))
    config = TrainingConfig(**BASE)
    eager = project(load_model("llama2-13b"), CLUSTER, config, hardware=A100, profile=PROFILE, framework=titan)
    fused = project(load_model("llama2-13b"), CLUSTER, config, hardware=A100, profile=PROFILE,
                    framework=titan.model_copy(update={"eager_elementwise": False}))
    assert eager.iteration_time_s > 1.05 * fused.iteration_time_s
