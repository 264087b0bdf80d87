"""Parameter counts of a ModelSpec, per layer and per component (elements, not bytes).

Components are kept apart because they shard differently: attention, dense-MLP and
shared-expert weights by TP; routed experts by EP x ETP; norms and routers are replicated.
Formulas follow the modules of Megatron-core / Hugging Face transformers: GQA attention
``h*(a*d) + 2*h*(g*d) + (a*d)*h``, gated MLP ``3*h*f``, plain MLP ``2*h*f``, MLA as in
DeepSeek-V2 (arXiv 2405.04434, Sec. 2.1.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from projection.model_spec import ModelSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerParams:
    """Parameters of one decoder layer by sharding class (elements)."""

    attention: int          # TP-sharded attention weights and biases
    mlp: int                # TP-sharded dense MLP (0 in MoE layers)
    shared_experts: int     # TP-sharded shared-expert MLP
    experts: int            # all routed experts of the layer (EP x ETP sharded)
    replicated: int         # norms, router, q/k norms: every TP rank holds a copy

    @property
    def total(self) -> int:
        """All parameters of the layer."""
        return self.attention + self.mlp + self.shared_experts + self.experts + self.replicated


def _mlp_params(model: ModelSpec, ffn: int, *, bias: bool) -> int:
    mats = 3 if model.gated_mlp else 2
    weights = mats * model.hidden_size * ffn
    biases = ((2 if model.gated_mlp else 1) * ffn + model.hidden_size) if bias else 0
    return weights + biases


def _attention_params(model: ModelSpec) -> tuple[int, int]:
    """Return (TP-sharded, replicated) attention parameters."""
    h, a = model.hidden_size, model.num_attention_heads
    if model.uses_mla:
        qk = model.head_dim  # nope + rope
        if model.q_lora_rank:
            q = h * model.q_lora_rank + model.q_lora_rank * a * qk
            q_norm = model.q_lora_rank
        else:
            q, q_norm = h * a * qk, 0
        kv_down = h * (model.kv_lora_rank + model.qk_rope_head_dim)
        kv_up = model.kv_lora_rank * a * (qk - model.qk_rope_head_dim + model.v_head_dim)
        out = a * model.v_head_dim * h
        return q + kv_down + kv_up + out, q_norm + model.kv_lora_rank
    qkv = h * (model.q_width + 2 * model.kv_width)
    out = model.q_width * h
    bias = (model.q_width + 2 * model.kv_width + h) if model.attention_bias else 0
    sinks = a if model.model_type == "gpt_oss" else 0  # learned attention sinks, one per head
    qk_norm = 2 * model.head_dim if model.qk_norm else 0
    return qkv + out + bias + sinks, qk_norm


def _norm_params(model: ModelSpec) -> int:
    return model.hidden_size * (2 if model.norm == "layernorm" and model.linear_bias else 1)


def layer_params(model: ModelSpec, layer: int) -> LayerParams:
    """Parameters of decoder layer ``layer`` (0-based)."""
    return layer_param_table(model)[layer]


@lru_cache(maxsize=256)
def layer_param_table(model: ModelSpec) -> tuple[LayerParams, ...]:
    """Parameters of every decoder layer, computed once per model (hot loops index this table).

    A layer's counts depend only on whether it is an MoE layer (``_layer_params``), so each kind is
    computed once and shared by every layer of that kind.
    """
    by_kind: dict[bool, LayerParams] = {}
    table = []
    for i in range(model.num_layers):
        moe = bool(model.moe_layers[i])
        if moe not in by_kind:
            by_kind[moe] = _layer_params(model, i)
        table.append(by_kind[moe])
    return tuple(table)


def _layer_params(model: ModelSpec, layer: int) -> LayerParams:
    attention, attn_replicated = _attention_params(model)
    replicated = attn_replicated + 2 * _norm_params(model)
    if model.moe_layers[layer]:
        h, e = model.hidden_size, model.num_experts
        router = h * e + (e if model.expert_bias else 0)
        experts = e * _mlp_params(model, model.moe_ffn_hidden_size, bias=model.expert_bias)
        shared = _mlp_params(model, model.shared_expert_ffn_hidden_size, bias=False) if model.num_shared_experts else 0
        return LayerParams(attention=attention, mlp=0, shared_experts=shared, experts=experts,
                           replicated=replicated + router)
    mlp = _mlp_params(model, model.ffn_hidden_size, bias=model.linear_bias)
    return LayerParams(attention=attention, mlp=mlp, shared_experts=0, experts=0, replicated=replicated)


def embedding_params(model: ModelSpec) -> int:
    """Input embedding (TP-sharded over the vocabulary) plus learned positions."""
    return model.vocab_size * model.hidden_size + model.learned_positions * model.hidden_size


def output_params(model: ModelSpec) -> int:
    """LM head (0 when tied to the embedding) plus the final norm."""
    head = 0 if model.tie_embeddings else model.vocab_size * model.hidden_size
    return head + _norm_params(model)


@lru_cache(maxsize=256)
def total_params(model: ModelSpec) -> int:
    """All parameters of the model (no multi-token-prediction heads)."""
    layers = sum(p.total for p in layer_param_table(model))
    return layers + embedding_params(model) + output_params(model)


@lru_cache(maxsize=256)
def active_params(model: ModelSpec) -> int:
    """Parameters one token passes through (top-k of the routed experts)."""
    total = total_params(model)
    if not model.is_moe:
        return total
    per_expert = _mlp_params(model, model.moe_ffn_hidden_size, bias=model.expert_bias)
    inactive = (model.num_experts - model.top_k) * per_expert * model.num_moe_layers
    return total - inactive
