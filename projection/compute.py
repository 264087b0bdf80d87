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
  the backward runs at 0.85 of the forward's efficiency);
- unfused attention (no flash kernel) is what its code runs: batched GEMMs over the full s x s
  score matrix (the causal mask is applied after QK^T, so no half is skipped) at GEMM rates, plus
  the element-wise passes over the materialised scores at streaming rates.
"""

from __future__ import annotations

from dataclasses import dataclass

from projection.device_profile import DeviceProfile
from projection.hardware import HardwareSpec

ATTENTION_BACKWARD_FLOP_RATIO = 2.5    # FA2 backward: 5 matmuls vs 2 in forward (Dao 2023, Sec. 3.1)
ATTENTION_BACKWARD_EFFICIENCY = 0.85   # backward/forward achieved-FLOP ratio (Dao 2023, Fig. 6 vs 5)
# Softmax exponentials of flash attention run on the SM's special function units (MUFU.EX2), not the tensor
# cores: 16 per clock per SM on Ampere, Hopper and Blackwell ("the exponential unit (MUFU) ... remains at 16
# operations per clock per SM", unchanged from Hopper to B200: Zadouri, Hoehnerbach, Shah, Liu, Thakkar, Dao,
# FlashAttention-4, together.ai/blog/flashattention-4, whose "feeds and speeds" analysis finds the B200 forward
# bound by the exponential, not the MMA), and twice that on Blackwell Ultra ("Blackwell Ultra alleviates this
# bottleneck by doubling SFU throughput over the standard NVIDIA Blackwell architecture", NVIDIA Technical Blog,
# "Making Softmax More Efficient with NVIDIA Blackwell Ultra").  One exponential per score in the forward and one
# in the backward (P is recomputed from the saved log-sum-exp).  Per score the forward's MMAs are 2 (d_qk + d_v)
# FLOPs, so at head dim 128 on B200 the exponentials (1 / (16 x 148 SMs x 1.965 GHz) = 0.215 ps) and the MMAs
# (512 / 2.25 PFLOP/s = 0.228 ps) take about as long and head dim 64 is exponential-bound.  The cuDNN 9.13
# kernels Transformer Engine runs for gpt-oss's learnable softmax (FlashAttention is not eligible for it) do not
# emulate the exponential on the FMA units as FlashAttention-4 does (FA4 is "up to 1.3x faster than cuDNN version
# 9.13").  AMD CDNA: no per-CU transcendental rate in this catalog's sources, so no bound (0).
SFU_EXP_PER_CLOCK_PER_SM = {"ampere": 16, "hopper": 16, "blackwell": 16, "blackwell-ultra": 32}
# Block-scaled FP8 GEMMs reach a smaller fraction of the FP8 peak than per-tensor-scaled ones: the scale
# factors are extra operands the kernel loads and applies every K block.
# - NVIDIA Blackwell (SM100, native block-scaled MMA): MXFP8.  Transformer Engine's GEMM profiling guide
#   (docs/features/low_precision_training/gemm_profiling, B300, Llama-style layer, pre-quantised inputs):
#   per-layer GEMM time 6.830 ms with FP8 block scaling vs 7.324 ms with MXFP8; a per-tensor-scaled GEMM
#   carries no scale operands, so MXFP8 runs at most 6.830 / 7.324 = 0.933 of it.  End to end, torchao's
#   torchtitan Llama 3 8B on 8 x B200 (torchao/prototype/mx_formats/README.md) shows the same ordering:
#   float8 tensorwise 10,417 tokens/s vs mxfp8 9,969 (-4.3%) although MXFP8 casts with one read less.
#   On SM100 Float8BlockScaling is "emulated with MXFP8" (TE docs, fp8_blockwise_scaling, Supported devices),
#   so fp8-blockwise runs MXFP8 GEMMs there.
# - NVIDIA Hopper (SM90, no block-scaled MMA): "block-scaled GEMMs are software-emulated" (same TE page);
#   FBGEMM's H100 measurements (pytorch/FBGEMM PR 2546: "fp8 block gemm only" vs "fp8 row gemm only" at
#   8192^3, 65536x8192x7168, 65536x3584x8192: 870.4/1125.5, 828.3/1082.8, 828.3/1141.4 TFLOP/s) give 0.755
#   on average.
# AMD block-scaled GEMMs (hipBLASLt) have no public comparison here: left at the per-tensor efficiency.
MX_GEMM_FRACTION = 6.830 / 7.324
HOPPER_BLOCKWISE_GEMM_FRACTION = (870.4 / 1125.5 + 828.3 / 1082.8 + 828.3 / 1141.4) / 3


# GPU-side launch gap a CUDA graph removes per kernel: NVIDIA "Getting Started with CUDA Graphs" (A. Gray, NVIDIA
# developer blog, 2019): a chain of short kernels took 3.8 us per kernel (kernel + launch overheads) when launched
# one by one from a stream and 3.4 us when replayed from a graph, 0.4 us less per kernel.  The host-side dispatch
# (host_launch_s per op) disappears as well: one graph launch replaces a layer pass's launches
# (projection.workload.host_dispatch_s).
CUDA_GRAPH_GAP_SAVING_S = 0.4e-6
# GPU-side gap between two dependent kernels already queued on one stream, when the host is not what sets the pace:
# the same measurement replays a chain of 2.9 us kernels from a CUDA graph at 3.4 us per kernel, so 3.4 - 2.9 =
# 0.5 us per kernel is the GPU's own launch-to-launch gap (NVIDIA "Getting Started with CUDA Graphs", A. Gray, 2019).
# A lower bound for any tiny kernel or memset in a chain: its own run time is not counted.
GPU_KERNEL_GAP_S = 3.4e-6 - 2.9e-6
# Chips whose FP8 tensor-core GEMMs take non-TN operand layouts, so a per-tensor-scaled FP8 tensor needs no transposed
# copy for the backward GEMMs: Transformer Engine's ``nvte_is_non_tn_fp8_gemm_supported`` is true for compute
# capability 10.x-11.x and >= 13.0 (NVIDIA/TransformerEngine@v2.7 transformer_engine/common/transformer_engine.cpp),
# i.e. datacenter Blackwell (SM100 B200/GB200, SM103 B300/GB300); Hopper (SM90) is TN-only.  Then
# ``Float8CurrentScalingQuantizer::create_tensor`` allocates the row-wise data and no transpose
# (``with_transpose = columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported()``, pytorch/csrc/quantizer.cpp).
NON_TN_FP8_GEMM_FAMILIES = frozenset({"blackwell", "blackwell-ultra"})


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
    exp_per_s: float = 0.0           # softmax exponentials per second (SFU_EXP_PER_CLOCK_PER_SM); 0 = no such bound
    eager_elementwise: bool = False  # the framework runs a block's norms, rotary embedding and activation unfused
    unfused_attention: bool = False  # attention_backend "unfused": scores materialised (unfused_attention_fwd_bwd_s)
    cuda_graphs: bool = False        # a layer's kernels replay from one graph: one host launch per layer pass
    fp8_transpose_free: bool = False  # per-tensor FP8 GEMMs take non-TN layouts: no transposed FP8 copy (Blackwell)


def device_rates(hardware: HardwareSpec, profile: DeviceProfile, precision: str,
                 compute_multiplier: float = 1.0, host_launch_s: float = 0.0,
                 attention_multiplier: float = 1.0, eager_elementwise: bool = False, *,
                 unfused_attention: bool = False, cuda_graphs: bool = False) -> DeviceRates:
    """Resolve peak rates and efficiencies for a precision recipe (times a framework's compute multiplier).

    FP8 and FP4 GEMMs never reach a higher fraction of their peak than 16-bit GEMMs do (the narrower
    recipe only adds quantisation and scaling work), so their efficiency is capped at the 16-bit one.
    ``host_launch_s`` is the framework's host dispatch cost per kernel (0 for compiled or graph-captured steps).
    ``attention_multiplier``: the speed of the framework's attention kernel on this chip relative to the kernel
    the profile's attention efficiency describes (``FrameworkProfile.attention_speed``).
    ``eager_elementwise``: the framework's ``eager_elementwise`` (projection.workload.eager_elementwise_bytes).
    ``unfused_attention`` / ``cuda_graphs``: the resolved switches (projection.switches); CUDA graphs shorten the
    per-kernel launch gap by ``CUDA_GRAPH_GAP_SAVING_S``.  ``fp8_transpose_free`` is the chip's (:func:`fp8_transpose_free`).
    """
    low = precision not in ("bf16", "fp16")
    sixteen = hardware.peak_flops_for("fp16" if precision == "fp16" else "bf16")
    return DeviceRates(
        peak_flops_per_s=hardware.peak_flops_for(precision),
        peak_16bit_flops_per_s=sixteen,
        gemm_efficiency=min(1.0, compute_multiplier * block_scaling_fraction(hardware, precision) * (
            min(profile.fp4_gemm_efficiency, profile.low_precision_gemm_efficiency, profile.gemm_efficiency)
            if precision == "nvfp4"
            else min(profile.low_precision_gemm_efficiency, profile.gemm_efficiency) if low
            else profile.gemm_efficiency)),
        hbm_bytes_per_s=hardware.hbm_bandwidth_bytes_per_s * profile.memory_efficiency,
        num_compute_units=hardware.num_compute_units,
        tile_m=profile.tile_m,
        tile_n=profile.tile_n,
        kernel_overhead_s=(max(0.0, profile.kernel_overhead_s - CUDA_GRAPH_GAP_SAVING_S) if cuda_graphs
                           else profile.kernel_overhead_s),
        attention_efficiency=min(1.0, profile.attention_efficiency * compute_multiplier * attention_multiplier),
        moe_efficiency=profile.moe_efficiency,
        moe_layer_overhead_s=profile.moe_layer_overhead_s,
        gemm_operand_bytes=0.5 if precision == "nvfp4" else 1.0 if low else 2.0,
        host_launch_s=host_launch_s,
        exp_per_s=(hardware.num_compute_units * hardware.boost_clock_ghz * 1e9
                   * SFU_EXP_PER_CLOCK_PER_SM.get(hardware.family, 0)),
        eager_elementwise=eager_elementwise,
        unfused_attention=unfused_attention,
        cuda_graphs=cuda_graphs,
        fp8_transpose_free=fp8_transpose_free(hardware),
    )


def fp8_transpose_free(hardware: HardwareSpec) -> bool:
    """True when the chip's FP8 GEMMs take non-TN layouts, so per-tensor FP8 keeps no transposed copy
    (NON_TN_FP8_GEMM_FAMILIES: NVIDIA datacenter Blackwell)."""
    return hardware.vendor == "nvidia" and hardware.family in NON_TN_FP8_GEMM_FAMILIES


def block_scaling_fraction(hardware: HardwareSpec, precision: str) -> float:
    """GEMM throughput of a block-scaled FP8 recipe relative to per-tensor FP8 on this chip (1 for the others).

    See MX_GEMM_FRACTION: on NVIDIA chips with native MX (Blackwell) mxfp8 and fp8-blockwise (emulated with
    MXFP8) run at MX_GEMM_FRACTION; on NVIDIA chips without it (Hopper) fp8-blockwise is software-emulated.
    """
    if hardware.vendor != "nvidia" or precision not in ("mxfp8", "fp8-blockwise"):
        return 1.0
    if "mxfp8" in hardware.supported_precisions:
        return MX_GEMM_FRACTION
    return HOPPER_BLOCKWISE_GEMM_FRACTION


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


def attention_fwd_bwd_s(flops_fwd: float, rates: DeviceRates, scores: float = 0.0) -> tuple[float, float]:
    """(forward, backward) time of flash attention with ``flops_fwd`` forward FLOPs, seconds.

    ``scores``: attention scores computed (one softmax exponential each, forward and backward); each pass takes
    the longer of its MMAs and its exponentials (SFU_EXP_PER_CLOCK_PER_SM), which the kernel overlaps, at the
    profile's attention efficiency.
    """
    if flops_fwd <= 0:
        return 0.0, 0.0
    mma_fwd = flops_fwd / rates.peak_16bit_flops_per_s
    mma_bwd = ATTENTION_BACKWARD_FLOP_RATIO * mma_fwd / ATTENTION_BACKWARD_EFFICIENCY
    exps = scores / rates.exp_per_s if rates.exp_per_s > 0 else 0.0
    fwd = max(mma_fwd, exps) / rates.attention_efficiency + rates.kernel_overhead_s
    bwd = max(mma_bwd, exps) / rates.attention_efficiency
    return fwd, bwd + 2 * rates.kernel_overhead_s


# Unfused (pre-flash) attention as Megatron-LM's CoreAttention runs it (NVIDIA/Megatron-LM v2.x
# megatron/model/transformer.py ParallelAttention.forward, the attention DeepSpeed's 2021 GPT training used):
# torch.baddbmm QK^T into a 16-bit score tensor, FusedScaleMaskSoftmax (one fused kernel: read scores, write
# probabilities, 2 + 2 B per score), attention dropout (read 2, write 2, and its 1-byte mask), torch.bmm with V.
# The backward runs the dropout backward (read gradient 2 and mask 1, write 2) and the fused softmax backward
# (read probabilities 2 and gradient 2, write 2): 5 + 6 B per score; the four score GEMMs (dP = dO V^T,
# dV = P^T dO, dQ = dS K, dK = dS^T Q) are charged as GEMMs.  Without dropout the dropout passes drop out.
UNFUSED_SOFTMAX_FWD_BYTES = 4.0
UNFUSED_SOFTMAX_BWD_BYTES = 6.0
UNFUSED_DROPOUT_FWD_BYTES = 5.0
UNFUSED_DROPOUT_BWD_BYTES = 5.0


def unfused_attention_fwd_bwd_s(batch_heads: float, seq_q: float, seq_k: float, d_qk: float, d_v: float,
                                rates: DeviceRates, *, dropout: bool) -> tuple[float, float]:
    """(forward, backward) seconds of attention without a flash kernel, for ``batch_heads`` (micro-batch x local
    heads) score matrices of ``seq_q x seq_k``: batched GEMMs at the GEMM rate (roofline, tile/wave model) and
    the softmax / dropout passes over the materialised 16-bit scores at the streaming rate."""
    if batch_heads <= 0 or seq_q <= 0 or seq_k <= 0:
        return 0.0, 0.0
    g = int(round(batch_heads))
    scores = batch_heads * seq_q * seq_k
    fwd_bytes = UNFUSED_SOFTMAX_FWD_BYTES + (UNFUSED_DROPOUT_FWD_BYTES if dropout else 0.0)
    bwd_bytes = UNFUSED_SOFTMAX_BWD_BYTES + (UNFUSED_DROPOUT_BWD_BYTES if dropout else 0.0)
    kernels = 1 + (1 if dropout else 0)
    fwd = (gemm_s(seq_q, seq_k, d_qk, rates, groups=g)          # S = Q K^T
           + gemm_s(seq_q, d_v, seq_k, rates, groups=g)         # O = P V
           + streaming_s(fwd_bytes * scores, kernels, rates))
    bwd = (gemm_s(seq_q, seq_k, d_v, rates, groups=g)           # dP = dO V^T
           + gemm_s(seq_k, d_v, seq_q, rates, groups=g)         # dV = P^T dO
           + gemm_s(seq_q, d_qk, seq_k, rates, groups=g)        # dQ = dS K
           + gemm_s(seq_k, d_qk, seq_q, rates, groups=g)        # dK = dS^T Q
           + streaming_s(bwd_bytes * scores, kernels, rates))
    return fwd, bwd


def streaming_s(num_bytes: float, num_kernels: int, rates: DeviceRates) -> float:
    """Memory-bound element-wise work: bytes moved at achievable HBM bandwidth plus kernel costs."""
    return num_bytes / rates.hbm_bytes_per_s + num_kernels * rates.kernel_overhead_s
