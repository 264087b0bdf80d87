"""project_memory (the array form, memory_batch.MemoryBatcher.stages) equals stage_memory of each rank, bit for bit.

Random layouts over models with dense, MoE, mixed and windowed layers, every schedule (ZB-V included),
recompute (full on part of a stage, selective modules), ZeRO levels with HSDP, LoRA with FP8, the MoE
dispatchers and frameworks: every StageMemory field is equal (== on floats, not approx).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from projection.layout import ParallelDims
from projection.memory import project_memory, stage_memory
from projection.model_spec import load_model
from projection.training_config import TrainingConfig
from memory_setup import H100, PROFILE

_MODELS = [load_model(name) for name in ("llama3-8b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3",
                                         "llama3.1-405b")]


@settings(max_examples=120, deadline=None)
@given(model=st.sampled_from(_MODELS), pp=st.integers(1, 24), vpp=st.sampled_from([1, 2, 3, 4]),
       schedule=st.sampled_from(["1f1b", "interleaved", "zero-bubble", "gpipe"]),
       tp=st.sampled_from([1, 2, 8]), micro=st.integers(1, 40),
       recompute=st.sampled_from(["none", "selective", "full"]), rnl=st.sampled_from([None, 1, 2, 5]),
       modules=st.sampled_from([("core_attn",), ("core_attn", "layernorm"), ("mlp",)]),
       zero=st.sampled_from([0, 1, 2, 3]), fsdp=st.sampled_from([None, 2]),
       precision=st.sampled_from(["bf16", "fp8", "mxfp8"]), lora=st.booleans(),
       framework=st.sampled_from([None, "torchtitan", "jax"]), dispatcher=st.sampled_from(["alltoall", "deepep"]))
def test_every_rank_equals_stage_memory(model, pp, vpp, schedule, tp, micro, recompute, rnl, modules, zero, fsdp,
                                        precision, lora, framework, dispatcher) -> None:
    pp = min(pp, model.num_layers)
    if schedule == "interleaved":
        vpp = max(2, vpp)
        if pp < 2 or pp * vpp > model.num_layers:
            schedule, vpp = "1f1b", 1
        else:
            micro = pp * max(1, micro // pp)
    elif schedule == "zero-bubble" and vpp == 2 and pp > 1 and 2 * pp <= model.num_layers:
        micro = max(micro, pp)    # ZB-V (zero-bubble with two chunks)
    else:
        vpp = 1
        if schedule == "zero-bubble":
            micro = max(micro, pp)
    ep = 8 if model.is_moe else 1
    dp = 16
    config = TrainingConfig(
        tp=tp, pp=pp, vpp=vpp, ep=ep, dp=dp, mbs=1, gbs=micro * dp, seq_len=4096, recompute=recompute,
        recompute_num_layers=rnl if recompute == "full" else None,
        recompute_modules=modules if recompute == "selective" else ("core_attn",), zero=zero,
        fsdp_size=fsdp if zero == 3 else None, precision=precision, framework=framework,
        finetune="lora" if lora else None, moe_dispatcher=dispatcher if model.is_moe else "alltoall",
        pp_schedule=schedule, sequence_parallel=tp > 1)
    dims = ParallelDims(tp=tp, pp=pp, cp=1, dp=dp, ep=ep, etp=1, vpp=vpp, num_microbatches=micro)
    memory = project_memory(model, H100, config, dims, PROFILE)
    assert memory.stages == tuple(stage_memory(model, config, dims, PROFILE, rank, scale_up_gpus=8)
                                  for rank in range(pp))
