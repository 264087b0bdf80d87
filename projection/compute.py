"""Kernel times on one GPU from a device profile: GEMMs, grouped GEMMs, flash attention, streaming ops.

The model follows what the hardware does rather than a flat efficiency:
- GEMM output tiles (``tile_m x tile_n``) are spread over the compute units in waves; a
  partial last wave idles units (tile/wave quantisation, as in NVIDIA's "Matrix
  Multiplication Background" guide and ROCm Origami);
- time is the larger of the compute time at an achievable fraction of dense peak and the
  memory time of reading inputs and writing outputs at achievable HBM bandwidth
  (roofline), plus a fixed per-kernel cost (launch and tail latency);
- flash attention is compute bound at its own achievable fraction (FlashAttention-2,
  Dao 2023, arXiv 2307.08691: forward reaches up to ~73% of A100 peak, backward ~63%, so
  the backward runs at 0.85 of the forward's efficiency).
"""

from __future__ import annotations

from dataclasses import dataclass

from projection.device_profile import DeviceProfile
from projection.hardware import HardwareSpec

ATTENTION_BACKWARD_FLOP_RATIO = 2.5    # FA2 backward: 5 matmuls vs 2 in forward (Dao 2023, Sec. 3.1)
ATTENTION_BACKWARD_EFFICIENCY = 0.85   # backward/forward achieved-FLOP ratio (Dao 2023, Fig. 6 vs 5)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceRates:
    """Plain-number view of a GPU and its profile, built once per projection (hot loop input)."""

    peak_flops_per_s: float          # dense peak for the GEMM dtype of the precision recipe
    peak_16bit_flops_per_s: float    # dense bf16/fp16 peak (attention, MFU)
    gemm_efficiency: float
    hbm_bytes_per_s: float           # achievable HBM bandwidth
    num_compute_units: int
    tile_m: int
    tile_n: int
    kernel_overhead_s: float
    attention_efficiency: float
    moe_efficiency: float
    moe_layer_overhead_s: float      # fixed forward cost per MoE layer
    gemm_operand_bytes: float        # bytes per element of GEMM operands (2 for 16-bit, 1 for FP8)
    host_launch_s: float = 0.0       # host (CPU) time to dispatch one kernel: a layer is never faster than its launches


def device_rates(hardware: HardwareSpec, profile: DeviceProfile, precision: str,
                 compute_multiplier: float = 1.0, host_launch_s: float = 0.0) -> DeviceRates:
    """Resolve peak rates and efficiencies for a precision recipe (times a framework's compute multiplier).

    FP8 and FP4 GEMMs never reach a higher fraction of their peak than 16-bit GEMMs do (the narrower
    recipe only adds quantisation and scaling work), so their efficiency is capped at the 16-bit one.
    ``host_launch_s`` is the framework's host dispatch cost per kernel (0 for compiled or graph-captured steps).
    """
    low = precision not in ("bf16", "fp16")
    sixteen = hardware.peak_flops_for("fp16" if precision == "fp16" else "bf16")
    return DeviceRates(
        peak_flops_per_s=hardware.peak_flops_for(precision),
        peak_16bit_flops_per_s=sixteen,
        gemm_efficiency=min(1.0, compute_multiplier * (
            min(profile.fp4_gemm_efficiency, profile.low_precision_gemm_efficiency, profile.gemm_efficiency)
            if precision == "nvfp4"
            else min(profile.low_precision_gemm_efficiency, profile.gemm_efficiency) if low
            else profile.gemm_efficiency)),
        hbm_bytes_per_s=hardware.hbm_bandwidth_bytes_per_s * profile.memory_efficiency,
        num_compute_units=hardware.num_compute_units,
        tile_m=profile.tile_m,
        tile_n=profile.tile_n,
        kernel_overhead_s=profile.kernel_overhead_s,
        attention_efficiency=min(1.0, profile.attention_efficiency * compute_multiplier),
        moe_efficiency=profile.moe_efficiency,
        moe_layer_overhead_s=profile.moe_layer_overhead_s,
        gemm_operand_bytes=0.5 if precision == "nvfp4" else 1.0 if low else 2.0,
        host_launch_s=host_launch_s,
    )


def gemm_s(m: float, n: float, k: float, rates: DeviceRates, *, groups: int = 1, efficiency: float = 1.0) -> float:
    """Time of ``groups`` GEMMs of shape (m x k) @ (k x n), run as one (grouped) kernel, seconds."""
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    tiles = groups * -(-int(m + 0.999999) // rates.tile_m) * -(-int(n + 0.999999) // rates.tile_n)
    waves = -(-tiles // rates.num_compute_units)
    utilisation = tiles / (waves * rates.num_compute_units)
    flops = 2.0 * m * n * k * groups
    compute = flops / (rates.peak_flops_per_s * rates.gemm_efficiency * efficiency * utilisation)
    traffic = (m * k + k * n) * rates.gemm_operand_bytes * groups + 2.0 * m * n * groups
    memory = traffic / rates.hbm_bytes_per_s
    return max(compute, memory) + rates.kernel_overhead_s


def gemm_fwd_bwd_s(m: float, n: float, k: float, rates: DeviceRates, *, groups: int = 1,
                   efficiency: float = 1.0) -> tuple[float, float, float]:
    """(forward, input-gradient, weight-gradient) times of a linear layer, seconds."""
    fwd = gemm_s(m, n, k, rates, groups=groups, efficiency=efficiency)
    dgrad = gemm_s(m, k, n, rates, groups=groups, efficiency=efficiency)
    wgrad = gemm_s(k, n, m, rates, groups=groups, efficiency=efficiency)
    return fwd, dgrad, wgrad


def attention_fwd_bwd_s(flops_fwd: float, rates: DeviceRates) -> tuple[float, float]:
    """(forward, backward) time of flash attention with ``flops_fwd`` forward FLOPs, seconds."""
    if flops_fwd <= 0:
        return 0.0, 0.0
    fwd_rate = rates.peak_16bit_flops_per_s * rates.attention_efficiency
    fwd = flops_fwd / fwd_rate + rates.kernel_overhead_s
    bwd = ATTENTION_BACKWARD_FLOP_RATIO * flops_fwd / (fwd_rate * ATTENTION_BACKWARD_EFFICIENCY)
    return fwd, bwd + 2 * rates.kernel_overhead_s


def streaming_s(num_bytes: float, num_kernels: int, rates: DeviceRates) -> float:
    """Memory-bound element-wise work: bytes moved at achievable HBM bandwidth plus kernel costs."""
    return num_bytes / rates.hbm_bytes_per_s + num_kernels * rates.kernel_overhead_s
