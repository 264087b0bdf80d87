"""Which layouts each training framework can launch: one reason per broken rule, each rule cited to its source.

The projection's legality (:mod:`projection.legality`) is framework-neutral.  The frameworks
are stricter, and a layout that one of them rejects must never be exported as if it ran
there, nor returned by ``projtune search --framework NAME``.  Sources (read for this module):

- Megatron-LM ``megatron/training/arguments.py`` ``validate_args`` (NVIDIA/Megatron-LM, 2025
  main, commit 000c4ac2): ``--use-torch-fsdp2`` asserts pipeline size 1, expert parallel size 1,
  no distributed optimizer, no gradient-accumulation fusion, untied embeddings, not fp16;
  expert parallelism asserts not fp16; Megatron-LM has no zero-bubble / ZB-V / GPipe schedule
  flag (``megatron/core/pipeline_parallel/schedules.py``: 1F1B and interleaved 1F1B).
- Megatron-Bridge and Primus build the same Megatron-core model and run the same checks
  (Bridge's model providers subclass ``megatron.core.transformer.TransformerConfig``; Primus
  passes its overrides to Megatron-LM's ``validate_args``).  Primus adds the zero-bubble
  schedules (AMD-AGI/Primus ``primus/backends/megatron/core/pipeline_parallel/zerobubble``,
  presets in its DeepSeek optimisation guide: zb1p = vpp 1 + ``patch_zero_bubble``, zbv = vpp 2
  + ``zero_bubble_v_schedule``, with ``overlap_grad_reduce``/``overlap_param_gather`` off).
- torchtitan 0.3.0 (``pip install torchtitan==0.3.0``): ``torchtitan/distributed/parallel_dims.py``
  (EP borrows ranks from FSDP, CP and TP: ``efsdp = dp_shard*cp*tp/ep``; the sparse mesh has
  no TP axis, so experts are not tensor-parallel under EP), ``torchtitan/config/configs.py``
  (``mixed_precision_param`` is bfloat16 or float32; data parallelism is
  ``data_parallel_shard_degree`` x ``data_parallel_replicate_degree`` over FSDP2, no ZeRO-1),
  ``torchtitan/distributed/activation_checkpoint.py`` (AC is selective, full, memory-budget or
  none: no "first N layers"), ``torchtitan/distributed/pipeline_parallel.py`` (single-stage
  schedules need 1 stage per rank, multi-stage ones at least 2; torch's schedules have no
  single-stage zero-bubble), ``torchtitan/trainer.py`` (``seq_len`` divisible by
  ``tp*2*cp``), ``torchtitan/models/common/decoder.py`` (no weight tying with PP), and the
  ``config_registry.py`` functions it ships (quantisation is part of the chosen function's
  model spec, not a command-line option).
- MaxText (AI-Hypercomputer/maxtext ``src/MaxText/configs/types.py``; models in
  ``src/MaxText/configs/models/*.yml``): the ``expert`` mesh axis also shards the batch
  (``logical_axis_rules``), so EP divides the data-parallel ranks, not TP; FP8 quantisation is
  "not compatible with gradient accumulation"; pipeline micro-batches divisible by the stage
  count and stages x repeats x layers per stage = the decoder layers; remat policies are
  full/minimal/save_* (no per-layer count); data parallelism is ``data`` (replicated) or
  ``fsdp`` (sharded): no ZeRO-1/2; the non-expert weights are sharded over the expert axis too
  (``base.yml`` ``logical_axis_rules`` ``embed``), so EP layouts are ZeRO-3.
"""

from __future__ import annotations

import difflib

from projection.errors import ProjtuneError
from projection.framework import RECORDS, framework_record, record_of_launch
from projection.legality import even_split
from projection.model_spec import ModelSpec
from projection.pipeline_split import split_violations, stage_counts
from projection.training_config import Cluster, TrainingConfig
from projection.vocabulary import LAUNCH_FRAMEWORKS

FRAMEWORKS: tuple[str, ...] = LAUNCH_FRAMEWORKS   # the launch frameworks (projection/vocabulary.py)

MEGATRON_ARGS = "Megatron-LM megatron/training/arguments.py validate_args"
TITAN = "torchtitan 0.3.0"
MAXTEXT = "MaxText src/MaxText/configs/types.py"

# torchtitan 0.3.0 config_registry functions: (catalog model id, precision) -> (--module, --config).
# Read from torchtitan/models/{llama3,deepseek_v3,qwen3}/config_registry.py: llama3_8b and
# llama3_70b are bf16, llama3_8b_mxfp8 converts linears to MXFP8, llama3_405b always converts
# them to float8 (Float8LinearConverter), deepseek_v3_671b_float8 converts linears and grouped
# experts to float8.
TORCHTITAN_CONFIGS: dict[tuple[str, str], tuple[str, str]] = {
    ("llama3-8b", "bf16"): ("llama3", "llama3_8b"),
    ("llama3.1-8b", "bf16"): ("llama3", "llama3_8b"),
    ("llama3-8b", "mxfp8"): ("llama3", "llama3_8b_mxfp8"),
    ("llama3.1-8b", "mxfp8"): ("llama3", "llama3_8b_mxfp8"),
    ("llama3-70b", "bf16"): ("llama3", "llama3_70b"),
    ("llama3.1-70b", "bf16"): ("llama3", "llama3_70b"),
    ("llama3.1-405b", "fp8"): ("llama3", "llama3_405b"),
    ("deepseek-v3", "bf16"): ("deepseek_v3", "deepseek_v3_671b"),
    ("deepseek-v3", "fp8"): ("deepseek_v3", "deepseek_v3_671b_float8"),
    ("qwen3-32b", "bf16"): ("qwen3", "qwen3_32b"),
    ("qwen3-30b-a3b", "bf16"): ("qwen3", "qwen3_30b_a3b"),
}

# MaxText model names (src/MaxText/configs/models/<name>.yml) of the catalog models.
MAXTEXT_MODELS: dict[str, str] = {
    "llama2-7b": "llama2-7b", "llama2-13b": "llama2-13b", "llama2-70b": "llama2-70b",
    "llama3-8b": "llama3-8b", "llama3-70b": "llama3-70b", "llama3.1-8b": "llama3.1-8b",
    "llama3.1-70b": "llama3.1-70b", "llama3.1-405b": "llama3.1-405b",
    "mixtral-8x7b": "mixtral-8x7b", "mixtral-8x22b": "mixtral-8x22b", "deepseek-v3": "deepseek3-671b",
    "gpt3-175b": "gpt3-175b", "gpt-oss-20b": "gpt-oss-20b", "gpt-oss-120b": "gpt-oss-120b",
    "qwen3-8b": "qwen3-8b", "qwen3-32b": "qwen3-32b", "qwen3-30b-a3b": "qwen3-30b-a3b",
    "qwen3-235b-a22b": "qwen3-235b-a22b",
}

# Precision -> MaxText `quantization` ("" = bf16), per vendor (types.py QuantizationType: fp8 is
# AQT FP8 on NVIDIA, nanoo_fp8 the OCP-FP8 variant for AMD Instinct).
MAXTEXT_QUANT = {("bf16", "nvidia"): "", ("bf16", "amd"): "", ("fp8", "nvidia"): "fp8",
                 ("fp8", "amd"): "nanoo_fp8"}


def launch_framework_of(recipe: str | None) -> str | None:
    """The launch framework (exporter) of a sweep-format framework name (its record's ``launch``); None when it
    has none or no framework is named."""
    return framework_record(recipe).launch if recipe else None


def check_framework(name: str) -> str:
    """The framework name, or a one-line error naming the nearest known one."""
    if name in FRAMEWORKS:
        return name
    near = difflib.get_close_matches(name, FRAMEWORKS, n=1)
    hint = f"; did you mean '{near[0]}'?" if near else ""
    raise ProjtuneError(f"unknown framework '{name}' (known: {', '.join(FRAMEWORKS)}){hint}")


def dp_of(config: TrainingConfig, cluster: Cluster) -> int:
    """Data-parallel degree: given, or num_gpus / (tp*pp*cp)."""
    return config.data_parallel(cluster.num_gpus)


def _megatron(framework: str, model: ModelSpec, config: TrainingConfig) -> list[str]:
    c, reasons = config, []
    if c.zero == 3:
        if c.pp > 1:
            reasons.append(f"zero=3 (--use-torch-fsdp2) with pp={c.pp}: '--use-torch-fsdp2 is not supported with "
                           f"pipeline parallelism' ({MEGATRON_ARGS})")
        if c.ep > 1:
            reasons.append(f"zero=3 (--use-torch-fsdp2) with ep={c.ep}: '--use-torch-fsdp2 is not supported with "
                           f"expert parallelism' ({MEGATRON_ARGS})")
        if model.tie_embeddings:
            reasons.append(f"zero=3: '--use-torch-fsdp2 requires --untie-embeddings-and-output-weights' and "
                           f"{model.name} ties them ({MEGATRON_ARGS})")
        if c.precision == "fp16":
            reasons.append(f"zero=3: '--use-torch-fsdp2 not supported with fp16 yet' ({MEGATRON_ARGS})")
        if c.fsdp_size is not None:
            reasons.append(f"fsdp_size={c.fsdp_size} (HSDP): torch FSDP2 in Megatron-LM shards over the whole "
                           f"data-parallel group, no hybrid-shard flag ({MEGATRON_ARGS})")
    if c.ep > 1 and c.precision == "fp16":
        reasons.append(f"ep={c.ep} with fp16: 'Expert parallelism is not supported with fp16 training' "
                       f"({MEGATRON_ARGS})")
    if c.pp > 1 and c.pipeline_split.is_default and not even_split(model.num_layers, c.pp * c.vpp):
        reasons.append(f"{model.num_layers} layers on pp*vpp = {c.pp}*{c.vpp} stages: Megatron needs equal stages "
                       "(or equal after --account-for-embedding/loss-in-pipeline-split); state the split with "
                       "pp_first_stage_layers / pp_last_stage_layers (--decoder-first/last-pipeline-num-layers) or "
                       "pp_layout (--pipeline-model-parallel-layout)")
    primus_zb = framework == "primus" and c.schedule in ("zero-bubble", "zbv")
    if c.pp > 1 and c.schedule in ("zero-bubble", "zbv", "gpipe") and not primus_zb:
        reasons.append(f"pp_schedule={c.schedule}: Megatron-LM runs 1F1B or interleaved 1F1B only "
                       "(megatron/core/pipeline_parallel/schedules.py get_forward_backward_func)"
                       + ("; Primus adds zero-bubble (zb1p) and ZB-V (patch_zero_bubble)" if framework != "primus"
                          else ""))
    if c.precision == "nvfp4":
        reasons.append("precision nvfp4: not exported for Megatron (needs --fp4-format with Transformer Engine "
                       f">= 2.7; {MEGATRON_ARGS}); use bf16 or an FP8 recipe")
    if c.zero == 2:
        reasons.append("zero=2: Megatron has the distributed optimizer (ZeRO-1, --use-distributed-optimizer) and "
                       f"FSDP (ZeRO-3), no separate ZeRO-2 ({MEGATRON_ARGS})")
    return reasons


def _torchtitan(model: ModelSpec, cluster: Cluster, config: TrainingConfig) -> list[str]:
    c, reasons = config, []
    dp = dp_of(c, cluster)
    if (model.name, c.precision) not in TORCHTITAN_CONFIGS:
        have = sorted({p for (m, p) in TORCHTITAN_CONFIGS if m == model.name})
        what = (f"only for precision {', '.join(have)}" if have else
                "none for this model (it ships llama3, deepseek_v3, qwen3, gpt_oss, ... modules)")
        reasons.append(f"{TITAN} ships no config_registry function for {model.name} in {c.precision}: {what}; "
                       "quantisation is part of the function's model spec, not a command-line option")
    if c.zero == 1:
        reasons.append(f"zero=1: {TITAN} has no distributed optimizer over replicated parameters (FSDP2 shards "
                       "parameters, gradients and optimizer states together; torchtitan/config/configs.py)")
    if c.cp > 1 and c.zero == 0:
        reasons.append(f"cp={c.cp} with zero=0: torchtitan always applies FSDP over the CP ranks (its fsdp mesh is "
                       "dp_shard*cp, torchtitan/distributed/parallel_dims.py build_mesh), so a DDP layout with CP "
                       "runs as ZeRO-3 over CP")
    if c.zero == 3 and c.fsdp_size is not None and (c.fsdp_size % c.cp or dp % (c.fsdp_size // c.cp or 1)
                                                     or c.fsdp_size < c.cp):
        reasons.append(f"fsdp_size={c.fsdp_size} with cp={c.cp}: torchtitan's FSDP group is "
                       "data_parallel_shard_degree*cp, so fsdp_size must be a multiple of cp dividing dp*cp "
                       "(parallel_dims.py)")
    if c.recompute == "full" and c.recompute_num_layers is not None:
        reasons.append(f"recompute_num_layers={c.recompute_num_layers}: {TITAN} activation checkpointing is "
                       "selective, full, memory-budget or none, not a number of layers "
                       "(torchtitan/distributed/activation_checkpoint.py)")
    if c.precision == "fp16":
        reasons.append(f"precision fp16: {TITAN} training.mixed_precision_param is bfloat16 or float32")
    if c.pp > 1 and c.schedule == "zero-bubble":
        reasons.append("pp_schedule=zero-bubble with vpp=1: torch's zero-bubble schedules are multi-stage "
                       "(InterleavedZeroBubble, ZBVZeroBubble) and torchtitan needs >= 2 stages per rank for those "
                       "(torchtitan/distributed/pipeline_parallel.py _get_pipeline_metadata)")
    if c.pp > 1 and model.tie_embeddings:
        reasons.append(f"pp={c.pp} with tied embeddings: 'Weight tying is not supported with Pipeline Parallel.' "
                       "(torchtitan/models/common/decoder.py)")
    if c.pp > 1 and torchtitan_split(model.num_layers, c) is None:
        if c.pipeline_split.is_default:
            reasons.append(f"{model.num_layers} layers split into pp*vpp={c.pp * c.vpp} stages neither evenly nor "
                           "evenly after counting embedding and output as one layer each "
                           "(torchtitan pipeline_parallel_layers_per_stage); state first/last stage layers")
        else:
            reasons.append("the pipeline split is not torchtitan's shape: equal middle stages with the first and the "
                           "last virtual stage shortened by pipeline_parallel_first/last_stage_less_layers "
                           "(torchtitan/distributed/pipeline_parallel.py _generate_llm_fqn_per_model_part)")
    sp_cp = (c.tp if c.tp > 1 else 1) * (2 * c.cp if c.cp > 1 else 1)
    if c.seq_len % sp_cp:
        reasons.append(f"seq_len={c.seq_len} not divisible by tp*2*cp = {sp_cp} (torchtitan/trainer.py sequence/"
                       "context parallel evenness check)")
    if model.is_moe:
        shard = ((c.fsdp_size // c.cp if c.fsdp_size else dp) if c.zero == 3 else dp) if c.zero in (2, 3) else 1
        dense = shard * c.cp * c.tp
        if c.ep > 1 and dense % c.ep:
            reasons.append(f"ep={c.ep} does not divide data_parallel_shard_degree*cp*tp = {shard}*{c.cp}*{c.tp} = "
                           f"{dense}: torchtitan's EP borrows ranks from FSDP, CP and TP only "
                           "(torchtitan/distributed/parallel_dims.py efsdp)")
        if c.ep > 1 and c.etp != 1:
            reasons.append(f"etp={c.etp} with ep={c.ep}: torchtitan's sparse mesh (pp, dp_replicate, efsdp, ep) has "
                           "no TP axis, experts are not tensor-parallel under EP (parallel_dims.py)")
        if c.ep == 1 and c.tp > 1 and c.etp != c.tp:
            reasons.append(f"etp={c.etp} with ep=1 and tp={c.tp}: without EP torchtitan shards experts over TP "
                           f"(etp = tp = {c.tp})")
    return reasons


def maxtext_vendor(gpu: str) -> str:
    """'amd' for Instinct GPUs (ids start with 'mi'), else 'nvidia'."""
    return "amd" if gpu.startswith("mi") else "nvidia"


def _maxtext(model: ModelSpec, cluster: Cluster, config: TrainingConfig) -> list[str]:
    c, reasons = config, []
    dp = dp_of(c, cluster)
    if model.name not in MAXTEXT_MODELS:
        reasons.append(f"MaxText has no model config for {model.name} (src/MaxText/configs/models/*.yml)")
    if (c.precision, maxtext_vendor(cluster.gpu)) not in MAXTEXT_QUANT:
        reasons.append(f"precision {c.precision}: exported for MaxText as bf16 or fp8 (quantization fp8 / "
                       f"nanoo_fp8) only ({MAXTEXT} QuantizationType)")
    if c.zero in (1, 2):
        reasons.append(f"zero={c.zero}: MaxText data parallelism is the 'data' axis (replicated) or the 'fsdp' axis "
                       f"(ZeRO-3), no optimizer-only sharding ({MAXTEXT})")
    ep = c.ep if model.is_moe else 1
    group = c.cp * ep   # the context and expert axes shard the weights too (logical_axis_rules 'embed')
    if c.fsdp_size is not None and (c.zero != 3 or c.fsdp_size % group or (dp * c.cp) % c.fsdp_size
                                    or c.fsdp_size == c.cp < c.cp * ep * 2):   # a shard group of the context alone
        reasons.append(f"fsdp_size={c.fsdp_size}: MaxText's weight-shard group is fsdp x context x expert "
                       f"(data replicates), so fsdp_size must be a multiple of cp*ep = {group} dividing dp*cp = "
                       f"{dp * c.cp}, with zero=3 and an fsdp or expert axis above 1 (fsdp_size = cp alone is data "
                       f"parallelism with context-sharded weights) ({MAXTEXT} logical_axis_rules)")
    if c.recompute == "selective" or c.recompute_num_layers is not None:
        reasons.append(f"recompute={c.recompute}"
                       + (f" on {c.recompute_num_layers} layers" if c.recompute_num_layers is not None else "")
                       + f": MaxText remat policies are per-layer patterns (full, minimal, save_*), not a module "
                         f"list or a layer count ({MAXTEXT} RematPolicy)")
    if c.ep > 1 and c.zero == 0:
        reasons.append(f"zero=0 with ep={c.ep}: MaxText shards the non-expert weights over the expert axis "
                       f"(base.yml logical_axis_rules 'embed'), so an EP layout is ZeRO-3 (zero=3)")
    if c.ep > 1 and dp % c.ep:
        reasons.append(f"ep={c.ep} does not divide dp={dp}: MaxText's expert axis also shards the batch, so it "
                       f"comes out of the data-parallel ranks, not TP ({MAXTEXT} logical_axis_rules)")
    if c.etp != 1:
        reasons.append(f"etp={c.etp}: MaxText shards experts over the expert axis only in this export")
    if c.pp > 1:
        microbatches = c.gbs // (c.mbs * dp)
        if microbatches % c.pp:
            reasons.append(f"num_pipeline_microbatches = gbs/(mbs*dp) = {microbatches} not divisible by pp={c.pp} "
                           f"({MAXTEXT})")
        if model.num_layers % (c.pp * c.vpp):
            reasons.append(f"{model.num_layers} layers not divisible by pp*vpp = {c.pp * c.vpp}: stages x repeats x "
                           f"layers per stage must equal the decoder layers ({MAXTEXT})")
        if c.schedule not in ("1f1b", "interleaved", "gpipe"):
            reasons.append(f"pp_schedule={c.schedule}: MaxText's pipeline is a circular (interleaved) GPipe-style "
                           "loop, no zero-bubble schedule")
    elif c.precision == "fp8" and c.gbs // (c.mbs * dp) > 1:
        reasons.append(f"fp8 with {c.gbs // (c.mbs * dp)} gradient-accumulation steps: 'FP8 quantization is not "
                       f"compatible with gradient accumulation.' ({MAXTEXT})")
    return reasons


def framework_violations(framework: str, model: ModelSpec, cluster: Cluster, config: TrainingConfig) -> list[str]:
    """One readable, cited reason per rule of ``framework`` that the (projection-legal) layout breaks."""
    check_framework(framework)
    if record_of_launch(framework).megatron_core:
        return _finetune(framework, config) + _megatron(framework, model, config)
    if framework == "torchtitan":
        return _torchtitan(model, cluster, config)
    return _finetune(framework, config) + _maxtext(model, cluster, config)


def _finetune(framework: str, config: TrainingConfig) -> list[str]:
    """LoRA only where the launch framework trains adapters (the record's ``trains_lora``, cited there)."""
    if config.finetune == "lora" and not record_of_launch(framework).trains_lora:
        lora = sorted(r.launch for r in RECORDS.values() if r.trains_lora and r.launch)
        return [f"{framework} trains no LoRA adapters (frameworks that do: {', '.join(lora)})"]
    return []


def legal_frameworks(model: ModelSpec, cluster: Cluster, config: TrainingConfig) -> list[str]:
    """The frameworks that can launch the layout."""
    return [f for f in FRAMEWORKS if not framework_violations(f, model, cluster, config)]


def torchtitan_split(num_layers: int, config: TrainingConfig) -> tuple[int, int, int] | None:
    """(layers_per_stage, first_stage_less_layers, last_stage_less_layers) of the layout's pipeline split, or None
    when torchtitan cannot express it.

    torchtitan splits ``layers + first_less + last_less`` evenly over the virtual stages and takes the first/last
    ``less`` layers off the first/last virtual stage (pipeline_parallel.py ``_generate_llm_fqn_per_model_part``), so
    a stated split must be equal middle virtual stages of ``m`` layers with first/last stages of at most ``m``.
    """
    split = config.pipeline_split
    if split.is_default:
        return torchtitan_stage_split(num_layers, config.pp * config.vpp)
    if split_violations(num_layers, config.pp, config.vpp, split):
        return None
    counts = stage_counts(num_layers, config.pp, config.vpp, split)
    middle = set(counts[1:-1]) or {max(counts[0], counts[-1])}
    if len(middle) != 1:
        return None
    per_stage = middle.pop()
    if per_stage < 1 or counts[0] > per_stage or counts[-1] > per_stage:
        return None
    return per_stage, per_stage - counts[0], per_stage - counts[-1]


def torchtitan_stage_split(num_layers: int, stages: int) -> tuple[int, int, int] | None:
    """(layers_per_stage, first_stage_less_layers, last_stage_less_layers) giving ``stages`` even stages.

    torchtitan counts ``first/last_stage_less_layers`` as extra layers before splitting and takes
    ``ceil((layers + first + last) / layers_per_stage)`` stages (pipeline_parallel.py).  Even split
    first (0, 0); else embedding and output as one layer each (1, 1), torchtitan's default.
    """
    for extra in (0, 1):
        effective = num_layers + 2 * extra
        if effective % stages == 0 and effective // stages >= max(1, extra):
            return effective // stages, extra, extra
    return None
