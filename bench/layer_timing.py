"""Time one decoder layer on the local device: forward, backward, attention core, routed experts, AdamW.

GPU times come from ``torch.cuda.Event`` pairs (CUDA and ROCm alike) after warm-up, CPU
times from ``time.perf_counter``; each figure is the median over the timed iterations.
Backward is timed as one B+W pass (autograd computes both together); the caller splits it.
With frozen weights (LoRA fine-tuning: the engine charges no weight gradients) backward is B only.
Each run records the pinned attention backend, the precision the GEMMs really ran in, how the
routed experts ran (grouped GEMM or a per-expert loop), and the layer's useful forward FLOPs
(:func:`layer_flops`, the quantity ``projection.workload.layer_cost`` calls ``flops_fwd``).

Imports only torch and the standard library (the prepared device script uses it).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bench.attention import attended_pairs
from bench.fp8 import fp8_supported
from bench.layers import DecoderLayer, Head, MoEMLP
from bench.shapes import HeadShape, LayerShape


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
    attention_backend: str = ""       # flash | cudnn | efficient | math | flex (pinned for every timed call)
    gemm_precision: str = ""          # what the dense GEMMs ran in: fp8 | bf16 | fp32 | mixed
    expert_precision: str = ""        # routed experts ('' for dense layers)
    expert_gemm: str = ""             # grouped_mm | per-expert loop (why)
    flops_fwd: float = 0.0            # useful forward FLOPs of the layer (engine's definition)
    attention_flops_fwd: float = 0.0

    @property
    def forward_tflops(self) -> float:
        """Achieved forward TFLOP/s (useful FLOPs)."""
        return self.flops_fwd / self.forward_s / 1e12 if self.forward_s > 0 else 0.0

    @property
    def attention_tflops(self) -> float:
        """Achieved attention-core forward TFLOP/s (useful FLOPs)."""
        return self.attention_flops_fwd / self.attention_forward_s / 1e12 if self.attention_forward_s > 0 else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class HeadRun:
    """Median seconds of the embedding and the final norm + LM head + cross-entropy."""

    embedding_forward_s: float
    embedding_backward_s: float
    head_forward_s: float             # norm + LM head + loss
    head_backward_s: float            # B + W
    gemm_precision: str
    flops_fwd: float                  # LM head GEMM


def attention_flops(shape: LayerShape) -> float:
    """Useful forward FLOPs of the attention core: 2 per multiply-add over QK^T (D) and PV (Dv)."""
    return 2.0 * shape.batch * shape.heads * attended_pairs(shape.seq, shape.cp, shape.window) * (
        shape.head_dim + shape.v_head_dim)


def _grouped_mm_flops(a_shape: Any, b_shape: Any, *args: Any, **kwargs: Any) -> int:
    """``_grouped_mm(a (M, K), b (E, K, N), offs)``: each row meets one expert's (K, N)."""
    return 2 * a_shape[0] * a_shape[-1] * b_shape[-1]


def layer_flops(shape: LayerShape) -> float:
    """Useful forward FLOPs of the benchmark layer of ``shape``: its GEMMs counted by torch's
    ``FlopCounterMode`` on the meta device (nothing is computed), plus :func:`attention_flops`."""
    from torch.utils.flop_counter import FlopCounterMode

    meta = torch.device("meta")
    layer = DecoderLayer(shape, meta, torch.bfloat16)
    layer.attention.count_only = True
    x = torch.empty(shape.batch, shape.seq, shape.hidden, device=meta, dtype=torch.bfloat16)
    mapping = {torch.ops.aten._grouped_mm: _grouped_mm_flops} if hasattr(torch.ops.aten, "_grouped_mm") else {}
    with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        layer(x)
    return float(counter.get_total_flops()) + attention_flops(shape)


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
    """AdamW step over fp32 master copies of the layer's trainable parameters (fused on GPUs)."""
    master = [p.detach().float().clone().requires_grad_() for p in layer.parameters() if p.requires_grad]
    if not master:
        return 0.0
    for p in master:
        p.grad = torch.randn_like(p)
    optimizer = torch.optim.AdamW(master, lr=1e-4, fused=device.type == "cuda")
    return time_call(optimizer.step, device=device, warmup=warmup, iters=iters)


def _freeze(layer: torch.nn.Module) -> None:
    """Frozen base model (LoRA): no parameter gets a gradient (the rank-16 adapters are negligible, and the
    engine charges neither weight gradients nor an optimizer step for them)."""
    for p in layer.parameters():
        p.requires_grad_(False)


def time_layer(shape: LayerShape, *, device: torch.device, dtype: torch.dtype, warmup: int = 3,
               iters: int = 10, seed: int = 0, fp8: bool = False, frozen: bool = False,
               flex: bool = True, flops: float | None = None) -> LayerRun:
    """Build one layer of ``shape`` on ``device`` and time it.

    ``fp8``: dense GEMMs through :class:`bench.fp8.Fp8Linear` when FP8 runs here (else 16-bit,
    and ``gemm_precision`` says so). ``frozen``: base weights take no gradients (LoRA).
    ``flops``: the layer's useful forward FLOPs when already known (else counted, ~1 s of CPU).
    """
    torch.manual_seed(seed)
    clock = _Clock(device)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    layer = DecoderLayer(shape, device, dtype, fp8=fp8 and fp8_supported(device), flex=flex)
    if frozen:
        _freeze(layer)
    params = [p for p in layer.parameters() if p.requires_grad]
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

        expert_fwd, expert_bwd = _time_fwd_bwd(mlp.experts, fresh_routed,
                                               [p for p in mlp.experts.parameters() if p.requires_grad], clock,
                                               warmup, iters)
    optimizer = _time_optimizer(layer, device, warmup, iters)
    moe = isinstance(layer.mlp, MoEMLP)
    return LayerRun(
        forward_s=fwd, backward_s=bwd, attention_forward_s=attn_fwd, expert_forward_s=expert_fwd,
        expert_backward_s=expert_bwd, optimizer_s=optimizer, num_params=sum(p.numel() for p in layer.parameters()),
        peak_memory_bytes=peak, attention_backend=attention.attn.backend or "",
        gemm_precision=layer.gemm_precision(dtype),
        expert_precision=str(dtype).removeprefix("torch.") if moe else "", expert_gemm=layer.expert_path(),
        flops_fwd=layer_flops(shape) if flops is None else flops, attention_flops_fwd=attention_flops(shape),
    )


def time_head(shape: HeadShape, *, device: torch.device, dtype: torch.dtype, warmup: int = 3, iters: int = 10,
              seed: int = 0, fp8: bool = False, frozen: bool = False) -> HeadRun:
    """Time the embedding (forward, backward) and the norm + LM head + loss (forward, backward) of one micro-batch."""
    torch.manual_seed(seed)
    clock = _Clock(device)
    head = Head(shape, device, dtype, fp8=fp8 and fp8_supported(device))
    if frozen:
        head.embedding.weight.requires_grad_(False)
        head.lm_head.weight.requires_grad_(False)
    emb_params = [p for p in head.embedding.parameters() if p.requires_grad]
    if emb_params:
        emb_fwd, emb_bwd = _time_fwd_bwd(head.embed, tuple, emb_params, clock, warmup, iters)
    else:
        emb_fwd, emb_bwd = time_call(head.embed, device=device, warmup=warmup, iters=iters), 0.0
    x = torch.randn(shape.tokens, shape.hidden, device=device, dtype=dtype)

    def fresh_x() -> tuple[torch.Tensor]:
        return (x.detach().requires_grad_(),)

    params = [p for p in head.parameters() if p.requires_grad]
    loss_fwd, loss_bwd = _time_fwd_bwd(head.loss, fresh_x, params, clock, warmup, iters)
    fp8_ran = getattr(head.lm_head, "fp8_active", False)
    return HeadRun(embedding_forward_s=emb_fwd, embedding_backward_s=emb_bwd, head_forward_s=loss_fwd,
                   head_backward_s=loss_bwd, gemm_precision="fp8" if fp8_ran else str(dtype).removeprefix("torch."),
                   flops_fwd=2.0 * shape.tokens * shape.hidden * shape.vocab)
