"""The Blackwell 16-bit GEMM prior against the public kernel measurement it cites.

projection/catalog/priors/priors.yaml [te-gemm]: Transformer Engine's GEMM profiling tutorial
(NVIDIA/TransformerEngine@8f2e6357 docs/examples/gemm_profiling/gemm_profiling.rst), NVIDIA B300, the 12 GEMMs of
a hidden 4096 / FFN 16384 layer at 15,872 tokens, pre-quantized inputs: 13.102 ms per layer in BF16.  The tile/wave
GEMM model of projection/compute.py with the blackwell / blackwell-ultra prior must reproduce it; removing the
prior (DeviceProfile default 0.75: 11.8 ms) or zeroing it breaks the test.  evals/data/CHECKS.md entry 47.
"""

from __future__ import annotations

import pytest

from projection.compute import device_rates, gemm_s
from projection.hardware import load_hardware
from projection.profile_priors import cited_prior, prior_profile

TOKENS = 15_872
# (tokens, in features, out features) of the forward GEMMs: QKV, attention out, MLP up, MLP down.
FORWARD = ((TOKENS, 4096, 12288), (TOKENS, 4096, 4096), (TOKENS, 4096, 16384), (TOKENS, 16384, 4096))
TE_B300_BF16_LAYER_S = 13.102e-3


def _bf16_layer_s(group: str) -> float:
    """Projected time of the 12 GEMMs (forward, input and weight gradients) of the TE tutorial's layer on a B300."""
    profile = prior_profile(group).model_copy(update={"kernel_overhead_s": 0.0})
    rates = device_rates(load_hardware("b300"), profile, "bf16")
    return sum(gemm_s(m, n, k, rates) + gemm_s(m, k, n, rates) + gemm_s(k, n, m, rates) for m, k, n in FORWARD)


@pytest.mark.parametrize("group", ["b300", "b200", "gb300", "gb200"])
def test_blackwell_bf16_prior_reproduces_transformer_engine_b300_gemm_time(group: str) -> None:
    assert cited_prior(group, "gemm_efficiency")
    assert _bf16_layer_s(group) == pytest.approx(TE_B300_BF16_LAYER_S, rel=0.02)
