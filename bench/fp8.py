"""FP8 linear layers through ``torch._scaled_mm`` with per-tensor dynamic scaling (torch + stdlib only).

Forward: input and weight cast to E4M3, ``_scaled_mm`` with their scales. Backward: the output
gradient cast to E5M2; data gradient ``dY @ W`` and weight gradient ``dY^T @ X`` are both FP8
GEMMs on transposed copies, as Transformer Engine does (NVIDIA TE docs, "Using FP8 with
Transformer Engine": E4M3 forward, E5M2 gradients, per-tensor scales). Scales are the current
amax over the format maximum (E4M3 448, E5M2 57344: OCP FP8 spec v1.0); TE's delayed scaling
keeps an amax history instead, which costs the same kernels. ``_scaled_mm`` needs every dim a
multiple of 16; a layer that cannot run in FP8 runs in 16 bits and says so (``fp8_active``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

E4M3_MAX = 448.0
E5M2_MAX = 57344.0


def _cast(x: torch.Tensor, dtype: torch.dtype, fmax: float) -> tuple[torch.Tensor, torch.Tensor]:
    scale = (x.detach().abs().amax().float() / fmax).clamp(min=1e-12)
    # Saturate: E4M3FN has no infinity, so a value rounded past the maximum would become NaN.
    return (x / scale).clamp(-fmax, fmax).to(dtype), scale


def _mm(a8: torch.Tensor, b8_col: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, out: torch.dtype) -> torch.Tensor:
    return torch._scaled_mm(a8, b8_col, scale_a=sa, scale_b=sb, out_dtype=out)


class _Fp8Matmul(torch.autograd.Function):
    """y = x @ w.T with x (M, K), w (N, K), every GEMM in FP8."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x8, sx = _cast(x, torch.float8_e4m3fn, E4M3_MAX)
        w8, sw = _cast(w, torch.float8_e4m3fn, E4M3_MAX)
        ctx.save_for_backward(x8, sx, w8, sw)
        ctx.out_dtype = x.dtype
        ctx.w_grad = w.requires_grad
        return _mm(x8, w8.t(), sx, sw, x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:  # noqa: D102
        x8, sx, w8, sw = ctx.saved_tensors
        g8, sg = _cast(grad.contiguous(), torch.float8_e5m2, E5M2_MAX)
        dx = _mm(g8, w8.t().contiguous().t(), sg, sw, ctx.out_dtype)                  # (M,N) @ (N,K)
        dw = None
        if ctx.w_grad:
            dw = _mm(g8.t().contiguous(), x8.t().contiguous().t(), sg, sx, ctx.out_dtype)   # (N,M) @ (M,K)
        return dx, dw


def fp8_supported(device: torch.device) -> bool:
    """Whether FP8 GEMMs run forward and backward here (sm89+ GPUs; recent CPU builds)."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return False
    try:
        x = torch.randn(32, 32, device=device, dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(16, 32, device=device, dtype=torch.bfloat16, requires_grad=True)
        _Fp8Matmul.apply(x, w).sum().backward()
        return x.grad is not None and w.grad is not None
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):
        return False


class Fp8Linear(nn.Linear):
    """``nn.Linear`` whose GEMMs run in FP8 when shapes allow; ``fp8_active`` says whether they did."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fp8_active = self.in_features % 16 == 0 and self.out_features % 16 == 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if not self.fp8_active or rows % 16:
            self.fp8_active = False
            return super().forward(x)
        try:
            y = _Fp8Matmul.apply(x.reshape(rows, x.shape[-1]), self.weight).view(*x.shape[:-1], self.out_features)
        except RuntimeError:   # a shape or layout _scaled_mm rejects on this device: 16-bit, and say so
            self.fp8_active = False
            return super().forward(x)
        return y + self.bias if self.bias is not None else y
