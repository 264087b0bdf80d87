"""torchtitan's ``recompute: selective`` is per-op SAC: it re-runs every second matmul and the element-wise ops.

torchtitan torchtitan/parallelisms/parallelize_llama.py ``_custom_policy`` (@004b3148) saves the outputs of
``aten.mm``, SDPA and reduce-scatter "except every second mm", so a Llama block re-runs wk, wo and w3 (the
2nd, 4th and 6th of wq, wk, wv, wo, w1, w3, w2) and its norms, rotary embedding and activation, not the
attention core.  The memory side already reads it so (``memory_traits(...).op_level_selective_ac``); these
tests pin the time side.
"""

from __future__ import annotations

import pytest

from projection.compute import device_rates, gemm_fwd_bwd_s
from projection.device_profile import DeviceProfile
from projection.engine import _comm_groups, network_for, project
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from projection.workload import OP_SAC, layer_cost, selective_recompute_modules

A100 = load_hardware("a100-80gb")
PROFILE = DeviceProfile(hardware_id="a100-80gb", gemm_efficiency=0.75, low_precision_gemm_efficiency=0.75,
                        attention_efficiency=0.5, comm_efficiency=0.8, dp_overlap_fraction=0.9,
                        tp_overlap_fraction=0.0, kernel_overhead_s=5e-6, step_overhead_s=0.05,
                        scale_up_latency_s=5e-6, scale_out_latency_s=1.5e-5)
BASE = {"framework": "torchtitan", "mbs": 2, "gbs": 128, "seq_len": 4096, "zero": 3}


def _time(**config: object) -> float:
    return project(load_model("llama2-13b"), Cluster(gpu="a100-80gb", num_gpus=64),
                   TrainingConfig(**{**BASE, **config}), hardware=A100, profile=PROFILE).iteration_time_s


def test_selective_means_op_sac_under_torchtitan_only() -> None:
    assert selective_recompute_modules(TrainingConfig(**{**BASE, "recompute": "selective"})) == (OP_SAC,)
    assert selective_recompute_modules(TrainingConfig(**{**BASE, "recompute": "selective", "framework": "megatron"}
                                                      )) == ("core_attn",)
    assert selective_recompute_modules(TrainingConfig(**{**BASE, "recompute": "full"})) == ()


def test_op_sac_reruns_wk_wo_w3_and_the_elementwise_ops() -> None:
    model = load_model("llama2-13b")
    config = TrainingConfig(**{**BASE, "recompute": "selective"})
    cluster = Cluster(gpu="a100-80gb", num_gpus=64)
    dims = parallel_dims(config, cluster)
    net = network_for(A100, cluster, PROFILE)
    rates = device_rates(A100, PROFILE, config.precision)
    cost = layer_cost(model, 0, config, dims, rates, net, _comm_groups(dims, net))
    tokens, h = config.mbs * config.seq_len, model.hidden_size
    qkv_s = gemm_fwd_bwd_s(tokens, model.q_width + 2 * model.kv_width, h, rates)[0]
    wk = qkv_s * model.kv_width / (model.q_width + 2 * model.kv_width)
    wo = gemm_fwd_bwd_s(tokens, h, model.q_width, rates)[0]
    w3 = gemm_fwd_bwd_s(tokens, 2 * model.ffn_hidden_size, h, rates)[0] / 2
    rerun = cost.recompute_s((OP_SAC,))
    assert rerun > wk + wo + w3                      # the matmuls plus the element-wise passes
    assert rerun < wk + wo + w3 + 0.25 * cost.fwd_s   # ... and not the attention core or the other matmuls
    assert rerun < cost.fwd_s - cost.attention_fwd_s


def test_op_sac_step_lies_between_none_and_full_as_measured() -> None:
    """torchtitan docs/performance.md, Llama 2 13B on 64 A100 80GB (FSDP, local batch 2): 2,162 tokens/s/GPU
    without AC, 1,904 with selective op AC (0.881).  The projected ratio follows within 3%."""
    none, selective, full = (_time(recompute=r) for r in ("none", "selective", "full"))
    assert none < selective < full
    assert none / selective == pytest.approx(1904 / 2162, abs=0.03)
