"""The analytical projection of one training layout: step time, throughput, MFU, memory, breakdown.

``project`` is the single entry point: specs in, a frozen :class:`Projection` out.  It
builds per-layer costs (:mod:`projection.workload`), sums them into per-(rank, chunk)
forward/backward times with the exposed TP/CP/EP communication, runs the pipeline
schedule simulator (:mod:`projection.pipeline`), then adds the exposed data-parallel
gradient/parameter communication, the optimizer step and a fixed step overhead.

Iteration time = pipeline makespan + exposed DP comm + optimizer step + step overhead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache, reduce
from itertools import accumulate, repeat
from operator import add, itemgetter
from typing import TYPE_CHECKING, Literal

from projection import fast_paths
from projection.collectives import (
    NetworkParams,
    all_gather_s,
    all_reduce_s,
    network_params_from_hardware,
    p2p_s,
    place_group,
    reduce_scatter_s,
)
from projection.compute import DeviceRates, device_rates
from projection.device_profile import DeviceProfile, default_profile
from projection.errors import IllegalLayoutError
from projection.flops import FlopsFormula, model_flops_per_step
from projection.framework import framework_profile
from projection.framework_profile import FrameworkProfile
from projection.hardware import HardwareSpec
from projection.job import hardware_of
from projection.layout import ParallelDims, chunk_layers, effective_schedule, parallel_dims, recomputed_layers
from projection.legality import layout_violations
from projection.memory import MemoryResult, project_memory
from projection.model_spec import ModelSpec
from projection.params import layer_param_table
from projection.pipeline import StageTimes, simulate_pipeline
from projection.switches import FP32_GRAD_BYTES, TRITON_ATTENTION_SPEED, Switches, host_op_s, overlap_fraction, resolve_switches
from projection.training_config import Cluster, TrainingConfig
from projection.evidence import Novelty
from projection.uncertainty import job_band
from projection.workload import (CommGroups, LayerCost, embedding_cost, head_cost, layer_cost,
                                 selective_recompute_modules)

if TYPE_CHECKING:
    from projection.busiest_work import LayerWork

GRAD_REDUCE_BYTES = FP32_GRAD_BYTES  # fp32 gradient reduction (Megatron accumulate_allreduce_grads_in_fp32 with bf16);
                                     # a run's grad_reduce_in_fp32 or its framework's grad_reduce_bytes overrides it
PARAM_GATHER_BYTES = 2     # bf16 parameter all-gather (distributed optimizer / FSDP)
FP8_PARAM_GATHER_BYTES = 1  # FP8 primary weights (fp8_param_gather): Megatron-core allocates the param buffer of TE
                            # Float8Tensor parameters as torch.uint8 (NVIDIA/Megatron-LM @293e104
                            # megatron/core/distributed/distributed_data_parallel.py, _allocate_buffers_for_parameters)
ADAM_BYTES_PER_PARAM = 30  # Adam step: read param/grad/m/v fp32 (16 B), write param/m/v (12 B), bf16 copy (2 B)

Bottleneck = Literal["compute", "tp_comm", "cp_comm", "ep_comm", "pp_bubble", "dp_comm", "optimizer", "overhead"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepBreakdown:
    """Where one iteration's time goes on the critical pipeline rank, seconds."""

    compute_s: float
    tp_comm_s: float
    cp_comm_s: float
    ep_comm_s: float
    pp_bubble_s: float
    dp_comm_s: float
    optimizer_s: float
    overhead_s: float

    def as_dict(self) -> dict[str, float]:
        """Name -> seconds."""
        return {name: getattr(self, name) for name in self.__slots__}

    @property
    def bottleneck(self) -> Bottleneck:
        """The largest non-compute term when it exceeds 15% of the step, else compute."""
        parts = {k.removesuffix("_s"): v for k, v in self.as_dict().items()}
        total = sum(parts.values())
        worst = max((k for k in parts if k != "compute"), key=lambda k: parts[k])
        return worst if parts[worst] > 0.15 * total else "compute"  # type: ignore[return-value]


@dataclass(frozen=True, slots=True, kw_only=True)
class Projection:
    """Projected performance and memory of one layout."""

    model: str
    hardware: str
    num_gpus: int
    config: TrainingConfig
    dims: ParallelDims
    iteration_time_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    mfu: float
    flops_formula: str
    breakdown: StepBreakdown
    memory: MemoryResult
    bubble_fraction: float
    tokens_per_sec_per_gpu_low: float
    """Lower end of the 80% interval on throughput (:mod:`projection.uncertainty`), tokens/s/GPU."""
    tokens_per_sec_per_gpu_high: float
    """Upper end of the 80% interval on throughput, tokens/s/GPU."""
    iteration_time_s_low: float
    """Lower end of the 80% interval on iteration time, seconds."""
    iteration_time_s_high: float
    """Upper end of the 80% interval on iteration time, seconds."""
    switches: Switches | None = None
    """The run-time switches in effect: the config's, else its framework's defaults (projection.switches)."""
    band_novelty: tuple[Novelty, ...] = ()
    """Why the 80% interval is wider than its cell's: how the job lies outside the development evidence
    (:mod:`projection.evidence`); empty for a job inside it."""

    @property
    def band_reasons(self) -> tuple[str, ...]:
        """The sentences of :attr:`band_novelty` ("no development run on MI350X", ...)."""
        return tuple(n.text for n in self.band_novelty)


def _comm_groups(dims: ParallelDims, net) -> CommGroups:
    return CommGroups(
        tp=place_group(dims.tp, 1, net),
        cp=place_group(dims.cp, dims.tp, net),
        ep=place_group(dims.ep, dims.etp, net),
    )


_COSTS_CACHE: dict[tuple[object, ...], dict[int, LayerCost]] = {}
_COSTS_CACHE_SIZE = 4096


def _layer_costs(model: ModelSpec, config: TrainingConfig, dims: ParallelDims, rates, net, groups
                 ) -> dict[int, LayerCost]:
    """Cost of every layer, computed once per distinct layer kind (MoE flag, window).

    Memoised on exactly what :func:`projection.workload.layer_cost` reads, so layouts that differ
    only in PP, VPP, DP, ZeRO, recompute or schedule (most of a search) share one computation.
    The returned mapping is shared: callers must not mutate it.
    """
    key = (model, config.seq_len, config.mbs, config.sequence_parallel, config.precision, config.moe_dispatcher,
           config.moe_routing, config.moe_capacity_factor, config.framework, config.packed_document_tokens,
           dims.tp, dims.cp, dims.ep, dims.etp, rates, net, groups)
    cached = _COSTS_CACHE.get(key)
    if cached is None:
        if len(_COSTS_CACHE) >= _COSTS_CACHE_SIZE:
            _COSTS_CACHE.clear()
        cached = _COSTS_CACHE[key] = _compute_layer_costs(model, config, dims, rates, net, groups)
    return cached


def _compute_layer_costs(model: ModelSpec, config: TrainingConfig, dims: ParallelDims, rates, net, groups
                         ) -> dict[int, LayerCost]:
    by_kind: dict[tuple[bool, int], LayerCost] = {}
    n = model.num_layers
    windows = model.attention_windows[:n] if model.attention_windows else repeat(0, n)
    kinds = list(zip(map(bool, model.moe_layers[:n]), windows, strict=True))
    for layer, kind in enumerate(kinds):          # the first layer of each kind computes its cost
        if kind not in by_kind:
            by_kind[kind] = layer_cost(model, layer, config, dims, rates, net, groups)
    return dict(enumerate(map(by_kind.__getitem__, kinds)))


def _exposed(comm_s: float, overlap_fraction: float) -> float:
    return comm_s * (1.0 - overlap_fraction)


def _hidden_up_to(comm_s: float, overlap_fraction: float, window_s: float) -> float:
    """Exposed seconds of a communication that overlaps ``overlap_fraction`` of itself with compute, but never more
    than the ``window_s`` of compute it runs beside: max(comm * (1 - f), comm - window).  With f = 0 (the switch
    off) it is the whole communication."""
    return max(_exposed(comm_s, overlap_fraction), comm_s - window_s)


VECTOR_MIN_CHUNKS = 32   # pp * vpp from which the numpy stage times beat the loop (llama3-70b here: 58 vs 61 us at 32,
                         # 72 vs 97 us at 80, slower below ~16; issue 14)


def _layer_terms(config: TrainingConfig, profile: DeviceProfile, framework: FrameworkProfile,
                 costs: Mapping[int, LayerCost], num_layers: int, switches: Switches
                 ) -> tuple[list[tuple[float, ...]], list[int]]:
    """(fwd, bwd-input, bwd-weight, selective recompute, compute, tp, cp, ep) of each distinct cost, and per layer
    the index of its cost's terms.

    TP, CP and EP communication hide under compute only when the run overlaps them (``comm_overlap``,
    :func:`projection.switches.overlap_fraction`); off, they run between the layer's kernels, fully exposed.  When
    overlapped, each hides at most under the compute it runs beside (:func:`_hidden_up_to`): CP's ring exchange under
    the attention, TP collectives (userbuffers GEMM overlap) and the EP token exchange under the layer's compute.
    """
    tp_overlap = overlap_fraction(switches, "tp", profile.tp_overlap_fraction if framework.tp_overlap_fraction is None
                                  else framework.tp_overlap_fraction)
    cp_overlap = overlap_fraction(switches, "cp", profile.cp_overlap_fraction)
    ep_overlap = overlap_fraction(switches, "ep", profile.ep_overlap_fraction)
    recomputed_modules = selective_recompute_modules(config)
    lora = config.finetune == "lora"  # frozen base weights: no weight gradients
    distinct: list[tuple[float, ...]] = []
    position: dict[int, int] = {}
    values = list(costs.values())
    for cost in dict(zip(map(id, values), values, strict=True)).values():    # distinct costs, first-seen order
        tp = _hidden_up_to(cost.tp_comm_s, tp_overlap, cost.fwd_s)
        cp = _hidden_up_to(cost.cp_comm_s, cp_overlap, cost.attention_fwd_s)
        ep = _hidden_up_to(cost.ep_comm_s, ep_overlap, cost.fwd_s)
        comm = tp + cp + ep
        weight_grad = 0.0 if lora else cost.bwd_weight_s
        selective = cost.recompute_s(recomputed_modules)
        position[id(cost)] = len(distinct)
        distinct.append((cost.fwd_s + comm, cost.bwd_input_s + comm, weight_grad, selective,
                         cost.fwd_s + cost.bwd_input_s + weight_grad, tp, cp, ep))
    return distinct, list(map(position.__getitem__, map(id, map(costs.__getitem__, range(num_layers)))))


def _stage_times(model: ModelSpec, config: TrainingConfig, dims: ParallelDims, profile: DeviceProfile,
                 framework: FrameworkProfile, costs: Mapping[int, LayerCost], head: tuple[float, float, float],
                 embed: tuple[float, float], vector: bool | None = None, switches: Switches | None = None
                 ) -> tuple[list[StageTimes], dict[str, list[float]]]:
    """Per-rank, per-chunk times, and per-rank component sums (per micro-batch) for the breakdown.

    Chunks are contiguous layer ranges and recomputed layers a prefix of each chunk, so every
    chunk sum is a difference of prefix sums over per-layer terms.  Without full recompute and
    with many chunks the differences and sums are numpy over every (rank, chunk) at once
    (:func:`_stage_times_vector`, the same IEEE operations in the same order; ``vector`` forces
    either path, tests/projection/test_engine_stage_times.py checks they agree bit for bit).
    """
    switches = switches or resolve_switches(config, framework)
    distinct, kinds = _layer_terms(config, profile, framework, costs, model.num_layers, switches)
    if vector is None:
        vector = config.recompute != "full" and dims.pp * dims.vpp >= VECTOR_MIN_CHUNKS
    if vector and config.recompute != "full":
        return _stage_times_vector(model, config, dims, distinct, kinds, head, embed)
    columns = zip(*map(distinct.__getitem__, kinds), strict=True)
    p_f, p_bi, p_bw, p_sel, p_comp, p_tp, p_cp, p_ep = (list(accumulate(c, initial=0.0)) for c in columns)

    chunks_by_rank = chunk_layers(model.num_layers, dims.pp, dims.vpp, dims.split)
    zbv = effective_schedule(config) == "zbv"
    head_rank, head_chunk = (0, 0) if zbv else (dims.pp - 1, dims.vpp - 1)
    rows: list[tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]] = []
    parts: dict[str, list[float]] = {"compute": [], "tp": [], "cp": [], "ep": []}
    for rank, chunks in enumerate(chunks_by_rank):
        stage_layer_count = sum(len(c) for c in chunks)
        fwd, b_in, b_w = [], [], []
        compute = tp_sum = cp_sum = ep_sum = 0.0
        position = 0
        for chunk_index, chunk in enumerate(chunks):
            full = recomputed_layers(config, chunk, stage_layer_count, position)
            position += len(chunk)
            lo = chunk[0] if chunk else 0
            mid, hi = lo + full, lo + len(chunk)
            f = p_f[hi] - p_f[lo]
            bw = p_bw[hi] - p_bw[lo]
            if full:
                recompute_full = p_f[mid] - p_f[lo]
                selective = p_sel[hi] - p_sel[mid]
                bi = p_bi[hi] - p_bi[lo] + recompute_full + selective
                tp_full, cp_full, ep_full = p_tp[mid] - p_tp[lo], p_cp[mid] - p_cp[lo], p_ep[mid] - p_ep[lo]
                compute += p_comp[hi] - p_comp[lo] + (recompute_full - tp_full - cp_full - ep_full) + selective
                tp_sum += p_tp[hi] - p_tp[lo] + 0.5 * tp_full  # a recomputed layer re-issues its forward comm
                cp_sum += p_cp[hi] - p_cp[lo] + 0.5 * cp_full
                ep_sum += p_ep[hi] - p_ep[lo] + 0.5 * ep_full
            else:
                # no full recompute: the terms above with every *_full term +0.0, dropped (a difference of
                # these prefix sums, which start at +0.0, is never -0.0, so adding +0.0 changes no bit)
                selective = p_sel[hi] - p_sel[lo]
                bi = p_bi[hi] - p_bi[lo] + selective
                compute += p_comp[hi] - p_comp[lo] + selective
                tp_sum += p_tp[hi] - p_tp[lo]
                cp_sum += p_cp[hi] - p_cp[lo]
                ep_sum += p_ep[hi] - p_ep[lo]
            if rank == 0 and chunk_index == 0:
                f, bi = f + embed[0], bi + embed[1]
                compute += embed[0] + embed[1]
            if rank == head_rank and chunk_index == head_chunk:
                f, bi, bw = f + head[0], bi + head[1], bw + head[2]
                compute += sum(head)
            fwd.append(f)
            b_in.append(bi)
            b_w.append(bw)
        rows.append((tuple(fwd), tuple(b_in), tuple(b_w)))
        parts["compute"].append(compute)
        parts["tp"].append(2 * tp_sum)
        parts["cp"].append(2 * cp_sum)
        parts["ep"].append(2 * ep_sum)
    every = [x for row in rows for times in row for x in times]
    checked = min(every) >= 0.0 and math.isfinite(sum(every))      # StageTimes' checks, on all at once
    build = StageTimes.trusted if checked else StageTimes          # (a failing value: its own error)
    return [build(forward_s=f, backward_input_s=b, backward_weight_s=w) for f, b, w in rows], parts


def _stage_times_vector(model: ModelSpec, config: TrainingConfig, dims: ParallelDims,
                        distinct: list[tuple[float, ...]], kinds: list[int], head: tuple[float, float, float],
                        embed: tuple[float, float]) -> tuple[list[StageTimes], dict[str, list[float]]]:
    """:func:`_stage_times` without full recompute, numpy over all (rank, chunk): the loop's operations, in order.

    Prefix sums: a cumulative sum from an explicit 0.0 (sequential, as ``accumulate(..., initial=0.0)``);
    chunk terms: differences at each chunk's bounds; per-rank sums: added chunk by chunk, the embedding
    and the LM head right after their chunk, as the loop adds them.
    """
    import numpy as np      # here: a projection of few chunks (a CLI `project`) does not load numpy

    pp, vpp = dims.pp, dims.vpp
    table = np.zeros((8, model.num_layers + 1))
    table[:, 1:] = np.array(distinct)[np.array(kinds)].T
    prefix = np.cumsum(table, axis=1)
    chunks_by_rank = chunk_layers(model.num_layers, pp, vpp, dims.split)
    lo = np.array([[chunk[0] if chunk else 0 for chunk in chunks] for chunks in chunks_by_rank], dtype=np.int64)
    hi = lo + np.array([[len(chunk) for chunk in chunks] for chunks in chunks_by_rank], dtype=np.int64)
    d_f, d_bi, d_bw, d_sel, d_comp, d_tp, d_cp, d_ep = prefix[:, hi] - prefix[:, lo]   # each (pp, vpp)
    f, bw = d_f, d_bw
    bi = d_bi + d_sel
    compute_terms = d_comp + d_sel
    zbv = effective_schedule(config) == "zbv"
    head_rank, head_chunk = (0, 0) if zbv else (pp - 1, vpp - 1)
    embed_sum, head_sum = embed[0] + embed[1], sum(head)
    f[0, 0] += embed[0]
    bi[0, 0] += embed[1]
    f[head_rank, head_chunk] += head[0]
    bi[head_rank, head_chunk] += head[1]
    bw[head_rank, head_chunk] += head[2]
    # per-rank sums, chunk by chunk from 0.0 (the embedding and the head right after their chunk)
    sums = np.zeros((4, pp))
    chunk_terms = np.stack([compute_terms, d_tp, d_cp, d_ep])      # (4, pp, vpp)
    for c in range(vpp):
        sums += chunk_terms[:, :, c]
        if c == 0:
            sums[0, 0] += embed_sum
        if c == head_chunk:
            sums[0, head_rank] += head_sum
    every = np.concatenate([f, bi, bw])
    checked = bool(every.min() >= 0.0) and math.isfinite(every.sum())    # StageTimes' checks, on all at once
    build = StageTimes.trusted if checked else StageTimes                # (a failing value: its own error)
    stages = [build(forward_s=tuple(a), backward_input_s=tuple(b), backward_weight_s=tuple(c))
              for a, b, c in zip(f.tolist(), bi.tolist(), bw.tolist(), strict=True)]
    compute, tp_sum, cp_sum, ep_sum = sums.tolist()
    return stages, {"compute": compute, "tp": [2 * x for x in tp_sum], "cp": [2 * x for x in cp_sum],
                    "ep": [2 * x for x in ep_sum]}


@lru_cache(maxsize=4096)
def _layer_params_per_gpu(model: ModelSpec, tp: int, ep: int, etp: int) -> tuple[float, float]:
    """(dense, expert) elements of all decoder layers one GPU of a full pipeline would hold."""
    table = layer_param_table(model)
    terms = {id(p): ((p.attention + p.mlp + p.shared_experts) / tp + p.replicated, p.experts / (ep * etp))
             for p in dict(zip(map(id, table), table, strict=True)).values()}   # per distinct LayerParams
    per_layer = list(map(terms.__getitem__, map(id, table)))
    # still added layer by layer, in order, from 0.0 (reduce: the loop's additions, in C)
    return reduce(add, map(itemgetter(0), per_layer), 0.0), reduce(add, map(itemgetter(1), per_layer), 0.0)


def _bucketed(collective, total_bytes: float, bucket_bytes: float, group, net) -> float:
    """Time of ``total_bytes`` sent as consecutive collectives of ``bucket_bytes`` each (latency per bucket)."""
    if total_bytes <= bucket_bytes:
        return collective(total_bytes, group, net)
    return total_bytes / bucket_bytes * collective(bucket_bytes, group, net)


def _blocking_p2p(stages: list[StageTimes], p2p: float) -> list[StageTimes]:
    """Stage times when pipeline sends and receives are not overlapped (``comm_overlap`` without ``pp``): each
    chunk's forward waits for its activation send and each backward for its gradient send, ``p2p`` seconds each
    (Megatron-core ``p2p_communication.py``: without ``overlap_p2p_comm`` the send/recv pair is issued and waited
    on between the chunk's compute; with it the next chunk computes while they are in flight).  The simulator's
    own ``p2p_s`` stays the latency on the dependency path in both cases."""
    return [StageTimes(forward_s=tuple(f + p2p for f in s.forward_s),
                       backward_input_s=tuple(b + p2p for b in s.backward_input_s),
                       backward_weight_s=s.backward_weight_s) for s in stages]


def attention_backend_speed(switches: Switches) -> float:
    """Throughput of the run's attention kernel relative to the framework's fused kernel: TRITON_ATTENTION_SPEED for
    a Triton flash kernel, 1 otherwise (unfused attention is priced from its passes, not a ratio)."""
    return TRITON_ATTENTION_SPEED if switches.attention_backend == "triton" else 1.0


def _dp_comm(model: ModelSpec, config: TrainingConfig, dims: ParallelDims, net, framework: FrameworkProfile) -> float:
    """Total gradient/parameter communication of one step per GPU (before overlap), seconds.

    Collectives are issued in the framework's buckets (Megatron DDP: max(40M, 1M*dp) elements;
    FSDP: one transformer layer; DeepSpeed ZeRO-3: its prefetch/reduce bucket sizes), so each
    bucket pays the collective's latency.
    """
    return sum(_dp_comm_parts(model, config, dims, net, framework))


def _dp_comm_parts(model: ModelSpec, config: TrainingConfig, dims: ParallelDims, net,
                   framework: FrameworkProfile) -> tuple[float, float, float]:
    """:func:`_dp_comm` in three parts, seconds per GPU and step: (ZeRO-3 parameter all-gathers, every other DP
    collective, host time of per-rank list handling).

    The third is 0 unless ``framework.zero3_list_collectives``: each ZeRO-3 collective is then issued per weight
    matrix (:func:`_zero3_tensors`) with a tensor list of one chunk per rank, and the process group copies each
    chunk with its own op (``host_launch_s`` each; not a bandwidth, so ``dp_comm_efficiency`` does not scale it).
    """
    if (dims.dp * dims.cp == 1 and dims.expert_dp == 1) or config.finetune == "lora":
        return 0.0, 0.0, 0.0
    layers_per_rank = model.num_layers / dims.pp
    dense, expert = _layer_params_per_gpu(model, dims.tp, dims.ep, dims.etp)
    layer_params = (dense + expert) / model.num_layers  # mean per-layer elements held by one GPU
    scale = layers_per_rank / model.num_layers
    dense, expert = dense * scale, expert * scale
    embedding = model.vocab_size * model.hidden_size / dims.tp / max(1, dims.pp // 2 + 1)
    layer_dense = dense
    dense += embedding
    dense_group = place_group(config.fsdp_size or dims.dp * dims.cp, dims.tp, net)
    expert_group = place_group(dims.expert_dp, dims.ep * dims.etp, net)
    grad_bucket = framework.grad_bucket_elements or layer_params
    grad_bucket = max(grad_bucket, framework.grad_bucket_elements_per_dp_rank * dims.dp)
    fsdp_bucket = framework.fsdp_bucket_elements or layer_params
    grad_bytes = resolve_switches(config, framework).grad_reduce_bytes     # grad_reduce_in_fp32, else the framework's
    # FP8 primary weights: the decoder layers' weights gather as FP8 (norms are a negligible share), the
    # embedding / LM head stay bf16 (Transformer Engine quantises only its own GEMM modules).
    fp8_params = framework.keeps_fp8_primary_weights(config.precision)
    dense_gather = ((FP8_PARAM_GATHER_BYTES * layer_dense + PARAM_GATHER_BYTES * embedding) / dense
                    if fp8_params and dense > 0 else PARAM_GATHER_BYTES)
    expert_gather = FP8_PARAM_GATHER_BYTES if fp8_params else PARAM_GATHER_BYTES
    total = gathered = host = 0.0
    for params, group, gather_bytes in ((dense, dense_group, dense_gather), (expert, expert_group, expert_gather)):
        if group.size == 1 or params == 0:
            continue
        if config.zero == 0:
            total += _bucketed(all_reduce_s, grad_bytes * params, grad_bytes * grad_bucket, group, net)
        elif config.zero in (1, 2):
            total += _bucketed(reduce_scatter_s, grad_bytes * params, grad_bytes * grad_bucket,
                               group, net)
            total += _bucketed(all_gather_s, gather_bytes * params, gather_bytes * grad_bucket,
                               group, net)
        else:
            gathers = 2 + (config.recompute == "full" and framework.recompute_regathers_params)
            gathered += dims.num_microbatches * gathers * _bucketed(
                all_gather_s, gather_bytes * params, gather_bytes * fsdp_bucket, group, net)
            if framework.zero3_list_collectives and group is dense_group:
                host += (dims.num_microbatches * (gathers + 1) * _zero3_tensors(model, layers_per_rank)
                         * group.size * framework.host_launch_s)
            total += dims.num_microbatches * _bucketed(reduce_scatter_s, grad_bytes * params,
                                                       grad_bytes * grad_bucket, group, net)
    return gathered, total, host


def _dp_exposure(model: ModelSpec, config: TrainingConfig, dims: ParallelDims, net, framework: FrameworkProfile,
                 profile: DeviceProfile, switches: Switches) -> tuple[float, float, float]:
    """The step's DP communication as :func:`project` exposes it, seconds per GPU and step: (blocking, hideable,
    overlap fraction).  ``blocking`` runs between the compute kernels whatever the overlap (a framework whose ZeRO-3
    parameter all-gathers block the host, ``FrameworkProfile.zero3_gathers_block_host``, runs them and the host
    work around them there); ``hideable`` may hide under compute, up to ``overlap`` of itself (0: not overlapped)."""
    gathers_s, rest_s, host_s = _dp_comm_parts(model, config, dims, net, framework)
    gathers_s, rest_s = gathers_s / framework.dp_comm_efficiency, rest_s / framework.dp_comm_efficiency
    blocking = gathers_s + host_s if framework.zero3_gathers_block_host else 0.0
    hideable = gathers_s + rest_s + host_s - blocking
    overlap = overlap_fraction(switches, "dp", profile.dp_overlap_fraction if framework.dp_overlap_fraction is None
                               else framework.dp_overlap_fraction)
    return blocking, hideable, overlap


def fsdp_exposed_floor(model: ModelSpec, cluster: Cluster, config: TrainingConfig, *,
                       hardware: HardwareSpec | None = None, profile: DeviceProfile | None = None,
                       framework: FrameworkProfile | None = None) -> tuple[float, float]:
    """Lower bounds of a ZeRO-3 (FSDP) layout's exposed DP communication, seconds per micro-batch: (what is exposed
    at least beside the pipeline, what the step takes at least with it); (0, 0) below ZeRO 3.

    :func:`project` exposes ``blocking + max(hideable * (1 - overlap), hideable - window)`` (``blocking +
    hideable`` when not overlapped) with, under ZeRO 3, the window the busiest rank's work, which the pipeline
    makespan is at least: so at least ``blocking + hideable * (1 - overlap)`` beside the makespan, and the makespan
    plus the exposed part at least ``blocking + hideable``.  Under ZeRO 3 every DP collective is issued once per
    micro-batch (:func:`_dp_comm_parts`), so both are per micro-batch (computed with one micro-batch); below ZeRO 3
    they are small next to the step and left out (0 is a lower bound)."""
    if config.zero < 3:
        return 0.0, 0.0
    hardware = hardware_of(cluster, hardware)
    profile = profile or default_profile(hardware)
    framework = framework or framework_profile(config.framework)
    dims = replace(parallel_dims(config, cluster), num_microbatches=1)
    blocking, hideable, overlap = _dp_exposure(model, config, dims, network_for(hardware, cluster, profile),
                                               framework, profile, resolve_switches(config, framework))
    return blocking + hideable * (1.0 - overlap), blocking + hideable


def _zero3_tensors(model: ModelSpec, layers: float) -> float:
    """Weight matrices one GPU's ZeRO-3 collectives move one by one: per decoder layer the fused QKV and output
    projections (Megatron's ParallelAttention, the code DeepSpeed ZeRO-3 ran under in Narayanan et al. SC21) and
    2 (3 gated) MLP matrices, plus the word embedding.  Biases and norms (< 1e5 elements) stay out: ZeRO-3 keeps
    parameters under ``stage3_param_persistence_threshold`` (default 1e5) whole on every rank."""
    return layers * (2 + (3 if model.gated_mlp else 2)) + 1.0


def _dp_window_microbatches(dims: ParallelDims, schedule: str) -> float:
    """Micro-batches of one rank's work (forward + backward) that DDP / distributed-optimizer comm can hide under.

    Without virtual chunks the gradient buckets are reduced during the last micro-batch's backward and the
    parameters gathered during the first one's forward: 1.  With the interleaved schedule Megatron-core
    launches a model chunk's gradient reduction as soon as that chunk's last micro-batch backward is done
    (NVIDIA/Megatron-LM megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving:
    ``backward_step_helper_postprocess`` calls ``config.grad_sync_func[grad_sync_chunk_id]`` when
    ``is_last_microbatch_for_model_chunk``), and a chunk's parameter all-gather when the previous chunk's
    first micro-batch forward starts (``param_sync_func`` in ``forward_step_helper_preprocess``).  The last
    group of ``g = min(pp, m)`` micro-batches runs chunk by chunk, so after the first chunk's last backward
    ``(vpp - 1) * g`` chunk-steps of ``1 / vpp`` micro-batch each remain (mirror image for the forward):
    ``(1 + (vpp - 1) * g) / vpp`` micro-batches.
    """
    if schedule != "interleaved" or dims.vpp <= 1:
        return 1.0
    group = min(dims.pp, dims.num_microbatches)
    return min(float(dims.num_microbatches), (1 + (dims.vpp - 1) * group) / dims.vpp)


def _optimizer_s(model: ModelSpec, config: TrainingConfig, dims: ParallelDims, hardware: HardwareSpec,
                 profile: DeviceProfile) -> float:
    if config.finetune == "lora":
        return 0.0  # adapters only: negligible next to the frozen model
    dense, expert = _layer_params_per_gpu(model, dims.tp, dims.ep, dims.etp)
    dense = dense / dims.pp + model.vocab_size * model.hidden_size / dims.tp
    expert /= dims.pp
    if config.zero >= 1:
        dense /= config.fsdp_size or dims.dp * dims.cp
        expert /= dims.expert_dp
    bandwidth = hardware.hbm_bandwidth_bytes_per_s * profile.optimizer_memory_efficiency
    return ADAM_BYTES_PER_PARAM * (dense + expert) / bandwidth


def network_for(hardware: HardwareSpec, cluster: Cluster, profile: DeviceProfile) -> NetworkParams:
    """The collective model's view of a cluster: catalog links, cluster overrides, profile efficiencies."""
    return network_params_from_hardware(
        hardware, gpus_per_node=cluster.gpus_per_node, nics_per_node=cluster.nics_per_node,
        nic_gbit_per_s=cluster.nic_gbps, scale_up_domain_gpus=cluster.nvlink_domain,
        scale_up_efficiency=profile.scale_up_efficiency, scale_out_efficiency=profile.scale_out_efficiency,
        scale_up_latency_s=profile.scale_up_latency_s, scale_out_latency_s=profile.scale_out_latency_s,
    )


# Prepared projections by exact inputs: a layout projected again (agent trials, exports) reuses its stage times
# (shared objects: callers must not mutate them). Off with projection.fast_paths.disabled().
_PREPARED_CACHE: dict[tuple[object, ...], _Prepared] = {}
_PREPARED_CACHE_SIZE = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedSpecs:
    """The specs one layout's costs are computed from, resolved: GPU, device profile, framework, parallel sizes,
    device rates and network (shared by the engine's work inputs and bench.analytic.AnalyticLayout)."""

    hardware: HardwareSpec
    profile: DeviceProfile
    framework: FrameworkProfile
    dims: ParallelDims
    rates: DeviceRates
    net: NetworkParams


@dataclass(frozen=True, slots=True, kw_only=True)
class _WorkInputs(ResolvedSpecs):
    """What a layout's per-micro-batch work is built from: resolved specs, per-layer costs, head and embedding."""

    switches: Switches
    costs: Mapping[int, LayerCost]
    head: tuple[float, float, float]
    embed: tuple[float, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Prepared(_WorkInputs):
    """Everything of a projection that comes before the pipeline simulation."""

    stages: list[StageTimes]
    parts: dict[str, list[float]]


def _work_inputs(model: ModelSpec, cluster: Cluster, config: TrainingConfig, hardware: HardwareSpec | None,
                 profile: DeviceProfile | None, framework: FrameworkProfile | None,
                 layer_costs: Mapping[int, LayerCost] | None) -> _WorkInputs:
    hardware = hardware_of(cluster, hardware)
    profile = profile or default_profile(hardware)
    dims = parallel_dims(config, cluster)
    framework = framework or framework_profile(config.framework)
    switches = resolve_switches(config, framework)
    rates = device_rates(hardware, profile, config.precision, framework.compute_efficiency,
                         host_op_s(framework.host_launch_s, cluster.host_op_s),
                         framework.attention_speed(hardware.family) * attention_backend_speed(switches),
                         framework.eager_elementwise and not switches.compile,
                         unfused_attention=switches.attention_backend == "unfused", cuda_graphs=switches.cuda_graphs)
    net = network_for(hardware, cluster, profile)
    # measured-mode hook (bench/restore.py)
    costs = (dict(layer_costs) if layer_costs is not None
             else _layer_costs(model, config, dims, rates, net, _comm_groups(dims, net)))
    return _WorkInputs(hardware=hardware, profile=profile, framework=framework, dims=dims, rates=rates, net=net,
                       switches=switches, costs=costs, head=head_cost(model, config, dims, rates),
                       embed=embedding_cost(model, config, dims, rates))


def _prepare(model: ModelSpec, cluster: Cluster, config: TrainingConfig, hardware: HardwareSpec | None,
             profile: DeviceProfile | None, framework: FrameworkProfile | None, check: bool,
             layer_costs: Mapping[int, LayerCost] | None) -> _Prepared:
    if check:
        reasons = layout_violations(model, hardware_of(cluster, hardware), cluster, config)
        if reasons:
            raise IllegalLayoutError(reasons)
    key = None
    if layer_costs is None and fast_paths.enabled():   # memo on exact inputs (all frozen); issue 14
        key = (model, cluster, config, hardware, profile, framework)
        cached = _PREPARED_CACHE.get(key)
        if cached is not None:
            return cached
    w = _work_inputs(model, cluster, config, hardware, profile, framework, layer_costs)
    stages, parts = _stage_times(model, config, w.dims, w.profile, w.framework, w.costs, w.head, w.embed,
                                 switches=w.switches)
    prepared = _Prepared(hardware=w.hardware, profile=w.profile, framework=w.framework, dims=w.dims, rates=w.rates,
                         net=w.net, switches=w.switches, costs=w.costs, head=w.head, embed=w.embed, stages=stages,
                         parts=parts)
    if key is not None:
        if len(_PREPARED_CACHE) >= _PREPARED_CACHE_SIZE:
            _PREPARED_CACHE.clear()
        _PREPARED_CACHE[key] = prepared
    return prepared


def work_inputs(model: ModelSpec, cluster: Cluster, config: TrainingConfig, *, hardware: HardwareSpec | None = None,
                profile: DeviceProfile | None = None, framework: FrameworkProfile | None = None) -> _WorkInputs:
    """What :func:`layer_work` builds a layout's per-layer terms from (specs, switches in effect, per-layer costs,
    head and embedding), for a caller that shares it between layouts: it reads the config's per-micro-batch work
    fields and the switches in effect (:func:`projection.switches.resolve_switches`), not its recompute or
    pipeline beyond what those switches read (the search builds it once per distinct such key)."""
    return _work_inputs(model, cluster, config, hardware, profile, framework, None)


def layer_work(model: ModelSpec, cluster: Cluster, config: TrainingConfig, *, hardware: HardwareSpec | None = None,
               profile: DeviceProfile | None = None, framework: FrameworkProfile | None = None,
               inputs: _WorkInputs | None = None) -> LayerWork:
    """Per-layer work of one micro-batch of a layout (:class:`projection.busiest_work.LayerWork`): the terms
    :func:`_stage_times` sums.  Reads neither the pipeline (PP, VPP, split, schedule) nor DP, ZeRO or gbs.

    ``inputs``: the layout's :func:`work_inputs` when the caller has them (built for a layout with the same
    per-micro-batch work fields and switches in effect); of the config itself only the selective recompute
    modules and the fine-tuning mode are then read."""
    from projection.busiest_work import layer_work as from_terms   # numpy: only where a bound is asked for

    w = inputs if inputs is not None else _work_inputs(model, cluster, config, hardware, profile, framework, None)
    distinct, kinds = _layer_terms(config, w.profile, w.framework, w.costs, model.num_layers, w.switches)
    return from_terms(distinct, kinds, w.head, w.embed)


def iteration_time_lower_bound(model: ModelSpec, cluster: Cluster, config: TrainingConfig, *,
                               hardware: HardwareSpec | None = None, profile: DeviceProfile | None = None,
                               framework: FrameworkProfile | None = None) -> float:
    """A lower bound of :func:`project`'s iteration time, seconds, at a fraction of its cost.

    The pipeline makespan is at least, over the ranks, a rank's work plus the fill before its first op and (where
    backward and weight gradient run as one op) the drain after its last (no p2p, no other bubble;
    :func:`projection.busiest_work.makespan_floor`, the array form the search runs over many layouts), and exposed
    DP communication is at least zero, under ZeRO 3 at least :func:`fsdp_exposed_floor` (beside the makespan, and
    with it); optimizer and step overhead are exact.  Search uses it to skip layouts that cannot reach the current
    top-k.  Assumes a legal layout.
    """
    from projection.busiest_work import makespan_floor, stage_layers

    hardware = hardware_of(cluster, hardware)
    profile = profile or default_profile(hardware)
    dims = parallel_dims(config, cluster)
    work = layer_work(model, cluster, config, hardware=hardware, profile=profile, framework=framework)
    m = dims.num_microbatches
    makespan = float(makespan_floor([work], [0], [stage_layers(model.num_layers, config, dims)], [0], [m])[0])
    floor, alone = fsdp_exposed_floor(model, cluster, config, hardware=hardware, profile=profile, framework=framework)
    return (max(makespan + m * floor, m * alone) + _optimizer_s(model, config, dims, hardware, profile)
            + profile.step_overhead_s)


def project(model: ModelSpec, cluster: Cluster, config: TrainingConfig, *, hardware: HardwareSpec | None = None,
            profile: DeviceProfile | None = None, framework: FrameworkProfile | None = None,
            flops_formula: FlopsFormula = "6nd", check: bool = True,
            layer_costs: Mapping[int, LayerCost] | None = None, memory: MemoryResult | None = None) -> Projection:
    """Project one layout.

    ``framework`` overrides the shipped profile of ``config.framework`` (calibration passes trial values).
    ``layer_costs`` (layer index -> cost of one micro-batch on one GPU) replaces the analytic
    per-layer costs; measured mode (``bench/restore.py``) passes restored measurements.
    ``memory`` is this layout's :func:`projection.memory.project_memory` result when the caller
    already has it (search screens memory first).

    Raises:
        IllegalLayoutError: the layout breaks framework rules (when ``check``), with every reason.
    """
    prep = _prepare(model, cluster, config, hardware, profile, framework, check, layer_costs)
    hardware, profile, framework, dims, rates, net = (prep.hardware, prep.profile, prep.framework, prep.dims,
                                                      prep.rates, prep.net)
    stages, parts = prep.stages, prep.parts
    pp_stride_cross = dims.tp * dims.cp * dims.dp >= net.scale_up_domain_gpus
    boundary_bytes = 2.0 * config.mbs * config.seq_len / dims.cp * model.hidden_size / (
        dims.tp if config.sequence_parallel else 1)
    p2p = p2p_s(boundary_bytes, cross_domain=pp_stride_cross, net=net) if dims.pp > 1 else 0.0
    if p2p and not prep.switches.overlapped("pp"):
        stages = _blocking_p2p(stages, p2p)
    schedule = effective_schedule(config)
    pipe = simulate_pipeline(stages, num_microbatches=dims.num_microbatches, schedule=schedule, p2p_s=p2p)

    m = dims.num_microbatches
    critical = max(range(dims.pp), key=lambda r: sum(parts[k][r] for k in parts))
    compute = parts["compute"][critical] * m
    tp_s, cp_s, ep_s = (parts[k][critical] * m for k in ("tp", "cp", "ep"))
    bubble = max(0.0, pipe.makespan_s - compute - tp_s - cp_s - ep_s)

    blocking, hideable, overlap = _dp_exposure(model, config, dims, net, framework, profile, prep.switches)
    busy = compute + tp_s + cp_s + ep_s
    # FSDP overlaps every micro-batch.  DDP / distributed optimizer reduce gradients during the last
    # micro-batch's backward and the pipeline cool-down, and gather parameters during the warm-up.
    window = busy if config.zero >= 3 else busy / m * _dp_window_microbatches(dims, schedule) + bubble
    # Overlapped: hidden up to the profile's share, and never more than the compute window it runs under;
    # not overlapped (comm_overlap without dp): every collective waits for the backward and blocks the step.
    dp_exposed = blocking + (max(hideable * (1.0 - overlap), hideable - window) if overlap else hideable)
    optimizer = _optimizer_s(model, config, dims, hardware, profile)
    overhead = profile.step_overhead_s
    iteration = pipe.makespan_s + dp_exposed + optimizer + overhead

    tokens_per_step = config.gbs * config.seq_len
    flops = model_flops_per_step(model, config.seq_len, config.gbs, flops_formula)
    tflops_per_gpu = flops / iteration / cluster.num_gpus / 1e12
    tokens_per_gpu = tokens_per_step / iteration / cluster.num_gpus
    band = job_band(model, cluster, config, hardware)
    low, high = band.low, band.high
    return Projection(
        model=model.name, hardware=hardware.id, num_gpus=cluster.num_gpus, config=config, dims=dims,
        iteration_time_s=iteration,
        tokens_per_s_per_gpu=tokens_per_gpu,
        tokens_per_sec_per_gpu_low=tokens_per_gpu * low, tokens_per_sec_per_gpu_high=tokens_per_gpu * high,
        iteration_time_s_low=iteration / high, iteration_time_s_high=iteration / low,
        band_novelty=band.reasons,
        model_tflops_per_gpu=tflops_per_gpu,
        mfu=tflops_per_gpu * 1e12 / rates.peak_16bit_flops_per_s,
        flops_formula=flops_formula,
        breakdown=StepBreakdown(compute_s=compute, tp_comm_s=tp_s, cp_comm_s=cp_s, ep_comm_s=ep_s,
                                pp_bubble_s=bubble, dp_comm_s=dp_exposed, optimizer_s=optimizer,
                                overhead_s=overhead),
        memory=memory or project_memory(model, hardware, config, dims, profile),
        bubble_fraction=pipe.bubble_fraction,
        switches=prep.switches,
    )
