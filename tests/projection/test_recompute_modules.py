"""Selective recompute re-runs the forward of each module it names, so each module costs step time.

Megatron-core ``TransformerConfig.recompute_modules`` (core_attn, layernorm, mlp, moe, moe_act,
shared_experts, mla_up_proj): the named submodules drop their activations and run their forward again
in the backward pass.  Before this was priced, only core_attn cost time and the search could pick
"recompute everything cheap" for free.
"""

from __future__ import annotations

import pytest

from projection.compute import device_rates
from projection.device_profile import DeviceProfile
from projection.engine import _comm_groups, network_for, project
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from projection.workload import OP_SAC, layer_cost

H100 = load_hardware("h100-sxm")
PROFILE = DeviceProfile(hardware_id="h100-sxm", gemm_efficiency=0.7, low_precision_gemm_efficiency=0.35,
                        attention_efficiency=0.5, comm_efficiency=0.8, dp_overlap_fraction=0.0,
                        tp_overlap_fraction=0.0, kernel_overhead_s=5e-6, step_overhead_s=0.05,
                        scale_up_latency_s=5e-6, scale_out_latency_s=1.5e-5)


def _time(model: str, num_gpus: int, **config: object) -> float:
    base = {"mbs": 1, "gbs": num_gpus, "seq_len": 4096, "framework": "megatron"}
    return project(load_model(model), Cluster(gpu="h100-sxm", num_gpus=num_gpus), TrainingConfig(**{**base, **config}),
                   hardware=H100, profile=PROFILE).iteration_time_s


@pytest.mark.parametrize(("model", "extra", "layout"), [
    ("llama3-8b", "layernorm", {}),
    ("llama3-8b", "mlp", {}),
    ("mixtral-8x7b", "moe_act", {"ep": 8}),
    ("mixtral-8x7b", "moe", {"ep": 8}),
    ("deepseek-v3", "mla_up_proj", {"ep": 8, "pp": 8}),
    ("deepseek-v3", "shared_experts", {"ep": 8, "pp": 8}),
])
def test_each_recomputed_module_adds_its_forward(model: str, extra: str, layout: dict) -> None:
    gpus = 64
    attn_only = _time(model, gpus, recompute="selective", recompute_modules=("core_attn",), **layout)
    more = _time(model, gpus, recompute="selective", recompute_modules=("core_attn", extra), **layout)
    assert more > attn_only * 1.0005, f"recomputing {extra} must cost step time"


def test_module_costs_are_parts_of_the_layer_forward() -> None:
    """Each module's re-run forward is positive and below the whole layer's forward (it is a part of it)."""
    model, config = load_model("deepseek-v3"), TrainingConfig(mbs=1, gbs=64, seq_len=4096, ep=8, pp=8)
    cluster = Cluster(gpu="h100-sxm", num_gpus=64)
    dims = parallel_dims(config, cluster)
    net = network_for(H100, cluster, PROFILE)
    rates = device_rates(H100, PROFILE, config.precision)
    dense, moe = (layer_cost(model, i, config, dims, rates, net, _comm_groups(dims, net)) for i in (0, 5))
    assert {n for n, _ in dense.module_fwd_s} == {"layernorm", "mlp", "mla_up_proj", OP_SAC}
    assert {n for n, _ in moe.module_fwd_s} == {"layernorm", "moe", "moe_act", "shared_experts", "mla_up_proj", OP_SAC}
    for cost in (dense, moe):
        for name, seconds in cost.module_fwd_s:
            assert 0 < seconds < cost.fwd_s, name
    assert moe.recompute_s(("core_attn",)) == moe.attention_fwd_s
    assert moe.recompute_s(("moe",)) > moe.recompute_s(("moe_act",)) > 0
    assert moe.recompute_s(("moe", "moe_act", "shared_experts")) == moe.recompute_s(("moe",))   # parts of moe
