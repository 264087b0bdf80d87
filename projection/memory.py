"""Peak memory per pipeline stage: weights, gradients, optimizer states, activations, overheads.

Bytes per parameter follow Megatron-LM mixed precision (``theoretical_memory_usage.py``):
16-bit weights (2 B), fp32 gradients (4 B, ``accumulate_allreduce_grads_in_fp32`` is forced
on with bf16), fp32 master weights and two Adam moments (12 B).  ZeRO levels shard the
optimizer (1), then the gradients (2), then the weights (3) over the data-parallel shard
group (dense weights: dp*cp, or fsdp_size; experts: the expert-DP group).  FP8 recipes keep
an FP8 weight copy and its transpose (Transformer Engine ``Float8Tensor``), 2 B per GEMM
weight.  Activations come from :mod:`projection.activations` times the (micro-batch, chunk)
sets the pipeline schedule holds in flight (:mod:`projection.pipeline`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

from projection.activations import (
    ActivationContext,
    embedding_activation_bytes,
    full_recompute_layer_bytes,
    layer_activation_bytes,
    output_activation_bytes,
)
from projection.device_profile import DeviceProfile
from projection.framework_profile import framework_profile
from projection.hardware import HardwareSpec
from projection.layout import ParallelDims, chunk_layers, effective_schedule, recomputed_layers
from projection.model_spec import ModelSpec
from projection.params import embedding_params, layer_param_table, output_params
from projection.pipeline import peak_in_flight_closed_form
from projection.training_config import TrainingConfig

GIB = 2**30
WEIGHT_BYTES = 2            # bf16/fp16 model weights
GRAD_BYTES = 4              # fp32 main gradients
OPTIMIZER_BYTES = 12        # fp32 master weights + Adam exp_avg + exp_avg_sq
FP8_COPY_BYTES = 2          # FP8 weight + transposed copy per GEMM weight
AT_RISK_MARGIN = 0.10       # Primus tuning agent memory_safety_margin default (HBM * (1 - 0.10))
DEEPEP_BUFFER_BYTES = 2 * GIB  # DeepEP NVL/RDMA buffers as configured by Megatron (num_sms/buffer size), approx.

Verdict = Literal["fits", "at risk", "out of memory"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StageMemory:
    """Peak memory of one pipeline rank, bytes."""

    rank: int
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    fp8_copies_bytes: float
    activations_bytes: float
    transient_bytes: float
    overhead_bytes: float
    microbatches_in_flight: float

    @property
    def total_bytes(self) -> float:
        """Sum of every term."""
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.fp8_copies_bytes
                + self.activations_bytes + self.transient_bytes + self.overhead_bytes)


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryResult:
    """Memory of every pipeline rank and the verdict against HBM."""

    stages: tuple[StageMemory, ...]
    capacity_bytes: float
    verdict: Verdict

    @property
    def peak(self) -> StageMemory:
        """The stage with the largest total."""
        return max(self.stages, key=lambda s: s.total_bytes)

    @property
    def peak_bytes(self) -> float:
        """Largest per-GPU total over stages."""
        return self.peak.total_bytes

    @property
    def headroom_fraction(self) -> float:
        """1 - peak / capacity (negative when out of memory)."""
        return 1.0 - self.peak_bytes / self.capacity_bytes


def activation_context(model: ModelSpec, config: TrainingConfig) -> ActivationContext:
    """The activation-memory settings of a layout."""
    modules = frozenset(config.recompute_modules) if config.recompute == "selective" else frozenset()
    return ActivationContext(
        seq_len=config.seq_len // config.cp,
        micro_batch=config.mbs,
        tp=config.tp,
        sequence_parallel=config.sequence_parallel and config.tp > 1,
        flash_attention=True,
        dropout=model.model_type == "gpt2",
        gemm_input_bytes=1 if config.is_low_precision else 2,
        recompute_modules=modules,
    )


def _stage_params(model: ModelSpec, layers: tuple[int, ...], dims: ParallelDims, first: bool, last: bool
                  ) -> tuple[float, float, float]:
    """Return (dense-sharded, expert-sharded, GEMM-weight) parameters held by one GPU of a stage."""
    return _stage_params_cached(model, layers, dims.tp, dims.ep, dims.etp, dims.pp, first, last)


@lru_cache(maxsize=8192)
def _stage_layers(num_layers: int, pp: int, vpp: int, rank: int) -> tuple[int, ...]:
    """Every layer index pipeline rank ``rank`` holds, over its chunks."""
    return tuple(layer for chunk in chunk_layers(num_layers, pp, vpp)[rank] for layer in chunk)


@lru_cache(maxsize=8192)
def _stage_params_cached(model: ModelSpec, layers: tuple[int, ...], tp: int, ep: int, etp: int, pp: int,
                         first: bool, last: bool) -> tuple[float, float, float]:
    dense = 0.0
    experts = 0.0
    table = layer_param_table(model)
    for layer in layers:
        p = table[layer]
        dense += (p.attention + p.mlp + p.shared_experts) / tp + p.replicated
        experts += p.experts / (ep * etp)
    gemm = dense + experts
    if first:
        dense += embedding_params(model) / tp
    if last:
        head = output_params(model) if not model.tie_embeddings or pp == 1 else (
            output_params(model) + model.vocab_size * model.hidden_size)
        dense += head / tp
        gemm += 0 if model.tie_embeddings and pp == 1 else model.vocab_size * model.hidden_size / tp
    return dense, experts, gemm


def _state_bytes(params: float, zero: int, shard: int) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes of ``params`` under a ZeRO level and shard group size."""
    weights = WEIGHT_BYTES * params / (shard if zero >= 3 else 1)
    grads = GRAD_BYTES * params / (shard if zero >= 2 else 1)
    optimizer = OPTIMIZER_BYTES * params / (shard if zero >= 1 else 1)
    return weights, grads, optimizer


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
    no_recompute = replace(ctx, recompute_modules=frozenset())
    by_kind: dict[tuple[bool, int], tuple[float, float]] = {}
    kept: list[float] = []
    rebuilt: list[float] = []
    for layer in range(model.num_layers):
        kind = (bool(model.moe_layers[layer]), model.attention_windows[layer] if model.attention_windows else 0)
        if kind not in by_kind:
            keep = layer_activation_bytes(model, layer, ctx)
            by_kind[kind] = (keep, layer_activation_bytes(model, layer, no_recompute) - keep)
        kept.append(by_kind[kind][0])
        rebuilt.append(by_kind[kind][1])
    prefix = [0.0]
    for value in kept:
        prefix.append(prefix[-1] + value)
    return _LayerTables(ctx=ctx, kept=tuple(kept), kept_prefix=tuple(prefix), rebuilt=tuple(rebuilt),
                        full_input=full_recompute_layer_bytes(model, ctx))


def stage_memory(model: ModelSpec, config: TrainingConfig, dims: ParallelDims, profile: DeviceProfile,
                 rank: int, tables: _LayerTables | None = None) -> StageMemory:
    """Peak memory of pipeline rank ``rank``."""
    tables = tables or _layer_tables(model, config)
    ctx = tables.ctx
    chunks = chunk_layers(model.num_layers, dims.pp, dims.vpp)[rank]
    layers = _stage_layers(model.num_layers, dims.pp, dims.vpp, rank)
    first, last = rank == 0, rank == dims.pp - 1
    dense, experts, gemm = _stage_params(model, layers, dims, first, last)
    dense_shard = config.fsdp_size or dims.dp * dims.cp
    expert_shard = max(1, min(dense_shard, dims.expert_dp)) if config.fsdp_size else dims.expert_dp
    w1, g1, o1 = _state_bytes(dense, config.zero, dense_shard)
    w2, g2, o2 = _state_bytes(experts, config.zero, expert_shard)
    if config.finetune == "lora":  # frozen base weights: no gradients or optimizer states (adapters are tiny)
        g1 = o1 = g2 = o2 = 0.0
    fp8 = 0.0
    if config.is_low_precision:  # FP8 copies shard like the weights they copy
        sharded = config.zero >= 3
        fp8 = FP8_COPY_BYTES * ((gemm - experts) / (dense_shard if sharded else 1)
                                + experts / (expert_shard if sharded else 1))

    stage_layer_count = len(layers)
    total_chunk_bytes = 0.0
    position = 0
    kept, prefix = tables.kept, tables.kept_prefix
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
    transient = 0.0
    if last:
        loss_bytes = framework_profile(config.framework).loss_bytes_per_logit
        transient += output_activation_bytes(model, ctx, loss_bytes)  # logits and their gradient during the loss
    if config.recompute != "none" and layers:
        # What recompute dropped is rebuilt for one layer at a time while its backward runs:
        # the whole layer under full recompute, the dropped modules under selective.
        rebuilt = kept if config.recompute == "full" else tables.rebuilt
        transient += max(rebuilt[layer] for layer in layers)
    if config.zero >= 3 and layers:
        table = layer_param_table(model)
        # Gathered weights of the current and prefetched layer: only the part other shards hold.
        biggest = max((table[layer].attention + table[layer].mlp + table[layer].shared_experts) / dims.tp
                      * (1 - 1 / dense_shard) + table[layer].experts / (dims.ep * dims.etp) * (1 - 1 / expert_shard)
                      for layer in layers)
        transient += 2 * WEIGHT_BYTES * biggest
    if model.is_moe and config.moe_dispatcher == "deepep":
        transient += DEEPEP_BUFFER_BYTES
    dynamic = activations + transient
    overhead = profile.memory_overhead_gib * GIB + profile.memory_fragmentation * dynamic
    return StageMemory(
        rank=rank, weights_bytes=w1 + w2, gradients_bytes=g1 + g2, optimizer_bytes=o1 + o2,
        fp8_copies_bytes=fp8, activations_bytes=activations, transient_bytes=transient,
        overhead_bytes=overhead, microbatches_in_flight=in_flight / dims.vpp,
    )


def memory_verdict(peak_bytes: float, capacity_bytes: float) -> Verdict:
    """Fits below (1 - margin) of HBM, at risk up to HBM, out of memory above."""
    if peak_bytes > capacity_bytes:
        return "out of memory"
    if peak_bytes > capacity_bytes * (1 - AT_RISK_MARGIN):
        return "at risk"
    return "fits"


def project_memory(model: ModelSpec, hardware: HardwareSpec, config: TrainingConfig, dims: ParallelDims,
                   profile: DeviceProfile) -> MemoryResult:
    """Memory of every pipeline rank; the verdict uses the largest."""
    ranks = range(dims.pp) if dims.pp <= 4 else sorted({0, 1, dims.pp // 2, dims.pp - 2, dims.pp - 1})
    tables = _layer_tables(model, config)
    stages = tuple(stage_memory(model, config, dims, profile, r, tables) for r in ranks)
    peak = max(s.total_bytes for s in stages)
    return MemoryResult(stages=stages, capacity_bytes=hardware.hbm_capacity_bytes,
                        verdict=memory_verdict(peak, hardware.hbm_capacity_bytes))
