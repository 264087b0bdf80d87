"""Reference layers: real per-GPU shapes match the engine's parameter counts; tiny shapes time on CPU."""

from __future__ import annotations

import math

import pytest
import torch

from bench.layer_timing import time_layer
from bench.layers import DecoderLayer, RoutedExperts
from bench.shapes import layer_shape, shrink
from projection.layout import parallel_dims
from projection.model_spec import load_model
from projection.params import layer_params
from projection.training_config import Cluster, TrainingConfig

CPU = torch.device("cpu")
LAYOUTS = [
    ("llama3-8b", dict(tp=2, gbs=4)),
    ("mixtral-8x7b", dict(ep=2, gbs=8)),
    ("deepseek-v3", dict(ep=8, gbs=8)),        # MLA, dense first layers, shared experts
    ("gpt-oss-20b", dict(gbs=8)),              # sliding-window layers
    ("gpt3-175b", dict(tp=8, gbs=8)),          # plain GELU MLP, LayerNorm, biases
]


def _shapes(name: str, config: dict):
    model, cfg = load_model(name), TrainingConfig(**config)
    dims = parallel_dims(cfg, Cluster(gpu="h100-sxm", num_gpus=8))
    return model, dims, [layer_shape(model, cfg, dims, layer) for layer in sorted({0, model.num_layers - 1})]


@pytest.mark.parametrize(("name", "config"), LAYOUTS)
def test_real_shapes_hold_the_engines_parameters_per_gpu(name: str, config: dict) -> None:
    model, dims, shapes = _shapes(name, config)
    for layer, shape in zip(sorted({0, model.num_layers - 1}), shapes, strict=True):
        built = sum(p.numel() for p in DecoderLayer(shape, "meta", torch.bfloat16).parameters())
        p = layer_params(model, layer)
        expected = (p.attention + p.mlp + p.shared_experts) / dims.tp + p.replicated + p.experts / (dims.ep * dims.etp)
        assert built == pytest.approx(expected, rel=1e-3)   # q/k norms and attention sinks are left out


@pytest.mark.parametrize(("name", "config"), LAYOUTS)
def test_tiny_layers_run_forward_and_backward_on_cpu(name: str, config: dict) -> None:
    _, _, shapes = _shapes(name, config)
    for shape in shapes:
        tiny = shrink(shape, max_hidden=64, max_tokens=32)
        assert tiny.hidden == 64 and tiny.tokens <= 32 and not tiny.representative
        run = time_layer(tiny, device=CPU, dtype=torch.float32, warmup=1, iters=2)
        for value in (run.forward_s, run.backward_s, run.attention_forward_s, run.optimizer_s):
            assert math.isfinite(value) and value > 0
        assert (run.expert_forward_s > 0) == tiny.moe
        assert run.num_params > 0 and run.peak_memory_bytes is None


@pytest.mark.parametrize("grouped", [True, False])
def test_routed_experts_match_a_plain_loop_over_experts(grouped: bool) -> None:
    _, _, shapes = _shapes("mixtral-8x7b", dict(ep=2, gbs=8))
    shape = shrink(shapes[0], max_hidden=64, max_tokens=32)
    torch.manual_seed(0)
    experts = RoutedExperts(shape, CPU, torch.float32)
    experts.grouped = grouped and experts.grouped   # grouped: torch._grouped_mm where it runs
    x = torch.randn(shape.tokens, shape.hidden)
    token = torch.arange(shape.routed_tokens) % shape.tokens
    gate = torch.rand(shape.routed_tokens)
    out = experts(x, token, gate)
    expected = torch.zeros_like(x)
    start = 0
    for e, count in enumerate(experts.counts):
        rows = slice(start, start + count)
        gate_up = x[token[rows]] @ experts.w1[e].T
        g, u = gate_up.chunk(2, dim=-1)
        y = (torch.nn.functional.silu(g) * u) @ experts.w2[e].T * gate[rows, None]
        expected.index_add_(0, token[rows], y)
        start += count
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
