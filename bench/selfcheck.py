"""Correctness checks the device script runs before timing (torch + stdlib only).

Each compares a benchmark kernel with a reference on fresh random inputs (never zeros) by
``||out - ref|| / ||ref||`` (/work/.library/device/METHOD.md): FP8 linear forward and data
gradient against float32 (E4M3/E5M2 keep ~3 and ~2 mantissa bits: bound 0.1), the attention
core (causal, CP rank, sliding window; every pinned backend it picks) against masked math
attention in float32 (bf16: bound 2e-2), grouped expert GEMM against a per-expert loop
(bound 2e-2). A failed check is recorded, and the layer timings it concerns are then suspect.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from bench.attention import AttentionCore
from bench.fp8 import Fp8Linear, fp8_supported

BOUNDS = {"fp8_linear": 0.1, "attention": 2e-2, "grouped_gemm": 2e-2}


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.detach().float(), ref.detach().float()
    if not torch.isfinite(out).all():
        return float("inf")
    return float((out - ref).norm() / ref.norm().clamp(min=1e-30))


def _attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, core: AttentionCore) -> torch.Tensor:
    cp = core.cp
    k, v = (torch.cat([t] * cp, dim=2) if cp > 1 else t for t in (k, v))
    positions = torch.tensor([p for c in core.calls for p in range(c.q_start, c.q_start + c.q_len)],
                             device=q.device)
    keys = torch.arange(k.shape[2], device=q.device)
    mask = keys[None, :] <= positions[:, None]
    if core.window:
        mask &= positions[:, None] - keys[None, :] < core.window
    reps = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(reps, dim=1) for t in (k, v))
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)


def run_checks(device: torch.device, dtype: torch.dtype, *, seed: int = 1234) -> list[dict[str, Any]]:
    """All checks; each a dict with name, relative error, bound, ok (and what ran)."""
    torch.manual_seed(seed)
    out: list[dict[str, Any]] = []

    def record(name: str, kind: str, rel: float, **info: Any) -> None:
        out.append({"name": name, "kind": kind, "rel_error": rel, "bound": BOUNDS[kind], "ok": rel <= BOUNDS[kind],
                    **info})

    if fp8_supported(device):
        layer = Fp8Linear(256, 128, bias=False, device=device, dtype=dtype)
        x = torch.randn(64, 256, device=device, dtype=dtype, requires_grad=True)
        y = layer(x)
        grad = torch.randn_like(y)
        y.backward(grad)
        ref_y = x.detach().float() @ layer.weight.detach().float().t()
        ref_dx = grad.float() @ layer.weight.detach().float()
        record("fp8 linear forward", "fp8_linear", _rel(y, ref_y), fp8=layer.fp8_active)
        record("fp8 linear data gradient", "fp8_linear", _rel(x.grad, ref_dx), fp8=layer.fp8_active)
    for seq, cp, window in ((256, 1, 0), (256, 2, 0), (256, 1, 64)):
        core = AttentionCore(seq, cp, window)
        q = torch.randn(1, 4, seq, 64, device=device, dtype=dtype)
        k = torch.randn(1, 2, seq, 64, device=device, dtype=dtype)
        v = torch.randn(1, 2, seq, 64, device=device, dtype=dtype)
        for backend in core.candidates(device):
            try:
                core.choose(q, k, v, only=backend)
            except RuntimeError:
                continue
            record(f"attention seq {seq} cp {cp} window {window} {backend}", "attention",
                   _rel(core(q, k, v), _attention_ref(q, k, v, core)), backend=backend)
    if hasattr(torch, "_grouped_mm"):
        e, m, n, kk = 4, 32, 48, 64
        a = torch.randn(e * m, kk, device=device, dtype=dtype)
        b = torch.randn(e, n, kk, device=device, dtype=dtype)
        offs = torch.arange(1, e + 1, device=device, dtype=torch.int32) * m
        try:
            got = torch._grouped_mm(a, b.transpose(-2, -1), offs=offs)
            ref = torch.cat([a[i * m:(i + 1) * m].float() @ b[i].float().t() for i in range(e)])
            record("grouped GEMM vs per-expert loop", "grouped_gemm", _rel(got, ref))
        except (RuntimeError, NotImplementedError) as err:
            out.append({"name": "grouped GEMM vs per-expert loop", "kind": "grouped_gemm", "ok": None,
                        "error": str(err).splitlines()[0][:160]})
    return out
