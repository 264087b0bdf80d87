"""The pipeline split of a layout in each framework's own options (the one place exports write it).

- Megatron-LM / Primus (argparse dests, megatron/training/arguments.py): ``pp_layout`` ->
  ``pipeline_model_parallel_layout`` (the layout sets the virtual stages, so
  ``num_virtual_stages_per_pipeline_rank`` is left out: validate_args allows one of the two);
  first/last stage layers -> ``decoder_first_pipeline_num_layers`` /
  ``decoder_last_pipeline_num_layers``; an unstated split that is even only after counting the
  embedding and the loss as a layer each -> ``account_for_embedding/loss_in_pipeline_split``.
- Megatron-Bridge (``TransformerConfig`` fields as ``model.`` overrides): ``pipeline_model_parallel_layout``,
  ``num_layers_in_first/last_pipeline_stage``, ``account_for_embedding/loss_in_pipeline_split``.
- torchtitan: :func:`tools.framework_rules.torchtitan_split` (layers per stage, first/last stage less layers).
"""

from __future__ import annotations

from typing import Any

from projection.training_config import TrainingConfig

_BRIDGE_NAMES = {"decoder_first_pipeline_num_layers": "num_layers_in_first_pipeline_stage",
                 "decoder_last_pipeline_num_layers": "num_layers_in_last_pipeline_stage"}


def megatron_split_dests(num_layers: int, config: TrainingConfig) -> dict[str, Any]:
    """Megatron-LM dests of the pipeline split and the virtual stages (empty without PP)."""
    c = config
    if c.pp <= 1:
        return {}
    if c.pp_layout is not None:
        return {"pipeline_model_parallel_layout": c.pp_layout}
    d: dict[str, Any] = {}
    if c.pp_first_stage_layers is not None:
        d["decoder_first_pipeline_num_layers"] = c.pp_first_stage_layers
    if c.pp_last_stage_layers is not None:
        d["decoder_last_pipeline_num_layers"] = c.pp_last_stage_layers
    stages = c.pp * c.vpp
    if not d and num_layers % stages and (num_layers + 2) % stages == 0:
        d["account_for_embedding_in_pipeline_split"] = True
        d["account_for_loss_in_pipeline_split"] = True
    if c.vpp > 1:
        d["num_virtual_stages_per_pipeline_rank"] = c.vpp
    return d


def bridge_split_overrides(num_layers: int, config: TrainingConfig) -> dict[str, Any]:
    """Megatron-Bridge ``model.*`` overrides of the pipeline split and the virtual stages."""
    d = megatron_split_dests(num_layers, config)
    out: dict[str, Any] = {}
    for dest, value in d.items():
        if dest == "num_virtual_stages_per_pipeline_rank":
            continue
        out["model." + _BRIDGE_NAMES.get(dest, dest)] = value
    out["model.virtual_pipeline_model_parallel_size"] = config.vpp if config.vpp > 1 else None
    return out
