"""Enumerate every legal layout of a job, within constraints: the search space of :mod:`tools.search`.

The space (kept sane on purpose, each rule with its reason):
- TP divides the attention and KV heads and stays inside a scale-up domain (a node; NVL72: the
  rack); SP is on whenever TP > 1 (what the Megatron, NeMo and Primus recipes do).
- PP and VPP: equal stages (or equal after counting embedding and loss as one layer each,
  :func:`projection.legality.even_split`); where that is impossible (DeepSeek-V3's 61 layers), one
  uneven split whose first and last virtual stages carry fewer layers
  (:func:`projection.pipeline_split.uneven_split`: Megatron's first/last stage layers with vpp 1,
  a pipeline layout string with vpp 2 or 4, the Megatron-Bridge DeepSeek-V3 presets' shape), searched only
  where no PP > 1 splits evenly on the cluster (:func:`uneven_searched`).  VPP > 1
  with the interleaved schedule; zero-bubble (ZB-H1) only with vpp 1 and pp > 1.
- CP: degrees dividing the GPU count with seq_len divisible by 2*cp (Megatron-core/Transformer Engine load-balanced
  causal CP cuts each sequence into 2*cp chunks; torchtitan also needs tp*2*cp, tools/framework_rules.py, which the
  search applies when a framework launches the layouts).  From seq_len 16384 on (or when the constraints name cp)
  every such degree up to legality.MAX_CP.  Below 16384, a search bound, not a legality rule (a pinned or
  constrained CP layout is still projected): CP > 1 only where the job has fewer sequences per iteration than GPUs
  (gbs < num_gpus: DP cannot give every GPU its own sequence, so every layout shares one sequence over
  tp*pp*cp > 1 ranks, and CP is the way to share it that adds neither pipeline bubble nor per-layer TP
  all-reduces; llama3.1-405b on 16,384 H100 at gbs 2048: the best layout, CP 4, is projected 24% faster than
  the best without CP, while where gbs >= num_gpus the benchmark jobs gain under 3%); at most cp 8 and
  2,048 tokens per CP rank (chunks of 1,024 tokens: attention kernels and the KV ring exchange lose efficiency
  below that); and only with mbs 1 (CP c with mbs m does the per-rank work of CP c/2 with mbs m/2 and twice the
  DP, plus a ring exchange of K/V the latter does not pay, so the space keeps the latter).
- EP only for MoE: divisors of the expert count with ep*etp dividing tp*cp*dp; etp 1 (MoE parallel
  folding, the Megatron-core recommendation), or 1 and tp when the constraints name etp.
- MBS powers of two up to 16 with gbs divisible by mbs*dp.
- Recompute: none, selective, full on all layers, full on half the layers of a stage.  Selective
  comes in two module sets (Megatron-core ``--recompute-modules``, checked in its
  ``TransformerConfig``: ``moe_act`` needs grouped-GEMM MoE, ``mla_up_proj`` needs MLA):
  ``core_attn`` (the default), and ``core_attn`` plus the cheap re-runs the model has
  (``layernorm``, ``moe_act`` for MoE, ``mla_up_proj`` for MLA).  ``mlp``, ``moe`` and
  ``shared_experts`` re-run whole GEMMs the engine does not price as recompute, so they are
  not searched (a pinned config may still name them).
- Precision: bf16 and the FP8 recipes the GPU supports (fp8, fp8-blockwise, mxfp8).
- ZeRO 0 (DDP), 1 (distributed optimizer), 3 (FSDP, only with pp 1 and tp <= 8); with ZeRO 3 and a
  data-parallel group wider than a node, also HSDP (``fsdp_size`` = GPUs per node / tp: shard inside
  the node, replicate across nodes).
- MoE dispatcher: alltoall; DeepEP too where the EP group spans nodes (``ep * etp`` above the
  GPUs of a node), the case its internode kernels are for (Megatron-core MoE README, "DeepEP").
Ties (projected throughput within 0.1%) go to the simpler layout: :func:`simplicity` (lower VPP, no CP,
less recompute and fewer recomputed modules, plain dispatcher, no HSDP, the simpler FP8 recipe), never
to extreme VPP.
Every layout of the space is legal by construction (:func:`projection.legality.layout_violations` is empty).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar

from projection.framework import memory_traits
from projection.hardware import HardwareSpec
from projection.legality import (
    MICRO_BATCH_SIZES,
    cp_degrees,
    divisors,
    even_split,
    schedule_microbatch_violation,
    tp_degrees,
    tp_span,
)
from projection.model_spec import ModelSpec
from projection.pipeline_split import DEFAULT_SPLIT, PipelineSplit, uneven_split
from projection.training_config import JOB, Cluster, TrainingConfig, fields_with
from projection.vocabulary import (
    DEFAULT_RECOMPUTE_MODULES,
    MOE_DISPATCHERS,
    PRECISIONS,
    RECOMPUTE_LEVEL,
    RECOMPUTE_MODULES,
    RECOMPUTES,
    SEARCHED_FP8_RECIPES,
)
from tools.constraints import SWITCH_PINS, Constraints

CP_MIN_SEQ_LEN = 16384            # CP degrees up to legality.MAX_CP from this sequence length on (module docstring)
SHORT_SEQ_MAX_CP = 8              # below it: CP degree at most 8 (a search bound, module docstring; not a legality rule)
CP_MIN_LOCAL_TOKENS = 2048        # below it: tokens of a sequence per CP rank, at least (a search bound chosen with the
#                                   one above, not a measured kernel limit; module docstring)
FP8_RECIPES = SEARCHED_FP8_RECIPES
FSDP_MAX_TP = 8                   # FSDP (zero 3) is searched with pp 1 and tp <= 8 only
TIE_TOLERANCE = 1e-3              # throughputs within 0.1% are a tie (below the engine's resolution)
T = TypeVar("T")
# Simpler recipe first among equally fast ones: PRECISIONS lists them simplest first (projection/vocabulary.py).
_RECIPE_ORDER = {precision: rank for rank, precision in enumerate(PRECISIONS)}
_RECOMPUTE_LEVEL = RECOMPUTE_LEVEL
_JOB_FIELDS = fields_with(JOB)      # the job's own fields, which every layout of a search carries


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchSpace:
    """The job a search lays out: model, GPU, cluster, batch and constraints."""

    model: ModelSpec
    hardware: HardwareSpec
    cluster: Cluster
    constraints: Constraints
    gbs: int
    seq_len: int
    framework: str | None = None
    """The recipe framework the layouts run on (projection/framework.py; None = megatron)."""
    ep_overlap_hides: bool = True
    """Whether the device profile hides any expert all-to-all under the overlap (tools/switch_rules.ep_overlap_hides;
    False: the search does not turn the switch on, it would only cost memory)."""


def _ok(space: SearchSpace, axis: str, value: int | str) -> bool:
    return space.constraints.allows(axis, value)


def tp_values(space: SearchSpace, cp: int) -> list[int]:
    """TP degrees: divide heads (and KV heads unless MLA), fit a scale-up domain (a node; NVL72: the rack,
    :func:`projection.legality.tp_span`), divide the local sequence for SP."""
    n = space.cluster.num_gpus
    return [t for t in tp_degrees(space.model, tp_span(space.hardware, space.cluster)) if n % (t * cp) == 0
            and (t == 1 or (space.seq_len // cp) % t == 0) and _ok(space, "tp", t)]


def short_sequence_cp(space: SearchSpace) -> bool:
    """Whether the short-sequence bounds of CP apply (seq_len below :data:`CP_MIN_SEQ_LEN`, no cp constraint)."""
    return space.seq_len < CP_MIN_SEQ_LEN and space.constraints.cp is None


def cp_values(space: SearchSpace) -> list[int]:
    """CP degrees: divisors of the GPU count splitting seq_len in 2*cp (:func:`projection.legality.cp_degrees`); under
    :func:`short_sequence_cp`, 1 plus (fewer sequences per iteration than GPUs) up to :data:`SHORT_SEQ_MAX_CP` with at
    least :data:`CP_MIN_LOCAL_TOKENS` per rank (module docstring); any when a cp constraint names them."""
    degrees = cp_degrees(space.cluster.num_gpus, space.seq_len)
    if short_sequence_cp(space):
        degrees = [c for c in degrees if c == 1 or (space.gbs < space.cluster.num_gpus and c <= SHORT_SEQ_MAX_CP
                                                    and space.seq_len // c >= CP_MIN_LOCAL_TOKENS)]
    return [c for c in degrees if _ok(space, "cp", c)]


UNEVEN_VPPS = (1, 2, 4)   # virtual stages of the uneven splits searched (the published DeepSeek-V3 recipes use 1, 2, 4)


@lru_cache(maxsize=1024)
def uneven_searched(num_layers: int, num_gpus: int) -> bool:
    """Whether the search offers uneven splits: only where no PP > 1 dividing the GPU count splits the layers evenly
    (DeepSeek-V3's 61 layers on a power-of-two cluster), so models with even PP options keep their space."""
    return not any(num_gpus % p == 0 and even_split(num_layers, p) for p in range(2, min(num_layers, num_gpus) + 1))


def searched_split(num_layers: int, num_gpus: int, pp: int, vpp: int) -> PipelineSplit | None:
    """The pipeline split the search gives (pp, vpp): the default where stages are even (embedding/loss rule), else
    :func:`projection.pipeline_split.uneven_split` where :func:`uneven_searched` and vpp is one of
    :data:`UNEVEN_VPPS`; None when neither applies."""
    if pp == 1 or even_split(num_layers, pp * vpp):
        return DEFAULT_SPLIT
    if vpp not in UNEVEN_VPPS or not uneven_searched(num_layers, num_gpus):
        return None
    return uneven_split(num_layers, pp, vpp)


def split_fields(split: PipelineSplit) -> dict[str, Any]:
    """The TrainingConfig fields that state ``split`` (all None for the default split)."""
    return {"pp_first_stage_layers": split.first, "pp_last_stage_layers": split.last, "pp_layout": split.layout}


def pp_values(space: SearchSpace, tp: int, cp: int) -> list[int]:
    """PP degrees with even stages (embedding/loss rule) or an uneven first/last split, whose tp*cp*pp divides the
    GPU count."""
    n, layers = space.cluster.num_gpus, space.model.num_layers
    return [p for p in range(1, min(layers, n) + 1) if n % (tp * cp * p) == 0
            and searched_split(layers, n, p, 1) is not None and _ok(space, "pp", p)]


def pipeline_options(space: SearchSpace, pp: int) -> list[tuple[int, str, PipelineSplit]]:
    """(vpp, schedule, split) triples: 1f1b; zero-bubble when pp > 1; interleaved for every vpp whose chunks split
    evenly or by :func:`searched_split`'s uneven rule.

    The schedules also constrain the micro-batch count, which depends on mbs: see :func:`schedule_fits`.
    """
    layers = space.model.num_layers
    n = space.cluster.num_gpus
    flat = searched_split(layers, n, pp, 1)
    if flat is None:
        return []
    options = [(1, "1f1b", flat)]
    if pp > 1:
        options.append((1, "zero-bubble", flat))
        for v in range(2, (layers + 2) // pp + 1):
            if (split := searched_split(layers, n, pp, v)) is not None:
                options.append((v, "interleaved", split))
    return [(v, s, split) for v, s, split in options if _ok(space, "vpp", v) and _ok(space, "pp_schedule", s)]


def schedule_fits(schedule: str, pp: int, num_microbatches: int) -> bool:
    """Micro-batch rules of the schedules: interleaved needs a multiple of pp (Megatron's microbatch groups),
    zero-bubble at least pp (:func:`projection.legality.schedule_microbatch_violation`, their one copy)."""
    return schedule_microbatch_violation(schedule, pp, num_microbatches) is None


def expert_options(space: SearchSpace, tp: int, cp: int, dp: int) -> list[tuple[int, int]]:
    """(ep, etp) pairs for MoE models: ep divides experts, etp 1 (or tp if constrained), ep*etp divides tp*cp*dp."""
    m = space.model
    if not m.is_moe:
        return [(1, 1)] if _ok(space, "ep", 1) and _ok(space, "etp", 1) else []
    stage_ranks = tp * cp * dp
    etps = sorted({1, tp}) if space.constraints.etp is not None else [1]
    return [(e, et) for e in divisors(m.num_experts) for et in etps
            if stage_ranks % (e * et) == 0 and _ok(space, "ep", e) and _ok(space, "etp", et)]


def mbs_values(space: SearchSpace, dp: int, cp: int) -> list[int]:
    """Micro-batch sizes: powers of two up to MAX_MBS (legality.MICRO_BATCH_SIZES), up to the first whose mbs*dp
    does not divide gbs; 1 only with cp > 1 under :func:`short_sequence_cp` (module docstring)."""
    values = []
    for mbs in MICRO_BATCH_SIZES[:1] if cp > 1 and short_sequence_cp(space) else MICRO_BATCH_SIZES:
        if space.gbs % (mbs * dp):
            break
        if _ok(space, "mbs", mbs):
            values.append(mbs)
    return values


def zero_values(space: SearchSpace, tp: int, pp: int) -> list[int]:
    """ZeRO levels: 0 and 1 always; 3 (FSDP) with pp 1 and tp <= 8."""
    levels = [0, 1] + ([3] if pp == 1 and tp <= FSDP_MAX_TP else [])
    return [z for z in levels if _ok(space, "zero", z)]


def precision_values(space: SearchSpace) -> list[str]:
    """bf16 plus the FP8 recipes the GPU supports (when allowed); a precision constraint may name others."""
    supported = space.hardware.supported_precisions
    rule = space.constraints.rule("precision")
    wanted = ["bf16", *FP8_RECIPES] if rule is None or rule.allowed is None else sorted(rule.allowed)
    if not space.constraints.allow_fp8:
        wanted = [p for p in wanted if p not in FP8_RECIPES and p != "nvfp4"]
    return [p for p in wanted if p in supported and _ok(space, "precision", p)]


def recompute_options(space: SearchSpace, pp: int) -> list[tuple[str, int | None]]:
    """(recompute, recompute_num_layers): none, selective, full on all layers, full on half a stage."""
    stage_layers = -(-space.model.num_layers // pp)
    half = stage_layers // 2
    options: list[tuple[str, int | None]] = [(recompute, None) for recompute in RECOMPUTES]
    if 1 <= half < stage_layers:
        options.append(("full", half))
    rnl_rule = space.constraints.rule("recompute_num_layers")
    selective_only = space.constraints.recompute_modules is not None   # a module set is selective recompute's
    return [(r, n) for r, n in options if _ok(space, "recompute", r) and (r == "selective" or not selective_only)
            and (rnl_rule is None or (r == "full" and rnl_rule(stage_layers if n is None else n)))]


def recompute_module_sets(space: SearchSpace) -> list[tuple[str, ...]]:
    """Module sets of selective recompute: the default, then the default plus the cheap re-runs (docstring); only
    the default where the framework's selective recompute is per-op SAC (torchtitan), which no module list changes
    (projection.workload.selective_recompute_modules), so the variants would be one layout twice."""
    pinned = space.constraints.recompute_modules
    if pinned is not None:     # 'recompute_modules=core_attn,mlp': exactly that set, in the vocabulary's order
        return [tuple(m for m in RECOMPUTE_MODULES if m in pinned)]
    if memory_traits(space.framework).op_level_selective_ac:
        return [DEFAULT_RECOMPUTE_MODULES]
    m = space.model
    extra = ["layernorm"] + (["moe_act"] if m.is_moe else []) + (["mla_up_proj"] if m.uses_mla else [])
    return [DEFAULT_RECOMPUTE_MODULES, (*DEFAULT_RECOMPUTE_MODULES, *extra)]


def fsdp_sizes(space: SearchSpace, tp: int, cp: int, dp: int, zero: int) -> list[int | None]:
    """Sharding group sizes of ZeRO 3: the whole DP group (None), or one node's worth (HSDP) when DP spans nodes."""
    if zero != 3:
        return [None]
    node = space.cluster.gpus_per_node // tp
    if node > 1 and dp * cp > node and (dp * cp) % node == 0:
        return [None, node]
    return [None]


def dispatchers(space: SearchSpace, ep: int, etp: int) -> tuple[str, ...]:
    """MoE token dispatchers: alltoall, and DeepEP when the EP group spans nodes (module docstring); exactly the
    dispatchers a ``moe_dispatcher`` constraint names (e.g. ``moe_dispatcher=hybridep``) when it names any."""
    rule = space.constraints.rule("moe_dispatcher")
    if not space.model.is_moe:    # a dense model dispatches nothing: 'moe_dispatcher=deepep' leaves no layout
        return tuple(d for d in ("alltoall",) if rule is None or rule(d))
    if rule is not None and rule.allowed is not None:
        return tuple(d for d in MOE_DISPATCHERS if rule(d))
    base = ("alltoall",) if ep * etp <= space.cluster.gpus_per_node else ("alltoall", "deepep")
    return tuple(d for d in base if rule is None or rule(d))


def switch_pins(constraints: Constraints) -> dict[str, Any]:
    """The run-time switches the constraints pin (comm_overlap, cuda_graphs, compile; attention_backend when one
    value is named): every layout of the search carries them."""
    pins: dict[str, Any] = {k: getattr(constraints, k) for k in SWITCH_PINS if getattr(constraints, k) is not None}
    if pins.get("comm_overlap") is not None:
        pins["comm_overlap"] = tuple(pins["comm_overlap"])
    rule = constraints.rule("attention_backend")
    if rule is not None and rule.allowed is not None and len(rule.allowed) == 1:
        pins["attention_backend"] = next(iter(rule.allowed))
    return pins


def simplicity(config: TrainingConfig) -> tuple[int, ...]:
    """Sort key of the simpler layout among equally fast ones: lower VPP, no CP, less recompute, fewer modules..."""
    level = _RECOMPUTE_LEVEL.get((config.recompute, config.recompute_num_layers is not None), 3)
    modules = len(config.recompute_modules) if config.recompute == "selective" else 0
    return (config.vpp, config.cp, level, modules, int(config.moe_dispatcher != "alltoall"),
            int(config.fsdp_size is not None), _RECIPE_ORDER.get(config.precision, len(_RECIPE_ORDER)),
            config.pp, config.tp, config.ep, config.zero, config.mbs)


def break_ties(items: Sequence[T], throughput: Callable[[T], float], config_of: Callable[[T], TrainingConfig],
               tolerance: float = TIE_TOLERANCE) -> list[T]:
    """Reorder a best-first list so runs of items within ``tolerance`` of each run's head go simplest first.

    ``throughput(item)`` (tokens/s/GPU) and ``config_of(item)`` read an item; the order between runs is unchanged.
    """
    out: list[T] = []
    run: list[T] = []
    for item in items:
        if run and throughput(item) < throughput(run[0]) * (1.0 - tolerance):
            out += sorted(run, key=lambda i: simplicity(config_of(i)))
            run = []
        run.append(item)
    return out + sorted(run, key=lambda i: simplicity(config_of(i)))


def recompute_variants(space: SearchSpace, pp: int) -> list[tuple[str, int | None, tuple[str, ...]]]:
    """(recompute, recompute_num_layers, recompute_modules): :func:`recompute_options` with the module sets."""
    out: list[tuple[str, int | None, tuple[str, ...]]] = []
    for recompute, rnl in recompute_options(space, pp):
        sets = recompute_module_sets(space) if recompute == "selective" else [DEFAULT_RECOMPUTE_MODULES]
        out += [(recompute, rnl, modules) for modules in sets]
    return out


def job_template(space: SearchSpace, finetune: str | None, packed_document_tokens: int | None = None
                 ) -> TrainingConfig:
    """The job's own fields (FIELD_EFFECTS 'job': batch, sequence, fine-tuning, packed documents, the recipe
    framework that prices the layouts; defaults for the rest) that every layout of the search carries.

    Raises:
        pydantic.ValidationError: a packed document longer than the sequence (TrainingConfig's rule).
    """
    return TrainingConfig(gbs=space.gbs, seq_len=space.seq_len, finetune=finetune,
                          packed_document_tokens=packed_document_tokens, framework=space.framework,
                          **switch_pins(space.constraints))


def with_job_fields(raw: dict[str, Any], **job: Any) -> dict[str, Any]:
    """A candidate config dict with the job's fields (gbs, seq_len, finetune, packed_document_tokens, ...) filled
    in where the candidate leaves them out or sets them to None; a candidate may still state its own."""
    return {**{k: v for k, v in job.items() if v is not None},
            **{k: v for k, v in raw.items() if v is not None or k not in job}}


def in_space(space: SearchSpace, config: TrainingConfig, finetune: str | None = None,
             packed_document_tokens: int | None = None) -> bool:
    """Whether :func:`tools.candidate_columns.enumerate_candidates` yields this layout (up to equal layouts: dp may be left derived, the
    schedule implied, and recompute modules are ignored unless recompute is selective).

    The membership form of the enumeration: the same axis functions, in the same nesting.
    """
    c, n = config, space.cluster.num_gpus
    template = job_template(space, finetune, packed_document_tokens)
    if any(getattr(c, name) != getattr(template, name) for name in _JOB_FIELDS):
        return False
    if c.cp not in cp_values(space) or c.tp not in tp_values(space, c.cp) or c.pp not in pp_values(space, c.tp, c.cp):
        return False
    dp = n // (c.tp * c.cp * c.pp)
    if space.gbs % dp or not _ok(space, "dp", dp) or c.dp not in (None, dp):
        return False
    if c.sequence_parallel != (c.tp > 1) or (c.ep, c.etp) not in expert_options(space, c.tp, c.cp, dp):
        return False
    if (c.vpp, c.schedule, c.pipeline_split) not in pipeline_options(space, c.pp):
        return False
    if c.mbs not in mbs_values(space, dp, c.cp):
        return False
    if not schedule_fits(c.schedule, c.pp, space.gbs // (c.mbs * dp)):
        return False
    modules = tuple(c.recompute_modules) if c.recompute == "selective" else DEFAULT_RECOMPUTE_MODULES
    return (c.zero in zero_values(space, c.tp, c.pp) and c.precision in precision_values(space)
            and c.fsdp_size in fsdp_sizes(space, c.tp, c.cp, dp, c.zero)
            and c.moe_dispatcher in dispatchers(space, c.ep, c.etp)
            and (c.recompute, c.recompute_num_layers, modules) in recompute_variants(space, c.pp))
