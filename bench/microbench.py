"""Microbenchmark kernels: GEMM (16-bit, FP8), grouped GEMM, attention forward/backward, HBM copy.

Imports only torch and the standard library (the prepared device script runs it on a machine
without the project's dependencies). A point is a plain dict (the fields of
:class:`bench.device.SweepPoint`); :func:`measure` returns its median seconds and what ran
(attention backend, FP8 or not), or 0 s and the error when the op does not run on this device.
Inputs are random normal (never zeros: zeros run faster than real data on some GPUs,
/work/.library/device/METHOD.md), and GEMM operands rotate among buffers larger than L2
when they are small, so the timing does not measure a warm cache.
"""

from __future__ import annotations

from typing import Any

import torch

from bench.attention import AttentionCore
from bench.layer_timing import time_call

L2_BYTES = 64 * 2**20   # rotate operand sets until they exceed this (H200 L2 is 60 MB: KINDS.md)


def _rotating(make: Any, one_bytes: int) -> list[Any]:
    """Enough independent operand sets that together they exceed the L2 (at most 8)."""
    count = max(1, min(8, -(-2 * L2_BYTES // max(1, one_bytes))))
    return [make() for _ in range(count)]


def _cycle(fns: list[Any]) -> Any:
    state = {"i": 0}

    def call() -> Any:
        state["i"] = (state["i"] + 1) % len(fns)
        return fns[state["i"]]()
    return call


def _gemm(p: dict[str, Any], device: torch.device, dtype: torch.dtype, fp8: bool) -> Any:
    m, n, k = p["m"], p["n"], p["k"]

    def make() -> Any:
        a = torch.randn(m, k, device=device, dtype=dtype)
        b = torch.randn(n, k, device=device, dtype=dtype)      # (out, in) like a weight
        if not fp8:
            return lambda: a @ b.t()
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        one = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=dtype)

    element = 1 if fp8 else torch.empty((), dtype=dtype).element_size()
    return _cycle(_rotating(make, element * (m * k + n * k + m * n)))


def _grouped(p: dict[str, Any], device: torch.device, dtype: torch.dtype) -> Any:
    groups, m, n, k = p["groups"], p["m"], p["n"], p["k"]
    a = torch.randn(groups * m, k, device=device, dtype=dtype)
    b = torch.randn(groups, n, k, device=device, dtype=dtype)
    offs = torch.arange(1, groups + 1, device=device, dtype=torch.int32) * m
    torch._grouped_mm(a, b.transpose(-2, -1), offs=offs)       # raises here when it does not run
    return lambda: torch._grouped_mm(a, b.transpose(-2, -1), offs=offs)


def _attention(p: dict[str, Any], device: torch.device, dtype: torch.dtype, backward: bool) -> tuple[Any, str]:
    core = AttentionCore(p["seq"], p.get("cp", 1), p.get("window", 0))
    q = torch.randn(p["batch"], p["heads"], p["seq"], p["head_dim"], device=device, dtype=dtype)
    kv = torch.randn(p["batch"], p["kv_heads"], p["seq"], p["head_dim"], device=device, dtype=dtype)
    backend = core.choose(q, kv, kv, only=p.get("backend") or None)
    if not backward:
        return (lambda: core(q, kv, kv)), backend
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, kv, kv))
    out = core(qg, kg, vg)
    grad = torch.randn_like(out)

    def bwd() -> None:
        torch.autograd.grad(out, (qg, kg, vg), grad, retain_graph=True)
    return bwd, backend


def measure(p: dict[str, Any], device: torch.device, dtype: torch.dtype, *, warmup: int = 3, iters: int = 10
            ) -> tuple[float, dict[str, str]]:
    """(median seconds, what ran) of one point; (0.0, {"error": why}) when the op does not run here."""
    kind = p["kind"]
    info: dict[str, str] = {}
    try:
        if kind in ("gemm", "gemm_fp8"):
            fn = _gemm(p, device, dtype, fp8=kind == "gemm_fp8")
            fn()
            info["precision"] = "fp8" if kind == "gemm_fp8" else str(dtype).removeprefix("torch.")
        elif kind == "grouped_gemm":
            fn = _grouped(p, device, dtype)
            info["path"] = "grouped_mm"
        elif kind in ("attention", "attention_bwd"):
            fn, info["backend"] = _attention(p, device, dtype, backward=kind == "attention_bwd")
        elif kind == "copy":
            src = torch.randn(int(p["num_bytes"]) // 4, device=device, dtype=torch.float32)
            dst = torch.empty_like(src)
            fn = lambda: dst.copy_(src)  # noqa: E731
        else:
            raise ValueError(f"unknown microbenchmark kind {kind!r}; allowed: gemm, gemm_fp8, grouped_gemm, "
                             "attention, attention_bwd, copy")
    except (RuntimeError, NotImplementedError, TypeError, AttributeError) as err:
        info["error"] = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
        return 0.0, info
    return time_call(fn, device=device, warmup=warmup, iters=iters), info


def attention_kernel_flops(p: dict[str, Any]) -> float:
    """Useful forward FLOPs of an attention point (same count as :func:`bench.layer_timing.attention_flops`)."""
    from bench.attention import attended_pairs

    return 2.0 * p["batch"] * p["heads"] * attended_pairs(p["seq"], p.get("cp", 1), p.get("window", 0)) * (
        2 * p["head_dim"])


def device_tensor_ok(device: torch.device) -> bool:
    """Whether a small op runs on ``device`` (a sanity check before the sweep)."""
    try:
        x = torch.randn(64, 64, device=device)
        return bool(torch.isfinite((x @ x).sum()).item())
    except RuntimeError:
        return False

