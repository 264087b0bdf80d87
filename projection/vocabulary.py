"""The closed sets of a layout: every allowed value of each choice field, spelled once.

Each set is a ``Literal`` type and the tuple of its values (``typing.get_args`` of the type,
so the two cannot drift).  Everything else derives from here: the fields of
:class:`projection.training_config.TrainingConfig` and the sweep-file model
(:mod:`evals.sweep_models`), the constraint parser's choices (:mod:`tools.constraints`),
:func:`projection.legality.legal_axes`, the search's enumeration (:mod:`tools.candidates`),
the tool schemas and the CLI's option help.  Orders are meaningful: where a search
enumerates a set, it does so in the order given here, and ties between equally fast
layouts go to the earlier (simpler) value.

Values are the sweep-format config values (``shared/specs/sweep-format.md``, *Config keys*).
Two related sets live next to what decides them: memory verdicts in
:mod:`projection.memory_verdict` (``Verdict``), hardware vendors and fabrics in
:mod:`projection.hardware`.
"""

from __future__ import annotations

from typing import Literal, get_args

Precision = Literal["bf16", "fp16", "fp8", "fp8-blockwise", "mxfp8", "nvfp4"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
"""Training precisions, simplest recipe first: 16-bit, then per-tensor FP8 (one scale per tensor), then
recipes with more scale factors to compute and apply (128x128 blocks, 32-element MX blocks, NVFP4 16-element
blocks plus a per-tensor scale); NVIDIA Transformer Engine docs, "Using FP8 with Transformer Engine"."""
LOW_PRECISIONS: frozenset[Precision] = frozenset({"fp8", "fp8-blockwise", "mxfp8", "nvfp4"})
"""Recipes whose GEMMs run in 8 or 4 bits (an FP8 constraint or ``allow_fp8=false`` excludes them)."""
SEARCHED_FP8_RECIPES: tuple[Precision, ...] = ("fp8", "fp8-blockwise", "mxfp8")
"""The low-precision recipes a search tries by default (NVFP4 only when a constraint names it)."""

Recompute = Literal["none", "selective", "full"]
RECOMPUTES: tuple[Recompute, ...] = get_args(Recompute)
"""Activation recompute modes, least recompute first."""
RECOMPUTE_LEVEL: dict[tuple[str, bool], int] = {
    ("none", False): 0, ("selective", False): 1, ("full", True): 2, ("full", False): 3,
}
"""How much a layout recomputes, by (recompute, recompute_num_layers is set): none < selective < full on
some layers of a stage < full on all of them.  Other pairs (e.g. selective with a layer count) have no level."""

RecomputeModule = Literal["core_attn", "layernorm", "mlp", "moe", "moe_act", "shared_experts", "mla_up_proj"]
RECOMPUTE_MODULES: tuple[RecomputeModule, ...] = get_args(RecomputeModule)
"""Modules selective recompute can re-run (Megatron-core ``--recompute-modules``)."""
DEFAULT_RECOMPUTE_MODULES: tuple[RecomputeModule, ...] = ("core_attn",)
"""The modules of selective recompute when none are named (Megatron-core's default)."""

PipelineSchedule = Literal["1f1b", "interleaved", "zero-bubble", "zbv", "gpipe"]
PIPELINE_SCHEDULES: tuple[PipelineSchedule, ...] = get_args(PipelineSchedule)
"""Pipeline schedules the engine simulates (projection/pipeline_plan.py)."""

Framework = Literal["megatron", "nemo", "megatron-deepspeed", "torchtitan", "automodel", "llm-foundry", "deepspeed", "jax",
                    "primus"]
FRAMEWORKS: tuple[Framework, ...] = get_args(Framework)
"""Training frameworks a sweep run names (``framework``): they select memory traits and profiles."""

LaunchFramework = Literal["megatron", "megatron-bridge", "primus", "torchtitan", "maxtext"]
LAUNCH_FRAMEWORKS: tuple[LaunchFramework, ...] = get_args(LaunchFramework)
"""Frameworks a layout can be exported to and launched with (tools/exports, tools/framework_rules.py)."""

ImportFramework = Literal["megatron", "megatron-bridge", "primus", "torchtitan", "maxtext"]
IMPORT_FRAMEWORKS: tuple[ImportFramework, ...] = get_args(ImportFramework)
"""Frameworks whose launch files and logs can be read back into a layout (tools/launch_import.py)."""

MoeDispatcher = Literal["alltoall", "allgather", "deepep", "hybridep"]
MOE_DISPATCHERS: tuple[MoeDispatcher, ...] = get_args(MoeDispatcher)
"""MoE token dispatchers, the plain one first (``hybridep``: NVIDIA HybridEP, Megatron-core's flex dispatcher with the
HybridEP backend)."""

CommOverlap = Literal["dp", "tp", "pp", "ep", "cp"]
COMM_OVERLAPS: tuple[CommOverlap, ...] = get_args(CommOverlap)
"""Communications a run can overlap with compute (sweep key ``comm_overlap``): DP gradient reduce / parameter gather,
TP/SP collectives, pipeline send/receive, MoE token exchange, context-parallel exchange."""

AttentionBackend = Literal["fused", "triton", "unfused"]
ATTENTION_BACKENDS: tuple[AttentionBackend, ...] = get_args(AttentionBackend)
"""Attention kernel classes: fused flash kernels (FlashAttention-2/3, cuDNN, CK/AITER), a Triton flash kernel, unfused
(scores materialised: separate matmul, softmax, dropout passes over s x s)."""

MoeRouting = Literal["balanced", "dropless", "token-drop"]
MOE_ROUTINGS: tuple[MoeRouting, ...] = get_args(MoeRouting)
"""MoE routing modes: forced balanced routing, dropless, capacity-bounded token dropping."""

Finetune = Literal["sft", "lora"]
FINETUNES: tuple[Finetune, ...] = get_args(Finetune)
"""Fine-tuning modes (None means pre-training)."""

ZERO_LEVELS: tuple[int, ...] = (0, 1, 2, 3)
"""ZeRO levels: 0 DDP, 1 optimizer states sharded, 2 + gradients, 3 + parameters (FSDP full shard)."""

CLOSED_SETS: dict[str, tuple[str, ...]] = {
    "precision": PRECISIONS,
    "recompute": RECOMPUTES,
    "recompute_modules": RECOMPUTE_MODULES,
    "pp_schedule": PIPELINE_SCHEDULES,
    "framework": FRAMEWORKS,
    "launch_framework": LAUNCH_FRAMEWORKS,
    "import_framework": IMPORT_FRAMEWORKS,
    "moe_dispatcher": MOE_DISPATCHERS,
    "attention_backend": ATTENTION_BACKENDS,
    "moe_routing": MOE_ROUTINGS,
    "finetune": FINETUNES,
}
"""Every closed set of string values by the config key (or concept) it belongs to.  ``COMM_OVERLAPS`` stays out: its
values are the parallel axis names (dp, tp, pp, ...), which many tuples spell for their own reasons."""


def choices_help(values: tuple[str, ...]) -> str:
    """The values as CLI option help writes them: ``a|b|c``."""
    return "|".join(values)
