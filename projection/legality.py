"""Legality: the rules Megatron-style frameworks enforce on a layout, one reason per violation.

Rules and where frameworks enforce them (Megatron-LM ``megatron/training/arguments.py``
and ``megatron/core/parallel_state.py``, torchtitan ``parallel_dims.py``):
world size = tp*pp*cp*dp; tp divides attention heads and query groups; pp*vpp at most the
layer count (uneven splits allowed: Megatron ``decoder_first/last_pipeline_num_layers`` and pipeline
layout strings, checked by :func:`projection.pipeline_split.split_violations`);
ep divides experts and ep*etp divides the tp*cp*dp ranks of a stage (MoE parallel folding);
the causal load-balanced CP split needs seq_len divisible by 2*cp; gbs divisible by mbs*dp.
"""

from __future__ import annotations

from dataclasses import dataclass

from projection.hardware import HardwareSpec
from projection.model_spec import ModelSpec
from projection.pipeline_split import split_violations, stage_counts, stage_layers_of_rank
from projection.training_config import Cluster, TrainingConfig
from projection.vocabulary import PIPELINE_SCHEDULES, PRECISIONS, RECOMPUTES, ZERO_LEVELS

# Bounded work (issue 13): the pipeline simulator is linear in micro-batches x pp x vpp (a few
# us and ~1.5 KB per op on one core where no steady-state shortcut applies: ZB-V, GPipe), so
# these keep one projection about 1 s and well under 1 GiB (benchmarks/fuzz.py; README
# "Limits").  The largest development run has 49,152 (Megatron-Bridge 405B on 256 GB200:
# 384 micro-batches x pp 16 x vpp 8); published jobs use tens to a few thousand micro-batches.
MAX_MICROBATCHES = 16_384
MAX_PIPELINE_OPS = 131_072
MAX_ZBV_OPS = 32_768   # ZB-V's greedy order builder costs ~4x per op and has no steady-state shortcut
# Axis ranges considered by legal_axes and the search (tools/candidates.py): CP up to 64 ranks, micro-batches
# powers of two up to 16.  Modelling choices that bound the space, not framework limits.
MAX_CP = 64
MICRO_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16)
MAX_MBS = MICRO_BATCH_SIZES[-1]


def tp_span(hardware: HardwareSpec, cluster: Cluster) -> int:
    """The most GPUs one TP group may span: one scale-up (NVLink/xGMI) domain.

    TP all-reduces every layer, so frameworks keep it on the scale-up fabric.  On HGX and MI300X-class
    nodes that is the node (8 GPUs); a GB200/GB300 NVL72 rack joins 18 four-GPU trays into one
    72-GPU NVLink domain (catalog ``scale_up.domain_gpus``), so TP may span trays up to the domain.
    The cluster's ``nvlink_domain`` (as the user gave it) wins; otherwise a catalog domain larger than
    the catalog node counts, and a node-sized domain stays the cluster's ``gpus_per_node``.
    """
    if cluster.nvlink_domain is not None:
        return cluster.nvlink_domain
    if hardware.scale_up_domain_gpus > hardware.gpus_per_node:
        return max(cluster.gpus_per_node, hardware.scale_up_domain_gpus)
    return cluster.gpus_per_node


def derived_dp(config: TrainingConfig, cluster: Cluster) -> int:
    """Data-parallel degree implied by the cluster size (0 when it does not divide)."""
    model_parallel = config.tp * config.pp * config.cp
    if cluster.num_gpus % model_parallel:
        return 0
    return cluster.num_gpus // model_parallel


def layout_violations(model: ModelSpec, hardware: HardwareSpec, cluster: Cluster,
                      config: TrainingConfig, *, allow_cross_node_tp: bool = False) -> list[str]:
    """Return one readable reason per rule the layout breaks (empty when legal)."""
    c = config
    reasons: list[str] = []
    mp = c.tp * c.pp * c.cp
    if cluster.num_gpus % mp:
        reasons.append(f"tp*pp*cp = {c.tp}*{c.pp}*{c.cp} = {mp} does not divide num_gpus={cluster.num_gpus}")
    dp = derived_dp(c, cluster)
    if c.dp is not None and dp and c.dp != dp:
        reasons.append(f"dp={c.dp} but num_gpus/(tp*pp*cp) = {cluster.num_gpus}/{mp} = {dp}")
    if model.num_attention_heads % c.tp:
        reasons.append(f"tp={c.tp} does not divide num_attention_heads={model.num_attention_heads}")
    if model.num_kv_heads % c.tp and not model.uses_mla:
        reasons.append(f"tp={c.tp} does not divide num_kv_heads={model.num_kv_heads}")
    if not allow_cross_node_tp and c.tp > (span := tp_span(hardware, cluster)):
        where = (f"gpus_per_node={cluster.gpus_per_node} (TP must stay inside a node)" if span == cluster.gpus_per_node
                 else f"the {span}-GPU NVLink domain (TP must stay inside one scale-up domain)")
        reasons.append(f"tp={c.tp} exceeds {where}")
    stages = c.pp * c.vpp
    if stages > model.num_layers and not (stages == model.num_layers + 2 and c.pp > 1):
        reasons.append(f"pp*vpp = {c.pp}*{c.vpp} exceeds num_layers={model.num_layers}")
    if c.vpp > 1 and c.pp == 1:
        reasons.append(f"vpp={c.vpp} needs pp > 1")
    split = c.pipeline_split
    reasons += split_violations(model.num_layers, c.pp, c.vpp, split)
    reasons += _schedule_violations(c)
    if model.is_moe:
        if model.num_experts % c.ep:
            reasons.append(f"ep={c.ep} does not divide num_experts={model.num_experts}")
        if dp and (c.tp * c.cp * dp) % (c.ep * c.etp):
            reasons.append(f"ep*etp = {c.ep * c.etp} does not divide tp*cp*dp = {c.tp * c.cp * dp}")
    else:   # MoE-only settings on a dense model would be ignored without a word
        moe_only = ([f"ep={c.ep}, etp={c.etp}"] if c.ep > 1 or c.etp > 1 else []) + [
            f"{name}={value}" for name, value, default in (("moe_dispatcher", c.moe_dispatcher, "alltoall"),
                                                           ("moe_routing", c.moe_routing, "dropless"))
            if value != default]
        if moe_only:
            verb = "needs" if len(moe_only) == 1 and "," not in moe_only[0] else "need"   # 'ep=2, etp=1' is two
            reasons.append(f"{', '.join(moe_only)} {verb} a MoE model ('{model.name}' is dense)")
    if c.cp > 1 and c.seq_len % (2 * c.cp):
        reasons.append(f"seq_len={c.seq_len} not divisible by 2*cp={2 * c.cp} (load-balanced causal CP split)")
    if c.sequence_parallel and c.tp > 1 and (c.seq_len // c.cp) % c.tp:
        reasons.append(f"seq_len/cp = {c.seq_len // c.cp} not divisible by tp={c.tp} (sequence parallel)")
    microbatches = c.gbs // (c.mbs * dp) if dp else 0
    if dp and (why := schedule_microbatch_violation(c.schedule, c.pp, microbatches)):
        reasons.append(why)
    if dp and microbatches > MAX_MICROBATCHES:
        reasons.append(f"micro-batches per step gbs/(mbs*dp) = {microbatches} exceeds {MAX_MICROBATCHES} "
                       "(bounded work; raise mbs or lower gbs)")
    elif dp and microbatches * c.pp * c.vpp > (limit := MAX_ZBV_OPS if c.schedule == "zbv" else MAX_PIPELINE_OPS):
        reasons.append(f"micro-batches x pp x vpp = {microbatches}*{c.pp}*{c.vpp} exceeds {limit} for "
                       f"{c.schedule} (bounded pipeline simulation; raise mbs, lower gbs or vpp)")
    if dp and c.gbs % (c.mbs * dp):
        reasons.append(f"gbs={c.gbs} not divisible by mbs*dp = {c.mbs}*{dp} = {c.mbs * dp}")
    if c.precision not in hardware.supported_precisions:
        reasons.append(
            f"precision {c.precision} not supported on {hardware.id} "
            f"(supported: {', '.join(p for p in PRECISIONS if p in hardware.supported_precisions)})"
        )
    if c.recompute_num_layers is not None and c.recompute != "full":
        reasons.append(f"recompute_num_layers={c.recompute_num_layers} needs recompute=full")
    if c.recompute_num_layers is not None and c.recompute_num_layers > (most := most_stage_layers(model, c)):
        reasons.append(f"recompute_num_layers={c.recompute_num_layers} exceeds layers per stage ({most})")
    if c.fsdp_size is not None:
        if c.zero != 3:
            reasons.append(f"fsdp_size={c.fsdp_size} needs zero=3")
        elif dp and (dp * c.cp) % c.fsdp_size:
            reasons.append(f"fsdp_size={c.fsdp_size} does not divide dp*cp = {dp * c.cp}")
    return reasons


def most_stage_layers(model: ModelSpec, config: TrainingConfig) -> int:
    """The most layers one pipeline rank holds (over its chunks); ceil(layers / pp) for an unstated split."""
    if config.pipeline_split.is_default:
        return -(-model.num_layers // config.pp)
    if split_violations(model.num_layers, config.pp, config.vpp, config.pipeline_split):
        return model.num_layers
    counts = stage_counts(model.num_layers, config.pp, config.vpp, config.pipeline_split)
    return max(stage_layers_of_rank(counts, config.pp))


def schedule_microbatch_violation(schedule: str, pp: int, microbatches: int) -> str | None:
    """Why ``microbatches`` per step do not suit the schedule on ``pp`` stages, or None.

    Interleaved 1F1B needs a multiple of pp (Megatron-LM's microbatch groups); the zero-bubble
    schedules need at least pp.  The one copy of the rule: legality and the search read it.
    """
    if pp <= 1:
        return None
    if schedule == "interleaved" and microbatches % pp:
        return (f"interleaved schedule needs micro-batches per step gbs/(mbs*dp) = {microbatches} "
                f"to be a multiple of pp={pp} (Megatron-LM microbatch groups)")
    if schedule in ("zbv", "zero-bubble") and microbatches < pp:
        return f"{schedule} schedule needs micro-batches per step gbs/(mbs*dp) = {microbatches} >= pp={pp}"
    return None


def _schedule_violations(c: TrainingConfig) -> list[str]:
    schedule = c.schedule
    if schedule == "interleaved" and c.vpp < 2:
        return ["pp_schedule=interleaved needs vpp >= 2"]
    if schedule in ("1f1b", "gpipe") and c.vpp > 1:
        return [f"pp_schedule={schedule} needs vpp=1 (got vpp={c.vpp}); use interleaved"]
    if schedule == "zbv" and c.vpp != 2:
        return [f"pp_schedule=zbv needs vpp=2 (got vpp={c.vpp})"]
    if schedule == "zero-bubble" and c.vpp > 2:
        return [f"pp_schedule=zero-bubble needs vpp <= 2 (got vpp={c.vpp})"]
    if schedule != "1f1b" and c.pp == 1:
        return [f"pp_schedule={schedule} needs pp > 1"]
    return []


def divisors(n: int) -> list[int]:
    """All positive divisors of n, ascending."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass(frozen=True, slots=True, kw_only=True)
class LegalAxes:
    """Legal values of each axis considered on its own (combinations are checked separately)."""

    tp: tuple[int, ...]
    pp: tuple[int, ...]
    vpp: tuple[int, ...]
    cp: tuple[int, ...]
    ep: tuple[int, ...]
    mbs: tuple[int, ...]
    precision: tuple[str, ...]
    recompute: tuple[str, ...]
    zero: tuple[int, ...]
    pp_schedule: tuple[str, ...]


def even_split(num_layers: int, stages: int) -> bool:
    """Whether ``stages`` pipeline stages (or model chunks, pp*vpp) get equal layers, or equal after counting
    embedding and loss as one layer each."""
    return num_layers % stages == 0 or (stages > 1 and (num_layers + 2) % stages == 0)


def even_pp_splits(num_layers: int, max_pp: int) -> list[int]:
    """PP degrees whose stages get equal layers, or equal after counting embedding and loss as one layer each."""
    return [p for p in range(1, max_pp + 1) if even_split(num_layers, p)]


def tp_degrees(model: ModelSpec, span: int) -> list[int]:
    """TP degrees the model allows on its own: divide the attention heads (and KV heads unless MLA) and fit
    ``span`` GPUs, the most one TP group may cover (:func:`tp_span`: a node; NVL72: the rack)."""
    return [t for t in divisors(model.num_attention_heads)
            if t <= span and (model.uses_mla or model.num_kv_heads % t == 0)]


def cp_degrees(num_gpus: int, seq_len: int) -> list[int]:
    """CP degrees up to MAX_CP that divide the GPU count and split seq_len in 2*cp (load-balanced causal CP)."""
    return [c for c in divisors(num_gpus) if c <= MAX_CP and seq_len % (2 * c) == 0]


def legal_axes(model: ModelSpec, hardware: HardwareSpec, cluster: Cluster, *, seq_len: int = 4096,
               max_mbs: int = MAX_MBS) -> LegalAxes:
    """Return the legal values of each parallel/batch/precision axis for this model and cluster."""
    n = cluster.num_gpus
    tp = [d for d in tp_degrees(model, tp_span(hardware, cluster)) if n % d == 0]
    pp = [p for p in even_pp_splits(model.num_layers, min(model.num_layers, n)) if n % p == 0]
    vpp = [v for v in range(1, 17) if any(p * v <= model.num_layers and p > 1 for p in pp)] or [1]
    cp = cp_degrees(n, seq_len) if seq_len > 1 else [1]
    ep = [e for e in divisors(model.num_experts) if n % e == 0] if model.is_moe else [1]
    mbs = [m for m in MICRO_BATCH_SIZES if m <= max_mbs]
    precision = [p for p in PRECISIONS if p in hardware.supported_precisions]
    return LegalAxes(
        tp=tuple(tp), pp=tuple(pp), vpp=tuple(vpp), cp=tuple(cp), ep=tuple(ep), mbs=tuple(mbs),
        precision=tuple(precision), recompute=RECOMPUTES, zero=ZERO_LEVELS, pp_schedule=PIPELINE_SCHEDULES,
    )
