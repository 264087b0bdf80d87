"""TrainingConfig and Cluster: the layout of a training job and the machines it runs on.

Field names are the config keys of the sweep-file format (``shared/specs/sweep-format.md``),
so a sweep run's config validates by building a TrainingConfig.  Rules that involve the
model or the cluster (divisibility, memory) live in :mod:`projection.legality`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from projection.collectives import HardwareNetworkFields, catalog_nics_for
from projection.errors import unknown_name_message
from projection.pipeline_split import DEFAULT_SPLIT, PipelineSplit, parse_layout
from projection.vocabulary import (
    COMM_OVERLAPS,
    DEFAULT_RECOMPUTE_MODULES,
    LOW_PRECISIONS,
    PRECISIONS,
    RECOMPUTE_MODULES,
    AttentionBackend,
    CommOverlap,
    Finetune,
    Framework,
    MoeDispatcher,
    MoeRouting,
    PipelineSchedule,
    Precision,
    Recompute,
)

__all__ = [  # the vocabulary names are re-exported: callers import them from here or projection.vocabulary
    "FIELD_EFFECTS", "JOB", "LOW_PRECISIONS", "MAX_DEGREE", "MAX_GBS", "MAX_GPUS", "MAX_GPUS_PER_NODE", "MAX_SEQ_LEN",
    "MICROBATCH_WORK", "PRECISIONS", "RECOMPUTE_KNOB", "RECOMPUTE_MODULES", "STATIC_MEMORY", "Cluster", "Framework",
    "PipelineSchedule", "Precision", "Recompute", "TrainingConfig", "fields_with", "fields_without",
]
# Upper bounds on accepted inputs (issue 13, "bounded work"): with them one projection takes
# <= 1 s and << 1 GiB on one CPU core (benchmarks/fuzz.py checks the worst cases).  They sit
# well above any published job: the largest single training jobs run on ~100k GPUs (xAI
# Colossus, 100k H100), global batches are 1k-16k sequences (Llama 3 405B: 2048 x 8k), long-
# context training reaches 1M tokens (Qwen2.5-1M), and the largest NVLink domain announced is
# 576 GPUs (NVIDIA Rubin Ultra NVL576).  The pipeline simulator's work is linear in
# micro-batches x pp x vpp; that product is bounded in projection.legality.
MAX_GPUS = 131_072
MAX_GPUS_PER_NODE = 576
MAX_GBS = 1_048_576
MAX_SEQ_LEN = 4_194_304
MAX_DEGREE = MAX_GPUS        # any single parallel degree or micro-batch size
MAX_NICS_PER_NODE = 64       # input bound; published nodes carry at most 8-16 scale-out NICs
MAX_NIC_GBPS = 1e5           # Gbit/s, input bound; the fastest shipping NICs run at 800 Gbit/s (ConnectX-8)
MIN_NIC_GBPS = 1e-3          # Gbit/s (1 Mbit/s), input bound: refuses 0 and denormal rates (1e-310 projects to inf s)

# The cluster's optional network overrides, one definition for Cluster and every tool input that carries them.
NicsPerNode = Annotated[int | None, Field(ge=1, le=MAX_NICS_PER_NODE,
                                          description="Scale-out NICs per node; None = the GPU catalog's "
                                                      "(kept at the catalog's NICs per GPU).")]
NicGbps = Annotated[float | None, Field(ge=MIN_NIC_GBPS, le=MAX_NIC_GBPS, allow_inf_nan=False,
                                        description="Line rate of one NIC, Gbit/s (400 for NDR IB / 400G RoCE); "
                                                    "None = the catalog's.")]
NvlinkDomain = Annotated[int | None, Field(
    ge=1, le=MAX_GPUS_PER_NODE,
    description="GPUs in one scale-up (NVLink/xGMI) domain, e.g. 72 for a GB200 NVL72 rack of 4-GPU trays; TP may "
                "span it. None = the hardware catalog's scale_up.domain_gpus.")]

MAX_HOST_OP_S = 1e-3         # input bound: 1 ms per op is 100x the slowest eager dispatch reported (~5-25 us)
HostOpSeconds = Annotated[float | None, Field(
    gt=0, le=MAX_HOST_OP_S, allow_inf_nan=False,
    description="Host (CPU) time to dispatch one op of an eager step, seconds, as `projtune bench host` measures it "
                "on the nodes' CPU; None = the framework profile's host_launch_s.")]


def _within_sequence(tokens: int | None, info: ValidationInfo) -> int | None:
    """A packed document fits in one sequence: at most the ``seq_len`` validated before it (when known)."""
    seq_len = info.data.get("seq_len")
    if tokens is not None and isinstance(seq_len, int) and tokens > seq_len:
        raise ValueError(f"{tokens} tokens per packed document is more than seq_len {seq_len}: documents are packed "
                         f"into one sequence, so give at most {seq_len} (or leave it unset for unpacked data)")
    return tokens


# Packed fine-tuning documents, one definition for TrainingConfig and every request that carries it (the search,
# the tune tool, the agent's request); a model using it declares ``seq_len`` before it.
PackedDocumentTokens = Annotated[int | None, Field(
    ge=1, le=MAX_SEQ_LEN,
    description=(
        "Fine-tuning on packed sequences whose attention is per document (cu_seqlens / THD: a query attends "
        "only to its own document, NVIDIA NeMo 24.07 docs features/optimizations/sequence_packing): the mean "
        "document length, tokens, at most seq_len. None = one document fills the sequence (pretraining-style "
        "causal mask)."
    )), AfterValidator(_within_sequence)]


def known_recompute_modules(modules: Sequence[str]) -> Sequence[str]:
    """``modules`` unchanged when each is one of RECOMPUTE_MODULES; else the first unknown one named with the
    nearest (one rule for TrainingConfig and the sweep file's list)."""
    for module in modules:
        if module not in RECOMPUTE_MODULES:
            raise ValueError(unknown_name_message("recompute module", module, RECOMPUTE_MODULES))
    return modules


class TrainingConfig(BaseModel):
    """How one training job is laid out: parallel degrees, batch, precision, memory savers.

    Every field is a sweep-format config key with the format's default.  ``dp`` is derived
    from the cluster (``num_gpus / (tp*pp*cp)``) when not given.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tp: int = Field(default=1, ge=1, le=MAX_DEGREE, description="Tensor-parallel degree.")
    pp: int = Field(default=1, ge=1, le=MAX_DEGREE, description="Pipeline-parallel degree.")
    cp: int = Field(default=1, ge=1, le=MAX_DEGREE, description="Context-parallel degree.")
    ep: int = Field(default=1, ge=1, le=MAX_DEGREE, description="Expert-parallel degree (MoE).")
    etp: int = Field(default=1, ge=1, le=MAX_DEGREE, description="Expert tensor-parallel degree (MoE).")
    vpp: int = Field(default=1, ge=1, le=MAX_DEGREE, description="Virtual pipeline chunks per pipeline rank.")
    dp: int | None = Field(default=None, ge=1, le=MAX_GPUS, description="Data-parallel degree; derived if None.")
    mbs: int = Field(default=1, ge=1, le=MAX_DEGREE, description="Micro-batch size, sequences.")
    gbs: int = Field(default=1, ge=1, le=MAX_GBS, description="Global batch size, sequences per step.")
    seq_len: int = Field(default=4096, ge=1, le=MAX_SEQ_LEN, description="Sequence length, tokens.")
    precision: Precision = "bf16"
    recompute: Recompute = "none"
    recompute_num_layers: int | None = Field(
        default=None, ge=0, description="With full recompute: layers per pipeline stage that recompute; None = all."
    )
    recompute_modules: Annotated[tuple[str, ...], AfterValidator(known_recompute_modules)] = Field(
        default=DEFAULT_RECOMPUTE_MODULES, description=f"With selective recompute: modules from {RECOMPUTE_MODULES}."
    )
    sequence_parallel: bool = False
    zero: int = Field(default=0, ge=0, le=3, description="0 DDP, 1 optimizer, 2 +grads, 3 +params sharded.")
    fsdp_size: int | None = Field(default=None, ge=1, le=MAX_GPUS,
                                  description="ZeRO-3 sharding group size (HSDP); None = DP.")
    pp_first_stage_layers: int | None = Field(
        default=None, ge=0, le=MAX_DEGREE,
        description="Transformer layers on the first pipeline rank (Megatron --decoder-first-pipeline-num-layers; "
                    "torchtitan pipeline_parallel_first_stage_less_layers = middle - this); the middle ranks split "
                    "the rest evenly. None = the default split (projection/pipeline_split.py).")
    pp_last_stage_layers: int | None = Field(
        default=None, ge=0, le=MAX_DEGREE,
        description="Transformer layers on the last pipeline rank (Megatron --decoder-last-pipeline-num-layers; "
                    "torchtitan pipeline_parallel_last_stage_less_layers = middle - this). None = the default split.")
    pp_layout: str | None = Field(
        default=None, min_length=1, max_length=1024,
        description="Megatron pipeline layout string (--pipeline-model-parallel-layout), virtual stages split by '|': "
                    "E embedding, t layer, m MTP (not modelled), L loss, x*n and (...)*n repeats, e.g. "
                    "'Et|(tt|)*30mL' (pp 8 x vpp 4). None = no layout.")
    pp_schedule: PipelineSchedule | None = Field(
        default=None, description="None = 'interleaved' if vpp > 1 else '1f1b'."
    )
    framework: Framework | None = None
    moe_dispatcher: MoeDispatcher = "alltoall"
    moe_routing: MoeRouting = "dropless"
    moe_capacity_factor: float | None = Field(
        default=None, gt=0, le=64,
        description=(
            "With token-drop routing: expert capacity as a multiple of the balanced share of tokens "
            "(MaxText `capacity_factor`, Megatron `moe_expert_capacity_factor`); experts compute on the "
            "full padded capacity. None = dropless."
        ),
    )
    finetune: Finetune | None = None
    packed_document_tokens: PackedDocumentTokens = None
    # Run-time switches (sweep-format keys): None = the framework's default, which its catalog record
    # (projection/catalog/frameworks/*.yaml, FrameworkProfile.default_*) states with its source.
    comm_overlap: tuple[CommOverlap, ...] | None = Field(
        default=None, description=f"Communications overlapped with compute, from {COMM_OVERLAPS}; () = none; "
        "None = the framework's default overlaps.")
    cuda_graphs: bool | None = Field(
        default=None, description="Kernels replayed from captured CUDA/HIP graphs (no per-op host dispatch); "
        "None = the framework's default.")
    compile: bool | None = Field(
        default=None, description="A graph compiler fuses the element-wise work (torch.compile, XLA); None = the "
        "framework's default (true for jax).")
    attention_backend: AttentionBackend | None = Field(
        default=None, description="Attention kernel class: fused (flash), triton, unfused (s x s scores "
        "materialised); None = the framework's default.")
    grad_reduce_in_fp32: bool | None = Field(
        default=None, description="Gradients accumulated and reduced in FP32 (4 B) rather than the 16-bit training "
        "dtype (2 B); None = the framework's default.")

    @model_validator(mode="after")
    def _check_modules(self) -> TrainingConfig:
        if self.comm_overlap is not None and len(set(self.comm_overlap)) != len(self.comm_overlap):
            raise ValueError(f"comm_overlap: {list(self.comm_overlap)} names a communication twice (allowed once "
                             f"each: {', '.join(COMM_OVERLAPS)})")
        if self.pp_layout is not None:
            parse_layout(self.pp_layout)        # syntax only; the counts are checked against the model in legality
        return self

    @property
    def pipeline_split(self) -> PipelineSplit:
        """The pipeline split this layout states (all None = the default split)."""
        if self.pp_first_stage_layers is None and self.pp_last_stage_layers is None and self.pp_layout is None:
            return DEFAULT_SPLIT
        return PipelineSplit(first=self.pp_first_stage_layers, last=self.pp_last_stage_layers, layout=self.pp_layout)

    @property
    def schedule(self) -> PipelineSchedule:
        """The pipeline schedule in effect."""
        if self.pp_schedule is not None:
            return self.pp_schedule
        return "interleaved" if self.vpp > 1 else "1f1b"

    def data_parallel(self, num_gpus: int) -> int:
        """The data-parallel degree on ``num_gpus``: ``dp`` when given, else num_gpus // (tp*pp*cp) (floor division;
        :func:`projection.legality.layout_violations` says when it does not divide)."""
        return self.dp or num_gpus // (self.tp * self.pp * self.cp)

    @property
    def is_low_precision(self) -> bool:
        """Whether GEMMs run in an 8- or 4-bit recipe."""
        return self.precision in LOW_PRECISIONS


STATIC_MEMORY = "static_memory"
"""Weights, gradients, optimizer states, FP8 copies, workspace or the usable capacity depend on the field
(:attr:`projection.memory.StageMemory.static_bytes`, :func:`projection.memory.usable_capacity_bytes`)."""
MICROBATCH_WORK = "microbatch_work"
"""The per-micro-batch stage times (projection/engine.py ``_stage_times``, projection/workload.py) read it."""
RECOMPUTE_KNOB = "recompute"
"""The field says what is recomputed: layouts differing only in these form a recompute group (tools/search_core.py)."""
JOB = "job"
"""Set by the job, not by its layout: a search carries the job's value on every candidate (tools/candidates.py)."""

FIELD_EFFECTS: dict[str, frozenset[str]] = {
    # Static-memory fields first: their order is the order of the sharding key (tools/search_core.py), which
    # also orders the search's work between tasks.
    "tp": frozenset({STATIC_MEMORY, MICROBATCH_WORK}),
    "pp": frozenset({STATIC_MEMORY, MICROBATCH_WORK}),
    "vpp": frozenset({STATIC_MEMORY, MICROBATCH_WORK}),
    "pp_first_stage_layers": frozenset({STATIC_MEMORY, MICROBATCH_WORK}),
    "pp_last_stage_layers": frozenset({STATIC_MEMORY, MICROBATCH_WORK}),
    "pp_layout": frozenset({STATIC_MEMORY, MICROBATCH_WORK}),
    "cp": frozenset({STATIC_MEMORY, MICROBATCH_WORK}),
    "ep": frozenset({STATIC_MEMORY, MICROBATCH_WORK}),
    "etp": frozenset({STATIC_MEMORY, MICROBATCH_WORK}),
    "dp": frozenset({STATIC_MEMORY}),
    "zero": frozenset({STATIC_MEMORY}),
    "fsdp_size": frozenset({STATIC_MEMORY}),
    "precision": frozenset({STATIC_MEMORY, MICROBATCH_WORK}),
    "finetune": frozenset({STATIC_MEMORY, MICROBATCH_WORK, JOB}),
    "framework": frozenset({STATIC_MEMORY, MICROBATCH_WORK, JOB}),
    "mbs": frozenset({MICROBATCH_WORK}),
    "gbs": frozenset({JOB}),
    "seq_len": frozenset({MICROBATCH_WORK, JOB}),
    "recompute": frozenset({RECOMPUTE_KNOB, MICROBATCH_WORK}),
    "recompute_num_layers": frozenset({RECOMPUTE_KNOB, MICROBATCH_WORK}),
    "recompute_modules": frozenset({RECOMPUTE_KNOB, MICROBATCH_WORK}),
    "sequence_parallel": frozenset({MICROBATCH_WORK}),
    "pp_schedule": frozenset({MICROBATCH_WORK}),
    "moe_dispatcher": frozenset({MICROBATCH_WORK}),
    "moe_routing": frozenset({MICROBATCH_WORK, JOB}),
    "moe_capacity_factor": frozenset({MICROBATCH_WORK, JOB}),
    "packed_document_tokens": frozenset({MICROBATCH_WORK, JOB}),
    # The switches: TP/CP/EP overlap and the host/attention kernels set the stage times; DP overlap and the
    # gradient dtype set the DP exposure (engine.project), the dtype also the gradient buffer (memory._states).
    "comm_overlap": frozenset({MICROBATCH_WORK}),
    "cuda_graphs": frozenset({MICROBATCH_WORK}),
    "compile": frozenset({MICROBATCH_WORK}),
    "attention_backend": frozenset({MICROBATCH_WORK}),
    "grad_reduce_in_fp32": frozenset({STATIC_MEMORY}),
}
"""What each TrainingConfig field affects, declared once; the search's grouping and cache keys derive from it.

Every field must be classified (tests/projection/test_vocabulary.py): a field left out would silently drop
from the keys and merge layouts that differ in it.  Static memory was read off projection/memory.py
(``_states``, ``_shards``, ``stage_params``, ``memory_traits(framework)``); the fields the stage times do not
read (dp, gbs, zero, fsdp_size) off projection/engine.py ``_stage_times``."""


def fields_with(effect: str) -> tuple[str, ...]:
    """TrainingConfig fields that have ``effect``, in :data:`FIELD_EFFECTS` order."""
    return tuple(name for name, effects in FIELD_EFFECTS.items() if effect in effects)


def fields_without(effect: str) -> tuple[str, ...]:
    """TrainingConfig fields that lack ``effect``, in :data:`FIELD_EFFECTS` order."""
    return tuple(name for name, effects in FIELD_EFFECTS.items() if effect not in effects)


class Cluster(BaseModel):
    """The GPUs a job runs on: type, count, node size, and optional network overrides."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: str = Field(description="Hardware catalog id, e.g. 'h100-sxm', 'mi300x'.")
    num_gpus: int = Field(ge=1, le=MAX_GPUS, description="GPUs in the job.")
    gpus_per_node: int = Field(default=8, ge=1, le=MAX_GPUS_PER_NODE, description="GPUs per node (server).")
    nic_gbps: NicGbps = None
    nics_per_node: NicsPerNode = None
    nvlink_domain: NvlinkDomain = None
    host_op_s: HostOpSeconds = None

    @property
    def num_nodes(self) -> int:
        """Nodes the job spans (rounded up)."""
        return -(-self.num_gpus // self.gpus_per_node)

    def network_of(self, hardware: HardwareNetworkFields) -> tuple[float, float, int]:
        """(NICs per node, Gbit/s per NIC, GPUs per scale-up domain) in effect: these overrides, else the catalog's
        (NICs at the catalog's NICs per GPU: :func:`projection.collectives.catalog_nics_for`, as the collective
        model uses them)."""
        nics = (self.nics_per_node if self.nics_per_node is not None
                else catalog_nics_for(hardware, self.gpus_per_node))
        gbit = self.nic_gbps if self.nic_gbps is not None else hardware.nic_bytes_per_s * 8 / 1e9
        domain = self.nvlink_domain if self.nvlink_domain is not None else hardware.scale_up_domain_gpus
        return nics, gbit, domain

    def scale_out_gbit_per_gpu(self, hardware: HardwareNetworkFields) -> float:
        """Line rate of one GPU's share of its node's NICs, Gbit/s: NICs x Gbit/s per NIC / GPUs per node.

        The collective model (:mod:`projection.collectives`) multiplies it by the profile's
        scale-out efficiency; e.g. 8 x 400 Gbit/s on an 8-GPU node = 400 Gbit/s per GPU.
        """
        nics, gbit, _ = self.network_of(hardware)
        return nics * gbit / self.gpus_per_node
