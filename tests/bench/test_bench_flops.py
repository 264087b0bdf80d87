"""FLOP parity: every benchmarked layer does the forward FLOPs the engine charges for the same shape.

The benchmark's GEMMs are counted by torch's FlopCounterMode on the meta device (the real
modules, nothing computed); its attention from the pairs its kernels compute. The engine's
figure is ``LayerCost.flops_fwd`` of ``projection.workload.layer_cost``. They agree up to the
causal diagonal (S/2 pairs per head of S^2/2: relative 1/S).
"""

from __future__ import annotations

import pytest

from bench.analytic import analytic_layout, layer_kinds
from bench.layer_timing import attention_flops, layer_flops
from bench.shapes import head_shape, layer_shape
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig

CASES = [
    ("llama3.1-8b", 8, dict(seq_len=8192, mbs=2, gbs=64)),
    ("llama2-70b", 8, dict(tp=2, seq_len=8192, gbs=8, finetune="lora", precision="fp8", sequence_parallel=True)),
    ("llama2-70b", 8, dict(tp=1, cp=2, seq_len=8192, gbs=8)),                         # CP rank
    ("llama3.1-405b", 512, dict(tp=4, cp=2, pp=8, vpp=8, seq_len=8192, gbs=1152, sequence_parallel=True)),
    ("gpt-oss-20b", 8, dict(seq_len=4096, gbs=8)),                                     # sliding window 128
    ("mixtral-8x7b", 64, dict(ep=8, pp=4, seq_len=4096, gbs=256)),
    ("deepseek-v3", 256, dict(ep=64, pp=4, seq_len=4096, gbs=256)),                  # MLA + shared experts
    ("qwen3-30b-a3b", 16, dict(tp=2, ep=4, seq_len=4096, gbs=16, sequence_parallel=True)),   # SP router
]


@pytest.mark.parametrize(("model_id", "gpus", "layout"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_benchmarked_layer_flops_equal_the_engines(model_id: str, gpus: int, layout: dict) -> None:
    model = load_model(model_id)
    config = TrainingConfig(**layout)
    view = analytic_layout(model, Cluster(gpu="h200", num_gpus=gpus), config)
    for kind, layer in layer_kinds(model).items():
        shape = layer_shape(model, config, view.dims, layer)
        engine = view.costs[kind].flops_fwd
        assert layer_flops(shape) == pytest.approx(engine, rel=2.0 / shape.seq), (kind, shape)


def test_parity_fails_when_cp_ranks_attend_only_their_local_keys() -> None:
    """The old bench (local queries x local keys) under-counted CP attention: the check catches it."""
    from dataclasses import replace

    model = load_model("llama2-70b")
    config = TrainingConfig(tp=1, cp=4, seq_len=8192, gbs=8)
    view = analytic_layout(model, Cluster(gpu="h200", num_gpus=8), config)
    shape = layer_shape(model, config, view.dims, 0)
    engine = view.costs[(False, 0)].flops_fwd
    assert layer_flops(replace(shape, cp=1)) != pytest.approx(engine, rel=0.01)
    assert attention_flops(shape) == pytest.approx(4 * attention_flops(replace(shape, cp=1)), rel=1e-3)


def test_head_shape_matches_the_engines_lm_head() -> None:
    model = load_model("llama3.1-8b")
    config = TrainingConfig(tp=4, cp=2, seq_len=8192, gbs=8)
    view = analytic_layout(model, Cluster(gpu="h200", num_gpus=8), config)
    head = head_shape(model, config, view.dims)
    assert (head.tokens, head.vocab) == (8192 // 2, -(-model.vocab_size // 4))
