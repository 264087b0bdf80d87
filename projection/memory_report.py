"""The memory breakdown a user reads: every term of the heaviest pipeline rank, per rank totals, the margins.

Plain data (GiB) for ``projtune memory --json`` and its table; the terms of a rank sum to its
total, and the heaviest rank's total is the peak.
"""

from __future__ import annotations

from typing import Any

from projection.memory import GIB, MemoryResult

TERM_NOTES = {
    "weights": "model weights as the forward reads them (framework bytes/param, ZeRO-3 sharded)",
    "gradients": "main gradients (fp32 in Megatron-core), ZeRO-2/3 sharded",
    "optimizer": "fp32 master + Adam moments, sharded by the distributed optimizer (experts over expert-DP)",
    "fp8": "Transformer Engine FP8/MX/NVFP4 weight copies (+ transpose, scales, amax history)",
    "activations": "saved activations x micro-batches in flight (schedule, recompute, SP/CP)",
    "buffers": "loss logits, recompute rebuild, ZeRO-3 gathers, MoE dispatch buffers",
    "workspace": "CUDA context, NCCL/RCCL and cuBLAS workspaces (device profile)",
    "allocator": "caching-allocator fragmentation (device profile share of dynamic memory)",
}


def memory_breakdown_dict(memory: MemoryResult) -> dict[str, Any]:
    """The heaviest rank's terms (GiB), every rank's total, the usable memory and the verdict's margins."""
    peak = memory.peak
    terms = {name: value / GIB for name, value in peak.terms().items()}
    return {
        "heaviest_rank": peak.rank,
        "heaviest_rank_layers": peak.layers,
        "peak_terms_gib": terms,
        "peak_terms_sum_gib": sum(terms.values()),
        "rank_totals_gib": [s.total_bytes / GIB for s in memory.stages],
        "hbm_gib": memory.hbm_bytes / GIB,
        "usable_gib": memory.capacity_bytes / GIB,
        "fits_limit_gib": memory.capacity_bytes / (1.0 + memory.margins.under) / GIB,
        "oom_limit_gib": memory.capacity_bytes / (1.0 - memory.margins.over) / GIB,
        "margins": {"under": memory.margins.under, "over": memory.margins.over, "note": memory.margins.note},
    }
