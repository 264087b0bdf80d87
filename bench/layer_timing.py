"""Time one decoder layer on the local device: forward, backward, attention core, routed experts, AdamW.

GPU times come from ``torch.cuda.Event`` pairs (CUDA and ROCm alike) after warm-up, CPU
times from ``time.perf_counter``; each figure is the median over the timed iterations.
Backward is timed as one B+W pass (autograd computes both together); the caller splits it.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bench.layers import DecoderLayer, MoEMLP
from bench.shapes import LayerShape


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerRun:
    """Median times of one layer on one device, seconds; memory in bytes."""

    forward_s: float
    backward_s: float                 # B + W together
    attention_forward_s: float
    expert_forward_s: float           # 0 for dense layers
    expert_backward_s: float
    optimizer_s: float
    num_params: int
    peak_memory_bytes: int | None     # None on CPU


@contextlib.contextmanager
def cpu_threads(device_type: str, num_threads: int = 1) -> Iterator[None]:
    """Limit torch's CPU threads for tiny-shape CPU runs (thread start-up dwarfs the work), then restore."""
    if device_type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _Clock:
    """Marks on a device timeline: CUDA events on GPUs, perf_counter on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def seconds(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) * 1e-3 if self.cuda else end - start

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def time_call(fn: Callable[[], object], *, device: torch.device, warmup: int = 3, iters: int = 10) -> float:
    """Median seconds of ``fn()`` on ``device``'s timeline."""
    clock = _Clock(device)
    marks = []
    for i in range(warmup + iters):
        start = clock.mark()
        fn()
        end = clock.mark()
        if i >= warmup:
            marks.append((start, end))
    clock.sync()
    return statistics.median(clock.seconds(a, b) for a, b in marks)


def _time_fwd_bwd(forward: Callable[..., torch.Tensor], make_inputs: Callable[[], Sequence[torch.Tensor]],
                  params: Sequence[torch.nn.Parameter], clock: _Clock, warmup: int, iters: int,
                  backward: bool = True) -> tuple[float, float]:
    """Median forward and backward seconds of ``forward(*make_inputs())``."""
    marks = []
    grad = None
    for i in range(warmup + iters):
        inputs = make_inputs()
        start = clock.mark()
        out = forward(*inputs)
        mid = clock.mark()
        if backward:
            grad = torch.randn_like(out) if grad is None else grad
            out.backward(grad)
        end = clock.mark()
        if i >= warmup:
            marks.append((start, mid, end))
        for p in params:
            p.grad = None
        del out
    clock.sync()
    fwd = statistics.median(clock.seconds(a, b) for a, b, _ in marks)
    bwd = statistics.median(clock.seconds(b, c) for _, b, c in marks)
    return fwd, bwd


def _time_optimizer(layer: torch.nn.Module, device: torch.device, warmup: int, iters: int) -> float:
    """AdamW step over fp32 master copies of the layer's parameters (fused on GPUs)."""
    master = [p.detach().float().clone().requires_grad_() for p in layer.parameters()]
    for p in master:
        p.grad = torch.randn_like(p)
    optimizer = torch.optim.AdamW(master, lr=1e-4, fused=device.type == "cuda")
    return time_call(optimizer.step, device=device, warmup=warmup, iters=iters)


def time_layer(shape: LayerShape, *, device: torch.device, dtype: torch.dtype, warmup: int = 3,
               iters: int = 10, seed: int = 0) -> LayerRun:
    """Build one layer of ``shape`` on ``device`` and time it."""
    torch.manual_seed(seed)
    clock = _Clock(device)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    layer = DecoderLayer(shape, device, dtype)
    params = list(layer.parameters())
    x = torch.randn(shape.batch, shape.seq, shape.hidden, device=device, dtype=dtype)

    def fresh_x() -> tuple[torch.Tensor]:
        return (x.detach().requires_grad_(),)

    fwd, bwd = _time_fwd_bwd(layer, fresh_x, params, clock, warmup, iters)
    peak = int(torch.cuda.max_memory_allocated(device)) if cuda else None

    attention = layer.attention
    with torch.no_grad():
        q, k, v = attention.qkv_heads(x)

    def fresh_qkv() -> tuple[torch.Tensor, ...]:
        return tuple(t.detach().requires_grad_() for t in (q, k, v))

    attn_fwd, _ = _time_fwd_bwd(attention.core, fresh_qkv, [], clock, warmup, iters, backward=False)

    expert_fwd = expert_bwd = 0.0
    if isinstance(layer.mlp, MoEMLP):
        mlp = layer.mlp
        x_th = x.reshape(-1, shape.hidden)
        with torch.no_grad():
            token_r, gate_r = mlp.route(x_th)

        def fresh_routed() -> tuple[torch.Tensor, ...]:
            return x_th.detach().requires_grad_(), token_r, gate_r.detach().requires_grad_()

        expert_fwd, expert_bwd = _time_fwd_bwd(mlp.experts, fresh_routed, list(mlp.experts.parameters()), clock,
                                               warmup, iters)
    optimizer = _time_optimizer(layer, device, warmup, iters)
    return LayerRun(
        forward_s=fwd, backward_s=bwd, attention_forward_s=attn_fwd, expert_forward_s=expert_fwd,
        expert_backward_s=expert_bwd, optimizer_s=optimizer, num_params=sum(p.numel() for p in params),
        peak_memory_bytes=peak,
    )
