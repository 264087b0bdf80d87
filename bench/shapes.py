"""Per-GPU tensor shapes of one layer of a layout, as ``projection.workload`` models them.

This module imports nothing outside the standard library at run time, so that the prepared
device script (``benchmarks/gpu_check.py``) can use it on a machine without the project's
dependencies.

One GPU of the benchmark layout holds 1/tp of the attention heads and MLP width
(Megatron column/row-parallel linears) and ``num_experts / ep`` routed experts that process
``tokens * top_k / tp * etp`` token copies (balanced routing). ``shrink`` makes a tiny
version of the same structure for CPU plumbing runs; such shapes are not representative.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # runtime imports stay torch- and pydantic-free: the device script imports this module
    from projection.layout import ParallelDims
    from projection.model_spec import ModelSpec
    from projection.training_config import TrainingConfig

_ALIGN = 8          # GEMM dims of shrunk shapes stay multiples of 8 (16-byte strides for grouped GEMMs)
TINY_HEAD_DIM = 16
TINY_MAX_HEADS = 4
TINY_MAX_EXPERTS = 4


def _round_up(value: float, multiple: int = _ALIGN) -> int:
    return max(multiple, -(-int(value) // multiple) * multiple)


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerShape:
    """Sizes of one decoder layer on one GPU (elements); local = after TP/EP/ETP sharding."""

    batch: int                  # sequences per micro-batch
    seq: int                    # local sequence (seq_len / cp)
    cp: int = 1                 # context-parallel degree: local queries attend keys of the full seq * cp
    hidden: int
    heads: int                  # local query heads
    kv_heads: int               # local key/value heads
    head_dim: int               # query/key head dim
    v_head_dim: int
    window: int                 # sliding window in tokens; 0 = full causal
    q_lora_rank: int = 0        # MLA low-rank query (0 = direct)
    kv_lora_rank: int = 0       # MLA compressed KV (0 = standard GQA attention)
    rope_dim: int = 0           # MLA decoupled rotary key dim
    ffn: int                    # local dense MLP width (0 in MoE layers)
    gated: bool
    activation: str
    norm: str
    bias: bool                  # biases on attention and MLP linears
    moe: bool
    router_experts: int = 0     # router output width (all experts of the model)
    local_experts: int = 0
    top_k: int = 0
    moe_ffn: int = 0            # local expert width (moe_ffn / etp)
    routed_tokens: int = 0      # token copies this GPU's experts process
    shared_ffn: int = 0         # local shared-expert width
    router_tokens: int = 0      # tokens the router sees (tokens / tp with sequence parallelism; 0 = all)
    representative: bool = True

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able fields."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LayerShape:
        """Inverse of :meth:`to_dict` (unknown keys are an error)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown LayerShape fields {unknown}; allowed: {sorted(names)}")
        return cls(**data)

    @property
    def tokens(self) -> int:
        """Tokens of the micro-batch on this GPU."""
        return self.batch * self.seq


def layer_shape(model: ModelSpec, config: TrainingConfig, dims: ParallelDims, layer: int) -> LayerShape:
    """The real per-GPU shape of ``layer`` under ``config``."""
    t = dims.tp
    seq = config.seq_len // dims.cp
    moe = bool(model.moe_layers and model.moe_layers[layer])
    tokens = config.mbs * seq
    return LayerShape(
        batch=config.mbs, seq=seq, cp=dims.cp, hidden=model.hidden_size,
        heads=model.num_attention_heads // t, kv_heads=max(1, model.num_kv_heads // t),
        head_dim=model.head_dim, v_head_dim=model.v_head_dim,
        window=model.attention_windows[layer] if model.attention_windows else 0,
        q_lora_rank=model.q_lora_rank, kv_lora_rank=model.kv_lora_rank, rope_dim=model.qk_rope_head_dim,
        ffn=0 if moe else model.ffn_hidden_size // t, gated=model.gated_mlp, activation=model.activation,
        norm=model.norm, bias=model.linear_bias or model.attention_bias, moe=moe,
        router_experts=model.num_experts if moe else 0,
        local_experts=max(1, model.num_experts // dims.ep) if moe else 0,
        top_k=model.top_k if moe else 0,
        moe_ffn=model.moe_ffn_hidden_size // dims.etp if moe else 0,
        routed_tokens=int(tokens * model.top_k / t * dims.etp) if moe else 0,
        shared_ffn=model.shared_expert_ffn_hidden_size // t if moe and model.num_shared_experts else 0,
        router_tokens=tokens // t if moe and config.sequence_parallel and t > 1 else 0,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class HeadShape:
    """Embedding lookup, final norm, LM head (vocab / tp columns) and cross-entropy of one micro-batch."""

    tokens: int                 # mbs * seq_len / cp
    hidden: int
    vocab: int                  # local vocabulary columns (vocab_size / tp)
    norm: str
    representative: bool = True

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able fields."""
        return asdict(self)


def head_shape(model: ModelSpec, config: TrainingConfig, dims: ParallelDims) -> HeadShape:
    """The per-GPU shape of the head and embedding, as ``projection.workload.head_cost`` models it."""
    return HeadShape(tokens=config.mbs * config.seq_len // dims.cp, hidden=model.hidden_size,
                     vocab=-(-model.vocab_size // dims.tp), norm=model.norm)


def shrink_head(shape: HeadShape, *, max_hidden: int | None = None, max_tokens: int | None = None) -> HeadShape:
    """A tiny head for CPU plumbing runs."""
    out = shape
    if max_tokens is not None and shape.tokens > max_tokens:
        out = replace(out, tokens=max_tokens, representative=False)
    if max_hidden is not None and shape.hidden > max_hidden:
        out = replace(out, hidden=_round_up(max_hidden), vocab=min(out.vocab, 8 * _round_up(max_hidden)),
                      representative=False)
    return out


def shrink(shape: LayerShape, *, max_hidden: int | None = None, max_tokens: int | None = None) -> LayerShape:
    """A tiny layer with the same structure (GQA ratio, gating, MoE, MLA, window) for CPU runs."""
    out = shape
    if max_tokens is not None and shape.tokens > max_tokens:
        seq = max(1, max_tokens // shape.batch)
        batch = max(1, min(shape.batch, max_tokens // seq))
        scale = batch * seq / shape.tokens
        out = replace(out, batch=batch, seq=seq, routed_tokens=max(out.local_experts, int(out.routed_tokens * scale))
                      if out.moe else 0, window=min(out.window, max(1, seq * out.cp // 4)) if out.window else 0,
                      router_tokens=int(out.router_tokens * scale), representative=False)
    if max_hidden is not None and shape.hidden > max_hidden:
        f = max_hidden / shape.hidden
        heads = min(out.heads, TINY_MAX_HEADS)
        kv_heads = max(1, heads * out.kv_heads // out.heads)
        while heads % kv_heads:
            kv_heads -= 1
        scaled = {name: _round_up(getattr(out, name) * f) if getattr(out, name) else 0
                  for name in ("ffn", "moe_ffn", "shared_ffn", "q_lora_rank", "kv_lora_rank")}
        out = replace(out, hidden=_round_up(max_hidden), heads=heads, kv_heads=kv_heads, head_dim=TINY_HEAD_DIM,
                      v_head_dim=TINY_HEAD_DIM, rope_dim=min(out.rope_dim, TINY_HEAD_DIM // 2), **scaled,
                      local_experts=min(out.local_experts, TINY_MAX_EXPERTS),
                      router_experts=min(out.router_experts, max(TINY_MAX_EXPERTS, out.top_k)),
                      representative=False)
    return out
