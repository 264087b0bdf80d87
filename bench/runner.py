"""One benchmark run: reduce the layout, time each layer kind and the collectives, build a Measurement.

Compute is timed on one device with the per-GPU shapes of the benchmark layout (TP-sharded
heads and widths, the experts local to one EP rank); TP all-reduce and EP all-to-all are
timed on their own over the local GPUs (Primus's "decomposed" measurement,
shared/notes/primus-projection.md 2.1). Backward is timed as B+W and split by the engine's
analytic B/W ratio of the same layer.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import torch

from bench.analytic import AnalyticLayout, analytic_layout, layer_kinds
from bench.collectives import CollectiveSpec, measure_collectives
from bench.layer_timing import LayerRun, cpu_threads, time_layer
from bench.measurement import LayerTiming, Measurement, cache_key, cached, store
from bench.reduction import reduce_layout
from bench.runtime import RuntimeInfo, runtime_info
from bench.shapes import layer_shape, shrink
from projection.model_spec import ModelSpec
from projection.training_config import Cluster, TrainingConfig
from projection.workload import ACT_BYTES

_MS = 1e3


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchOptions:
    """How to run: device, shape limits (CPU plumbing runs), iterations, collectives."""

    device: str = "cuda"             # "cuda" (CUDA or ROCm) or "cpu"
    max_hidden: int | None = None    # shrink hidden size to this (CPU runs; not representative)
    max_tokens: int | None = None    # shrink tokens per micro-batch to this
    warmup: int = 5
    iters: int = 20
    collectives: bool = True
    collective_timeout_s: float = 300.0
    use_cache: bool = True


def _split(total: float, b: float, w: float) -> tuple[float, float]:
    """Split a measured B+W time by the analytic B/W ratio."""
    return (total * b / (b + w), total * w / (b + w)) if b + w > 0 else (total, 0.0)


def _timing(kind: tuple[bool, int], run: LayerRun, bench: AnalyticLayout) -> LayerTiming:
    cost, expert = bench.costs[kind], bench.experts[kind]
    b, w = _split(run.backward_s, cost.bwd_input_s, cost.bwd_weight_s)
    xb, xw = _split(run.expert_backward_s, expert.bwd_input_s, expert.bwd_weight_s)
    return LayerTiming(
        kind="moe" if kind[0] else "dense", window=kind[1], forward_ms=run.forward_s * _MS,
        backward_input_ms=b * _MS, backward_weight_ms=w * _MS, backward_split="analytic-ratio",
        attention_forward_ms=run.attention_forward_s * _MS, expert_forward_ms=run.expert_forward_s * _MS,
        expert_backward_input_ms=xb * _MS, expert_backward_weight_ms=xw * _MS,
        optimizer_ms=run.optimizer_s * _MS, num_params=run.num_params, peak_memory_bytes=run.peak_memory_bytes,
    )


def _collective_specs(bench: AnalyticLayout, tokens: int, hidden: int) -> list[CollectiveSpec]:
    """TP all-reduce of the layer output and EP dispatch all-to-all, at the (possibly shrunk) shapes."""
    specs = []
    if bench.dims.tp > 1:
        specs.append(CollectiveSpec(op="all_reduce", group_size=bench.dims.tp,
                                    message_bytes=ACT_BYTES * tokens * hidden))
    if bench.dims.ep > 1 and bench.model.is_moe:
        dispatch = ACT_BYTES * tokens * bench.model.top_k / bench.dims.tp * hidden
        specs.append(CollectiveSpec(op="all_to_all", group_size=bench.dims.ep, message_bytes=dispatch))
    return specs


def run_measurement(model: ModelSpec, cluster: Cluster, config: TrainingConfig, *, local_gpus: int,
                    options: BenchOptions) -> Measurement:
    """Benchmark the reduced layout of ``config`` on the local device and return the measurement."""
    info = runtime_info(options.device)
    reduction = reduce_layout(model, cluster, config, local_gpus, local_gpu=info.hardware_id)
    bench = analytic_layout(reduction.model, reduction.bench_cluster, reduction.bench_config)
    device = torch.device("cuda", 0) if options.device == "cuda" else torch.device("cpu")
    dtype = torch.bfloat16 if options.device == "cuda" else torch.float32
    shapes = {kind: shrink(layer_shape(bench.model, bench.config, bench.dims, layer),
                           max_hidden=options.max_hidden, max_tokens=options.max_tokens)
              for kind, layer in layer_kinds(bench.model).items()}
    key = cache_key(device_name=info.device_name, driver_version=info.driver_version,
                    torch_version=info.torch_version,
                    what={"reduction": reduction.model_dump(mode="json"), "shapes": [repr(s) for s in shapes.values()],
                          "dtype": str(dtype), "iters": options.iters})
    if options.use_cache and (hit := cached(key)) is not None:
        return hit
    with cpu_threads(device.type):
        layers = tuple(_timing(kind, time_layer(shape, device=device, dtype=dtype, warmup=options.warmup,
                                                iters=options.iters), bench) for kind, shape in shapes.items())
    any_shape = next(iter(shapes.values()))
    specs = _collective_specs(bench, any_shape.tokens, any_shape.hidden) if options.collectives else []
    timings = measure_collectives(specs, backend="nccl" if options.device == "cuda" else "gloo",
                                  warmup=options.warmup, iters=options.iters, timeout_s=options.collective_timeout_s)
    by_op = {t.op: t for t in timings}
    representative = options.device == "cuda" and all(s.representative for s in shapes.values())
    measurement = Measurement(
        source="gpu" if options.device == "cuda" else "cpu", representative=representative,
        device_name=info.device_name, hardware_id=info.hardware_id, torch_version=info.torch_version,
        runtime_version=info.runtime_version, driver_version=info.driver_version,
        dtype=str(dtype).removeprefix("torch."),
        model=model.name, reduction=reduction, shape_note=_shape_note(options),
        layers=layers, tp_all_reduce=by_op.get("all_reduce"), ep_all_to_all=by_op.get("all_to_all"),
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        notes="" if representative else "NOT REPRESENTATIVE: CPU plumbing check and/or shrunk shapes",
    )
    if options.use_cache:
        store(key, measurement)
    return measurement


def _shape_note(options: BenchOptions) -> str:
    if options.max_hidden is None and options.max_tokens is None:
        return ""
    return f"shrunk to hidden<={options.max_hidden}, tokens<={options.max_tokens}"


def describe(info: RuntimeInfo) -> str:
    """One line naming the device and stack."""
    return (f"{info.device_name} ({info.hardware_id or 'not in catalog'}), torch {info.torch_version}, "
            f"runtime {info.runtime_version or '-'}, driver {info.driver_version or '-'}")
