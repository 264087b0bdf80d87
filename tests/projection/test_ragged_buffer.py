"""MaxText's dropless expert-parallel path receives into a worst-case buffer (projection/workload.py).

The ragged all-to-all output holds ep * tokens * min(local experts, top_k) rows; every row is zero-filled
and moved by the local permute and unpermute, so larger EP costs HBM traffic even at the same routed tokens.
"""

from __future__ import annotations

import pytest

from projection.engine import project
from projection.layout import parallel_dims
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from projection.workload import ACT_BYTES, ragged_buffer_bytes

DSV3 = load_model("deepseek-v3")
CLUSTER = Cluster(gpu="mi355x", num_gpus=64)


def _config(ep: int, **overrides) -> TrainingConfig:
    base = {"framework": "jax", "mbs": 1, "gbs": 64, "seq_len": 4096, "zero": 3, "recompute": "full",
            "moe_routing": "dropless", "ep": ep}
    return TrainingConfig(**{**base, **overrides})


def _bytes(ep: int, **overrides) -> float:
    config = _config(ep, **overrides)
    dims = parallel_dims(config, CLUSTER)
    return ragged_buffer_bytes(DSV3, config, dims, 4096.0, DSV3.num_experts // ep, DSV3.moe_ffn_hidden_size)


def test_buffer_rows_follow_maxtext_sizing() -> None:
    h, f, k, tokens = DSV3.hidden_size, DSV3.moe_ffn_hidden_size, DSV3.top_k, 4096
    for ep in (8, 16, 32, 64):
        rows = ep * tokens * min(DSV3.num_experts // ep, k)
        padding = rows - tokens * k
        assert _bytes(ep) == pytest.approx(ACT_BYTES * (rows * 5 * h + padding * 3 * f))
    # 256 experts, top-8: the buffer stops growing once a GPU holds fewer than top_k experts
    assert _bytes(64) == pytest.approx(_bytes(32))
    assert _bytes(8) < _bytes(16) < _bytes(32)


def test_only_the_ragged_path_pays() -> None:
    assert _bytes(8, framework="megatron") == 0.0
    assert _bytes(8, moe_dispatcher="allgather") == 0.0
    assert _bytes(8, framework="megatron", moe_dispatcher="deepep") == 0.0
    assert _bytes(8, moe_routing="token-drop", moe_capacity_factor=1.25) == 0.0
    assert _bytes(1) == 0.0


def test_buffer_slows_the_step_by_its_bytes() -> None:
    # Same layout, Megatron-style exact receive vs the ragged path: the ragged one is slower, and the gap grows
    # with EP (the buffer's rows grow with EP until a GPU holds fewer than top_k experts).
    def gap(ep: int) -> float:
        ragged = project(DSV3, CLUSTER, _config(ep)).breakdown.compute_s
        exact = project(DSV3, CLUSTER, _config(ep, moe_dispatcher="allgather")).breakdown.compute_s
        return ragged - exact
    assert 0 < gap(8) < gap(16) < gap(32)


def test_deepep_buffer_follows_num_worst_tokens() -> None:
    # MaxText's DeepEP path: num_worst_tokens = ep * tokens received rows, fanned out top_k-way; 3 h-wide passes
    # per row, the padding rows' gated activation, and one fp32 fan-in row per received token.
    h, f, k, tokens = DSV3.hidden_size, DSV3.moe_ffn_hidden_size, DSV3.top_k, 4096
    for ep in (8, 16):
        received = ep * tokens
        rows = received * k
        padding = rows - tokens * k
        expected = ACT_BYTES * (rows * 3 * h + padding * 3 * f) + 4 * received * h
        assert _bytes(ep, moe_dispatcher="deepep") == pytest.approx(expected)
    # fewer passes than the ragged path's zero fill + permute + unpermute at the same rows (ep 8: 8 local-expert
    # slots = top_k)
    assert 0 < _bytes(8, moe_dispatcher="deepep") < _bytes(8)


def test_deepep_buffer_slows_the_step() -> None:
    # The term reaches the step: under MaxText the DeepEP path computes longer than an exact-receive dispatcher
    # (all-gather) at the same layout, by more at a larger per-device batch (the buffer scales with the tokens).
    def gap(mbs: int) -> float:
        def compute(dispatcher: str) -> float:
            config = _config(8, moe_dispatcher=dispatcher, mbs=mbs, gbs=64 * mbs)
            return project(DSV3, CLUSTER, config).breakdown.compute_s
        return compute("deepep") - compute("allgather")
    assert 0 < gap(1) < gap(4)
