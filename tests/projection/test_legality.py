"""Legality: one readable reason per broken framework rule; legal_axes lists only legal values."""

from __future__ import annotations

import pytest

from projection.hardware import load_hardware
from projection.legality import layout_violations, legal_axes
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig

LLAMA70 = load_model("llama3-70b")
MIXTRAL = load_model("mixtral-8x7b")
H100 = load_hardware("h100-sxm")
A100 = load_hardware("a100-80gb")


def _reasons(model, hw, gpus, **config):
    return layout_violations(model, hw, Cluster(gpu=hw.id, num_gpus=gpus), TrainingConfig(**config))


def test_legal_layout_has_no_reasons() -> None:
    assert _reasons(LLAMA70, H100, 64, tp=8, pp=4, vpp=5, mbs=1, gbs=128, seq_len=8192,
                    sequence_parallel=True) == []


@pytest.mark.parametrize(("config", "fragment"), [
    ({"tp": 3}, "does not divide num_attention_heads"),
    ({"tp": 16}, "exceeds gpus_per_node"),
    ({"pp": 3}, "does not divide num_gpus"),
    ({"pp": 64, "vpp": 2}, "exceeds num_layers"),
    ({"vpp": 2}, "needs pp > 1"),
    ({"gbs": 100}, "not divisible by mbs*dp"),
    ({"cp": 2, "seq_len": 4098}, "not divisible by 2*cp"),
    ({"ep": 2}, "need a MoE model"),
    ({"recompute": "selective", "recompute_num_layers": 2}, "needs recompute=full"),
    ({"pp": 2, "pp_schedule": "zbv"}, "zbv needs vpp=2"),
    ({"zero": 1, "fsdp_size": 8}, "needs zero=3"),
])
def test_each_rule_gives_one_reason(config, fragment) -> None:
    base = {"gbs": 64, "seq_len": 4096}
    reasons = _reasons(LLAMA70, H100, 64, **(base | config))
    assert any(fragment in r for r in reasons), reasons


def test_fp8_not_on_a100() -> None:
    reasons = _reasons(LLAMA70, A100, 64, tp=8, gbs=64, precision="fp8")
    assert reasons == ["precision fp8 not supported on a100-80gb (supported: bf16, fp16)"]


def test_moe_rules() -> None:
    assert any("does not divide num_experts=8" in r for r in _reasons(MIXTRAL, H100, 64, ep=3, gbs=64))
    assert _reasons(MIXTRAL, H100, 64, ep=8, gbs=64) == []


def test_several_violations_are_all_reported() -> None:
    reasons = _reasons(LLAMA70, A100, 64, tp=3, gbs=7, precision="fp8")
    assert len(reasons) >= 3


def test_legal_axes_values_are_legal_alone() -> None:
    cluster = Cluster(gpu="h100-sxm", num_gpus=64)
    axes = legal_axes(LLAMA70, H100, cluster, seq_len=8192)
    assert axes.tp == (1, 2, 4, 8)
    assert 80 % axes.pp[-1] == 0 or (80 + 2) % axes.pp[-1] == 0
    assert all(64 % p == 0 for p in axes.pp)
    assert axes.ep == (1,)
    assert "fp8" in axes.precision and "nvfp4" not in axes.precision
    assert legal_axes(MIXTRAL, H100, cluster).ep == (1, 2, 4, 8)
