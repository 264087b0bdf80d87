"""Plain-data views of projection results (JSON-ready dicts), shared by the CLI, tools and evals."""

from __future__ import annotations

from typing import Any

from projection.engine import Projection
from projection.memory import GIB, MemoryResult, StageMemory
from projection.switches import FP32_GRAD_BYTES, Switches
from projection.vocabulary import COMM_OVERLAPS


def config_dict(projection: Projection) -> dict[str, Any]:
    """The layout as sweep-format config keys, with derived dp and the schedule in effect."""
    data = projection.config.model_dump(mode="json", exclude_none=True)
    data["dp"] = projection.dims.dp
    data["pp_schedule"] = projection.config.schedule
    return data


def stage_memory_dict(stage: StageMemory) -> dict[str, float]:
    """One stage's memory terms in GiB."""
    return {
        "rank": stage.rank,
        "weights_gib": stage.weights_bytes / GIB,
        "gradients_gib": stage.gradients_bytes / GIB,
        "optimizer_gib": stage.optimizer_bytes / GIB,
        "fp8_copies_gib": stage.fp8_copies_bytes / GIB,
        "activations_gib": stage.activations_bytes / GIB,
        "transient_gib": stage.transient_bytes / GIB,
        "overhead_gib": stage.overhead_bytes / GIB,
        "total_gib": stage.total_bytes / GIB,
        "microbatches_in_flight": stage.microbatches_in_flight,
    }


def memory_dict(memory: MemoryResult) -> dict[str, Any]:
    """Memory result in GiB with the verdict."""
    return {
        "verdict": memory.verdict,
        "peak_gib": memory.peak_bytes / GIB,
        "peak_rank": memory.peak.rank,
        "capacity_gib": memory.capacity_bytes / GIB,
        "headroom_fraction": memory.headroom_fraction,
        "stages": [stage_memory_dict(s) for s in memory.stages],
    }


def projection_dict(projection: Projection) -> dict[str, Any]:
    """Everything a user or another agent needs from one projection."""
    breakdown = projection.breakdown.as_dict()
    return {
        "model": projection.model,
        "gpu": projection.hardware,
        "num_gpus": projection.num_gpus,
        "config": config_dict(projection),
        "iteration_time_s": projection.iteration_time_s,
        "tokens_per_sec_per_gpu": projection.tokens_per_s_per_gpu,
        "tokens_per_sec_per_gpu_low": projection.tokens_per_sec_per_gpu_low,
        "tokens_per_sec_per_gpu_high": projection.tokens_per_sec_per_gpu_high,
        "iteration_time_s_low": projection.iteration_time_s_low,
        "iteration_time_s_high": projection.iteration_time_s_high,
        "band_reasons": list(projection.band_reasons),
        "model_tflops_per_gpu": projection.model_tflops_per_gpu,
        "mfu": projection.mfu,
        "flops_formula": projection.flops_formula,
        "num_microbatches": projection.dims.num_microbatches,
        "bubble_fraction": projection.bubble_fraction,
        "breakdown_s": breakdown,
        "bottleneck": projection.breakdown.bottleneck,
        "memory": memory_dict(projection.memory),
        **({"switches": switches_dict(projection.switches)} if projection.switches is not None else {}),
    }


def switches_dict(switches: Switches) -> dict[str, Any]:
    """The run-time switches in effect (the layout's, else its framework's documented defaults)."""
    return {"comm_overlap": [c for c in COMM_OVERLAPS if switches.overlapped(c)], "cuda_graphs": switches.cuda_graphs,
            "compile": switches.compile, "attention_backend": switches.attention_backend,
            "grad_reduce_in_fp32": switches.grad_reduce_bytes >= FP32_GRAD_BYTES}
