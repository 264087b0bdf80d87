"""Per-layer workload: FP8 cast traffic follows the GEMM inputs actually cast (routed copies in MoE layers)."""

from __future__ import annotations

import pytest

from projection.model_spec import load_model
from projection.workload import fp8_cast_elements


def test_dense_layer_casts_qkv_proj_fc1_fc2_inputs() -> None:
    model = load_model("llama3-8b")  # h 4096, 32 query heads x 128, FFN 14336
    tokens, tp = 8192.0, 2
    expected = tokens * (4096 + 4096 / tp) + tokens * (4096 + 14336 / tp)
    assert fp8_cast_elements(model, tokens, tp, routed=0.0) == pytest.approx(expected)


def test_moe_layer_casts_each_routed_copy_at_the_expert_width() -> None:
    model = load_model("qwen3-30b-a3b")  # top-8 of 128 experts, expert FFN 768, dense FFN 6144 unused
    tokens = 4096.0
    routed = tokens * model.top_k
    attention = tokens * (model.hidden_size + model.q_width)
    got = fp8_cast_elements(model, tokens, 1, routed=routed)
    assert got == pytest.approx(attention + routed * (model.hidden_size + model.moe_ffn_hidden_size))
    # eight routed copies cost more casting than one dense MLP input of the same tokens would
    assert got > fp8_cast_elements(model, tokens, 1, routed=0.0)
    # expert tensor parallelism splits the expert width
    assert fp8_cast_elements(model, tokens, 1, routed=routed, etp=2) == pytest.approx(
        attention + routed * (model.hidden_size + model.moe_ffn_hidden_size / 2))
