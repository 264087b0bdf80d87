"""One benchmark run: reduce the layout, time each layer kind and the collectives, build a Measurement.

Compute is timed on one device. By default (``slice="target"``) each layer runs at the
TARGET layout's per-GPU shapes: the reference layer has no collectives inside, so a TP8 or
EP8 target's shard (1/8 of the heads and widths, the experts local to one EP rank, the CP
rank's queries against the full sequence) runs on one GPU as it is, and the restore needs no
compute ratio. ``slice="bench"`` times the reduced layout's shapes instead (restored by the
analytic ratio). TP all-reduce and EP all-to-all are timed on their own over the local GPUs
(Primus's "decomposed" measurement, shared/notes/primus-projection.md 2.1); the embedding and
the LM head + loss are timed too. Backward is timed as B+W and split by the engine's analytic
B/W ratio of the same layer. FP8 targets time their dense GEMMs in FP8 (``bench.fp8``) when the
device runs it; every layer records the precision it really ran in.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Literal

import torch

from bench.analytic import AnalyticLayout, analytic_layout, layer_kinds
from bench.collectives import CollectiveSpec, measure_collectives
from bench.layer_timing import HeadRun, LayerRun, cpu_threads, time_head, time_layer
from bench.measurement import CollectiveTiming, HeadTiming, LayerTiming, Measurement, cache_key, cached, store
from bench.reduction import Reduction, reduce_layout
from bench.runtime import RuntimeInfo, runtime_info
from bench.shapes import head_shape, layer_shape, shrink, shrink_head
from bench.version import code_version
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
    slice: Literal["target", "bench"] = "target"   # which layout's per-GPU shapes the layers run at
    head: bool = True                # also time embedding and LM head + loss
    flex: bool = True                # FlexAttention for sliding windows on GPUs

    def key_fields(self) -> dict[str, object]:
        """Everything of the options that changes a result (the cache key takes all of them)."""
        return {"device": self.device, "max_hidden": self.max_hidden, "max_tokens": self.max_tokens,
                "warmup": self.warmup, "iters": self.iters, "collectives": self.collectives, "slice": self.slice,
                "head": self.head, "flex": self.flex}


def _split(total: float, b: float, w: float) -> tuple[float, float]:
    """Split a measured B+W time by the analytic B/W ratio."""
    return (total * b / (b + w), total * w / (b + w)) if b + w > 0 else (total, 0.0)


def _timing(kind: tuple[bool, int], run: LayerRun, bench: AnalyticLayout, frozen: bool) -> LayerTiming:
    cost, expert = bench.costs[kind], bench.experts[kind]
    b, w = (run.backward_s, 0.0) if frozen else _split(run.backward_s, cost.bwd_input_s, cost.bwd_weight_s)
    xb, xw = ((run.expert_backward_s, 0.0) if frozen
              else _split(run.expert_backward_s, expert.bwd_input_s, expert.bwd_weight_s))
    bwd_flops = (1.0 if frozen else 2.0) * run.flops_fwd
    return LayerTiming(
        kind="moe" if kind[0] else "dense", window=kind[1], forward_ms=run.forward_s * _MS,
        backward_input_ms=b * _MS, backward_weight_ms=w * _MS, backward_split="analytic-ratio",
        attention_forward_ms=run.attention_forward_s * _MS, expert_forward_ms=run.expert_forward_s * _MS,
        expert_backward_input_ms=xb * _MS, expert_backward_weight_ms=xw * _MS,
        optimizer_ms=run.optimizer_s * _MS, num_params=run.num_params, peak_memory_bytes=run.peak_memory_bytes,
        attention_backend=run.attention_backend, gemm_precision=run.gemm_precision,
        expert_precision=run.expert_precision, expert_gemm=run.expert_gemm, flops_fwd=run.flops_fwd,
        forward_tflops=run.forward_tflops,
        backward_tflops=bwd_flops / run.backward_s / 1e12 if run.backward_s > 0 else 0.0,
        attention_tflops=run.attention_tflops,
    )


def head_timing(run: HeadRun) -> HeadTiming:
    """The measurement-file form of a head run."""
    return HeadTiming(
        embedding_forward_ms=run.embedding_forward_s * _MS, embedding_backward_ms=run.embedding_backward_s * _MS,
        head_forward_ms=run.head_forward_s * _MS, head_backward_ms=run.head_backward_s * _MS,
        gemm_precision=run.gemm_precision, flops_fwd=run.flops_fwd,
        head_tflops=run.flops_fwd / run.head_forward_s / 1e12 if run.head_forward_s > 0 else 0.0)


def measured_precision(layers: tuple[LayerTiming, ...]) -> str:
    """One word for the dense GEMMs of all layers: fp8 / bf16 / fp32 when they agree, else mixed."""
    seen = {t.gemm_precision for t in layers if t.gemm_precision}
    return seen.pop() if len(seen) == 1 else ("mixed" if seen else "")


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
    """Benchmark ``config`` on the local device (per-GPU slices of the target, or of the reduced layout)."""
    info = runtime_info(options.device)
    reduction = reduce_layout(model, cluster, config, local_gpus, local_gpu=info.hardware_id)
    bench = analytic_layout(reduction.model, reduction.bench_cluster, reduction.bench_config)
    # The layout whose per-GPU shapes are timed: the target itself (on the local GPU type), or the bench layout.
    timed = bench if options.slice == "bench" else analytic_layout(
        model, cluster.model_copy(update={"gpu": reduction.bench_cluster.gpu}), config)
    device = torch.device("cuda", 0) if options.device == "cuda" else torch.device("cpu")
    dtype = torch.bfloat16 if options.device == "cuda" else torch.float32
    fp8 = config.is_low_precision
    frozen = config.finetune == "lora"
    shapes = {kind: shrink(layer_shape(timed.model, timed.config, timed.dims, layer),
                           max_hidden=options.max_hidden, max_tokens=options.max_tokens)
              for kind, layer in layer_kinds(timed.model).items()}
    head = shrink_head(head_shape(timed.model, timed.config, timed.dims), max_hidden=options.max_hidden,
                       max_tokens=options.max_tokens) if options.head else None
    version = code_version()
    key = cache_key(device_name=info.device_name, driver_version=info.driver_version,
                    torch_version=info.torch_version,
                    what={"reduction": reduction.model_dump(mode="json"), "shapes": [repr(s) for s in shapes.values()],
                          "head": repr(head), "dtype": str(dtype), "fp8": fp8, "frozen": frozen},
                    options=options.key_fields(), version=version)
    if options.use_cache and (hit := cached(key)) is not None:
        return hit
    with cpu_threads(device.type):
        layers = tuple(_timing(kind, time_layer(shape, device=device, dtype=dtype, warmup=options.warmup,
                                                iters=options.iters, fp8=fp8, frozen=frozen, flex=options.flex),
                               timed, frozen) for kind, shape in shapes.items())
        head_run = (time_head(head, device=device, dtype=dtype, warmup=options.warmup, iters=options.iters,
                              fp8=fp8, frozen=frozen) if head is not None else None)
    # Collectives run at the bench layout's message sizes (the restore anchors them on its analytic view);
    # shrunk plumbing runs use the shrunk sizes.
    any_shape = next(iter(shapes.values()))
    tokens, hidden = ((any_shape.tokens, any_shape.hidden) if not any_shape.representative
                      else (int(bench.tokens), bench.model.hidden_size))
    specs = _collective_specs(bench, tokens, hidden) if options.collectives else []
    timings = measure_collectives(specs, backend="nccl" if options.device == "cuda" else "gloo",
                                  warmup=options.warmup, iters=options.iters, timeout_s=options.collective_timeout_s)
    representative = (options.device == "cuda" and all(s.representative for s in shapes.values())
                      and (head is None or head.representative))
    measurement = build_measurement(
        model=model, config=config, reduction=reduction, info=info, dtype=dtype, layers=layers, head=head_run,
        collectives=timings, representative=representative, compute_slice=options.slice,
        options=options.key_fields(), version=version, shape_note=_shape_note(options))
    if options.use_cache:
        store(key, measurement)
    return measurement


def build_measurement(*, model: ModelSpec, config: TrainingConfig, reduction: Reduction, info: RuntimeInfo,
                      dtype: torch.dtype, layers: tuple[LayerTiming, ...], head: HeadRun | None,
                      collectives: list[CollectiveTiming], representative: bool, compute_slice: str,
                      options: dict[str, object], version: str, shape_note: str = "",
                      provenance: dict[str, str] | None = None) -> Measurement:
    """The measurement file of one benchmark (shared by ``run_measurement`` and the device-script import)."""
    by_op = {t.op: t for t in collectives}
    precision = measured_precision(layers)
    notes = [] if representative else ["NOT REPRESENTATIVE: CPU plumbing check and/or shrunk shapes"]
    if config.is_low_precision and precision != "fp8":
        notes.append(f"target precision {config.precision}, dense GEMMs ran in {precision or dtype}")
    loops = sorted({t.expert_gemm for t in layers if t.expert_gemm.startswith("per-expert loop")})
    notes += [f"routed experts: {loop}" for loop in loops]
    created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return Measurement(
        source="gpu" if info.device_type == "cuda" else "cpu", representative=representative,
        device_name=info.device_name, hardware_id=info.hardware_id, torch_version=info.torch_version,
        runtime_version=info.runtime_version, driver_version=info.driver_version,
        dtype=str(dtype).removeprefix("torch."),
        model=model.name, reduction=reduction, shape_note=shape_note,
        layers=layers, head=head_timing(head) if head is not None else None,
        compute_slice=compute_slice, measured_precision=precision, options=options,  # type: ignore[arg-type]
        code_version=version, provenance=provenance or {"date": created, "device": info.device_name,
                                                        "driver": info.driver_version or "",
                                                        "torch": info.torch_version},
        tp_all_reduce=by_op.get("all_reduce"), ep_all_to_all=by_op.get("all_to_all"),
        created=created, notes="; ".join(notes),
    )


def _shape_note(options: BenchOptions) -> str:
    if options.max_hidden is None and options.max_tokens is None:
        return ""
    return f"shrunk to hidden<={options.max_hidden}, tokens<={options.max_tokens}"


def describe(info: RuntimeInfo) -> str:
    """One line naming the device and stack."""
    return (f"{info.device_name} ({info.hardware_id or 'not in catalog'}), torch {info.torch_version}, "
            f"runtime {info.runtime_version or '-'}, driver {info.driver_version or '-'}")
