"""Host dispatch cost per op, measured on this CPU: ``projtune bench host``.

An eager PyTorch step issues one host-dispatched op per kernel (Python, autograd, the ATen dispatcher), then the
driver's launch call.  The engine prices a layer's host time as its launched ops times a per-op cost
(projection.workload.host_dispatch_s); this module measures that cost instead of fitting it:

1. a framework-like transformer block (the eager code of torchtitan / Hugging Face Llama: RMSNorm as
   float/pow/mean/rsqrt/mul, rotary embedding as complex multiply, SDPA, SwiGLU) runs forward and backward on the CPU
   with tiny tensors (hidden 64, 16 tokens), so the ops' own arithmetic is negligible and the wall time is dispatch;
2. a ``TorchDispatchMode`` counts the ATen ops of one forward + backward that would launch a kernel (views excluded:
   their dispatch time is charged to the kernels around them, as the engine counts launches);
3. per-op host cost = wall time per step / kernel ops per step, plus the driver's launch call, which a CPU run does not
   make: :data:`DRIVER_LAUNCH_S`.

Imports only torch and the standard library.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

# The driver's kernel launch call, which a CPU run does not make: NVIDIA "Getting Started with CUDA Graphs" (A. Gray,
# NVIDIA developer blog, 2019) launches a chain of 2.9 us kernels back to back from one stream at 3.8 us per kernel,
# i.e. the host's cudaLaunchKernel path, not the GPU, sets the pace: about 3.8 us - (3.4 us with graphs - 2.9 us)
# = 3.3 us of host launch time per kernel.  HIP's hipLaunchKernel path is taken as the same (no public figure here).
DRIVER_LAUNCH_S = 3.3e-6


class _Block(nn.Module):
    """An eager Llama-style decoder block (torchtitan / HF modeling_llama code paths), tiny."""

    def __init__(self, hidden: int = 64, heads: int = 4, ffn: int = 172) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.norm1 = nn.Parameter(torch.ones(hidden))
        self.norm2 = nn.Parameter(torch.ones(hidden))
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(hidden, hidden, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(hidden, ffn, bias=False), nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)

    @staticmethod
    def _rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).type_as(x) * weight

    def _rope(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(pairs * freqs).flatten(-2).type_as(x)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        y = self._rms(x, self.norm1)
        q, k, v = (w(y).view(b, s, self.heads, self.head_dim) for w in (self.wq, self.wk, self.wv))
        q, k = self._rope(q, freqs), self._rope(k, freqs)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, s, h))
        y = self._rms(x, self.norm2)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y))


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.ops += not func.is_view      # views (view, transpose, ...) launch no kernel: their cost joins the ops'
        return func(*args, **(kwargs or {}))


@dataclass(frozen=True, slots=True)
class HostBench:
    """What ``projtune bench host`` measured (seconds unless named)."""

    ops_per_step: int              # kernel-launching ATen ops of one block forward + backward (views excluded)
    step_s: float                  # median wall time of one forward + backward on this CPU
    dispatch_per_op_s: float       # step_s / ops_per_step: Python + autograd + ATen dispatch per op
    driver_launch_s: float         # DRIVER_LAUNCH_S (cited), not measured here
    host_op_s: float               # dispatch_per_op_s + driver_launch_s: the engine's per-op host cost
    threads: int                   # torch intra-op threads used (1: one launching thread, as a training rank)


def measure_host(iters: int = 50, warmup: int = 5) -> HostBench:
    """Time the eager block's forward + backward on this CPU and derive the per-op host cost (module docstring)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        block = _Block()
        x = torch.randn(1, 16, 64, requires_grad=True)
        angles = torch.outer(torch.arange(16.0), 1.0 / 10000 ** (torch.arange(0, 16, 2).float() / 16))
        freqs = torch.polar(torch.ones_like(angles), angles).view(1, 16, 1, 8)

        def step() -> None:
            block(x, freqs).sum().backward()

        for _ in range(warmup):
            step()
        with _Count() as counter:
            step()
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        step_s = sorted(times)[len(times) // 2]
        per_op = step_s / counter.ops
        return HostBench(ops_per_step=counter.ops, step_s=step_s, dispatch_per_op_s=per_op,
                         driver_launch_s=DRIVER_LAUNCH_S, host_op_s=per_op + DRIVER_LAUNCH_S, threads=1)
    finally:
        torch.set_num_threads(threads)
