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

FRAMEWORK = "megatron-bridge"
"""The launch framework this module exports to (tools/exports/__init__.py registers it under this name)."""
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
# Recipe scripts shipped in Megatron-Bridge v0.2.2 examples/recipes (catalog model -> script).
BRIDGE_SCRIPTS = {"llama3-8b": "examples/recipes/llama/pretrain_llama3_8b.py"}
# Recipes that set fp8_param_gather=True (mixed_precision.py, v0.2.2).
FP8_PARAM_GATHER_RECIPES = frozenset({"bf16_with_fp8_current_scaling_mixed", "bf16_with_fp8_delayed_scaling_mixed",
                                      "bf16_with_fp8_subchannel_scaling_mixed", "bf16_with_mxfp8_mixed"})
USER_MUST_ADD = ["a recipe script for the model (e.g. examples/recipes/llama/pretrain_llama3_8b.py) that sets the "
                 "architecture and tokenizer (BRIDGE_SCRIPT in the launcher)",
                 "data: the recipe's data_paths (the shipped scripts call pretrain_config() and train on mock data)",
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
    o.update(_fp8_overlap_and_peft(job))
    return {k: v for k, v in o.items() if v is not None or k == "model.recompute_granularity"}


# LoRA as the projection prices it (projection/memory.py LORA_RANK: rank 16 on linear_qkv and linear_proj); Bridge's
# LoRA (src/megatron/bridge/peft/lora.py) is built from ``_target_`` as optional ConfigContainer fields are.
LORA_OVERRIDES = {"peft._target_": "megatron.bridge.peft.lora.LoRA", "peft.dim": 16, "peft.alpha": 32,
                  "peft.target_modules": ["linear_qkv", "linear_proj"]}


def _fp8_overlap_and_peft(job: Job) -> dict[str, Any]:
    from projection.memory import LORA_RANK
    from tools.exports.megatron import moe_overlap_blockers

    c, o = job.config, {}
    if job.fp8_primary_weights():
        if BRIDGE_PRECISION[c.precision] in FP8_PARAM_GATHER_RECIPES and c.zero == 1:
            job.assumptions.append(f"{BRIDGE_PRECISION[c.precision]} sets fp8_param_gather=True (FP8 primary "
                                   "weights, as the memory model assumes)")
        else:
            job.warnings.append("the memory model holds FP8 primary weights; this recipe and sharding keep bf16 "
                                "weights too")
    if job.ep_overlap():
        blockers = moe_overlap_blockers(c)
        if blockers:
            job.warnings.append(f"the projection hides {job.profile.ep_overlap_fraction:.0%} of expert all-to-all, "
                                f"but overlap_moe_expert_parallel_comm cannot be on ({'; '.join(blockers)})")
        else:
            o["comm_overlap.overlap_moe_expert_parallel_comm"] = True
            job.assumptions.append(f"expert all-to-all overlaps compute (the projection hides "
                                   f"{job.profile.ep_overlap_fraction:.0%} of it)")
    if c.finetune is not None:
        o["checkpoint.pretrained_checkpoint"] = "<pretrained-checkpoint>"
    if c.finetune == "lora":
        o.update(LORA_OVERRIDES | {"peft.dim": LORA_RANK})
        job.assumptions.append(f"LoRA rank {LORA_RANK} on linear_qkv and linear_proj, base weights frozen, as "
                               "projected")
    elif c.finetune == "sft":
        job.assumptions.append("SFT: every weight trains from checkpoint.pretrained_checkpoint, as projected")
    return o


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
    from tools.exports.common import launcher_script, torchrun_words

    overrides = bridge_overrides(job)
    lines = [shlex.quote(f"{k}={_value(v)}") for k, v in overrides.items()]   # one shell word each
    head = comment_block(job, SOURCE) + [f"# add: {u}" for u in USER_MUST_ADD]
    text = "\n".join(head + [line + " \\" for line in lines[:-1]] + lines[-1:]) + "\n"
    pretrained = job.config.finetune is not None
    lines = [line.replace("=<pretrained-checkpoint>", '="$PRETRAINED"') for line in lines]
    run = ["OVERRIDES=(", *[f"    {_shell_word(line) if '$PRETRAINED' not in line else line}" for line in lines],
           ")",
           f"{torchrun_words(job)} \\",
           '    "$BRIDGE_SCRIPT" "${OVERRIDES[@]}" checkpoint.save="$CHECKPOINT_DIR"']
    launcher = launcher_script(job, SOURCE + "; this launcher runs the recipe script with them", run,
                               placeholders=("BRIDGE_SCRIPT", "CHECKPOINT_DIR")
                               + (("PRETRAINED",) if pretrained else ()),
                               known={"BRIDGE_SCRIPT": BRIDGE_SCRIPTS[job.model.name]}
                               if job.model.name in BRIDGE_SCRIPTS else None)
    return LaunchConfig(framework="megatron-bridge", text=text, options=overrides, warnings=job.warnings,
                        assumptions=job.assumptions, user_must_add=USER_MUST_ADD,
                        command="python examples/recipes/<model>/pretrain_<model>.py " + " ".join(lines),
                        filename=job.stem() + ".bridge.overrides", launcher=launcher,
                        launcher_filename=job.stem() + ".bridge.sh")


def _shell_word(text: str) -> str:
    """One bash word: single-quoted when it holds characters bash would read."""
    return text if not any(ch in text for ch in " []$<>'\"*?;&|()") else "'" + text.replace("'", "'\\''") + "'"


_SECTIONS = ("model", "train", "ddp", "dist", "dataset", "mixed_precision", "comm_overlap", "checkpoint", "peft",
             "optimizer", "scheduler", "logger", "tokenizer", "rng", "profiling")


def read_overrides(text: str) -> dict[str, Any]:
    """'section.field' -> value of Bridge overrides: dotted ``section.field=value`` words (comments and line
    continuations allowed) or a nested YAML override file (``--config-file``, e.g. Megatron-Bridge
    examples/recipes/llama/conf/llama3_8b_pretrain_override_example.yaml)."""
    import shlex

    import yaml

    from projection.errors import ProjtuneError

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    if isinstance(data, dict) and any(k in _SECTIONS for k in data):
        from tools.exports.common import flatten_dotted

        return flatten_dotted(data)
    body = " ".join(line.split("#", 1)[0] for line in text.splitlines()).replace("\\", " ")
    try:
        words = shlex.split(body)
    except ValueError as err:
        raise ProjtuneError(f"cannot parse Megatron-Bridge overrides: {err}") from err
    pairs: dict[str, Any] = {}
    for word in words:
        key, sep, raw = word.partition("=")
        if not sep:
            continue
        try:
            pairs[key] = yaml.safe_load(raw) if raw else None
        except yaml.YAMLError:
            pairs[key] = raw
    return pairs


def megatron_dests_of(pairs: dict[str, Any]) -> dict[str, Any]:
    """Megatron dests from Bridge overrides: model.* are TransformerConfig fields (= dests); train.*, ddp.*, dist.*
    carry the batch and sharding; ``mixed_precision`` names a recipe (BRIDGE_FP8)."""
    d: dict[str, Any] = {}
    for key, value in pairs.items():
        section, _, name = key.partition(".")
        if key == "mixed_precision":
            recipe = str(value)
            d["bf16" if "bf16" in recipe else "fp16"] = True
            if recipe in BRIDGE_FP8:
                d["fp8"], d["fp8_recipe"] = BRIDGE_FP8[recipe]
        elif section in ("model", "train", "ddp", "dist") and name:
            d[name] = value
    if d.get("pipeline_model_parallel_layout"):
        d.pop("virtual_pipeline_model_parallel_size", None)   # the layout sets the virtual stages (Bridge sets both)
    if d.get("virtual_pipeline_model_parallel_size"):
        d["num_virtual_stages_per_pipeline_rank"] = d.pop("virtual_pipeline_model_parallel_size")
    if pairs.get("dataset.sequence_length") is not None:
        d.setdefault("seq_length", pairs["dataset.sequence_length"])
    return d
