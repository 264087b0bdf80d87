"""The Blackwell GEMM priors and the FP8 : 16-bit band against the public kernel measurements they cite.

projection/catalog/priors/priors.yaml [te-gemm]: Transformer Engine's GEMM profiling tutorial
(NVIDIA/TransformerEngine@8f2e6357 docs/examples/gemm_profiling/gemm_profiling.rst), B300, the 12 GEMMs of a
hidden 4096 / FFN 16384 layer at 15,872 tokens, pre-quantized inputs: 13.102 ms BF16, 6.812 ms FP8 current
scaling, 7.161 ms MXFP8 per layer.  [mamf-bw]: maximum achievable matmul TFLOPS (stas00/ml-engineering, read in
evals/data/CHECKS.md entries 45 and 47).  Removing or zeroing either prior breaks these tests.
"""

from __future__ import annotations

import pytest

from projection.compute import device_rates, gemm_s
from projection.hardware import load_hardware
from projection.profile_priors import physical, precision_ratio_band, prior_profile

TOKENS = 15_872
# (tokens, in features, out features) of the forward GEMMs: QKV, attention out, MLP up, MLP down.
FORWARD = ((TOKENS, 4096, 12288), (TOKENS, 4096, 4096), (TOKENS, 4096, 16384), (TOKENS, 16384, 4096))
TE_B300_LAYER_S = {"bf16": 13.102e-3, "fp8": 6.812e-3, "mxfp8": 7.161e-3}
# Per-tensor FP8 over BF16 fraction of own peak: [mamf-bw] B300, B200, GB200; [te-gemm] B300.
MEASURED_RATIOS = (3353.3 / 4500 / (1769 / 2250), 3432.5 / 4500 / (1745 / 2250), 3615.6 / 5000 / (1822 / 2500),
                   13.102 / 6.812 / 2)


def _layer_s(group: str, precision: str) -> float:
    """Projected time of the 12 GEMMs (forward, input and weight gradients) of the TE tutorial's layer."""
    profile = prior_profile(group).model_copy(update={"kernel_overhead_s": 0.0})
    rates = device_rates(load_hardware("b300"), profile, precision)
    return sum(gemm_s(m, n, k, rates) + gemm_s(m, k, n, rates) + gemm_s(k, n, m, rates) for m, k, n in FORWARD)


@pytest.mark.parametrize("group", ["b300", "b200"])
@pytest.mark.parametrize("precision", ["bf16", "fp8", "mxfp8"])
def test_blackwell_prior_reproduces_transformer_engine_b300_gemm_times(group: str, precision: str) -> None:
    assert _layer_s(group, precision) == pytest.approx(TE_B300_LAYER_S[precision], rel=0.03)


def test_fp8_to_16bit_band_spans_the_measured_blackwell_pairs() -> None:
    for group in ("b200", "gb200", "b300", "gb300"):
        assert precision_ratio_band(group) == pytest.approx((min(MEASURED_RATIOS), max(MEASURED_RATIOS)), abs=2e-3)
    assert precision_ratio_band("h100-sxm") == (0.0, 1.0)


def test_physical_keeps_blackwell_fp8_inside_the_measured_band() -> None:
    low, high = precision_ratio_band("b200")
    equal = physical(prior_profile("b200").model_copy(update={"gemm_efficiency": 0.6,
                                                              "low_precision_gemm_efficiency": 0.6}))
    assert equal.low_precision_gemm_efficiency == pytest.approx(high * 0.6)
    far = physical(prior_profile("b300").model_copy(update={"gemm_efficiency": 0.75,
                                                            "low_precision_gemm_efficiency": 0.55}))
    assert far.low_precision_gemm_efficiency == pytest.approx(low * 0.75)
    hopper = physical(prior_profile("h100-sxm").model_copy(update={"gemm_efficiency": 0.7,
                                                                   "low_precision_gemm_efficiency": 0.7}))
    assert hopper.low_precision_gemm_efficiency == 0.7
