"""Which run-time switches a launch framework can turn on for a layout: the variants the search tries.

The search gives each layout the fastest setting its launch framework supports that fits memory
(:func:`switch_choices`: every overlap on, CUDA graphs / the expert overlap where allowed, else the same without the
switch that costs memory; tools/search.py ``_search_fallbacks``); each rule is cited:

- Megatron-LM / Megatron-Bridge / Primus (Megatron-core): every communication overlap exists as a switch
  (``--overlap-grad-reduce``/``--overlap-param-gather``, ``--tp-comm-overlap`` with sequence parallelism,
  ``overlap_p2p_comm`` for the interleaved schedule, TE context-parallel attention; Megatron-LM
  megatron/training/arguments.py), and the expert all-to-all overlap (``--overlap-moe-expert-parallel-comm``, off by
  default) where ``TransformerConfig.__post_init__`` accepts it (projection.switches.ep_overlap_blockers).  CUDA graphs (``--cuda-graph-impl local``, ``TransformerConfig.cuda_graph_impl``)
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

from projection.device_profile import DeviceProfile
from projection.model_spec import ModelSpec
from projection.training_config import TrainingConfig
from projection.framework import framework_profile, resolve_framework
from projection.switches import ep_overlap_blockers, resolve_switches
from projection.vocabulary import COMM_OVERLAPS


def ep_overlap_hides(profile: DeviceProfile) -> bool:
    """Whether turning on the expert all-to-all overlap hides any communication on this device profile
    (``ep_overlap_fraction > 0``, projection.engine); where it hides none the switch only costs its buffers."""
    return profile.ep_overlap_fraction > 0


def cuda_graphs_allowed(framework: str | None, model: ModelSpec, config: TrainingConfig) -> bool:
    """Whether ``framework`` can replay this layout's layers from CUDA graphs (module docstring; ``model`` is kept
    for model-dependent rules)."""
    return (resolve_framework(framework or "megatron").megatron_core and config.zero != 3
            and config.recompute == "none" and config.ep == 1)


def switch_choices(framework: str | None, model: ModelSpec, config: TrainingConfig, *,
                   ep_overlap_hides: bool = True) -> list[dict[str, object]]:
    """The switch settings the search gives a layout, best first: the fastest the launch framework supports, then
    (only when that one turns on a switch that costs memory) the same without it.  Switches the config pins stay.

    Why two at most (docs/architecture.md, "Run-time switches in the search"): every overlap is never slower
    (projection.switches.overlap_fraction only hides communication) and the DP/TP/PP/CP overlaps cost no memory,
    so they are simply on; the expert all-to-all overlap and CUDA graphs are never slower but cost memory
    (projection.memory_terms.ep_overlap_buffer_bytes, cuda_graph_buffer_bytes), and never apply to the same layout
    (graphs need ep 1, the expert overlap ep > 1).  So a layout's best setting is the first of these that fits
    memory, which is what an exhaustive search over every switch combination picks per layout (equally fast
    settings: the one with the switches on); tests/tools/test_switch_search.py checks it on small spaces.
    An empty dict: the config as it is (a framework without switches the search varies).
    ``ep_overlap_hides``: whether the device profile hides any of the expert all-to-all when the overlap is on
    (``DeviceProfile.ep_overlap_fraction > 0``); where it hides none the switch would only cost its buffers
    (projection.memory_terms.ep_overlap_buffer_bytes), so it is not turned on."""
    record = resolve_framework(framework or "megatron")
    if not record.megatron_core:
        return [{}]
    default = resolve_switches(config, framework_profile(config.framework))
    # a setting equal to the framework's default stays unset (None), as a run that states no switch would have it;
    # the fallback states every key the best one sets (None: back to the default)
    best: dict[str, object] = {}
    fallback: dict[str, object] = {}
    if config.comm_overlap is None:
        free = tuple(c for c in COMM_OVERLAPS if c != "ep")
        fallback["comm_overlap"] = None if frozenset(free) == default.overlaps else free
        expert = ep_overlap_hides and not ep_overlap_blockers(config)
        best["comm_overlap"] = COMM_OVERLAPS if expert else fallback["comm_overlap"]
    if config.cuda_graphs is None and cuda_graphs_allowed(framework, model, config) and not default.cuda_graphs:
        best["cuda_graphs"], fallback["cuda_graphs"] = True, None
    best = {k: v for k, v in best.items() if v is not None}
    return [best, fallback] if best != {k: v for k, v in fallback.items() if v is not None} else [best]


def switch_variants(framework: str | None, model: ModelSpec, config: TrainingConfig, *,
                    ep_overlap_hides: bool = True) -> list[TrainingConfig]:
    """The layout under each of :func:`switch_choices` (best first)."""
    return [config.model_copy(update=update) if update else config
            for update in switch_choices(framework, model, config, ep_overlap_hides=ep_overlap_hides)]
