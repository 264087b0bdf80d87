"""One local expert under Transformer Engine runs its expert GEMMs as dense GEMMs (projection/workload.py).

With num_experts == ep (Mixtral 8x7B at EP 8) Megatron-core's TEGroupedMLP hands GroupedLinear one GEMM
(``num_gemms`` = 1), which TE issues as one cublasLtMatmul; SequentialMLP runs the one expert as a plain MLP.
So the layer's fc1 / fc2 are priced by the dense tile/wave model at the dense GEMM efficiency, not at the
ragged grouped-GEMM efficiency ``moe_efficiency * M / (M + GROUPED_GEMM_HALF_M)``.  Two or more local experts,
and frameworks whose single-group call still goes through a grouped kernel, keep the grouped efficiency.
"""

from __future__ import annotations

import pytest

from projection import workload
from projection.compute import device_rates, gemm_fwd_bwd_s
from projection.device_profile import DeviceProfile
from projection.hardware import load_hardware
from projection.model_spec import load_model
from projection.workload import GROUPED_GEMM_HALF_M, single_expert_gemm

MIXTRAL = load_model("mixtral-8x7b")
B200 = load_hardware("b200")
PROFILE = DeviceProfile(hardware_id="b200", gemm_efficiency=0.6, low_precision_gemm_efficiency=0.6,
                        attention_efficiency=0.5, moe_efficiency=0.5, kernel_overhead_s=1e-5)
RATES = device_rates(B200, PROFILE, "bf16")


@pytest.fixture
def layer(b200_moe_layer):
    return lambda framework, ep: b200_moe_layer(MIXTRAL, framework, ep, RATES, mbs=2, gbs=256)


def _expert_gemms(routed_per_expert: float, experts: int, eff: float) -> tuple[float, float, float]:
    h, f = MIXTRAL.hidden_size, MIXTRAL.moe_ffn_hidden_size
    fc1 = gemm_fwd_bwd_s(routed_per_expert, 2 * f, h, RATES, groups=experts, efficiency=eff)
    fc2 = gemm_fwd_bwd_s(routed_per_expert, h, f, RATES, groups=experts, efficiency=eff)
    return tuple(a + b for a, b in zip(fc1, fc2, strict=True))  # type: ignore[return-value]


def test_rule_covers_one_te_expert_only() -> None:
    assert single_expert_gemm("nemo", 1) and single_expert_gemm("megatron", 1)
    assert not single_expert_gemm("megatron", 2)
    assert not single_expert_gemm("jax", 1)          # ragged_dot / megablox grouped kernel
    assert not single_expert_gemm("torchtitan", 1)   # torch._grouped_mm


def test_one_local_expert_prices_dense_gemms(monkeypatch: pytest.MonkeyPatch, layer) -> None:
    routed = 2 * 4096 * MIXTRAL.top_k              # mbs x seq x top_k token copies, all on the one expert
    grouped_eff = PROFILE.moe_efficiency * routed / (routed + GROUPED_GEMM_HALF_M)
    dense = _expert_gemms(routed, 1, 1.0)
    grouped = _expert_gemms(routed, 1, grouped_eff)
    with_rule = layer("nemo", 8)
    monkeypatch.setattr(workload, "single_expert_gemm", lambda framework, experts: False)
    without = layer("nemo", 8)
    assert without.fwd_s - with_rule.fwd_s == pytest.approx(grouped[0] - dense[0], rel=1e-9)
    assert without.bwd_input_s - with_rule.bwd_input_s == pytest.approx(grouped[1] - dense[1], rel=1e-9)
    assert without.bwd_weight_s - with_rule.bwd_weight_s == pytest.approx(grouped[2] - dense[2], rel=1e-9)
    assert with_rule.fwd_s < 0.9 * without.fwd_s      # the expert GEMMs are most of the layer


def test_two_local_experts_keep_grouped_efficiency(monkeypatch: pytest.MonkeyPatch, layer) -> None:
    with_rule = layer("nemo", 4)                   # 8 experts / EP 4: a grouped GEMM of 2
    monkeypatch.setattr(workload, "single_expert_gemm", lambda framework, experts: False)
    assert layer("nemo", 4).fwd_s == pytest.approx(with_rule.fwd_s)
