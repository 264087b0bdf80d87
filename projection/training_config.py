"""TrainingConfig and Cluster: the layout of a training job and the machines it runs on.

Field names are the config keys of the sweep-file format (``shared/specs/sweep-format.md``),
so a sweep run's config validates by building a TrainingConfig.  Rules that involve the
model or the cluster (divisibility, memory) live in :mod:`projection.legality`.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

Precision = Literal["bf16", "fp16", "fp8", "fp8-blockwise", "mxfp8", "nvfp4"]
Recompute = Literal["none", "selective", "full"]
PipelineSchedule = Literal["1f1b", "interleaved", "zero-bubble", "zbv", "gpipe"]
Framework = Literal["megatron", "nemo", "torchtitan", "llm-foundry", "deepspeed", "jax", "primus"]

PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp8-blockwise", "mxfp8", "nvfp4")
LOW_PRECISIONS: frozenset[str] = frozenset({"fp8", "fp8-blockwise", "mxfp8", "nvfp4"})
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
RECOMPUTE_MODULES: tuple[str, ...] = (
    "core_attn", "layernorm", "mlp", "moe", "moe_act", "shared_experts", "mla_up_proj",
)


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
    recompute_modules: tuple[str, ...] = Field(
        default=("core_attn",), description=f"With selective recompute: modules from {RECOMPUTE_MODULES}."
    )
    sequence_parallel: bool = False
    zero: int = Field(default=0, ge=0, le=3, description="0 DDP, 1 optimizer, 2 +grads, 3 +params sharded.")
    fsdp_size: int | None = Field(default=None, ge=1, le=MAX_GPUS,
                                  description="ZeRO-3 sharding group size (HSDP); None = DP.")
    pp_schedule: PipelineSchedule | None = Field(
        default=None, description="None = 'interleaved' if vpp > 1 else '1f1b'."
    )
    framework: Framework | None = None
    moe_dispatcher: Literal["alltoall", "allgather", "deepep"] = "alltoall"
    moe_routing: Literal["balanced", "dropless", "token-drop"] = "dropless"
    moe_capacity_factor: float | None = Field(
        default=None, gt=0, le=64,
        description=(
            "With token-drop routing: expert capacity as a multiple of the balanced share of tokens "
            "(MaxText `capacity_factor`, Megatron `moe_expert_capacity_factor`); experts compute on the "
            "full padded capacity. None = dropless."
        ),
    )
    finetune: Literal["sft", "lora"] | None = None

    @model_validator(mode="after")
    def _check_modules(self) -> TrainingConfig:
        unknown = [m for m in self.recompute_modules if m not in RECOMPUTE_MODULES]
        if unknown:
            raise ValueError(
                f"recompute_modules: unknown module(s) {unknown} (allowed: {', '.join(RECOMPUTE_MODULES)})"
            )
        return self

    @property
    def schedule(self) -> PipelineSchedule:
        """The pipeline schedule in effect."""
        if self.pp_schedule is not None:
            return self.pp_schedule
        return "interleaved" if self.vpp > 1 else "1f1b"

    @property
    def is_low_precision(self) -> bool:
        """Whether GEMMs run in an 8- or 4-bit recipe."""
        return self.precision in LOW_PRECISIONS


class Cluster(BaseModel):
    """The GPUs a job runs on: type, count, node size, and optional network overrides."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: str = Field(description="Hardware catalog id, e.g. 'h100-sxm', 'mi300x'.")
    num_gpus: int = Field(ge=1, le=MAX_GPUS, description="GPUs in the job.")
    gpus_per_node: int = Field(default=8, ge=1, le=MAX_GPUS_PER_NODE, description="GPUs per node (server).")
    nic_gbps: float | None = Field(default=None, gt=0, le=1e5, allow_inf_nan=False,
                                   description="Line rate of one NIC, Gbit/s.")
    nics_per_node: int | None = Field(default=None, ge=1, le=64, description="NICs per node.")
    nvlink_domain: int | None = Field(
        default=None, ge=1, le=MAX_GPUS_PER_NODE,
        description="GPUs in one scale-up (NVLink/xGMI) domain, e.g. 72 for a GB200 NVL72 rack of 4-GPU trays; "
                    "None = the hardware catalog's scale_up.domain_gpus.",
    )

    @property
    def num_nodes(self) -> int:
        """Nodes the job spans (rounded up)."""
        return -(-self.num_gpus // self.gpus_per_node)

    def network_of(self, hardware: _NetworkCatalog) -> tuple[int, float, int]:
        """(NICs per node, Gbit/s per NIC, GPUs per scale-up domain) in effect: these overrides, else the catalog's."""
        nics = self.nics_per_node if self.nics_per_node is not None else hardware.nics_per_node
        gbit = self.nic_gbps if self.nic_gbps is not None else hardware.nic_bytes_per_s * 8 / 1e9
        domain = self.nvlink_domain if self.nvlink_domain is not None else hardware.scale_up_domain_gpus
        return nics, gbit, domain

    def scale_out_gbit_per_gpu(self, hardware: _NetworkCatalog) -> float:
        """Line rate of one GPU's share of its node's NICs, Gbit/s: NICs x Gbit/s per NIC / GPUs per node.

        The collective model (:mod:`projection.collectives`) multiplies it by the profile's
        scale-out efficiency; e.g. 8 x 400 Gbit/s on an 8-GPU node = 400 Gbit/s per GPU.
        """
        nics, gbit, _ = self.network_of(hardware)
        return nics * gbit / self.gpus_per_node


class _NetworkCatalog(Protocol):
    """The HardwareSpec attributes :meth:`Cluster.network_of` reads (the catalog's reference network)."""

    @property
    def nics_per_node(self) -> int: ...

    @property
    def nic_bytes_per_s(self) -> float: ...

    @property
    def scale_up_domain_gpus(self) -> int: ...
