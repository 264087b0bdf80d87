"""The memory terms of one pipeline rank: states, FP8 copies, activations, buffers, workspace and allocator.

Terms per GPU of one pipeline rank (bytes; ``StageMemory.terms``):

- ``weights``/``gradients``/``optimizer``: bytes per parameter of the framework
  (:mod:`projection.memory_frameworks`; Megatron-core 2 + 4 + 12 as in Megatron-LM
  ``megatron/training/theoretical_memory_usage.py`` ``compute_weight_and_optimizer_memory``),
  sharded by ZeRO level: the distributed optimizer (zero 1) shards the optimizer states over
  the data-parallel group, dense weights over ``dp*cp`` and routed-expert weights over the
  expert-DP group ``tp*cp*dp/(ep*etp)`` (MoE parallel folding, Megatron-LM PR #4687 expert
  sharding); zero 2 adds the gradients, zero 3 (Megatron-FSDP / torchtitan FSDP2 / MaxText
  FSDP) the weights, over ``fsdp_size`` when set (HSDP).  LoRA freezes the base: no gradients or
  optimizer states for it (FP8 recipes keep the frozen base in FP8 only, as the MLPerf Llama 2 70B
  LoRA submissions do, without a cached transpose); adapters (rank 16 on the attention
  projections) are counted, and the frozen MLP GEMMs save no inputs.
- ``fp8``: Transformer Engine quantised weight copies kept next to the high-precision weights
  (``Float8Tensor`` data + transpose, 2 x 1 B per GEMM weight; MXFP8 row- and column-wise data
  with an E8M0 scale per 32 elements; NVFP4 2 x 0.5 B with an E4M3 scale per 16) and the amax
  history of delayed scaling (TE ``DelayedScaling(amax_history_len=1024)``, 3 fp32 histories
  per GEMM).
- ``activations``: :mod:`projection.activations` per layer times the (micro-batch, chunk) sets
  the schedule holds in flight (:func:`projection.pipeline.peak_in_flight_closed_form`: 1F1B,
  interleaved, zero-bubble, ZB-V, GPipe), selective recompute by module, full recompute for
  ``recompute_num_layers`` per stage, CP/SP; the embedding output on the first rank.
- ``buffers``: what lives only during part of the step: the logits and loss on the last rank,
  the layer recompute rebuilds while its backward runs, gathered ZeRO-3 weights (current +
  prefetched layer), the FP8 transpose of a frozen LoRA layer, MoE dispatch buffers (DeepEP NVL/RDMA buffers; MaxText's ragged
  all-to-all receive buffer ``ep * per_device_batch * seq * top_k`` rows, ``RoutedMoE.sparse_matmul``
  in ``MaxText/layers/moe.py``), the static graph buffers of CUDA graphs (:func:`cuda_graph_buffer_bytes`) and the
  second micro-batch's token buffers of the expert-parallel overlap (:func:`ep_overlap_buffer_bytes`).
- ``workspace``: CUDA context, NCCL/RCCL and cuBLAS workspaces (the device profile's fixed
  ``memory_overhead_gib``; XLA counts its workspaces in the compiled program's temp memory).
- ``allocator``: CUDA caching-allocator fragmentation, the profile's ``memory_fragmentation``
  share of the dynamic memory (XLA's BFC allocator reserve is in the usable capacity instead).

The peak is the maximum over **every** pipeline rank (no sampling): the first rank holds the
embedding and the most micro-batches in flight, the last the LM head and the loss, and uneven
splits (:func:`projection.layout.chunk_layers`) put different layer counts on each.

Gradient buffers hold the framework profile's ``grad_reduce_bytes`` when it sets one (Megatron-core's DDP
grad buffer is fp32 only with ``grad_reduce_in_fp32``, else the parameter dtype), and runs whose precision
keeps FP8 primary weights (``fp8_param_gather_precisions``) hold no bf16 copy of the GEMM weights, only the
FP8 data and transpose of ``fp8``.  Not modelled (no config key says so): CPU activation offloading,
expandable CUDA segments, multi-token-prediction layers on the last stage and
explicit ``pipeline_model_parallel_layout`` splits.  The verdict's calibrated margins
(:mod:`projection.memory_verdict`) cover what the development runs show of these.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import accumulate, repeat
from operator import itemgetter
from typing import Any

import numpy as np

from projection.activations import (
    ActivationContext,
    embedding_activation_bytes,
    full_recompute_layer_bytes,
    layer_activation_bytes,
    output_activation_bytes,
)
from projection.device_profile import DeviceProfile
from projection.framework import framework_profile, framework_record, memory_traits
from projection.hardware import HardwareSpec
from projection.layout import ParallelDims, chunk_layers, effective_schedule, recomputed_layers
from projection.memory_frameworks import MemoryTraits
from projection.pipeline_split import DEFAULT_SPLIT, PipelineSplit
from projection.model_spec import ModelSpec
from projection.params import LayerParams, embedding_params, layer_param_table, output_params
from projection.pipeline import peak_in_flight_closed_form
from projection.switches import grad_buffer_bytes, resolve_switches
from projection.training_config import TrainingConfig
from projection.workload import FP8_TRANSPOSE_BYTES, KERNEL_DISPATCHERS, drops_fp8_transpose

GIB = 2**30
BF16_BYTES = 2
FP8_COPY_BYTES = {"fp8": 2.0, "fp8-blockwise": 2.0 + 2 * 4 / (128 * 128), "mxfp8": 2.0 + 2 / 32,
                  "nvfp4": 1.0 + 2 / 16}
"""Quantised copy bytes per GEMM weight element: data + transpose (TE Float8Tensor), plus scales
(FP8 block-wise: one fp32 scale per 128x128 block; MXFP8: one E8M0 byte per 32; NVFP4: one E4M3 per 16).
On a chip whose FP8 GEMMs take non-TN layouts TE keeps no per-tensor transpose (:func:`fp8_copy_bytes`)."""


def fp8_copy_bytes(config: TrainingConfig, transpose_free: bool) -> float:
    """Quantised copy bytes per GEMM weight element (FP8_COPY_BYTES): per-tensor FP8 under Transformer Engine on a
    chip whose FP8 GEMMs take non-TN layouts (``transpose_free``: projection.compute.fp8_transpose_free, datacenter
    Blackwell) keeps the row-wise data only, ``FP8_TRANSPOSE_BYTES`` less (TE v2.7 pytorch/csrc/quantizer.cpp:
    ``with_transpose = columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported()``)."""
    copy = FP8_COPY_BYTES.get(config.precision, 2.0)
    return copy - FP8_TRANSPOSE_BYTES if drops_fp8_transpose(config, transpose_free) else copy
AMAX_HISTORY_BYTES = 1024 * 4 * 3   # TE DelayedScaling amax_history_len=1024, fp32, input/weight/grad per GEMM
LORA_RANK = 16                      # MLPerf Llama 2 70B LoRA reference (r=16); NeMo LoRA on linear_qkv/linear_proj
DEEPEP_BUFFER_BYTES = 2 * GIB       # DeepEP NVL + RDMA buffers as Megatron's fused_a2a sizes them (num_sms, ~1 GB each)

STATIC_TERMS = ("weights", "gradients", "optimizer", "fp8", "workspace")
"""Terms no micro-batch, schedule or recompute choice changes (a lower bound of any variant's peak)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StageMemory:
    """Peak memory of one GPU of pipeline rank ``rank``, bytes."""

    rank: int
    layers: int
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    fp8_copies_bytes: float
    activations_bytes: float
    transient_bytes: float          # "buffers": loss, recompute rebuild, ZeRO-3 gathers, MoE dispatch
    workspace_bytes: float
    allocator_bytes: float
    microbatches_in_flight: float

    @property
    def overhead_bytes(self) -> float:
        """Workspace plus allocator slack."""
        return self.workspace_bytes + self.allocator_bytes

    def terms(self) -> dict[str, float]:
        """Every term by name (bytes); they sum to :attr:`total_bytes`."""
        return {
            "weights": self.weights_bytes, "gradients": self.gradients_bytes, "optimizer": self.optimizer_bytes,
            "fp8": self.fp8_copies_bytes, "activations": self.activations_bytes, "buffers": self.transient_bytes,
            "workspace": self.workspace_bytes, "allocator": self.allocator_bytes,
        }

    @property
    def total_bytes(self) -> float:
        """Sum of every term."""
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.fp8_copies_bytes
                + self.activations_bytes + self.transient_bytes + self.workspace_bytes + self.allocator_bytes)

    @property
    def static_bytes(self) -> float:
        """The terms recompute, micro-batch size and schedule cannot change."""
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.fp8_copies_bytes
                + self.workspace_bytes)


def activation_context(model: ModelSpec, config: TrainingConfig) -> ActivationContext:
    """The activation-memory settings of a layout."""
    traits = memory_traits(config.framework)
    op_sac = traits.op_level_selective_ac and config.recompute == "selective"
    modules = frozenset(config.recompute_modules) if config.recompute == "selective" and not op_sac else frozenset()
    capacity = (config.moe_capacity_factor or 1.0) if config.moe_routing == "token-drop" else 1.0
    return ActivationContext(
        seq_len=config.seq_len // config.cp,
        micro_batch=config.mbs,
        tp=config.tp,
        sequence_parallel=(config.sequence_parallel or traits.tp_sequence_parallel) and config.tp > 1,
        # an unfused attention backend keeps the s x s scores (and dropout mask) for the backward
        flash_attention=(traits.flash_attention if config.attention_backend is None
                         else config.attention_backend != "unfused"),
        score_bytes=traits.score_bytes,
        dropout=model.model_type == "gpt2",
        gemm_input_bytes=1 if config.is_low_precision else 2,
        recompute_modules=modules,
        expert_capacity=capacity,
        frozen_mlp=config.finetune == "lora",
        op_sac=op_sac,
    )


@lru_cache(maxsize=8192)
def _stage_layers(num_layers: int, pp: int, vpp: int, rank: int, split: PipelineSplit = DEFAULT_SPLIT
                  ) -> tuple[int, ...]:
    """Every layer index pipeline rank ``rank`` holds, over its chunks."""
    return tuple(layer for chunk in chunk_layers(num_layers, pp, vpp, split)[rank] for layer in chunk)


@dataclass(frozen=True, slots=True)
class StageParams:
    """Parameters one GPU of a stage holds (elements), by how they shard."""

    dense: float        # TP-sharded + replicated non-expert parameters (DP/FSDP group)
    experts: float      # routed-expert parameters (expert-DP group)
    gemm_dense: float   # the GEMM weights among ``dense`` (what FP8 quantises)
    gemm_modules: float  # GEMM modules (for per-module FP8 scaling state)
    adapters: float     # LoRA adapter parameters


@lru_cache(maxsize=8192)
def stage_params(model: ModelSpec, layers: tuple[int, ...], tp: int, ep: int, etp: int, pp: int,
                 first: bool, last: bool) -> StageParams:
    """Parameters of one GPU of a stage holding ``layers`` (plus embedding / LM head on the end ranks)."""
    dense = gemm = experts = modules = adapters = 0.0
    table = layer_param_table(model)
    h = model.hidden_size
    qkv_out = model.q_width + 2 * model.kv_width
    layer_adapters = LORA_RANK * ((h + qkv_out) + (model.q_width + h)) / tp
    # Per-layer terms, computed once per distinct LayerParams (layers of one kind share it) and added
    # layer by layer in the same order as before (same sums, bit for bit).
    terms: dict[int, tuple[float, float, float, float]] = {}
    for layer in layers:
        p = table[layer]
        term = terms.get(id(p))
        if term is None:
            sharded = (p.attention + p.mlp + p.shared_experts) / tp
            local_experts = model.num_experts / ep if p.experts else 0
            term = terms[id(p)] = (sharded + p.replicated, sharded, p.experts / (ep * etp),
                                   2 + (2 if p.mlp or p.shared_experts else 0) + 2 * local_experts)
        dense += term[0]
        gemm += term[1]
        experts += term[2]
        modules += term[3]
        adapters += layer_adapters
    if first:
        dense += embedding_params(model) / tp
    if last:
        head = output_params(model)
        if model.tie_embeddings and pp > 1:  # the last stage keeps its own copy of the tied embedding
            head += model.vocab_size * h
        dense += head / tp
        if not (model.tie_embeddings and pp == 1):
            gemm += model.vocab_size * h / tp
            modules += 1
    return StageParams(dense=dense, experts=experts, gemm_dense=gemm, gemm_modules=modules, adapters=adapters)


def shard_sizes(fsdp_size: Any, dp: Any, cp: Any, expert_dp: Any) -> tuple[Any, Any]:
    """(dense, expert) sharding group sizes of ZeRO / FSDP (``fsdp_size`` 0: no HSDP size, shard over ``dp*cp``);
    ints, or integer arrays of many layouts (elementwise)."""
    dense = np.where(fsdp_size > 0, fsdp_size, dp * cp)
    expert = np.where(fsdp_size > 0, np.maximum(1, np.minimum(dense, expert_dp)), expert_dp)
    return dense, expert


def _shards(config: TrainingConfig, dims: ParallelDims) -> tuple[int, int]:
    """(dense, expert) sharding group sizes of ZeRO / FSDP of one layout."""
    dense, expert = shard_sizes(config.fsdp_size or 0, dims.dp, dims.cp, dims.expert_dp)
    return int(dense), int(expert)


def _states(params: StageParams, config: TrainingConfig, dims: ParallelDims, traits: MemoryTraits,
            transpose_free: bool = False) -> tuple[float, float, float, float]:
    """(weights, gradients, optimizer, fp8) bytes of one GPU (:func:`states_bytes` of one stage)."""
    dense_shard, expert_shard = _shards(config, dims)
    return tuple(float(term) for term in states_bytes(params, config.zero, dense_shard, expert_shard, config,
                                                      traits, transpose_free=transpose_free))


def states_bytes(params: StageParams, zero: Any, dense_shard: Any, expert_shard: Any, config: TrainingConfig,
                 traits: MemoryTraits, *, transpose_free: bool = False) -> tuple[Any, Any, Any, Any]:
    """(weights, gradients, optimizer, fp8) bytes of one GPU: of one stage (scalars), or of many stages and layouts
    at once (``params``' fields, ``zero`` and the shard sizes numpy arrays that broadcast together: the batch
    screen, :mod:`projection.memory_batch`).  ``config``: the precision, fine-tuning, framework and gradient dtype,
    shared by every stage of the call (its ZeRO level and sharding are the arguments).  ``transpose_free``: the
    chip keeps no per-tensor FP8 transpose (:func:`fp8_copy_bytes`)."""
    w_div = (np.where(zero >= 3, dense_shard, 1), np.where(zero >= 3, expert_shard, 1))
    g_div = (np.where(zero >= 2, dense_shard, 1), np.where(zero >= 2, expert_shard, 1))
    o_div = (np.where(zero >= 1, dense_shard, 1), np.where(zero >= 1, expert_shard, 1))
    low = config.is_low_precision
    copy = fp8_copy_bytes(config, transpose_free)
    gemm_experts = params.experts
    if config.finetune == "lora":
        # Frozen base: no gradients, no optimizer states; an FP8 recipe keeps the base in FP8 only, without a
        # cached transpose (Megatron-Bridge PEFT performance configs set ``disable_parameter_transpose_cache``;
        # the transpose of the running layer is a buffer): data in ``weights``, scales in ``fp8``.
        base_bytes = (1.0 if low else traits.weight_bytes)
        weights = (base_bytes * (params.gemm_dense + gemm_experts) + traits.weight_bytes * (
            params.dense - params.gemm_dense)) / w_div[0] + traits.weight_bytes * params.adapters
        fp8 = max(0.0, copy - 2.0) * (params.gemm_dense + gemm_experts) / w_div[0] if low else 0.0
        grads = traits.grad_bytes * params.adapters
        optimizer = traits.optimizer_bytes * params.adapters / o_div[0]
        return weights, grads, optimizer, fp8
    framework = framework_profile(config.framework)
    # The DDP grad buffer holds what the DP collective reduces (Megatron-core: fp32 only with
    # grad_reduce_in_fp32, else the parameter dtype); FP8 primary weights (fp8_param_gather) replace the bf16
    # GEMM weights by the FP8 data + transpose already counted in ``fp8``.
    grad_bytes = grad_buffer_bytes(config, framework, traits.grad_bytes)
    gemm_bytes = 0.0 if framework.keeps_fp8_primary_weights(config.precision) else traits.weight_bytes
    weights = (traits.weight_bytes * (params.dense - params.gemm_dense) / w_div[0]
               + gemm_bytes * (params.gemm_dense / w_div[0] + params.experts / w_div[1]))
    grads = grad_bytes * (params.dense / g_div[0] + params.experts / g_div[1])
    optimizer = traits.optimizer_bytes * (params.dense / o_div[0] + params.experts / o_div[1])
    fp8 = 0.0
    if low:
        fp8 = copy * (params.gemm_dense / w_div[0] + gemm_experts / w_div[1])
        if config.precision == "fp8":
            fp8 += AMAX_HISTORY_BYTES * params.gemm_modules
    return weights, grads, optimizer, fp8


@dataclass(frozen=True, slots=True, kw_only=True)
class _LayerTables:
    """Per-layer activation bytes of one layout, computed once per distinct layer kind."""

    ctx: ActivationContext
    kept: tuple[float, ...]         # bytes kept per layer without full recompute (selective applied)
    kept_prefix: tuple[float, ...]  # prefix sums of ``kept`` (chunks are contiguous layer ranges)
    rebuilt: tuple[float, ...]      # bytes a layer's recompute rebuilds while its backward runs
    full_input: float               # bytes kept per fully recomputed layer (its input)


def _layer_tables(model: ModelSpec, config: TrainingConfig) -> _LayerTables:
    return _layer_tables_for(model, activation_context(model, config))


@lru_cache(maxsize=4096)
def _layer_tables_for(model: ModelSpec, ctx: ActivationContext) -> _LayerTables:
    """Tables of one (model, activation context): shared by every layout that differs elsewhere."""
    no_recompute = replace(ctx, recompute_modules=frozenset(), op_sac=False)
    by_kind: dict[tuple[bool, int], tuple[float, float]] = {}
    moe_layers, windows = model.moe_layers, model.attention_windows
    n = model.num_layers
    kinds = list(zip(map(bool, moe_layers[:n]), windows[:n] if windows else repeat(0, n), strict=True))
    for layer, kind in enumerate(kinds):      # the first layer of each kind computes its bytes
        if kind not in by_kind:
            keep = layer_activation_bytes(model, layer, ctx)
            by_kind[kind] = (keep, layer_activation_bytes(model, layer, no_recompute) - keep)
    pairs = list(map(by_kind.__getitem__, kinds))
    kept = tuple(map(itemgetter(0), pairs))
    prefix = tuple(accumulate(kept, initial=0.0))   # same additions, in the same order
    return _LayerTables(ctx=ctx, kept=kept, kept_prefix=prefix, rebuilt=tuple(map(itemgetter(1), pairs)),
                        full_input=full_recompute_layer_bytes(model, ctx))


DCN_STAGING_COPIES = 2
"""Extra copies of MaxText's ragged all-to-all buffer when the expert axis leaves the scale-up domain (DCN):
XLA's collective path stages a send and a receive copy.  Set from the source's OOM cells (AMD-AGI/maxtext-slurm
deepseek3-671b-pdbs-sweep.md, 'DCN expert-parallelism extension': every per-device batch x EP = 64 cell with EP
over DCN went OOM while EP 8 inside a node ran up to batch 7); not read from XLA's source."""


def moe_dispatch_buffer_bytes(model: ModelSpec, config: TrainingConfig, dims: ParallelDims, has_moe: bool,
                              scale_up_gpus: int = 8) -> float:
    """Bytes of the MoE dispatch buffers one GPU holds while an MoE layer runs.

    DeepEP: its NVL/RDMA communication buffers.  MaxText's dropless ``sparse_matmul`` with
    expert parallelism: the ragged all-to-all receive buffer of ``ep * per_device_batch * seq * top_k``
    rows of ``emb_dim`` and the two grouped-GEMM outputs (``mlpwi_0``, ``mlpwi_1``) on those rows, bf16;
    with the expert axis across nodes, ``DCN_STAGING_COPIES`` more copies of the buffer.
    """
    if not (model.is_moe and has_moe):
        return 0.0
    if config.moe_dispatcher in KERNEL_DISPATCHERS:     # DeepEP / HybridEP registered communication buffers
        return DEEPEP_BUFFER_BYTES
    if (framework_record(config.framework).workload.ragged_worst_case_buffer and config.moe_routing != "token-drop"
            and dims.ep > 1):
        rows = dims.ep * config.mbs * (config.seq_len // config.cp) * model.top_k
        buffer = BF16_BYTES * rows * (model.hidden_size + 2 * model.moe_ffn_hidden_size / max(1, config.etp))
        return buffer * (1 + (DCN_STAGING_COPIES if dims.ep > scale_up_gpus else 0))
    return 0.0


CUDA_GRAPH_BACKWARD_SURFACES = 2
"""Hidden-state buffers a captured layer's backward graph holds while it replays: the static output-gradient copy
(``_CudaGraphRunner.static_grad_outputs``, filled by ``cudagraph_output_grad.copy_(user_output_grad)``) and the
static input gradient it writes (``static_grad_inputs``, kept by ``bwd_cudagraph_buffer`` until the previous layer's
backward reads it); Megatron-LM core_v0.16.1 ``megatron/core/transformer/cuda_graphs.py``."""


def hidden_state_bytes(ctx: ActivationContext, hidden_size: int) -> float:
    """Bytes of one bf16 hidden-state tensor of a micro-batch on one GPU: ``b * s/cp * h``, ``/tp`` under sequence
    parallelism (the layer-boundary tensor Megatron passes between transformer layers)."""
    return BF16_BYTES * ctx.micro_batch * ctx.seq_len * hidden_size / (ctx.tp if ctx.sequence_parallel else 1)


def cuda_graph_buffer_bytes(hidden_bytes: Any, sets_in_flight: Any) -> Any:
    """Bytes CUDA graphs add to one pipeline rank (Megatron-core ``--cuda-graph-impl local``, per-layer capture):
    ``hidden_bytes`` is the layout's hidden state per set (0 without graphs, :func:`switch_buffer_bytes`); scalars
    or numpy arrays (the batch screen's columns), the same operations either way.

    Megatron-LM core_v0.16.1 ``megatron/core/transformer/cuda_graphs.py``: each captured layer replays with static
    input and output surfaces taken from ``TensorReusePool``, which "maintains strong references to all tensors
    created by this pool, so that they will never be freed by the memory allocator"; a layer's static output is the
    next layer's static input (``cudagraph_reuse_ref_count``), so inside a chunk they are the layer inputs the
    backward keeps anyway (already in ``activations``), but the first captured layer of every chunk copies its
    input (the embedding output or the received pipeline tensor, ``can_skip_replay_copy = False`` for a fresh pool
    buffer) into a static buffer: one more hidden state per (micro-batch, chunk) set in flight.  With pipeline
    parallelism ``CudaGraphManager`` makes a runner per micro-batch ("Create cudagraphs for every microbatch"), each
    with its own surfaces, so the copies scale with the sets in flight, not one per layer.  The backward replay
    adds :data:`CUDA_GRAPH_BACKWARD_SURFACES` hidden states.  The activations the graphs save live in the graphs'
    private pool (``torch.cuda.graph(pool=CudaGraphManager.global_mempool)``), captured in execution order so its
    high-water mark is the eager one, already in ``activations``.  Never negative: graphs never lower memory.
    """
    return hidden_bytes * (sets_in_flight + CUDA_GRAPH_BACKWARD_SURFACES)


EP_OVERLAP_TOKEN_COPIES = 2
"""Token buffers of the second micro-batch an overlapped MoE layer holds: its dispatched (permuted) tokens and the
expert output waiting for the combine all-to-all."""


def ep_overlap_buffer_bytes(model: ModelSpec, ctx: ActivationContext, overlapped: bool) -> float:
    """Bytes the expert-parallel all-to-all overlap adds to a rank holding MoE layers (the caller adds it only
    where the rank holds some).

    Megatron-core ``--overlap-moe-expert-parallel-comm`` (with ``--delay-wgrad-compute``) "overlaps All-to-All with
    computation by merging FWD-BWD passes of adjacent microbatches" (Megatron-LM core_v0.16.1
    ``megatron/core/transformer/moe/README.md``, EP Communication Overlap; ``combined_1f1b.py``): while one
    micro-batch's MoE layer runs its backward, the next micro-batch's forward MoE layer dispatches, so the token
    buffers of two MoE layers are alive at once instead of one: :data:`EP_OVERLAP_TOKEN_COPIES` buffers of
    ``b * s/cp * top_k`` routed rows of ``hidden_size`` bf16 elements (``/tp`` under sequence parallelism, as the
    dispatcher's input) more.  Zero for a dense model or without the overlap."""
    if not (overlapped and model.is_moe):
        return 0.0
    return EP_OVERLAP_TOKEN_COPIES * model.top_k * hidden_state_bytes(ctx, model.hidden_size)


def switch_buffer_bytes(model: ModelSpec, config: TrainingConfig, ctx: ActivationContext) -> tuple[float, float]:
    """(hidden-state bytes CUDA graphs copy per set in flight, 0 without graphs; expert-overlap bytes of a rank with
    MoE layers) of a layout, from its resolved switches (:func:`projection.switches.resolve_switches`)."""
    switches = resolve_switches(config, framework_profile(config.framework))
    hidden = hidden_state_bytes(ctx, model.hidden_size)
    return (hidden if switches.cuda_graphs else 0.0,
            ep_overlap_buffer_bytes(model, ctx, switches.overlapped("ep") and config.ep > 1))


def gathered_layer_params(p: LayerParams, dims: ParallelDims, dense_shard: Any, expert_shard: Any) -> float:
    """Parameters (elements) of one layer that a ZeRO-3 all-gather brings to a GPU: of its dense share (/ tp) and
    expert share (/ (ep x etp)), the part the other ``dense_shard`` / ``expert_shard`` shards hold."""
    return ((p.attention + p.mlp + p.shared_experts) / dims.tp * (1 - 1 / dense_shard)
            + p.experts / (dims.ep * dims.etp) * (1 - 1 / expert_shard))


def local_layer_params(p: LayerParams, dims: ParallelDims) -> float:
    """Parameters (elements) of one layer on one GPU of its pipeline rank: dense / tp, experts / (ep x etp)."""
    return (p.attention + p.mlp + p.shared_experts) / dims.tp + p.experts / (dims.ep * dims.etp)


def loss_bytes_per_logit(framework: str) -> float:
    """Bytes per logit the loss holds (logits and their gradient): the framework's memory trait, else its
    profile's (:mod:`projection.memory_frameworks`, :mod:`projection.framework`)."""
    return memory_traits(framework).loss_bytes_per_logit or framework_profile(framework).loss_bytes_per_logit


def stage_memory(model: ModelSpec, config: TrainingConfig, dims: ParallelDims, profile: DeviceProfile,
                 rank: int, tables: _LayerTables | None = None, *, scale_up_gpus: int = 8,
                 transpose_free: bool = False) -> StageMemory:
    """Peak memory of one GPU of pipeline rank ``rank`` (``scale_up_gpus``: GPUs of one NVLink/xGMI domain;
    ``transpose_free``: the chip keeps no per-tensor FP8 transpose, :func:`fp8_copy_bytes`).

    The readable one-rank reference; :func:`project_memory` runs the array form of every rank at once
    (:meth:`projection.memory_batch.MemoryBatcher.stages`), equal to it field by field.
    """
    tables = tables or _layer_tables(model, config)
    traits = memory_traits(config.framework)
    ctx = tables.ctx
    chunks = chunk_layers(model.num_layers, dims.pp, dims.vpp, dims.split)[rank]
    layers = _stage_layers(model.num_layers, dims.pp, dims.vpp, rank, dims.split)
    first, last = rank == 0, rank == dims.pp - 1
    params = stage_params(model, layers, dims.tp, dims.ep, dims.etp, dims.pp, first, last)
    weights, grads, optimizer, fp8 = _states(params, config, dims, traits, transpose_free)

    stage_layer_count = len(layers)
    total_chunk_bytes = 0.0
    position = 0
    prefix = tables.kept_prefix
    for chunk in chunks:
        if not chunk:
            continue
        full = recomputed_layers(config, chunk, stage_layer_count, position)
        total_chunk_bytes += prefix[chunk[-1] + 1] - prefix[chunk[0] + full] + full * tables.full_input
        position += len(chunk)
    in_flight = peak_in_flight_closed_form(effective_schedule(config), dims.pp, dims.vpp, dims.num_microbatches, rank)
    activations = in_flight * total_chunk_bytes / len(chunks)
    if first:
        activations += min(in_flight, dims.num_microbatches) * embedding_activation_bytes(model, ctx) / dims.vpp
    buffers = 0.0
    if last:
        buffers += output_activation_bytes(model, ctx, loss_bytes_per_logit(config.framework))  # logits, their gradient
    if config.recompute != "none" and layers:
        # What recompute dropped is rebuilt for one layer at a time while its backward runs:
        # the whole layer under full recompute, the dropped modules under selective.
        rebuilt = tables.kept if config.recompute == "full" else tables.rebuilt
        buffers += max(rebuilt[layer] for layer in layers)
    dense_shard, expert_shard = _shards(config, dims)
    if config.zero >= 3 and layers:
        table = layer_param_table(model)
        # Gathered bf16 weights of the current and the prefetched layer: the part other shards hold.
        buffers += 2 * BF16_BYTES * max(gathered_layer_params(table[layer], dims, dense_shard, expert_shard)
                                        for layer in layers)
    if config.finetune == "lora" and config.is_low_precision and layers:
        table = layer_param_table(model)
        # FP8 transpose of the running layer's frozen weights, made for its dgrad GEMMs (1 B per element).
        buffers += max(local_layer_params(table[layer], dims) for layer in layers)
    # (a dense model has no dispatch buffer whatever its layers: skip the scan)
    has_moe = model.is_moe and any(model.moe_layers[layer] for layer in layers)
    buffers += moe_dispatch_buffer_bytes(model, config, dims, has_moe, scale_up_gpus)
    graph_hidden, ep_overlap = switch_buffer_bytes(model, config, ctx)
    buffers += cuda_graph_buffer_bytes(graph_hidden, in_flight)
    buffers += ep_overlap if has_moe else 0.0
    if traits.caching_allocator:
        workspace = profile.memory_overhead_gib * GIB
        allocator = profile.memory_fragmentation * (activations + buffers)
    else:
        workspace = allocator = 0.0
    return StageMemory(
        rank=rank, layers=stage_layer_count, weights_bytes=weights, gradients_bytes=grads,
        optimizer_bytes=optimizer, fp8_copies_bytes=fp8, activations_bytes=activations, transient_bytes=buffers,
        workspace_bytes=workspace, allocator_bytes=allocator, microbatches_in_flight=in_flight / dims.vpp,
    )


def usable_capacity_bytes(hardware: HardwareSpec, config: TrainingConfig) -> float:
    """HBM the framework's allocator can hand out (all of it for PyTorch, the BFC share for XLA)."""
    return hardware.hbm_capacity_bytes * memory_traits(config.framework).usable_fraction
