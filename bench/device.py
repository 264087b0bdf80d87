"""Device profiles from microbenchmarks: GEMMs, flash attention, HBM copies and all-reduces.

The sweep times the GEMM shapes of catalog models (QKV, output projection, fc1, fc2 of
llama3-8b and llama3-70b; one Mixtral-8x7B expert's fc1/fc2 at its routed tokens), SDPA
attention, a device-to-device copy, FP8 GEMMs when ``torch._scaled_mm`` runs, and an
all-reduce over the local GPUs when there are several. The profile's free parameters are
fitted by least squares on log time (``scipy.optimize.least_squares``) through
:mod:`projection.compute`'s own time functions, so the fitted profile reproduces the sweep
under the engine's model. The YAML records every point it was fitted on.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Callable, Iterable
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict
from scipy.optimize import least_squares

from bench.analytic import network_params
from bench.layer_timing import cpu_threads
from bench.microbench import measure
from projection.collectives import all_reduce_s, place_group
from projection.compute import attention_fwd_bwd_s, device_rates, gemm_s, streaming_s
from projection.device_profile import DeviceProfile, dump_profile
from projection.hardware import HardwareSpec, PrecisionNotSupported
from projection.model_spec import load_model
from projection.training_config import Cluster

Kind = Literal["gemm", "gemm_fp8", "grouped_gemm", "attention", "attention_bwd", "copy", "all_reduce"]
SWEEP_MODELS = ("llama3-8b", "llama3-70b", "mixtral-8x7b")
GPU_TOKENS = (1024, 4096)
GPU_ATTENTION_SEQ = (2048, 4096, 8192)
GPU_COPY_BYTES = (2**28, 2**30)
TINY_DIVISOR = 64          # CPU plumbing runs: every GEMM dim / 64 (multiples of 8)
_EFF_FLOOR = 1e-4          # lower bound of fitted efficiencies (CPU runs hit it)


class SweepPoint(BaseModel):
    """One microbenchmark: what ran and its median time."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Kind
    name: str
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 0
    heads: int = 0
    kv_heads: int = 0
    seq: int = 0
    head_dim: int = 0
    num_bytes: float = 0.0
    group_size: int = 1
    groups: int = 0             # grouped GEMM: experts (m rows each)
    backend: str = ""           # attention backend that ran (pinned)
    measured_s: float = 0.0


def _round8(value: float) -> int:
    return max(16, -(-int(value) // 8) * 8)


def gemm_points(models: Iterable[str] = SWEEP_MODELS, tokens: Iterable[int] = GPU_TOKENS, *,
                tiny: bool = False) -> list[SweepPoint]:
    """GEMM shapes (m = tokens, n = output width, k = input width) of the catalog models at TP1."""
    points = []
    for model_id in models:
        m = load_model(model_id)
        h = m.hidden_size
        mats = 2 if m.gated_mlp else 1
        ffn = m.moe_ffn_hidden_size if m.is_moe else m.ffn_hidden_size
        for t in tokens:
            rows = t * m.top_k // m.num_experts if m.is_moe else t   # one expert's routed tokens (balanced)
            shapes = {"fc1": (rows, mats * ffn, h), "fc2": (rows, h, ffn)}
            if not m.is_moe:
                shapes |= {"qkv": (t, m.q_width + 2 * m.kv_width, h), "proj": (t, h, m.q_width)}
            for op, dims in shapes.items():
                if tiny:
                    dims = tuple(_round8(d / TINY_DIVISOR) for d in dims)
                points.append(SweepPoint(kind="gemm", name=f"{model_id} {op} T{t}", m=dims[0], n=dims[1], k=dims[2]))
    return points


def attention_points(*, tiny: bool = False) -> list[SweepPoint]:
    """Causal GQA flash attention of llama3-8b heads at several sequence lengths."""
    if tiny:
        return [SweepPoint(kind="attention", name=f"sdpa s{s}", batch=1, heads=4, kv_heads=2, seq=s, head_dim=16)
                for s in (32, 64)]
    return [SweepPoint(kind="attention", name=f"sdpa s{s}", batch=1, heads=32, kv_heads=8, seq=s, head_dim=128)
            for s in GPU_ATTENTION_SEQ]


def copy_points(*, tiny: bool = False) -> list[SweepPoint]:
    """Device-to-device copies (read + write the buffer)."""
    sizes = (2**20, 2**22) if tiny else GPU_COPY_BYTES
    return [SweepPoint(kind="copy", name=f"copy {b >> 20} MiB", num_bytes=float(b)) for b in sizes]


def _measure(point: SweepPoint, device: torch.device, dtype: torch.dtype, warmup: int, iters: int) -> float | None:
    """Median time of one point (:func:`bench.microbench.measure`); None when the op does not run here."""
    seconds, _ = measure(point.model_dump(), device, dtype, warmup=warmup, iters=iters)
    return seconds or None


def run_sweep(*, device: str = "cuda", tiny: bool = False, warmup: int = 3, iters: int = 10,
              fp8: bool = True, all_reduce: bool = True) -> list[SweepPoint]:
    """Time every point on the local device (tiny shapes for CPU plumbing runs)."""
    dev = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    gemms = gemm_points(tiny=tiny)
    points = gemms + attention_points(tiny=tiny) + copy_points(tiny=tiny)
    if fp8 and device == "cuda":
        points += [p.model_copy(update={"kind": "gemm_fp8", "name": p.name + " fp8"}) for p in gemms]
    done = []
    with cpu_threads(dev.type):
        for point in points:
            seconds = _measure(point, dev, dtype, warmup, iters)
            if seconds is not None and seconds > 0:
                done.append(point.model_copy(update={"measured_s": seconds}))
    if all_reduce and device == "cuda" and torch.cuda.device_count() > 1:
        done += _all_reduce_points(torch.cuda.device_count(), warmup, iters)
    return done


def _all_reduce_points(gpus: int, warmup: int, iters: int) -> list[SweepPoint]:
    from bench.collectives import CollectiveSpec, measure_collectives

    specs = [CollectiveSpec(op="all_reduce", group_size=gpus, message_bytes=float(b)) for b in (2**24, 2**27, 2**29)]
    return [SweepPoint(kind="all_reduce", name=f"all_reduce x{gpus} {int(t.message_bytes) >> 20} MiB",
                       num_bytes=t.message_bytes, group_size=gpus, measured_s=t.time_ms * 1e-3)
            for t in measure_collectives(specs, warmup=warmup, iters=iters)]


# ---- fitting --------------------------------------------------------------------------------

def _predict(point: SweepPoint, hardware: HardwareSpec, profile: DeviceProfile) -> float:
    """The engine's time for one point under ``profile``."""
    if point.kind == "all_reduce":
        net = network_params(hardware, Cluster(gpu=hardware.id, num_gpus=point.group_size), profile)
        return all_reduce_s(point.num_bytes, place_group(point.group_size, 1, net), net)
    rates = device_rates(hardware, profile, "fp8" if point.kind == "gemm_fp8" else "bf16")
    if point.kind in ("gemm", "gemm_fp8"):
        return gemm_s(point.m, point.n, point.k, rates)
    if point.kind == "grouped_gemm":
        return gemm_s(point.m, point.n, point.k, rates, groups=point.groups, efficiency=rates.moe_efficiency)
    if point.kind in ("attention", "attention_bwd"):
        flops = 2.0 * point.batch * point.heads * point.seq * (point.seq / 2.0) * 2 * point.head_dim
        return attention_fwd_bwd_s(flops, rates)[0 if point.kind == "attention" else 1]
    return streaming_s(2.0 * point.num_bytes, 1, rates)


def _fit(points: list[SweepPoint], hardware: HardwareSpec, base: DeviceProfile, names: list[str],
         lower: list[float], upper: list[float]) -> DeviceProfile:
    """Least squares on log(predicted / measured) over ``names`` of the profile."""
    def make(x: np.ndarray) -> DeviceProfile:
        return base.model_copy(update=dict(zip(names, (float(v) for v in x), strict=True)))

    def residuals(x: np.ndarray) -> np.ndarray:
        profile = make(x)
        return np.array([math.log(_predict(p, hardware, profile) / p.measured_s) for p in points])

    x0 = np.clip([getattr(base, n) for n in names], lower, upper)
    result = least_squares(residuals, x0, bounds=(lower, upper), x_scale=np.maximum(np.abs(x0), 1e-6),
                           diff_step=1e-3)
    return make(result.x)


def fit_profile(points: list[SweepPoint], hardware: HardwareSpec, base: DeviceProfile) -> DeviceProfile:
    """Fit GEMM/attention/memory efficiencies and kernel overhead (and FP8, comm when measured)."""
    profile = base
    groups: list[tuple[set[str], list[str], list[float], list[float]]] = [
        ({"gemm", "attention", "attention_bwd", "copy"},
         ["gemm_efficiency", "attention_efficiency", "memory_efficiency", "kernel_overhead_s"],
         [_EFF_FLOOR] * 3 + [0.0], [1.0, 1.0, 1.0, 1e-3]),
        ({"gemm_fp8"}, ["low_precision_gemm_efficiency"], [_EFF_FLOOR], [1.0]),
        ({"grouped_gemm"}, ["moe_efficiency"], [_EFF_FLOOR], [1.0]),
        ({"all_reduce"}, ["scale_up_efficiency", "scale_up_latency_s"], [0.05, 0.0], [1.0, 1e-3]),
    ]
    for kinds, names, lower, upper in groups:
        subset = [p for p in points if p.kind in kinds]
        if kinds == {"gemm_fp8"}:
            try:
                device_rates(hardware, profile, "fp8")
            except PrecisionNotSupported:
                subset = []
            # The engine caps FP8 efficiency at the 16-bit one (projection.compute.device_rates): start below
            # the cap, where the time depends on the parameter (above it the gradient is zero).
            start = min(profile.low_precision_gemm_efficiency, 0.95 * profile.gemm_efficiency)
            profile = profile.model_copy(update={"low_precision_gemm_efficiency": start})
        if len(subset) >= len(names):
            profile = _fit(subset, hardware, profile, names, lower, upper)
    return profile


def profile_yaml(profile: DeviceProfile, points: list[SweepPoint], hardware: HardwareSpec) -> str:
    """The profile YAML plus one comment line per fitted point (JSON: point and predicted time)."""
    lines = [dump_profile(profile).rstrip("\n"),
             "# fitted on (one JSON object per line; predicted_s under this profile):"]
    for p in points:
        data = p.model_dump(exclude_defaults=True) | {"measured_s": p.measured_s,
                                                      "predicted_s": _predict(p, hardware, profile)}
        lines.append("# " + json.dumps(data))
    return "\n".join(lines) + "\n"


def rms_log_error(points: list[SweepPoint], hardware: HardwareSpec, profile: DeviceProfile) -> float:
    """Root-mean-square of log(predicted / measured) over the points."""
    errors = [math.log(_predict(p, hardware, profile) / p.measured_s) ** 2 for p in points]
    return math.sqrt(sum(errors) / len(errors)) if errors else 0.0


def device_profile(points: list[SweepPoint], hardware: HardwareSpec, base: DeviceProfile, *, device_name: str,
                   representative: bool, today: Callable[[], datetime.date] = datetime.date.today) -> DeviceProfile:
    """Fit ``points`` and annotate the profile with where and how it was fitted."""
    fitted = fit_profile(points, hardware, base)
    kinds = sorted({p.kind for p in points})
    note = (f"projtune bench device on {device_name}, {today().isoformat()}: {len(points)} points "
            f"({', '.join(kinds)}), rms log error {rms_log_error(points, hardware, fitted):.3f} "
            f"(was {rms_log_error(points, hardware, base):.3f} with the shipped profile)")
    if not representative:
        note = "NOT REPRESENTATIVE (CPU plumbing run, tiny shapes): " + note
    return fitted.model_copy(update={"hardware_id": hardware.id, "fitted_on": ("projtune-bench-device",),
                                     "fit_note": note})
