"""Write a layout as a launch config: Megatron-LM arguments, a Primus YAML overlay, or a torchtitan TOML section.

Option names are the frameworks' own; ``tools/launch_options/`` lists them with their sources
and the tests check every exported key against those lists.  What a framework cannot express
(e.g. the ZB-H1 schedule in upstream Megatron-LM, HSDP with torch FSDP2 in Megatron) becomes a
warning and a comment in the text, never an invented option.  :mod:`tools.launch_import`
parses the three formats back to sweep-format config keys.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from projection.layout import parallel_dims
from projection.model_spec import ModelSpec
from projection.training_config import Cluster, TrainingConfig

LaunchFramework = Literal["megatron", "primus", "torchtitan"]
FRAMEWORKS: tuple[str, ...] = ("megatron", "primus", "torchtitan")
OPTIONS_DIR = Path(__file__).parent / "launch_options"

# Precision -> Megatron/Transformer Engine FP8 recipe (--fp8-recipe choices: delayed, tensorwise, mxfp8, blockwise).
MEGATRON_FP8_RECIPE = {"fp8": "delayed", "fp8-blockwise": "blockwise", "mxfp8": "mxfp8"}
# Precision -> torchtitan converter section and recipe_name (torchao Float8 / MX recipes).
TORCHTITAN_QUANT = {"fp8": ("quantize.linear.float8", "tensorwise"),
                    "fp8-blockwise": ("quantize.linear.float8", "rowwise"),
                    "mxfp8": ("quantize.linear.mx", "mxfp8_cublas")}
TORCHTITAN_SCHEDULE = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "zbv": "ZBVZeroBubble", "gpipe": "GPipe"}


class LaunchConfig(BaseModel):
    """A layout written for one framework."""

    model_config = ConfigDict(extra="forbid")

    framework: LaunchFramework
    text: str = Field(description="The launch config: arguments, YAML or TOML, with a header comment.")
    options: dict[str, Any] = Field(description="Each exported option name (flag, YAML key or section.key) -> value.")
    warnings: list[str] = Field(default_factory=list, description="What the framework cannot express exactly.")
    filename: str = Field(description="Suggested file name.")


@cache
def known_options(framework: str) -> frozenset[str]:
    """The option names listed for a framework in ``tools/launch_options`` (torchtitan: 'section.key')."""
    if framework == "torchtitan":
        data = json.loads((OPTIONS_DIR / "torchtitan_options.json").read_text())
        return frozenset(f"{section}.{key}" for section, keys in data["sections"].items() for key in keys)
    name = {"megatron": "megatron_args.txt", "primus": "primus_overrides.txt"}[framework]
    lines = (OPTIONS_DIR / name).read_text().splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def _megatron_options(model: ModelSpec, config: TrainingConfig, warnings: list[str]) -> dict[str, Any]:
    """Megatron-LM flag -> value (True for a bare flag)."""
    c, layers = config, model.num_layers
    opts: dict[str, Any] = {"--num-layers": layers, "--tensor-model-parallel-size": c.tp,
                            "--pipeline-model-parallel-size": c.pp}
    stages = c.pp * c.vpp
    if c.pp > 1 and layers % stages and (layers + 2) % stages == 0:
        opts["--account-for-embedding-in-pipeline-split"] = True
        opts["--account-for-loss-in-pipeline-split"] = True
    elif c.pp > 1 and layers % stages:
        warnings.append(f"{layers} layers do not split evenly over pp*vpp={stages}; set "
                        "--decoder-first-pipeline-num-layers/--decoder-last-pipeline-num-layers by hand")
    if c.vpp > 1:
        if layers % stages == 0:
            opts["--num-layers-per-virtual-pipeline-stage"] = layers // stages
        else:
            opts["--num-virtual-stages-per-pipeline-rank"] = c.vpp
    opts["--context-parallel-size"] = c.cp
    if model.is_moe:
        opts["--expert-model-parallel-size"] = c.ep
        opts["--expert-tensor-parallel-size"] = c.etp
        opts["--moe-token-dispatcher-type"] = "flex" if c.moe_dispatcher == "deepep" else c.moe_dispatcher
        if c.moe_dispatcher == "deepep":
            opts["--moe-enable-deepep"] = True
    opts.update({"--micro-batch-size": c.mbs, "--global-batch-size": c.gbs, "--seq-length": c.seq_len})
    opts["--fp16" if c.precision == "fp16" else "--bf16"] = True
    if c.precision in MEGATRON_FP8_RECIPE:
        opts["--fp8-format"] = "hybrid"
        opts["--fp8-recipe"] = MEGATRON_FP8_RECIPE[c.precision]
    elif c.precision == "nvfp4":
        warnings.append("nvfp4 is not exported (no FP4 flags in the cited Megatron-LM arguments); bf16 written")
    if c.recompute == "selective":
        opts["--recompute-granularity"] = "selective"
        opts["--recompute-modules"] = list(c.recompute_modules)
    elif c.recompute == "full":
        opts["--recompute-granularity"] = "full"
        # block + N: the first N layers of each stage recompute; uniform + 1: every layer.
        opts["--recompute-method"] = "uniform" if c.recompute_num_layers is None else "block"
        opts["--recompute-num-layers"] = 1 if c.recompute_num_layers is None else c.recompute_num_layers
        if c.vpp > 1 and c.recompute_num_layers is not None:
            warnings.append("Megatron applies --recompute-num-layers to each virtual chunk; the projection applies "
                            "it to the whole stage")
    if c.sequence_parallel and c.tp > 1:
        opts["--sequence-parallel"] = True
    if c.zero in (1, 2):
        opts["--use-distributed-optimizer"] = True
        if c.zero == 2:
            warnings.append("zero=2 written as --use-distributed-optimizer (Megatron has no separate ZeRO-2)")
    elif c.zero == 3:
        opts["--use-torch-fsdp2"] = True
        if c.fsdp_size is not None:
            warnings.append(f"fsdp_size={c.fsdp_size} (HSDP) has no Megatron torch-FSDP2 flag; full sharding written")
    schedule = c.schedule
    if schedule in ("zero-bubble", "zbv", "gpipe"):
        warnings.append(f"pp_schedule={schedule} has no upstream Megatron-LM flag; 1F1B/interleaved is what runs")
    return opts


def _megatron_text(opts: dict[str, Any]) -> list[str]:
    lines = []
    for flag, value in opts.items():
        if value is True:
            lines.append(flag)
        elif isinstance(value, list):
            lines.append(f"{flag} {' '.join(str(v) for v in value)}")
        else:
            lines.append(f"{flag} {value}")
    return [line + " \\" for line in lines[:-1]] + lines[-1:]


def _primus_options(model: ModelSpec, config: TrainingConfig, warnings: list[str]) -> dict[str, Any]:
    """Primus override key -> value: Megatron dest names, booleans always explicit."""
    flags = _megatron_options(model, config, warnings)
    opts: dict[str, Any] = {}
    for flag, value in flags.items():
        key = "fp8" if flag == "--fp8-format" else flag.removeprefix("--").replace("-", "_")
        opts[key] = value
    for key in ("sequence_parallel", "use_distributed_optimizer", "use_torch_fsdp2", "bf16", "fp16"):
        opts.setdefault(key, False)
    opts.setdefault("recompute_granularity", None)
    return opts


def _torchtitan_options(model: ModelSpec, cluster: Cluster, config: TrainingConfig,
                        warnings: list[str]) -> dict[str, Any]:
    """'section.key' -> value for a torchtitan job TOML."""
    c = config
    dp = parallel_dims(c, cluster).dp
    opts: dict[str, Any] = {}
    if c.precision in TORCHTITAN_QUANT:
        section, recipe = TORCHTITAN_QUANT[c.precision]
        opts["model.converters"] = [section]
        opts[f"{section}.recipe_name"] = recipe
        if c.precision == "fp8-blockwise":
            warnings.append("torchtitan has no 1x128 blockwise float8 recipe; rowwise scaling is the closest")
    elif c.precision in ("fp16", "nvfp4"):
        # training.mixed_precision_param takes "bfloat16" or "float32" only
        warnings.append(f"precision {c.precision} is not exported for torchtitan; bf16 mixed precision written")
    # local_batch_size is per DP rank: with PP it is split into pipeline micro-batches, without PP it is the
    # micro-batch and torchtitan accumulates gradients up to global_batch_size.
    opts["training.local_batch_size"] = c.gbs // dp if c.pp > 1 else c.mbs
    opts["training.global_batch_size"] = c.gbs
    opts["training.seq_len"] = c.seq_len
    opts["training.mixed_precision_param"] = "bfloat16"
    shard, replicate, reshard = _torchtitan_dp(c, dp, warnings)
    opts["parallelism.data_parallel_shard_degree"] = shard
    opts["parallelism.data_parallel_replicate_degree"] = replicate
    if reshard is not None:
        opts["parallelism.fsdp_reshard_after_forward"] = reshard
    opts["parallelism.tensor_parallel_degree"] = c.tp
    if c.tp > 1 and not c.sequence_parallel:
        warnings.append("torchtitan always uses sequence parallelism with TP")
    opts["parallelism.pipeline_parallel_degree"] = c.pp
    if c.pp > 1:
        opts.update(_torchtitan_pipeline(model, c, warnings))
    opts["parallelism.context_parallel_degree"] = c.cp
    if model.is_moe:
        opts["parallelism.expert_parallel_degree"] = c.ep
        opts["parallelism.expert_tensor_parallel_degree"] = c.etp
    opts.update(_torchtitan_recompute(model, c, warnings))
    return opts


def _torchtitan_dp(c: TrainingConfig, dp: int, warnings: list[str]) -> tuple[int, int, str | None]:
    """(data_parallel_shard_degree, data_parallel_replicate_degree, fsdp_reshard_after_forward)."""
    if c.zero == 0:
        return 1, dp, None
    if c.zero == 3:
        shard = c.fsdp_size or dp
        return shard, dp // shard, None
    warnings.append(f"zero={c.zero}: torchtitan has no distributed optimizer over plain DP; written as FSDP that "
                    "keeps parameters gathered after forward (fsdp_reshard_after_forward = 'never', ZeRO-2 like)")
    return dp, 1, "never"


def _torchtitan_pipeline(model: ModelSpec, c: TrainingConfig, warnings: list[str]) -> dict[str, Any]:
    schedule = c.schedule
    opts: dict[str, Any] = {"parallelism.pipeline_parallel_microbatch_size": c.mbs}
    if schedule == "zero-bubble":
        warnings.append("torchtitan has no single-stage zero-bubble (ZB-H1) schedule; 1F1B written")
        schedule = "1f1b"
    opts["parallelism.pipeline_parallel_schedule"] = TORCHTITAN_SCHEDULE[schedule]
    stages = c.pp * c.vpp
    if model.num_layers % stages == 0:
        opts["parallelism.pipeline_parallel_layers_per_stage"] = model.num_layers // stages
    else:
        warnings.append(f"{model.num_layers} layers do not split evenly into {stages} stages; torchtitan "
                        "balances them itself (set pipeline_parallel_first/last_stage_less_layers to tune)")
    return opts


def _torchtitan_recompute(model: ModelSpec, c: TrainingConfig, warnings: list[str]) -> dict[str, Any]:
    if c.recompute == "none":
        return {"activation_checkpoint.mode": "none"}
    if c.recompute == "selective":
        if tuple(c.recompute_modules) != ("core_attn",):
            warnings.append("torchtitan selective AC is op-level; recompute_modules are not exported")
        return {"activation_checkpoint.mode": "selective", "activation_checkpoint.selective_ac_option": "op"}
    if c.recompute_num_layers is None:
        return {"activation_checkpoint.mode": "full"}
    stage_layers = -(-model.num_layers // c.pp)
    every = max(1, round(stage_layers / max(c.recompute_num_layers, 1)))
    if c.recompute_num_layers * every != stage_layers:
        warnings.append(f"recompute_num_layers={c.recompute_num_layers} of {stage_layers} written as every "
                        f"{every}th layer (torchtitan layer-selective AC)")
    return {"activation_checkpoint.mode": "selective", "activation_checkpoint.selective_ac_option": str(every)}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return str(value)


def _torchtitan_text(opts: dict[str, Any]) -> list[str]:
    sections: dict[str, list[str]] = {}
    for name, value in opts.items():
        section, _, key = name.rpartition(".")
        sections.setdefault(section, []).append(f"{key} = {_toml_value(value)}")
    lines: list[str] = []
    for section, entries in sections.items():
        lines += [f"[{section}]", *entries, ""]
    return lines[:-1]


def export_launch_config(model: ModelSpec, cluster: Cluster, config: TrainingConfig,
                         framework: LaunchFramework) -> LaunchConfig:
    """Write one layout for ``framework`` (megatron, primus or torchtitan)."""
    from projtune.render import layout_text

    warnings: list[str] = []
    dp = parallel_dims(config, cluster).dp
    layout = layout_text(config.model_dump(exclude_none=True) | {"dp": dp})
    header = f"{model.name} on {cluster.num_gpus} x {cluster.gpu}: {layout}"
    stem = f"{model.name}_{cluster.num_gpus}x{cluster.gpu}_{config.precision}".replace("/", "_")
    if framework == "megatron":
        opts = _megatron_options(model, config, warnings)
        body = _megatron_text(opts)
        source = "# flags: NVIDIA/Megatron-LM megatron/training/arguments.py (core_r0.13.0)"
        filename = stem + ".megatron.args"
    elif framework == "primus":
        opts = _primus_options(model, config, warnings)
        overlay = {"modules": {"pre_trainer": {"framework": "megatron", "config": "pre_trainer.yaml",
                                               "overrides": opts}}}
        body = yaml.safe_dump(overlay, sort_keys=False).splitlines()
        source = "# Primus examples/megatron/configs/*.yaml overlay: set modules.pre_trainer.model to your model file"
        filename = stem + ".primus.yaml"
    else:
        opts = _torchtitan_options(model, cluster, config, warnings)
        body = _torchtitan_text(opts)
        source = "# torchtitan job config sections (torchtitan/config/job_config.py); merge into your model's TOML"
        filename = stem + ".torchtitan.toml"
    comments = [f"# {header}", source, *(f"# warning: {w}" for w in warnings)]
    return LaunchConfig(framework=framework, text="\n".join(comments + body) + "\n", options=opts,
                        warnings=warnings, filename=filename)
