"""Which run-time switches a launch framework can turn on for a layout: the variants the search tries.

The search ranks a layout with its framework's default switches (projection/catalog/frameworks/*.yaml) and with
the fastest setting the launch framework supports; each rule is cited:

- Megatron-LM / Megatron-Bridge / Primus (Megatron-core): every communication overlap exists as a switch
  (``--overlap-grad-reduce``/``--overlap-param-gather``, ``--tp-comm-overlap`` with sequence parallelism,
  ``overlap_p2p_comm`` for the interleaved schedule, TE context-parallel attention; Megatron-LM
  megatron/training/arguments.py), and the expert all-to-all overlap (``--overlap-moe-expert-parallel-comm``, off by
  default) where ``TransformerConfig.__post_init__`` accepts it (projection.switches.ep_overlap_blockers).  CUDA graphs (``--enable-cuda-graph``, ``TransformerConfig.enable_cuda_graph``)
  capture each transformer layer, but megatron-core 0.16.1 ``TransformerConfig.__post_init__`` refuses them with
  full recompute ("full recompute is only supported with full iteration CUDA graph") and with selective recompute
  when attention dropout is on ("attention dropout is not supported with graphed attention recomputation"), which
  it is in every Megatron launch here (Megatron-LM ``--attention-dropout`` defaults to 0.1 and the exports leave it);
  torch FSDP2 (ZeRO-3 here) is left out: the graph's static buffers would pin the unsharded parameters; and
  Megatron-LM core_v0.16.1 ``validate_args`` refuses local CUDA graphs with expert parallelism unless
  ``--moe-pad-experts-for-cuda-graph-inference`` is set (an inference padding), so EP layouts are left out too.
- torchtitan 0.3.0: no CUDA-graph option in its job config (torchtitan/config/job_config.py); async TP needs
  ``--compile`` (``enable_async_tensor_parallel`` asserts compile), so the search keeps torchtitan's defaults.
- MaxText: XLA compiles the step; no switch the search varies.
"""

from __future__ import annotations

from projection.model_spec import ModelSpec
from projection.training_config import TrainingConfig
from projection.framework import resolve_framework
from projection.switches import ep_overlap_blockers
from projection.vocabulary import COMM_OVERLAPS


def cuda_graphs_allowed(framework: str | None, model: ModelSpec, config: TrainingConfig) -> bool:
    """Whether ``framework`` can replay this layout's layers from CUDA graphs (module docstring; ``model`` is kept
    for model-dependent rules)."""
    return (resolve_framework(framework or "megatron").megatron_core and config.zero != 3
            and config.recompute == "none" and config.ep == 1)


def switch_variants(framework: str | None, model: ModelSpec, config: TrainingConfig) -> list[TrainingConfig]:
    """The layout with its switches as given, and (where the framework supports more) with every overlap on and
    CUDA graphs where allowed; switches the config pins stay as they are."""
    variants = [config]
    if not resolve_framework(framework or "megatron").megatron_core:
        return variants
    update: dict[str, object] = {}
    if config.comm_overlap is None:      # the expert all-to-all overlap only where megatron-core allows it
        blocked = ep_overlap_blockers(config)
        update["comm_overlap"] = tuple(c for c in COMM_OVERLAPS if not (c == "ep" and blocked))
    if config.cuda_graphs is None and cuda_graphs_allowed(framework, model, config):
        update["cuda_graphs"] = True
    if update:
        variants.append(config.model_copy(update=update))
    return variants
