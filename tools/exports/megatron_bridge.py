"""Megatron-Bridge recipe overrides: dotted ``section.field=value`` Hydra-style overrides of a ConfigContainer.

Megatron-Bridge (NVIDIA-NeMo/Megatron-Bridge ``src/megatron/bridge/training/config.py``)
trains from a ``ConfigContainer`` whose ``model`` is a model provider subclassing
megatron-core's ``TransformerConfig`` (so ``model.*`` fields are TransformerConfig fields),
``train`` holds the batch sizes, ``ddp`` megatron-core's ``DistributedDataParallelConfig``,
``dataset.sequence_length`` the sequence, and ``mixed_precision`` names a recipe from
``src/megatron/bridge/training/mixed_precision.py``.  Overrides go after the recipe on the
command line of ``scripts/performance/run_script.py`` / ``examples/recipes/*/pretrain_*.py``.
"""

from __future__ import annotations

import shlex
from typing import Any

from tools.exports.common import Job, LaunchConfig, comment_block
from tools.exports.megatron import recompute_dests
from tools.exports.pipeline_split import bridge_split_overrides

SOURCE = "Megatron-Bridge ConfigContainer overrides (model.* = megatron-core TransformerConfig fields)"
# Precision -> Megatron-Bridge mixed-precision recipe name (mixed_precision.py).
BRIDGE_PRECISION = {"bf16": "bf16_mixed", "fp16": "fp16_mixed", "fp8": "bf16_with_fp8_current_scaling_mixed",
                    "fp8-blockwise": "bf16_with_fp8_subchannel_scaling_mixed", "mxfp8": "bf16_with_mxfp8_mixed"}
# What each recipe sets on the model (fp8, fp8_recipe), used to validate the model fields.
BRIDGE_FP8 = {"bf16_with_fp8_current_scaling_mixed": ("hybrid", "tensorwise"),
              "bf16_with_fp8_delayed_scaling_mixed": ("hybrid", "delayed"),
              "bf16_with_fp8_subchannel_scaling_mixed": ("e4m3", "blockwise"),
              "bf16_with_mxfp8_mixed": ("e4m3", "mxfp8")}
HYDRA_SPECIAL = frozenset("|()*[]{},' ")   # a string value with one of these is written as a quoted string
USER_MUST_ADD = ["a recipe for the model (e.g. examples/recipes/llama/pretrain_llama3_8b.py) that sets the "
                 "architecture and tokenizer", "dataset.blend / data paths, checkpoint.save",
                 "train.train_iters and optimizer settings"]


def bridge_overrides(job: Job) -> dict[str, Any]:
    """'section.field' -> value."""
    c, layers = job.config, job.model.num_layers
    o: dict[str, Any] = {"model.tensor_model_parallel_size": c.tp, "model.pipeline_model_parallel_size": c.pp,
                         "model.context_parallel_size": c.cp, "model.sequence_parallel": c.sequence_parallel
                         and c.tp > 1}
    o.update(bridge_split_overrides(layers, c))
    if job.model.is_moe:
        o["model.expert_model_parallel_size"] = c.ep
        o["model.expert_tensor_parallel_size"] = c.etp
        o["model.moe_token_dispatcher_type"] = "flex" if c.moe_dispatcher == "deepep" else c.moe_dispatcher
        if c.moe_dispatcher == "deepep":
            o["model.moe_enable_deepep"] = True
    o["model.seq_length"] = c.seq_len
    o["dataset.sequence_length"] = c.seq_len
    o["train.micro_batch_size"] = c.mbs
    o["train.global_batch_size"] = c.gbs
    o["mixed_precision"] = BRIDGE_PRECISION[c.precision]
    if c.precision == "fp8":
        job.warnings.append("bf16_with_fp8_current_scaling_mixed keeps the first and last transformer layer in BF16 "
                            "(first_last_layers_bf16); the projection prices every layer in FP8")
    o.update({f"model.{k}": v for k, v in recompute_dests(c).items()})
    p = job.profile
    if c.zero == 3:
        o["dist.use_torch_fsdp2"] = True
        o["model.gradient_accumulation_fusion"] = False
        o["ddp.use_distributed_optimizer"] = False
        job.assumptions.append(f"FSDP2 hides parameter gathers under compute (the projection hides "
                               f"{p.dp_overlap_fraction:.0%} of FSDP comm)")
    else:
        o["ddp.use_distributed_optimizer"] = c.zero == 1
        o["ddp.overlap_grad_reduce"] = True
        o["ddp.overlap_param_gather"] = c.zero == 1
        job.assumptions.append(f"DP comm overlaps the backward pass (the projection hides "
                               f"{p.dp_overlap_fraction:.0%} of it)")
    o["comm_overlap.tp_comm_overlap"] = job.tp_overlap()
    return {k: v for k, v in o.items() if v is not None or k == "model.recompute_granularity"}


def _value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ",".join(str(x) for x in v) + "]"
    if isinstance(v, str) and any(ch in v for ch in HYDRA_SPECIAL):
        return '"' + v + '"'          # a Hydra quoted string (a pipeline layout 'Et|(tt|)*30mL')
    return str(v)


def export(job: Job) -> LaunchConfig:
    overrides = bridge_overrides(job)
    lines = [shlex.quote(f"{k}={_value(v)}") for k, v in overrides.items()]   # one shell word each
    head = comment_block(job, SOURCE) + [f"# add: {u}" for u in USER_MUST_ADD]
    text = "\n".join(head + [line + " \\" for line in lines[:-1]] + lines[-1:]) + "\n"
    return LaunchConfig(framework="megatron-bridge", text=text, options=overrides, warnings=job.warnings,
                        assumptions=job.assumptions, user_must_add=USER_MUST_ADD,
                        command="python examples/recipes/<model>/pretrain_<model>.py " + " ".join(lines),
                        filename=job.stem() + ".bridge.overrides")
