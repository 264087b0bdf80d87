"""What a launch file leaves out or writes in a framework's own terms: defaults, layouts, partial recompute.

Real launch files set only what differs from their framework's defaults.  Each default taken
here is the framework's own, cited, and :func:`fill_defaults` says which it took:

- Megatron-LM (``megatron/training/arguments.py``): parallel sizes 1; ``--global-batch-size``
  unset = ``micro_batch_size * data-parallel size`` (``validate_args``); no distributed optimizer.
- Primus (AMD-AGI/Primus ``primus/configs/modules/megatron/pre_trainer.yaml`` extends
  ``trainer_base.yaml``): ``use_distributed_optimizer: true``, ``bf16: true``,
  ``micro_batch_size: 2``, ``global_batch_size: 16``, ``seq_length: 1024``, ``fp8_recipe: delayed``.
- torchtitan (0.3.0 ``torchtitan/config/configs.py`` ``TrainingConfig``, the same in the 0.2
  ``job_config.py`` the TOMLs were written for): ``local_batch_size 8``, ``global_batch_size -1``
  = ``local_batch_size * data-parallel degree``, ``seq_len 2048``.

:func:`primus_switches` reads what Primus files say in Megatron's newer or Primus' own terms:
``pipeline_model_parallel_layout`` (Megatron-core ``PipelineParallelLayerLayout``: stages split
by ``|``, ``t`` a decoder layer, ``E`` the embedding, ``L`` the loss, ``m`` an MTP layer, ``X*n``
and ``(...)*n`` repeats, ``,`` between items), ``recompute_layer_ids`` (Primus: the global indices
of the layers that run full recompute) and ``use_turbo_deepep`` (Primus-Turbo DeepEP: sets
``moe_enable_deepep`` and the ``flex`` dispatcher, ``patches/turbo/moe_dispatcher_patches.py``).
"""

from __future__ import annotations

import re
from typing import Any

from projection.errors import ProjtuneError
from projection.framework import record_of_launch

# Primus' module defaults (pre_trainer.yaml over trainer_base.yaml) that a layout depends on.
PRIMUS_DEFAULTS: dict[str, Any] = {"use_distributed_optimizer": True, "bf16": True, "micro_batch_size": 2,
                                   "global_batch_size": 16, "seq_length": 1024, "fp8_recipe": "delayed"}
PRIMUS_SOURCE = "Primus primus/configs/modules/megatron/pre_trainer.yaml (extends trainer_base.yaml)"
TORCHTITAN_DEFAULTS = {"local_batch_size": 8, "seq_len": 2048}
TORCHTITAN_SOURCE = "torchtitan 0.3.0 config/configs.py TrainingConfig"
MAX_LAYOUT_CHARS = 10_000


class LayoutError(ProjtuneError):
    """A pipeline layout string that cannot be read."""


def pipeline_layout_stages(layout: str) -> list[int]:
    """Decoder layers of each virtual pipeline stage of a Megatron ``pipeline_model_parallel_layout`` string.

    ``"Et*3|(tt|)*29,m|L"`` -> [3, 2, 2, ..., 0, 0].  Raises LayoutError on characters outside the grammar.
    """
    text = re.sub(r"\s", "", layout)
    if len(text) > MAX_LAYOUT_CHARS:
        raise LayoutError(f"pipeline layout of {len(text):,} characters (at most {MAX_LAYOUT_CHARS:,})")
    group = re.compile(r"\(([^()]*)\)\*(\d+)")
    for _ in range(100):  # innermost groups first
        text, count = group.subn(lambda m: m.group(1) * int(m.group(2)), text)
        if len(text) > 100_000:
            raise LayoutError("pipeline layout expands to more than 100,000 characters")
        if not count:
            break
    text = re.sub(r"([EtmL])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    bad = set(text) - set("EtmL|,")
    if bad:
        raise LayoutError(f"pipeline layout '{layout[:60]}': cannot read {''.join(sorted(bad))!r} (allowed: E t m "
                          "L | , X*n (...)*n)")
    return [stage.count("t") for stage in text.split("|")]


def stage_of_layers(counts: list[int], pp: int) -> list[list[int]]:
    """Global layer indices held by each pipeline rank (virtual stage ``k`` runs on rank ``k % pp``)."""
    ranks: list[list[int]] = [[] for _ in range(pp)]
    first = 0
    for stage, count in enumerate(counts):
        ranks[stage % pp].extend(range(first, first + count))
        first += count
    return ranks


def primus_switches(overrides: dict[str, Any], num_layers: int | None) -> tuple[dict[str, Any], list[str]]:
    """Sweep-format keys from Primus' own switches and Megatron's layout string, and what was read how."""
    config: dict[str, Any] = {}
    notes: list[str] = []
    pp = _int(overrides.get("pipeline_model_parallel_size"), 1)
    layout = overrides.get("pipeline_model_parallel_layout")
    counts: list[int] | None = None
    if isinstance(layout, str) and layout.strip():
        counts = pipeline_layout_stages(layout)
        if len(counts) % pp:
            raise LayoutError(f"pipeline layout has {len(counts)} stages, not a multiple of "
                              f"pipeline_model_parallel_size {pp}")
        config["vpp"] = len(counts) // pp
        if config["vpp"] > 1:
            config["pp_schedule"] = "interleaved"
        if num_layers is not None and sum(counts) != num_layers:
            raise LayoutError(f"pipeline layout places {sum(counts)} decoder layers; the model has {num_layers}")
        notes.append(f"pipeline_model_parallel_layout: {len(counts)} virtual stages ({config['vpp']} per rank) of "
                     f"{min(counts)}-{max(counts)} layers, projected with this split (each rank priced with its "
                     "own layers)")
    ids = overrides.get("recompute_layer_ids")
    if ids not in (None, "", False) and overrides.get("recompute_granularity") == "full":
        wanted = sorted({int(i) for i in str(ids).replace("[", "").replace("]", "").split(",") if i.strip()})
        if num_layers is None:
            raise LayoutError("recompute_layer_ids needs the model's layer count (num_layers)")
        if counts is None:
            from projection.layout import chunk_layers

            vpp = _int(overrides.get("num_virtual_stages_per_pipeline_rank"), 1)
            ranks = [[layer for chunk in rank for layer in chunk] for rank in chunk_layers(num_layers, pp, vpp)]
        else:
            ranks = stage_of_layers(counts, pp)
        per_rank = [sum(1 for layer in rank if layer in wanted) for rank in ranks]
        config["recompute"] = "full"
        config["recompute_num_layers"] = max(per_rank)
        notes.append(f"recompute_layer_ids: {len(wanted)} of {num_layers} layers recompute ({min(per_rank)}-"
                     f"{max(per_rank)} per pipeline rank); projected as recompute_num_layers={max(per_rank)} per "
                     "stage (the most any rank recomputes, which sets the memory peak)")
    if overrides.get("use_turbo_deepep") and overrides.get("enable_primus_turbo", True):
        config["moe_dispatcher"] = "deepep"
    if overrides.get("mtp_num_layers"):
        notes.append(f"mtp_num_layers {overrides['mtp_num_layers']}: multi-token-prediction layers are not "
                     "projected (the last stage holds them)")
    return config, notes


def _int(value: Any, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def primus_with_defaults(overrides: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Primus overrides over the module defaults, and which defaults were taken."""
    taken = [f"{k}: {v}" for k, v in PRIMUS_DEFAULTS.items() if k not in overrides]
    merged = PRIMUS_DEFAULTS | overrides
    if merged.get("fp8") and "bf16" not in overrides:
        taken = [t for t in taken if not t.startswith("bf16")]
    notes = [f"not in the file, Primus default taken ({PRIMUS_SOURCE}): {', '.join(taken)}"] if taken else []
    return merged, notes


# Megatron-Bridge recipe defaults (v0.2.2 src/megatron/bridge/recipes/llama/llama3.py: llama3_8b_pretrain_config's
# recommended kwargs over _llama3_common's defaults), for override files that leave them out.
BRIDGE_RECIPE_DEFAULTS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama3-8b": ("llama3_8b_pretrain_config", {"tp": 1, "pp": 1, "cp": 2, "sequence_parallel": False, "gbs": 512,
                                                "mbs": 1, "seq_len": 8192, "precision": "bf16", "zero": 1}),
}


# Config key -> the override fields that set it (absent from the file: the recipe's default applies).
_BRIDGE_FIELDS = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
                  "cp": "context_parallel_size", "sequence_parallel": "sequence_parallel",
                  "gbs": "global_batch_size", "mbs": "micro_batch_size", "seq_len": "seq_length|sequence_length",
                  "precision": "mixed_precision", "zero": "use_distributed_optimizer"}


def fill_defaults(framework: str, keys: dict[str, Any], text: str, num_gpus: int, model: str | None = None
                  ) -> list[str]:
    """Fill the batch and sequence a file leaves out with its framework's defaults (in place); say which."""
    notes: list[str] = []
    if framework == "megatron-bridge":
        recipe, defaults = BRIDGE_RECIPE_DEFAULTS.get(model or "", ("", {}))
        taken = {k: v for k, v in defaults.items()
                 if not any(name in text for name in _BRIDGE_FIELDS[k].split("|"))
                 and not (k == "zero" and keys.get("zero") == 3)}
        keys.update(taken)
        if taken:
            notes.append(f"not in the file, Megatron-Bridge recipe {recipe} default taken (v0.2.2 "
                         f"recipes/llama/llama3.py): " + ", ".join(f"{k} {v}" for k, v in taken.items()))
    tp, pp, cp = (int(keys.get(k, 1)) for k in ("tp", "pp", "cp"))
    dp = max(1, num_gpus // (tp * pp * cp))
    if framework == "torchtitan":
        import tomllib

        data = tomllib.loads(text)
        training, par = data.get("training", {}), data.get("parallelism", {})
        if int(par.get("data_parallel_shard_degree", -1)) == -1:
            replicate = int(par.get("data_parallel_replicate_degree", 1))
            shard = max(1, dp // replicate)
            if shard == 1:
                keys["zero"] = 0
            elif replicate > 1 and keys.get("zero") == 3:
                keys["fsdp_size"] = shard * cp
            notes.append(f"parallelism.data_parallel_shard_degree -1: torchtitan shards (FSDP) over the {shard} "
                         "data-parallel ranks left")
        local = int(training.get("local_batch_size", TORCHTITAN_DEFAULTS["local_batch_size"]))
        if "local_batch_size" not in training:
            notes.append(f"training.local_batch_size not set: torchtitan default {local} ({TORCHTITAN_SOURCE})")
        if "seq_len" not in keys:
            keys["seq_len"] = TORCHTITAN_DEFAULTS["seq_len"]
            notes.append(f"training.seq_len not set: torchtitan default {keys['seq_len']} ({TORCHTITAN_SOURCE})")
        if "gbs" not in keys or int(keys["gbs"]) <= 0:
            keys["gbs"] = local * dp
            notes.append(f"training.global_batch_size not set: torchtitan's default is local_batch_size x "
                         f"data-parallel degree = {local} x {dp} = {keys['gbs']} ({TORCHTITAN_SOURCE})")
        if pp == 1:
            keys.setdefault("mbs", local)
    elif framework != "primus" and record_of_launch(framework).megatron_core:  # Megatron-LM, Megatron-Bridge
        if "mbs" not in keys:
            keys["mbs"] = 1
            notes.append("--micro-batch-size not set: Megatron-LM default 1 (arguments.py)")
        if "gbs" not in keys:
            keys["gbs"] = int(keys["mbs"]) * dp
            notes.append(f"--global-batch-size not set: Megatron-LM takes micro-batch x data-parallel size = "
                         f"{keys['gbs']} (arguments.py validate_args)")
    return notes


# Megatron dests that change memory or speed but that no projection input carries: what the run does differently.
# CUDA graphs and the gradient-reduction dtype are projected (tools.launch_import.megatron_switches).
_UNMODELLED = {
    "use_precision_aware_optimizer": "precision-aware optimizer (main_grads_dtype / exp_avg_dtype / exp_avg_sq_dtype "
                                     "as set; the projection keeps fp32 moments and main weights)",
    "cpu_offloading": "activation CPU offloading (not projected)",
    "optimizer_cpu_offload": "optimizer CPU offload (not projected)",
    "moe_shared_expert_overlap": "shared-expert overlap (not projected)",
}


def switch_notes(dests: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """Notes for Megatron-family switches the file sets that the projection does not model, and for FP8 primary
    weights where the file and the memory model (framework profile ``fp8_param_gather_precisions``) disagree."""
    from projection.framework import framework_profile

    notes = [f"{dest}: {what}" for dest, what in _UNMODELLED.items() if dests.get(dest) not in (None, False, "none")]
    precision = str(config.get("precision", "bf16"))
    assumed = framework_profile("megatron").keeps_fp8_primary_weights(precision)
    if assumed and not dests.get("fp8_param_gather"):
        notes.append("no --fp8-param-gather: this run keeps bf16 GEMM weights besides the FP8 copies; the memory "
                     "model assumes FP8 primary weights (about 2 bytes per GEMM weight per shard less than the run)")
    return notes
