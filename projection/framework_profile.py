"""Framework profiles: how much of a device profile a training framework's software stack reaches.

The same GPU runs at different speeds under Megatron-core (fused kernels, TP/DP comm
overlap, userbuffers), torchtitan (PyTorch eager/compile, FSDP2) or DeepSpeed ZeRO-3 (2021:
per-parameter-group collectives with little prefetch).  A framework profile holds a few
multipliers on top of the device profile; ``projtune calibrate`` fits them on the
development sweeps like device profiles, and the files record what they were fitted on.
Runs that name no framework use ``megatron`` (what every public recipe here is built on); which file a
framework reads is said by its record (:mod:`projection.framework`).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from projection.safe_yaml import load_catalog
from projection.vocabulary import COMM_OVERLAPS, AttentionBackend, CommOverlap, Precision


class AttentionKernelSpeed(BaseModel):
    """A framework's attention kernel speed relative to the reference kernel, per architecture family (1.0: the
    same class of kernel as the reference on that family)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    ampere: float = Field(1.0, gt=0, le=1.5)
    hopper: float = Field(1.0, gt=0, le=1.5)
    blackwell: float = Field(1.0, gt=0, le=1.5)
    blackwell_ultra: float = Field(1.0, gt=0, le=1.5, alias="blackwell-ultra")
    cdna3: float = Field(1.0, gt=0, le=1.5)
    cdna4: float = Field(1.0, gt=0, le=1.5)


class FrameworkProfile(BaseModel):
    """Multipliers a framework applies to the device profile (dimensionless)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    compute_efficiency: float = Field(1.0, gt=0, le=1.5, description="Multiplier on GEMM/attention efficiency.")
    dp_comm_efficiency: float = Field(1.0, gt=0, le=1.5, description="Multiplier on DP/FSDP collective bandwidth.")
    dp_overlap_fraction: float | None = Field(None, ge=0, le=1, description="Overrides the device's DP overlap.")
    tp_overlap_fraction: float | None = Field(None, ge=0, le=1, description="Overrides the device's TP overlap.")
    loss_bytes_per_logit: float = Field(
        6.0, gt=0, description="Bytes per (token, vocab) entry live during the loss: Megatron's fused vocab-parallel "
        "cross-entropy keeps bf16 logits + fp32 softmax (6); an unfused PyTorch loss adds the fp32 gradient (10).")
    grad_bucket_elements: float | None = Field(
        40e6, gt=0, description="Elements per gradient reduce bucket (Megatron-core DDP default 40M; None = one "
        "transformer layer, as FSDP2 reduces per block).")
    grad_bucket_elements_per_dp_rank: float = Field(
        1e6, ge=0, description="Megatron-core grows buckets with DP: bucket = max(40M, 1M * dp) elements.")
    fsdp_bucket_elements: float | None = Field(
        None, gt=0, description="Elements per ZeRO-3/FSDP parameter all-gather; None = one transformer layer.")
    grad_reduce_bytes: float | None = Field(
        None, gt=0, le=4, description="Bytes per gradient element in the DP/FSDP reduction; None = fp32 (4, "
        "Megatron-core accumulate_allreduce_grads_in_fp32, FSDP2 reduce_dtype float32).")
    fp8_param_gather_precisions: tuple[Precision, ...] = Field(
        (), description="Precisions whose runs keep FP8 primary weights (Megatron-core ``fp8_param_gather``): the "
        "distributed optimizer's parameter all-gather moves the 1 B FP8 data of the GEMM weights (the DDP param "
        "buffer is uint8 for TE Float8Tensor parameters) instead of 2 B bf16.")
    host_launch_s: float = Field(
        0.0, ge=0, le=1e-4, description="Host (CPU) time to dispatch one kernel in eager mode, seconds: a layer "
        "takes at least its kernel count times this (TP that halves GPU work does not halve launches). 0 for "
        "compiled programs (XLA) and CUDA-graph-captured steps.")
    eager_elementwise: bool = Field(
        False, description="The framework's default step runs a transformer block's element-wise code as eager "
        "PyTorch, one ATen kernel per op: the RMSNorms, rotary embedding and SwiGLU product of its model file, and "
        "their autograd backward, instead of the fused kernels the device profiles are fitted on (Transformer "
        "Engine's fused RMSNorm, fused RoPE, Megatron-core's bias-SwiGLU fusion). Priced as HBM passes "
        "(projection.workload.eager_elementwise_bytes). A documented default of the framework (torch.compile off), "
        "not fitted.")
    recompute_regathers_params: bool = Field(
        True, description="With ZeRO-3 and full recompute, the recompute forward all-gathers the parameters again "
        "(DeepSpeed ZeRO-3 with activation checkpointing: 3 gathers per micro-batch); False when the backward's "
        "gather serves the recompute too (FSDP2 unshards once per block backward; XLA keeps the gathered weights "
        "of a rematerialised scan step): 2 gathers.")
    attention_kernel_speed: AttentionKernelSpeed = Field(
        default_factory=AttentionKernelSpeed, description="Achieved throughput of the framework's "
        "attention kernel relative to the kernel the device profile's attention efficiency is fitted on "
        "(Megatron-core's Transformer Engine attention), per architecture family, forward and backward alike. A "
        "documented property of the kernel the framework dispatches, not fitted.")
    zero3_gathers_block_host: bool = Field(
        False, description="ZeRO-3 parameter all-gathers block the host until the GPU is idle, so none of them runs "
        "under compute and all are exposed (DeepSpeed of 2021, v0.3.x-0.5.x: partition_parameters.py "
        "``_allgather_param`` calls ``torch.cuda.synchronize()`` before every parameter's all-gather, so 'the async "
        "version is not async at all', microsoft/DeepSpeed PR #1188; prefetches were also skipped by an off-by-one "
        "trace, issue #1069, fixed June 2021 by PR #1170). The gradient reduce-scatter, issued on a side stream as its "
        "buckets fill, keeps the device's overlap (optimistic: the next gather's synchronize also waits for it).")
    zero3_list_collectives: bool = Field(
        False, description="ZeRO-3 issues one list-based torch.distributed all_gather / reduce_scatter per weight "
        "matrix, and each costs one host-dispatched copy per rank of the group (``host_launch_s`` each): PyTorch's "
        "ProcessGroupNCCL::allgather copies the flat result into the output list rank by rank "
        "(``outputTensors[i][j].copy_(outputFlattened[i][j])``), reduce_scatter's flatten_for_scatter_gather copies "
        "the input list the same way (the copies torch.distributed._all_gather_base later removed, pytorch/pytorch "
        "PR #57769). DeepSpeed of 2021 (partition_parameters.py _allgather_param / _reduce_scatter_gradient) passed "
        "such lists; it moved to _all_gather_base after PR #1188.")
    default_comm_overlap: tuple[CommOverlap, ...] = Field(
        COMM_OVERLAPS, description="Communications the framework overlaps with compute when a run does not say "
        "(sweep key comm_overlap); the catalog file cites where each default comes from.")
    megatron_core_ep_overlap_rules: bool = Field(
        False, description="The framework's expert-parallel overlap is megatron-core's overlap_moe_expert_parallel_comm, "
        "which TransformerConfig refuses without EP, with PP but no VPP, with full recompute, and with the allgather "
        "dispatcher (megatron-core 0.16.1 transformer_config.py __post_init__): a default 'ep' overlap is dropped "
        "where it cannot run (projection.switches.ep_overlap_blockers).")
    default_cuda_graphs: bool = Field(
        False, description="Whether the framework replays its steps from CUDA/HIP graphs by default (cuda_graphs).")
    default_compile: bool = Field(
        False, description="Whether the framework compiles the model by default (compile: torch.compile off in every "
        "PyTorch framework here; XLA always compiles).")
    default_attention_backend: AttentionBackend = Field(
        "fused", description="The attention kernel class the framework dispatches by default (attention_backend).")
    fitted_on: tuple[str, ...] = ()
    fit_note: str = ""

    def attention_speed(self, family: str) -> float:
        """``attention_kernel_speed`` on ``family`` (dimensionless)."""
        return getattr(self.attention_kernel_speed, family.replace("-", "_"))

    def keeps_fp8_primary_weights(self, precision: str) -> bool:
        """Whether runs at ``precision`` keep FP8 primary weights (``fp8_param_gather_precisions``): the DP
        all-gather moves 1 B per GEMM weight and no bf16 copy of those weights is held."""
        return precision in self.fp8_param_gather_precisions


@lru_cache(maxsize=32)
def load_framework_profile(stems: tuple[str, ...], name: str) -> FrameworkProfile:
    """The profile in the first ``catalog/frameworks/<stem>.yaml`` that exists, named ``name`` (multiplier
    defaults when none does).  Which files a framework reads is its record's choice
    (:attr:`projection.framework.FrameworkRecord.profile`)."""
    folder = Path(str(resources.files("projection") / "catalog" / "frameworks"))
    for stem in stems:
        path = folder / f"{stem}.yaml"
        if path.is_file():
            return FrameworkProfile.model_validate({**(load_catalog(path.read_text()) or {}), "name": name})
    return FrameworkProfile(name=name)
