"""torchtitan job config: a TOML of the config sections plus the torchtitan 0.3.0 command line that sets them.

torchtitan 0.3.0 reads no TOML: ``torchtitan.train --module M --config F`` picks a
``config_registry`` function and every ``[section] key = value`` below becomes
``--section.key value`` (``torchtitan/config/manager.py`` ConfigManager, tyro);
activation checkpointing is a subcommand (``activation-checkpoint:full``).  The TOML keeps the
section layout of the older ``--job.config_file`` releases, so it also reads as one.  Sections:
``[training]`` (local/global batch, seq_len, mixed precision, CUDA graphs off with PP or EP:
``Trainer.Config._validate_cuda_graphs``), ``[parallelism]`` (FSDP shard/replicate degrees,
TP, PP with layers per stage and first/last stage less-layers, CP, EP), ``[activation_checkpoint]``.
"""

from __future__ import annotations

import json
from typing import Any

from tools.exports.common import Job, LaunchConfig, comment_block
from tools.framework_rules import TORCHTITAN_CONFIGS, torchtitan_split

TORCHTITAN_SCHEDULE = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "zbv": "ZBVZeroBubble", "gpipe": "GPipe"}
SOURCE = "torchtitan 0.3.0 config sections (torchtitan/config/configs.py, trainer.py Trainer.Config)"
USER_MUST_ADD = ["hf_assets_path (tokenizer) and dataloader.dataset / dataset_path",
                 "training.steps, optimizer and checkpoint settings"]


def titan_options(job: Job) -> dict[str, Any]:
    """'section.key' -> value."""
    c, dp, model = job.config, job.dp, job.model
    o: dict[str, Any] = {}
    # local_batch_size is per DP rank: with PP it is split into pipeline micro-batches (one step of
    # gradient accumulation), without PP it is the micro-batch and torchtitan accumulates up to gbs.
    o["training.local_batch_size"] = c.gbs // dp if c.pp > 1 else c.mbs
    o["training.global_batch_size"] = c.gbs
    o["training.seq_len"] = c.seq_len
    o["training.mixed_precision_param"] = "bfloat16"
    if c.pp > 1 or c.ep > 1:
        o["training.disable_cuda_graphs"] = True
    if c.zero == 0:
        shard, replicate = 1, dp
    else:
        # torchtitan's FSDP group is data_parallel_shard_degree * cp; projtune's fsdp_size counts the CP ranks too
        shard = (c.fsdp_size // c.cp if c.fsdp_size else dp) if c.zero == 3 else dp
        replicate = dp // shard
    o["parallelism.data_parallel_shard_degree"] = shard
    o["parallelism.data_parallel_replicate_degree"] = replicate
    if c.zero == 2:
        o["parallelism.fsdp_reshard_after_forward"] = "never"
    o["parallelism.tensor_parallel_degree"] = c.tp
    if c.tp > 1:
        o["parallelism.enable_sequence_parallel"] = True
        if not c.sequence_parallel:
            job.warnings.append("torchtitan uses sequence parallelism with TP; written with it on")
    o["parallelism.pipeline_parallel_degree"] = c.pp
    if c.pp > 1:
        o["parallelism.pipeline_parallel_schedule"] = TORCHTITAN_SCHEDULE.get(c.schedule, c.schedule)
        o["parallelism.pipeline_parallel_microbatch_size"] = c.mbs
        split = torchtitan_split(model.num_layers, c)
        if split is not None:
            per_stage, first, last = split
            o["parallelism.pipeline_parallel_layers_per_stage"] = per_stage
            o["parallelism.pipeline_parallel_first_stage_less_layers"] = first
            o["parallelism.pipeline_parallel_last_stage_less_layers"] = last
    o["parallelism.context_parallel_degree"] = c.cp
    if c.cp > 1:
        # spmd_types/full_dtensor + CP need FlexAttention (distributed/full_dtensor.py validate_config);
        # the partial_dtensor backend runs CP with SDPA.
        o["parallelism.spmd_backend"] = "partial_dtensor"
    if model.is_moe:
        o["parallelism.expert_parallel_degree"] = c.ep
    mode = {"none": "none", "selective": "selective", "full": "full"}[c.recompute]
    o["activation_checkpoint.mode"] = mode
    if c.recompute == "selective":
        job.warnings.append("torchtitan selective AC is op-level (saves matmuls, recomputes every second one), as "
                            "the projection prices it; recompute_modules " + ",".join(c.recompute_modules)
                            + " have no torchtitan equivalent and are not applied")
    job.assumptions.append(f"FSDP2 prefetches all-gathers / reduce-scatters under compute (the projection hides "
                           f"{job.profile.dp_overlap_fraction:.0%} of DP comm)")
    return o


def module_and_config(job: Job) -> tuple[str, str] | None:
    return TORCHTITAN_CONFIGS.get((job.model.name, job.config.precision))


def cli_args(options: dict[str, Any]) -> list[str]:
    """torchtitan 0.3.0 command-line overrides of the options (tyro: --section.key value, bool flags, AC subcommand)."""
    args: list[str] = []
    mode = None
    for name, value in options.items():
        if name == "activation_checkpoint.mode":
            mode = value
            continue
        section, _, key = name.rpartition(".")
        if isinstance(value, bool):
            args.append(f"--{section}.{key}" if value else f"--{section}.no_{key}")
        else:
            args += [f"--{section}.{key}", str(value)]
    if mode is not None:
        args.append(f"activation-checkpoint:{mode}")
    return args


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return str(value)


def toml_text(options: dict[str, Any]) -> list[str]:
    sections: dict[str, list[str]] = {}
    for name, value in options.items():
        section, _, key = name.rpartition(".")
        sections.setdefault(section, []).append(f"{key} = {toml_value(value)}")
    lines: list[str] = []
    for section, entries in sections.items():
        lines += [f"[{section}]", *entries, ""]
    return lines[:-1]


def export(job: Job) -> LaunchConfig:
    options = titan_options(job)
    chosen = module_and_config(job) or ("<module>", "<config>")
    args = cli_args(options)
    command = (f"torchrun --nproc-per-node {min(job.cluster.gpus_per_node, job.cluster.num_gpus)} -m torchtitan.train "
               f"--module {chosen[0]} --config {chosen[1]} " + " ".join(args))
    head = comment_block(job, SOURCE) + [f"# torchtitan 0.3.0: {command}"] + [f"# add: {u}" for u in USER_MUST_ADD]
    return LaunchConfig(framework="torchtitan", text="\n".join(head + toml_text(options)) + "\n", options=options,
                        warnings=job.warnings, assumptions=job.assumptions, user_must_add=USER_MUST_ADD,
                        command=command, filename=job.stem() + ".torchtitan.toml")
