"""Reference decoder layers in plain torch, built from a :class:`bench.shapes.LayerShape`.

Shape legend: B = sequences, S = local sequence, T = B*S tokens, H = hidden, A = local query
heads, G = local KV heads, D = query/key head dim, Dv = value head dim, F = MLP width,
E = local experts, R = routed token copies, N = router width.

Attention is :class:`bench.attention.AttentionCore` (causal SDPA with a pinned backend; CP
ranks' load-balanced query chunks against the full sequence; a windowed kernel for sliding
windows); the MoE MLP is router top-k, permute (index_select), grouped expert GEMMs
(``torch._grouped_mm`` when it runs on the device, else a loop over experts, recorded in
``RoutedExperts.gemm_path``) and unpermute (index_add). Routing is balanced like the engine
assumes: copy i of the R copies goes to local expert i mod E. With ``fp8=True`` the dense
linears (QKV, output projection, MLP, shared experts; not the router) are
:class:`bench.fp8.Fp8Linear`; routed experts stay 16-bit (recorded as such).

Imports only torch and the standard library (the prepared device script uses it).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bench.attention import AttentionCore
from bench.fp8 import Fp8Linear
from bench.shapes import HeadShape, LayerShape


def _linear(n_in: int, n_out: int, bias: bool, device: Any, dtype: torch.dtype, fp8: bool = False) -> nn.Linear:
    return (Fp8Linear if fp8 else nn.Linear)(n_in, n_out, bias=bias, device=device, dtype=dtype)


class _Norm(nn.Module):
    def __init__(self, width: int, kind: str, device: Any, dtype: torch.dtype) -> None:
        super().__init__()
        self.kind = kind
        self.weight = nn.Parameter(torch.ones(width, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(width, device=device, dtype=dtype)) if kind == "layernorm" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "layernorm":
            return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias)
        return F.rms_norm(x, (x.shape[-1],), self.weight)


def _activate(x: torch.Tensor, shape: LayerShape) -> torch.Tensor:
    if shape.gated:
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up
    if shape.activation == "relu2":
        return F.relu(x).square()
    return F.gelu(x)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding (GPT-NeoX half rotation) over the last dim."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    """Pre-norm self-attention block with residual: GQA or MLA projections, SDPA core."""

    def __init__(self, s: LayerShape, device: Any, dtype: torch.dtype, *, fp8: bool = False,
                 flex: bool = True) -> None:
        super().__init__()
        self.s = s
        self.norm = _Norm(s.hidden, s.norm, device, dtype)
        a, g, d = s.heads, s.kv_heads, s.head_dim
        if s.kv_lora_rank:
            self.q_down = _linear(s.hidden, s.q_lora_rank, False, device, dtype, fp8) if s.q_lora_rank else None
            self.q_up = _linear(s.q_lora_rank or s.hidden, a * d, False, device, dtype, fp8)
            self.kv_down = _linear(s.hidden, s.kv_lora_rank + s.rope_dim, False, device, dtype, fp8)
            self.kv_up = _linear(s.kv_lora_rank, a * (d - s.rope_dim + s.v_head_dim), False, device, dtype, fp8)
        else:
            self.qkv = _linear(s.hidden, (a + 2 * g) * d, s.bias, device, dtype, fp8)
        self.proj = _linear(a * s.v_head_dim, s.hidden, s.bias, device, dtype, fp8)
        pos = torch.arange(s.seq, device=device, dtype=torch.float32)[:, None]
        freq = 10000.0 ** (-torch.arange(0, d, 2, device=device, dtype=torch.float32) / d)
        angles = torch.cat((pos * freq, pos * freq), dim=-1)
        self.register_buffer("cos", angles.cos().to(dtype), persistent=False)
        self.register_buffer("sin", angles.sin().to(dtype), persistent=False)
        self.attn = AttentionCore(s.seq, s.cp, s.window, flex=flex)
        self.count_only = False     # FLOP counting: the core returns an empty output of the right shape

    def qkv_heads(self, x_BSH: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Project and rotate: q (B,A,S,D), k (B,G,S,D), v (B,G,S,Dv)."""
        s = self.s
        b, n = x_BSH.shape[0], s.seq
        if s.kv_lora_rank:
            q = self.q_up(self.q_down(x_BSH) if self.q_down is not None else x_BSH).view(b, n, s.heads, -1)
            latent, k_rope = self.kv_down(x_BSH).split((s.kv_lora_rank, s.rope_dim), dim=-1)
            k_nope, v = self.kv_up(latent).view(b, n, s.heads, -1).split(
                (s.head_dim - s.rope_dim, s.v_head_dim), dim=-1)
            k = torch.cat((k_nope, k_rope[:, :, None, :].expand(b, n, s.heads, s.rope_dim)), dim=-1)
        else:
            q, k, v = self.qkv(x_BSH).view(b, n, s.heads + 2 * s.kv_heads, s.head_dim).split(
                (s.heads, s.kv_heads, s.kv_heads), dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        return _rotate(q, self.cos, self.sin), _rotate(k, self.cos, self.sin), v

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The attention core (see :mod:`bench.attention`); q, k, v are local."""
        if self.count_only:
            return q.new_zeros(*q.shape[:-1], v.shape[-1])
        return self.attn(q, k, v)

    def forward(self, x_BSH: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv_heads(self.norm(x_BSH))
        o = self.core(q, k, v).transpose(1, 2).reshape(x_BSH.shape[0], self.s.seq, -1)
        return x_BSH + self.proj(o)


class DenseMLP(nn.Module):
    """Pre-norm MLP block (gated or plain) with residual."""

    def __init__(self, s: LayerShape, width: int, device: Any, dtype: torch.dtype, *, norm: bool = True,
                 fp8: bool = False) -> None:
        super().__init__()
        self.s = s
        self.norm = _Norm(s.hidden, s.norm, device, dtype) if norm else None
        self.fc1 = _linear(s.hidden, (2 if s.gated else 1) * width, s.bias, device, dtype, fp8)
        self.fc2 = _linear(width, s.hidden, s.bias, device, dtype, fp8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.norm is None:
            return self.fc2(_activate(self.fc1(x), self.s))
        return x + self.fc2(_activate(self.fc1(self.norm(x)), self.s))


class _GradContiguous(torch.autograd.Function):
    """Identity whose backward hands on a contiguous gradient (grouped GEMM backward needs one)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return grad.contiguous()


@functools.cache
def grouped_mm_works(device_type: str, dtype: torch.dtype) -> bool:
    """Whether ``torch._grouped_mm`` runs forward and backward here (sm90+ bf16 on CUDA, some CPUs)."""
    if not hasattr(torch, "_grouped_mm"):
        return False
    try:
        a = torch.randn(32, 16, device=device_type, dtype=dtype, requires_grad=True)
        b = torch.randn(2, 32, 16, device=device_type, dtype=dtype, requires_grad=True)   # (E, out, in)
        offs = torch.tensor([16, 32], device=device_type, dtype=torch.int32)
        out = _GradContiguous.apply(torch._grouped_mm(a, b.transpose(-2, -1), offs=offs))
        out.backward(torch.ones_like(out))
        return a.grad is not None and b.grad is not None
    except (RuntimeError, NotImplementedError, TypeError):
        return False


class RoutedExperts(nn.Module):
    """Permute, grouped expert GEMMs, activation, unpermute: the routed-expert part of a MoE layer."""

    def __init__(self, s: LayerShape, device: Any, dtype: torch.dtype) -> None:
        super().__init__()
        self.s = s
        e, h, f = s.local_experts, s.hidden, s.moe_ffn
        width = (2 if s.gated else 1) * f
        # (E, out, in) like nn.Linear, passed transposed: the layout grouped GEMM kernels take (as torchtitan).
        self.w1 = nn.Parameter(torch.randn(e, width, h, device=device, dtype=dtype) * h**-0.5)
        self.w2 = nn.Parameter(torch.randn(e, h, f, device=device, dtype=dtype) * f**-0.5)
        self.counts = [s.routed_tokens // e + (i < s.routed_tokens % e) for i in range(e)]   # copy i -> i mod E
        ends = torch.tensor(self.counts, dtype=torch.int64).cumsum(0).to(torch.int32)
        self.register_buffer("offs", ends.to(device), persistent=False)
        self.grouped = grouped_mm_works(torch.device(device).type, dtype)
        self.loop_reason = "" if self.grouped else "torch._grouped_mm does not run on this device/dtype"

    @property
    def gemm_path(self) -> str:
        """'grouped_mm', or 'per-expert loop (<why>)': a loop is not what Megatron/torchtitan run."""
        return "grouped_mm" if self.grouped else f"per-expert loop ({self.loop_reason})"

    def _gemm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if self.grouped:
            try:
                return _GradContiguous.apply(torch._grouped_mm(x, w.transpose(-2, -1), offs=self.offs))
            except RuntimeError as err:   # alignment rules differ by device and version: loop, and say so
                self.grouped = False
                self.loop_reason = f"torch._grouped_mm failed: {str(err).splitlines()[0][:100]}"
        return torch.cat([chunk @ w[i].T for i, chunk in enumerate(x.split(self.counts))])

    def forward(self, x_TH: torch.Tensor, token_R: torch.Tensor, gate_R: torch.Tensor) -> torch.Tensor:
        """``token_R``: source token of each copy, already sorted by local expert; ``gate_R``: its weight."""
        x_RH = x_TH.index_select(0, token_R)
        y_RH = self._gemm(_activate(self._gemm(x_RH, self.w1), self.s), self.w2) * gate_R[:, None]
        return torch.zeros_like(x_TH).index_add(0, token_R, y_RH)


class MoEMLP(nn.Module):
    """Pre-norm MoE block: router top-k, routed experts, optional shared experts, residual."""

    def __init__(self, s: LayerShape, device: Any, dtype: torch.dtype, *, fp8: bool = False) -> None:
        super().__init__()
        self.s = s
        self.norm = _Norm(s.hidden, s.norm, device, dtype)
        self.router = _linear(s.hidden, s.router_experts, False, device, dtype)   # 16-bit, as the engine
        self.experts = RoutedExperts(s, device, dtype)
        self.shared = DenseMLP(s, s.shared_ffn, device, dtype, norm=False, fp8=fp8) if s.shared_ffn else None
        copies = torch.arange(s.routed_tokens, device=device)
        # Sort copies by local expert (the permute); copy i -> expert i % E, token (i // K) mod T.
        order = torch.argsort(copies % s.local_experts, stable=True)
        self.register_buffer("copy_R", order % (s.tokens * s.top_k), persistent=False)

    def route(self, x_TH: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Router probabilities -> (source token, gate) of every routed copy."""
        rows = self.s.router_tokens
        if rows and rows < x_TH.shape[0]:   # sequence parallel: each TP rank routes its 1/tp of the tokens
            part = torch.softmax(self.router(x_TH[:rows]).float(), dim=-1)
            probs_TN = part.repeat(-(-x_TH.shape[0] // rows), 1)[:x_TH.shape[0]]
        else:
            probs_TN = torch.softmax(self.router(x_TH).float(), dim=-1)
        gate_TK, _ = probs_TN.topk(self.s.top_k, dim=-1)
        gate_R = gate_TK.reshape(-1).index_select(0, self.copy_R).to(x_TH.dtype)
        return self.copy_R // self.s.top_k, gate_R

    def forward(self, x_BSH: torch.Tensor) -> torch.Tensor:
        x_TH = self.norm(x_BSH).reshape(-1, self.s.hidden)
        token_R, gate_R = self.route(x_TH)
        y_TH = self.experts(x_TH, token_R, gate_R)
        if self.shared is not None:
            y_TH = y_TH + self.shared(x_TH)
        return x_BSH + y_TH.view_as(x_BSH)


class DecoderLayer(nn.Module):
    """Attention block then MLP block (dense or MoE)."""

    def __init__(self, s: LayerShape, device: Any, dtype: torch.dtype, *, fp8: bool = False,
                 flex: bool = True) -> None:
        super().__init__()
        self.attention = Attention(s, device, dtype, fp8=fp8, flex=flex)
        self.mlp: nn.Module = (MoEMLP(s, device, dtype, fp8=fp8) if s.moe
                               else DenseMLP(s, s.ffn, device, dtype, fp8=fp8))

    def forward(self, x_BSH: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.attention(x_BSH))

    def gemm_precision(self, dtype: torch.dtype) -> str:
        """'fp8' when every FP8-capable linear ran in FP8, 'mixed' when some did, else the 16/32-bit dtype."""
        fp8 = [m.fp8_active for m in self.modules() if isinstance(m, Fp8Linear)]
        base = str(dtype).removeprefix("torch.")
        if not fp8:
            return base
        return "fp8" if all(fp8) else ("mixed" if any(fp8) else base)

    def expert_path(self) -> str:
        """How the routed experts' GEMMs ran ('' for dense layers)."""
        return self.mlp.experts.gemm_path if isinstance(self.mlp, MoEMLP) else ""


class Head(nn.Module):
    """Embedding lookup (first stage) and final norm + LM head + cross-entropy (last stage)."""

    def __init__(self, s: HeadShape, device: Any, dtype: torch.dtype, *, fp8: bool = False) -> None:
        super().__init__()
        self.s = s
        self.embedding = nn.Embedding(s.vocab, s.hidden, device=device, dtype=dtype)
        self.norm = _Norm(s.hidden, s.norm, device, dtype)
        self.lm_head = _linear(s.hidden, s.vocab, False, device, dtype, fp8)
        self.register_buffer("tokens", torch.randint(0, s.vocab, (s.tokens,), device=device), persistent=False)

    def embed(self) -> torch.Tensor:
        """Embedding forward of the micro-batch's tokens, (T, H)."""
        return self.embedding(self.tokens)

    def loss(self, x_TH: torch.Tensor) -> torch.Tensor:
        """Final norm, LM head, fp32 cross-entropy against the tokens (a scalar)."""
        logits = self.lm_head(self.norm(x_TH))
        return F.cross_entropy(logits.float(), self.tokens)
