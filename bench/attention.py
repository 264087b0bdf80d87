"""The attention core of one GPU: which (query, key) blocks it computes, with which kernel, pinned.

Imports only torch and the standard library (the prepared device script uses it).

Work plan (positions are global, keys are causal and optionally windowed):

- no CP: one call, the local ``S`` queries against ``S`` keys (causal);
- CP > 1 (load-balanced, as Megatron-core and Transformer Engine split the sequence into
  ``2 cp`` chunks of ``c = S_local / 2`` and give rank ``r`` chunks ``r`` and ``2cp-1-r``):
  rank 0's two query chunks against every earlier key of the full sequence. Each rank then
  computes ``2 cp c^2 + c`` query-key pairs, the engine's ``S_local * S / 2``
  (``projection.workload.layer_cost``) up to the causal diagonal. The keys of the full
  sequence are the local K/V repeated ``cp`` times (a stand-in for the ring exchange,
  which the restore takes from the engine);
- sliding window ``w``: only keys ``q - w < k <= q``: FlexAttention with a block mask (compiled,
  on GPUs), else the query block split into sub-blocks of ``w`` rows, each against its
  ``<= 2w`` keys with a band mask (never the full ``S x S`` masked matrix).

The SDPA backend is pinned: the first of flash, cuDNN, memory-efficient, math (CPU: flash,
math) that runs the call forward and backward is used for every timed call, and its name is
recorded with the measurement.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

GPU_BACKENDS = ["flash", "cudnn", "efficient", "math"]   # order tried; the device script may reorder it
CPU_BACKENDS = ["flash", "math"]
BACKENDS = ("flash", "cudnn", "efficient", "math", "flex")


def set_gpu_order(names: list[str]) -> None:
    """Try these SDPA backends first on GPUs (the rest keep their order).

    Raises:
        ValueError: an unknown backend name.
    """
    bad = [n for n in names if n not in _SDPA_NAMES]
    if bad:
        raise ValueError(f"unknown attention backend(s) {bad}; allowed: {', '.join(_SDPA_NAMES)}")
    GPU_BACKENDS[:] = list(dict.fromkeys([*names, *GPU_BACKENDS]))


@dataclass(frozen=True, slots=True)
class Call:
    """Queries ``[q_start, q_start + q_len)`` against keys ``[k_start, q_start + q_len)`` (global positions)."""

    q_start: int
    q_len: int
    k_start: int

    @property
    def k_len(self) -> int:
        """Keys the call reads."""
        return self.q_start + self.q_len - self.k_start


def plan(seq: int, cp: int, window: int) -> list[Call]:
    """Kernel calls of CP rank 0 for a local sequence of ``seq`` tokens."""
    if cp <= 1:
        blocks = [(0, seq)]
    else:
        if seq % 2:
            raise ValueError(f"local sequence {seq} must be even under cp={cp} (two load-balanced chunks)")
        c = seq // 2
        blocks = [(0, c), ((2 * cp - 1) * c, c)]
    return [Call(q, n, max(0, q - window + 1) if window else 0) for q, n in blocks]


def attended_pairs(seq: int, cp: int, window: int) -> int:
    """Exact (query, key) pairs rank 0 computes: sum over its queries q of min(q + 1, window)."""
    total = 0
    for call in plan(seq, cp, window):
        lo, hi = call.q_start, call.q_start + call.q_len     # queries lo..hi-1 see q+1 keys (capped by window)
        if not window:
            total += (hi * (hi + 1) - lo * (lo + 1)) // 2
            continue
        cut = min(max(lo, window - 1), hi)                   # queries < window-1 see q+1 keys
        total += (cut * (cut + 1) - lo * (lo + 1)) // 2 + (hi - cut) * window
    return total


def _band_mask(q0: int, nq: int, k0: int, nk: int, window: int, device: torch.device) -> torch.Tensor:
    q = torch.arange(q0, q0 + nq, device=device)[:, None]
    k = torch.arange(k0, k0 + nk, device=device)[None, :]
    keep = k <= q
    if window:
        keep &= q - k < window
    return keep


_SDPA_NAMES = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
               "math": "MATH"}


@contextlib.contextmanager
def pinned(backend: str) -> Iterator[None]:
    """Restrict SDPA to one backend ("flex" and "none" pin nothing)."""
    if backend not in _SDPA_NAMES:
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([getattr(SDPBackend, _SDPA_NAMES[backend])]):
        yield


class AttentionCore:
    """Runs the plan of one layer shape; ``backend`` is chosen on first use and then kept."""

    def __init__(self, seq: int, cp: int, window: int, *, flex: bool = True) -> None:
        self.seq, self.cp, self.window = seq, cp, window
        self.calls = plan(seq, cp, window)
        self.backend: str | None = None
        self.kind = "causal" if not window else "window"
        self._flex = flex
        self._flex_fn: Callable[..., torch.Tensor] | None = None
        self._masks: dict[tuple[int, ...], torch.Tensor] = {}
        self._block_masks: dict[tuple[int, ...], object] = {}

    # -- helpers ---------------------------------------------------------------------------
    def _full_kv(self, t: torch.Tensor) -> torch.Tensor:
        return t if self.cp <= 1 else torch.cat([t] * self.cp, dim=2)

    def _mask(self, q0: int, nq: int, k0: int, nk: int, device: torch.device) -> torch.Tensor:
        key = (q0, nq, k0, nk)
        if key not in self._masks:
            self._masks[key] = _band_mask(q0, nq, k0, nk, self.window, device)
        return self._masks[key]

    def _sdpa_call(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: Call) -> torch.Tensor:
        """One call without a window: causal (square) or lower-right causal (CP)."""
        gqa = q.shape[1] != k.shape[1]
        ks = k[:, :, call.k_start:call.k_start + call.k_len]
        vs = v[:, :, call.k_start:call.k_start + call.k_len]
        if call.k_len == call.q_len:
            return F.scaled_dot_product_attention(q, ks, vs, is_causal=True, enable_gqa=gqa)
        from torch.nn.attention.bias import causal_lower_right

        bias = causal_lower_right(call.q_len, call.k_len)
        if gqa:
            try:
                return F.scaled_dot_product_attention(q, ks, vs, attn_mask=bias, enable_gqa=True)
            except (TypeError, RuntimeError):   # versions whose bias path drops enable_gqa: repeat K and V
                ks, vs = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (ks, vs))
        return F.scaled_dot_product_attention(q, ks, vs, attn_mask=bias)

    def _banded(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: Call) -> torch.Tensor:
        """Windowed call as sub-blocks of ``window`` queries, each against its <= 2w-1 keys (band mask)."""
        gqa = q.shape[1] != k.shape[1]
        if gqa:   # masked kernels take no GQA on every version: repeat K and V
            k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
        outs = []
        step = max(1, self.window)
        for off in range(0, call.q_len, step):
            q0, nq = call.q_start + off, min(step, call.q_len - off)
            k0 = max(0, q0 - self.window + 1)
            nk = q0 + nq - k0
            mask = self._mask(q0, nq, k0, nk, q.device)
            outs.append(F.scaled_dot_product_attention(q[:, :, off:off + nq], k[:, :, k0:k0 + nk],
                                                       v[:, :, k0:k0 + nk], attn_mask=mask))
        return torch.cat(outs, dim=2)

    def _flex_call(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: Call) -> torch.Tensor:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        if self._flex_fn is None:
            self._flex_fn = torch.compile(flex_attention, dynamic=False)
        key = (call.q_start, call.q_len, call.k_start, call.k_len)
        if key not in self._block_masks:
            q0, k0, w = call.q_start, call.k_start, self.window

            def sliding(b, h, qi, ki):  # noqa: ANN001, ANN202 - FlexAttention mask_mod signature
                return (ki + k0 <= qi + q0) & (qi + q0 - ki - k0 < w)

            self._block_masks[key] = create_block_mask(sliding, None, None, call.q_len, call.k_len,
                                                       device=q.device.type)
        ks = k[:, :, call.k_start:call.k_start + call.k_len]
        vs = v[:, :, call.k_start:call.k_start + call.k_len]
        return self._flex_fn(q, ks, vs, block_mask=self._block_masks[key], enable_gqa=q.shape[1] != k.shape[1])

    def _run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str) -> torch.Tensor:
        k, v = self._full_kv(k), self._full_kv(v)
        outs = []
        with pinned(backend):
            for call, (a, b) in zip(self.calls, self._q_slices(), strict=True):
                qc = q[:, :, a:b]
                if not self.window:
                    outs.append(self._sdpa_call(qc, k, v, call))
                elif backend == "flex":
                    outs.append(self._flex_call(qc, k, v, call))
                else:
                    outs.append(self._banded(qc, k, v, call))
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)

    def _q_slices(self) -> list[tuple[int, int]]:
        starts = [0]
        for call in self.calls:
            starts.append(starts[-1] + call.q_len)
        return list(zip(starts[:-1], starts[1:], strict=True))

    def candidates(self, device: torch.device) -> tuple[str, ...]:
        """Backends to try, fastest first."""
        sdpa = tuple(GPU_BACKENDS if device.type == "cuda" else CPU_BACKENDS)
        if self.window:
            # Band-masked SDPA runs on kernels that take a mask (not flash); flex compiles a windowed kernel.
            masked = tuple(b for b in sdpa if b != "flash")
            return (("flex",) if self._flex and device.type == "cuda" else ()) + masked
        return sdpa

    def choose(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, only: str | None = None) -> str:
        """Pin the first backend that runs forward and backward on these inputs (``only``: that one or fail)."""
        errors = []
        for backend in (only,) if only else self.candidates(q.device):
            try:
                qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
                out = self._run(qq, kk, vv, backend)
                out.sum().backward()
                self.backend = backend
                return backend
            except (RuntimeError, NotImplementedError, TypeError, ValueError, AssertionError) as err:
                errors.append(f"{backend}: {str(err).splitlines()[0][:120] if str(err) else type(err).__name__}")
            except Exception as err:  # noqa: BLE001 - torch.compile raises its own error types (flex)
                errors.append(f"{backend}: {type(err).__name__}")
        raise RuntimeError("no attention backend runs this shape: " + "; ".join(errors))

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (B, A, S, D) local queries; k, v (B, G, S, D|Dv) local keys/values; returns (B, A, S, Dv)."""
        if self.backend is None:
            self.choose(q, k, v)
        return self._run(q, k, v, self.backend or "math")

    def kernel_pairs(self) -> int:
        """(query, key) pairs the kernels compute, masked ones included (banded sub-blocks)."""
        total = 0
        for call in self.calls:
            if not self.window or self.backend == "flex":
                continue
            step = max(1, self.window)
            for off in range(0, call.q_len, step):
                q0, nq = call.q_start + off, min(step, call.q_len - off)
                total += nq * (q0 + nq - max(0, q0 - self.window + 1))
        return total or attended_pairs(self.seq, self.cp, self.window)
