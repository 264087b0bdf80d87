"""The numpy stage times (engine._stage_times_vector) equal the loop's (the reference) bit for bit.

Random layouts of dense, MoE, hybrid and windowed models: every schedule (ZB-V puts the LM head on rank 0),
uneven chunks, empty chunks, no or selective recompute, CP, LoRA; the per-chunk F/B/W times and the
per-rank breakdown sums are == equal; a bad time still raises StageTimes' error.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projection import engine
from projection.collectives import network_params_from_hardware
from projection.compute import device_rates
from projection.device_profile import default_profile
from projection.framework import framework_profile
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.model_spec import load_model
from projection.pipeline import StageTimes
from projection.training_config import Cluster, TrainingConfig
from projection.workload import embedding_cost, head_cost

H100 = load_hardware("h100-sxm")
_MODELS = [load_model(name) for name in ("llama3-8b", "mixtral-8x7b", "deepseek-v3", "llama3.1-405b", "gpt-oss-120b")]


@settings(max_examples=80, deadline=None)
@given(model=st.sampled_from(_MODELS), pp=st.integers(1, 20), vpp=st.integers(1, 5),
       schedule=st.sampled_from(["1f1b", "interleaved", "zero-bubble"]), tp=st.sampled_from([1, 2, 8]),
       cp=st.sampled_from([1, 2]), recompute=st.sampled_from(["none", "selective"]),
       modules=st.sampled_from([("core_attn",), ("core_attn", "layernorm")]), lora=st.booleans(),
       framework=st.sampled_from([None, "torchtitan"]))
def test_vector_stage_times_equal_the_loop(model, pp, vpp, schedule, tp, cp, recompute, modules, lora,
                                           framework) -> None:
    pp = min(pp, model.num_layers)
    if schedule == "1f1b" or pp == 1:
        schedule, vpp = "1f1b", 1
    elif schedule == "zero-bubble":
        vpp = 2 if vpp == 2 and 2 * pp <= model.num_layers else 1    # vpp 2: ZB-V
    elif pp * vpp > model.num_layers or vpp < 2:
        schedule, vpp = "1f1b", 1
    ep = 8 if model.is_moe else 1
    config = TrainingConfig(tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, dp=8, mbs=1, gbs=8 * pp * 2, seq_len=8192,
                            recompute=recompute,
                            recompute_modules=modules if recompute == "selective" else ("core_attn",),
                            finetune="lora" if lora else None, framework=framework, pp_schedule=schedule,
                            sequence_parallel=tp > 1)
    cluster = Cluster(gpu="h100-sxm", num_gpus=tp * pp * cp * 8)
    dims = parallel_dims(config, cluster)
    profile = default_profile(H100)
    fw = framework_profile(config.framework)
    rates = device_rates(H100, profile, config.precision, fw.compute_efficiency, fw.host_launch_s)
    net = network_params_from_hardware(H100)
    costs = engine._layer_costs(model, config, dims, rates, net, engine._comm_groups(dims, net))
    args = (model, config, dims, profile, fw, costs, head_cost(model, config, dims, rates),
            embedding_cost(model, config, dims, rates))
    loop = engine._stage_times(*args, vector=False)
    vector = engine._stage_times(*args, vector=True)
    assert loop == vector
    for stage in vector[0]:
        assert all(type(v) is float for v in (*stage.forward_s, *stage.backward_input_s, *stage.backward_weight_s))


def test_trusted_stage_times_equal_checked_ones() -> None:
    kwargs = {"forward_s": (1.0, 2.0), "backward_input_s": (1.5, 0.0), "backward_weight_s": (0.25, 0.0)}
    assert StageTimes.trusted(**kwargs) == StageTimes(**kwargs)


def test_vector_stage_times_raise_on_a_bad_time() -> None:
    model = load_model("llama3-8b")
    config = TrainingConfig(tp=1, pp=8, vpp=2, dp=1, mbs=1, gbs=16, seq_len=4096, pp_schedule="interleaved")
    dims = parallel_dims(config, Cluster(gpu="h100-sxm", num_gpus=8))
    profile = default_profile(H100)
    fw = framework_profile(None)
    rates = device_rates(H100, profile, config.precision, fw.compute_efficiency, fw.host_launch_s)
    net = network_params_from_hardware(H100)
    costs = engine._layer_costs(model, config, dims, rates, net, engine._comm_groups(dims, net))
    with pytest.raises(ValueError, match="must be finite and >= 0"):
        engine._stage_times(model, config, dims, profile, fw, costs, (math.nan, 0.0, 0.0), (0.0, 0.0), vector=True)
