"""torchtitan job config: a TOML of the config sections, the config module that loads it, and a launcher.

torchtitan 0.3.0's ConfigManager reads no TOML itself: ``torchtitan.train --module M --config F``
imports ``M`` (a short name of ``torchtitan.models``, else any importable module path) and calls
its function ``F`` (``torchtitan/config/manager.py`` ``_load_config``), then tyro applies
``--section.key value`` overrides.  So the export writes the TOML plus a small config module
(:func:`config_module`) whose function builds the model's ``config_registry`` config and sets
every ``[section] key = value`` of the TOML on it, read from the file at start-up; the launcher
runs ``torchrun -m torchtitan.train --module <that module> --config projtune_job`` with the
module's folder on ``PYTHONPATH``.  The command line of the same settings
(:func:`cli_args`) is kept as ``command``.  The TOML keeps the section layout of the older
``--job.config_file`` releases, so it also reads as one.  Sections:
``[training]`` (local/global batch, seq_len, mixed precision, CUDA graphs off with PP or EP:
``Trainer.Config._validate_cuda_graphs``), ``[parallelism]`` (FSDP shard/replicate degrees,
TP, PP with layers per stage and first/last stage less-layers, CP, EP), ``[activation_checkpoint]``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tools.exports.common import Job, LaunchConfig, comment_block, launcher_script, torchrun_words
from tools.framework_rules import TORCHTITAN_CONFIGS, torchtitan_split

FRAMEWORK = "torchtitan"
"""The launch framework this module exports to (tools/exports/__init__.py registers it under this name)."""
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


CONFIG_FUNCTION = "projtune_job"


def module_name(job: Job) -> str:
    """The config module's import name (a valid Python identifier from the job stem)."""
    return "projtune_" + re.sub(r"[^0-9a-zA-Z_]", "_", job.stem()).lower()


# LoRA as the projection prices it (projection/memory.py LORA_RANK on the attention projections): torchtitan 0.3.0
# components/lora.py LoRAConverter; llama3's attention linears are wq, wkv, wo (config_registry.py
# llama3_debugmodel_float8_emulate_lora).
LORA_TARGETS = {"llama3": ["wq", "wkv", "wo"]}


def config_module(toml_filename: str, base: tuple[str, str], lora: dict[str, Any] | None = None) -> str:
    """Python source of the config module: ``projtune_job()`` = the base ``config_registry`` function's config
    with the TOML next to this file applied (tables onto config sections, top-level keys onto the config,
    ``[activation_checkpoint] mode`` as the AC policy: none / selective / full)."""
    return f'''"""torchtitan 0.3.0 config module written by projtune: --module <this module> --config {CONFIG_FUNCTION}.

Builds {base[0]}.config_registry.{base[1]}() and sets every value of {toml_filename} (next to this file) on it.
"""

import importlib
import pathlib
import tomllib

TOML = pathlib.Path(__file__).with_name({toml_filename!r})
BASE = {base!r}
LORA = {lora!r}  # LoRAConverter settings (rank, alpha, target_modules), or None


def _set(target, path, values):
    for key, value in values.items():
        if isinstance(value, dict):
            _set(getattr(target, key), f"{{path}}{{key}}.", value)
        elif not hasattr(target, key):
            raise ValueError(f"{{TOML.name}}: {{path}}{{key}} is not a torchtitan config field")
        else:
            setattr(target, key, value)


def {CONFIG_FUNCTION}():
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    config = getattr(importlib.import_module(f"torchtitan.models.{{BASE[0]}}.config_registry"), BASE[1])()
    data = tomllib.loads(TOML.read_text())
    mode = data.pop("activation_checkpoint", {{}}).get("mode")
    if mode is not None:
        config.activation_checkpoint = {{"none": None, "selective": SelectiveAC.Config(),
                                         "full": FullAC.Config()}}[mode]
    _set(config, "", data)
    if LORA is not None:
        from torchtitan.components.lora import LoRAConverter

        config.model_spec.model = LoRAConverter.Config(**LORA).build().convert(config.model_spec.model)
    return config
'''


def export(job: Job) -> LaunchConfig:
    options = titan_options(job)
    chosen = module_and_config(job)
    if chosen is None:
        job.warnings.append(f"torchtitan 0.3.0 has no config_registry function for {job.model.name} at "
                            f"{job.config.precision}: set BASE in the config module")
    base = chosen or ("<module>", "<config>")
    args = cli_args(options)
    command = (f"torchrun --nproc-per-node {job.procs_per_node} -m torchtitan.train "
               f"--module {base[0]} --config {base[1]} " + " ".join(args))
    filename, module = job.stem() + ".torchtitan.toml", module_name(job)
    lora = None
    if job.config.finetune == "lora":
        from projection.memory import LORA_RANK

        targets = LORA_TARGETS.get(base[0])
        if targets is None:
            job.warnings.append(f"LoRA target module names of torchtitan's {base[0]} are not known here: set LORA "
                                "in the config module")
        lora = {"rank": LORA_RANK, "alpha": 2.0 * LORA_RANK, "target_modules": targets}
        job.assumptions.append(f"LoRA rank {LORA_RANK} on the attention projections, base weights frozen, as "
                               "projected")
    initial = ' --checkpoint.initial_load_path "$PRETRAINED"' if job.config.finetune else ""
    head = comment_block(job, SOURCE) + [f"# torchtitan 0.3.0: {command}",
                                         f"# this file is loaded by {module}.py: torchtitan.train --module {module} "
                                         f"--config {CONFIG_FUNCTION}"] + [f"# add: {u}" for u in USER_MUST_ADD]
    launcher = launcher_script(job, SOURCE + f"; this launcher runs torchtitan.train with {module}.py", [
        'HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)',
        f"PYTHONPATH=\"$HERE${{PYTHONPATH:+:$PYTHONPATH}}\" {torchrun_words(job)} \\",
        f"    -m torchtitan.train --module {module} --config {CONFIG_FUNCTION} \\",
        '    --hf_assets_path "$TOKENIZER" --dataloader.dataset_path "$DATA_PATH" '
        '--checkpoint.folder "$CHECKPOINT_DIR"' + initial],
        placeholders=("DATA_PATH", "TOKENIZER", "CHECKPOINT_DIR") + (("PRETRAINED",) if initial else ()))
    return LaunchConfig(framework="torchtitan", text="\n".join(head + toml_text(options)) + "\n", options=options,
                        warnings=job.warnings, assumptions=job.assumptions, user_must_add=USER_MUST_ADD,
                        command=command, filename=filename, launcher=launcher,
                        launcher_filename=job.stem() + ".torchtitan.sh",
                        files={f"{module}.py": config_module(filename, base, lora)})
