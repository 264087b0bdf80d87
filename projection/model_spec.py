"""ModelSpec: the architecture of a transformer LM, normalised from Hugging Face config fields.

A model comes from a catalog id (``projection/catalog/models/<id>.yaml``), a path to a
Hugging Face ``config.json``, or a mapping of its fields.  Missing fields take the defaults
of that ``model_type`` in Hugging Face transformers (``configuration_<type>.py``), so a
sweep file may list only what differs.  Everything downstream (parameters, memory,
workload) reads the normalised fields below, never the raw HF names.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from projection.errors import ModelSpecError, UnknownNameError
from projection.safe_yaml import load_catalog

SUPPORTED_MODEL_TYPES = (
    "llama",
    "mistral",
    "qwen2",
    "gemma",
    "gemma2",
    "phi3",
    "qwen3",
    "gpt2",
    "mpt",
    "nemotron",
    "mixtral",
    "qwen3_moe",
    "gpt_oss",
    "deepseek_v3",
    "deepseek_v2",
    "qwen2_moe",
    "gemma3_text",
    "llama4_text",
)
# Multimodal wrappers whose language model is their ``text_config`` (transformers Gemma3Config, Llama4Config): the
# text model is read from it; the vision encoder and projector are not modelled (text-only training).
MULTIMODAL_WRAPPERS = {"gemma3": "gemma3_text", "llama4": "llama4_text"}

# Per model_type: (mlp activation, gated MLP, norm, linear biases, tied embeddings,
# learned absolute positions).  From transformers' configuration/modeling files of each
# type (e.g. LlamaConfig: hidden_act="silu", tie_word_embeddings=False; GPT2: gelu, biases,
# learned wpe, tied lm_head; MPT: no_bias=True, ALiBi, tied; Nemotron: relu2, not gated).
_TYPE_TRAITS: dict[str, tuple[str, bool, str, bool, bool, bool]] = {
    "llama": ("silu", True, "rmsnorm", False, False, False),
    # MistralConfig: silu, tie_word_embeddings=False, sliding_window (4096 in Mistral-7B-v0.1).
    "mistral": ("silu", True, "rmsnorm", False, False, False),
    "qwen2": ("silu", True, "rmsnorm", False, False, False),
    # GemmaConfig / Gemma2Config: GeGLU (gate_proj/up_proj, hidden_activation gelu_pytorch_tanh), RMSNorm,
    # tie_word_embeddings=True, head_dim given (256 in Gemma-7B); Gemma2 alternates sliding/global layers.
    "gemma": ("gelu_pytorch_tanh", True, "rmsnorm", False, True, False),
    "gemma2": ("gelu_pytorch_tanh", True, "rmsnorm", False, True, False),
    # Phi3Config: silu, fused gate_up_proj (a gated MLP), RMSNorm, untied, no biases.
    "phi3": ("silu", True, "rmsnorm", False, False, False),
    "qwen3": ("silu", True, "rmsnorm", False, False, False),
    "mixtral": ("silu", True, "rmsnorm", False, False, False),
    "qwen3_moe": ("silu", True, "rmsnorm", False, False, False),
    "deepseek_v3": ("silu", True, "rmsnorm", False, False, False),
    # DeepseekV2Config: the V3 layout (MLA, shared + routed experts, first_k_dense_replace) with softmax routing.
    "deepseek_v2": ("silu", True, "rmsnorm", False, False, False),
    # Qwen2MoeConfig: silu, untied; one shared expert of shared_expert_intermediate_size per MoE layer.
    "qwen2_moe": ("silu", True, "rmsnorm", False, False, False),
    # Gemma3TextConfig: GeGLU (gelu_pytorch_tanh), RMSNorm, tied embeddings, q/k norm, 5 sliding : 1 global.
    "gemma3_text": ("gelu_pytorch_tanh", True, "rmsnorm", False, True, False),
    # Llama4TextConfig: silu, untied; MoE layers with one shared expert; chunked attention on RoPE layers.
    "llama4_text": ("silu", True, "rmsnorm", False, False, False),
    "gpt_oss": ("silu", True, "rmsnorm", False, False, False),
    "gpt2": ("gelu", False, "layernorm", True, True, True),
    "mpt": ("gelu", False, "layernorm", False, True, False),
    "nemotron": ("relu2", False, "layernorm", False, False, False),
}


class ModelSpec(BaseModel):
    """Normalised architecture of a decoder-only transformer language model.

    Sizes are counts (elements), never bytes.  Per-layer lists have one entry per
    decoder layer, in order.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Catalog id or a name derived from the config.")
    model_type: str = Field(description="Hugging Face model_type.")
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int = Field(description="Key/value heads (GQA); equals heads for MHA.")
    head_dim: int = Field(description="Per-head dimension of queries and keys.")
    v_head_dim: int = Field(description="Per-head dimension of values (differs for MLA).")
    ffn_hidden_size: int = Field(description="Intermediate size of dense MLP layers.")
    gated_mlp: bool = Field(description="SwiGLU-style MLP with gate and up projections.")
    activation: str
    norm: Literal["rmsnorm", "layernorm"]
    linear_bias: bool = Field(description="Biases on attention and MLP linears.")
    attention_bias: bool = Field(description="Biases on q/k/v/o projections.")
    qk_norm: bool = Field(default=False, description="Per-head RMSNorm on q and k (Qwen3).")
    vocab_size: int
    tie_embeddings: bool
    learned_positions: int = Field(default=0, description="Rows of a learned position table.")
    # MoE
    num_experts: int = Field(default=0, description="Routed experts per MoE layer; 0 = dense.")
    top_k: int = 0
    moe_ffn_hidden_size: int = 0
    num_shared_experts: int = 0
    shared_expert_ffn_hidden_size: int = 0
    moe_layers: tuple[bool, ...] = Field(default=(), description="Per layer: MoE MLP?")
    expert_bias: bool = Field(default=False, description="Biases on expert linears (gpt-oss).")
    activation_clamp: float = Field(default=0.0, ge=0.0, description=(
        "Clamp of the gated activation's inputs (gpt-oss ``swiglu_limit``: gate <= limit, |linear| <= limit); "
        "0 = none."))
    # MLA (DeepSeek-V2/V3)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    # Sliding-window attention: per layer window in tokens, 0 = full causal attention.
    attention_windows: tuple[int, ...] = ()
    source: str = ""
    published_params: float | None = Field(default=None, description="Published total params.")

    @property
    def is_moe(self) -> bool:
        """Whether any layer has routed experts."""
        return self.num_experts > 0

    @property
    def uses_mla(self) -> bool:
        """Whether attention is DeepSeek multi-head latent attention."""
        return self.kv_lora_rank > 0

    @property
    def q_width(self) -> int:
        """Width of the concatenated query heads (elements per token)."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of the concatenated key heads (elements per token)."""
        return self.num_kv_heads * self.head_dim

    @property
    def num_moe_layers(self) -> int:
        """Number of layers whose MLP is a routed MoE."""
        return sum(self.moe_layers)


# Field-by-field limits of config.json values (issue 13): (smallest, largest) accepted.  The upper
# bounds sit far above any published model (hidden 53,248 in Llama 3.1 405B is ~2^16; 256 routed
# experts in DeepSeek-V3; vocab 256k in Gemma) and keep every downstream product finite.
_POSITIVE = (1, 1 << 20)
_FIELD_LIMITS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(("hidden_size", "d_model", "n_embd"), (1, 1 << 20)),
    **dict.fromkeys(("num_hidden_layers", "n_layers", "n_layer"), (1, 4096)),
    **dict.fromkeys(("num_attention_heads", "n_heads", "n_head", "num_key_value_heads", "num_query_groups"),
                    (1, 16384)),
    **dict.fromkeys(("head_dim", "kv_channels", "qk_nope_head_dim", "v_head_dim"), (1, 65536)),
    "qk_rope_head_dim": (0, 65536),
    **dict.fromkeys(("intermediate_size", "ffn_hidden_size", "n_inner", "moe_intermediate_size",
                     "shared_expert_intermediate_size"), (1, 1 << 22)),
    "expansion_ratio": (1, 1024),
    **dict.fromkeys(("num_local_experts", "num_experts", "n_routed_experts"), (0, 1 << 16)),
    **dict.fromkeys(("num_experts_per_tok", "experts_per_token", "moe_router_topk"), (0, 1 << 16)),
    "n_shared_experts": (0, 1024),
    **dict.fromkeys(("kv_lora_rank", "q_lora_rank"), (0, 1 << 20)),
    **dict.fromkeys(("vocab_size", "padded_vocab_size"), (1, 1 << 24)),
    **dict.fromkeys(("max_position_embeddings", "n_positions"), (1, 1 << 26)),
    "sliding_window": (0, 1 << 26),
    "first_k_dense_replace": (0, 4096),
    **dict.fromkeys(("moe_layer_freq", "decoder_sparse_step", "interleave_moe_layer_step", "sliding_window_pattern",
                     "no_rope_layer_interval"), (1, 4096)),
    "intermediate_size_mlp": (1, 1 << 22),
    "attention_chunk_size": (0, 1 << 26),
}


def _check_fields(cfg: Mapping[str, Any]) -> None:
    """Every numeric config.json field present is a whole, finite number within its limits (the field is named).

    Raises:
        ModelSpecError: naming the first field that is not.
    """
    for key, (low, high) in _FIELD_LIMITS.items():
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ModelSpecError(f"model config field '{key}' must be a whole number, got {type(value).__name__}")
        if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
            raise ModelSpecError(f"model config field '{key}' must be a whole, finite number, got {value}")
        if not low <= value <= high:
            raise ModelSpecError(f"model config field '{key}' = {int(value)} is out of range (allowed {low}..{high})")


def _check_shape(spec: ModelSpec) -> None:
    """Cross-field rules: heads divisible by KV heads, a head width, top-k within the experts, layer lists."""
    if spec.num_attention_heads % spec.num_kv_heads and not spec.uses_mla:
        raise ModelSpecError(f"model config: num_attention_heads={spec.num_attention_heads} is not divisible by "
                             f"num_key_value_heads={spec.num_kv_heads}")
    if spec.head_dim < 1:
        raise ModelSpecError(f"model config: head_dim = hidden_size/num_attention_heads = {spec.hidden_size}/"
                             f"{spec.num_attention_heads} is 0; give 'head_dim' or fewer heads")
    if spec.num_experts and not 1 <= spec.top_k <= spec.num_experts:
        raise ModelSpecError(f"model config field 'num_experts_per_tok' = {spec.top_k} must be 1..num_experts="
                             f"{spec.num_experts}")
    if spec.num_experts and spec.moe_ffn_hidden_size < 1:
        raise ModelSpecError("model config field 'moe_intermediate_size' must be positive for a MoE model")
    if len(spec.attention_windows) != spec.num_layers:
        raise ModelSpecError(f"model config field 'layer_types' has {len(spec.attention_windows)} entries; "
                             f"num_hidden_layers is {spec.num_layers}")
    if spec.num_experts and not any(spec.moe_layers):
        raise ModelSpecError("model config: a MoE model with no MoE layer (check first_k_dense_replace, "
                             "moe_layer_freq, decoder_sparse_step, mlp_only_layers)")


def _first(cfg: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if key in cfg and cfg[key] is not None:
            return cfg[key]
    return default


def _activation_clamp(cfg: Mapping[str, Any], model_type: str) -> float:
    """gpt-oss's ``swiglu_limit`` (transformers GptOssConfig default 7.0, as in openai/gpt-oss-*/config.json); 0 for
    other model types without one.

    Raises:
        ModelSpecError: the value is not a finite number >= 0.
    """
    value = _first(cfg, "swiglu_limit", default=7.0 if model_type == "gpt_oss" else 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ModelSpecError(f"model config field 'swiglu_limit' must be a finite number >= 0, got {value!r}")
    return float(value)


def _flag(cfg: Mapping[str, Any], key: str, default: bool) -> bool:
    """A config.json boolean: true/false, or the strings "true"/"false" (any case) some exporters write.

    Raises:
        ModelSpecError: any other value (``bool("false")`` would be True).
    """
    value = cfg.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ModelSpecError(f"model config field '{key}' must be true or false, got {str(value)[:40]!r}")


def _require(cfg: Mapping[str, Any], *keys: str) -> int:
    value = _first(cfg, *keys)
    if value is None:
        raise ModelSpecError(f"model config lacks '{keys[0]}' (needed for model_type '{cfg.get('model_type')}')")
    return int(value)


def _moe_layer_flags(cfg: Mapping[str, Any], model_type: str, num_layers: int, num_experts: int) -> tuple[bool, ...]:
    if num_experts == 0:
        return (False,) * num_layers
    if model_type in ("deepseek_v3", "deepseek_v2"):
        first_dense = int(_first(cfg, "first_k_dense_replace", default=0))
        freq = int(_first(cfg, "moe_layer_freq", default=1))
        return tuple(i >= first_dense and i % freq == 0 for i in range(num_layers))
    if model_type == "llama4_text":
        # Llama4TextConfig: moe_layers, else every interleave_moe_layer_step-th layer (Scout 1, Maverick 2)
        listed = cfg.get("moe_layers")
        if listed is not None:
            if not isinstance(listed, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in listed):
                raise ModelSpecError("model config field 'moe_layers' must be a list of layer indices")
            return tuple(i in set(listed) for i in range(num_layers))
        step = int(_first(cfg, "interleave_moe_layer_step", default=1))
        return tuple((i + 1) % step == 0 for i in range(num_layers))
    if model_type in ("qwen3_moe", "qwen2_moe"):
        step = int(_first(cfg, "decoder_sparse_step", default=1))
        listed = _first(cfg, "mlp_only_layers", default=[]) or []
        if not isinstance(listed, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in listed):
            raise ModelSpecError("model config field 'mlp_only_layers' must be a list of layer indices")
        only_mlp = set(listed)
        return tuple(i not in only_mlp and (i + 1) % step == 0 for i in range(num_layers))
    return (True,) * num_layers


def _attention_windows(cfg: Mapping[str, Any], model_type: str, num_layers: int) -> tuple[int, ...]:
    if model_type == "llama4_text":
        return _llama4_windows(cfg, num_layers)
    window = int(_first(cfg, "sliding_window", default=4096 if model_type == "gemma3_text" else 0) or 0)
    if model_type == "gemma3_text" and window > 0 and not cfg.get("layer_types"):
        # Gemma3TextConfig: every sliding_window_pattern-th layer is global (pattern 6: 5 local, 1 global)
        pattern = int(_first(cfg, "sliding_window_pattern", default=6))
        return tuple(0 if (i + 1) % pattern == 0 else window for i in range(num_layers))
    if window <= 0:
        return (0,) * num_layers
    layer_types = cfg.get("layer_types")
    if layer_types:
        if not isinstance(layer_types, list) or len(layer_types) > 4096:
            raise ModelSpecError("model config field 'layer_types' must be a list with one entry per layer")
        return tuple(window if t == "sliding_attention" else 0 for t in layer_types)
    if model_type in ("gpt_oss", "gemma2"):  # they alternate sliding and full attention, sliding first
        return tuple(window if i % 2 == 0 else 0 for i in range(num_layers))
    if cfg.get("use_sliding_window") is False:
        return (0,) * num_layers
    return (window,) * num_layers


def _llama4_windows(cfg: Mapping[str, Any], num_layers: int) -> tuple[int, ...]:
    """Llama 4: RoPE layers attend within chunks of ``attention_chunk_size`` tokens, every
    ``no_rope_layer_interval``-th layer (NoPE) attends to the whole sequence (Llama4TextConfig ``no_rope_layers``).

    Chunked causal attention over S tokens in chunks of C costs S*C/2 score elements, as a sliding window of C/2
    does (S*W), so a chunked layer is priced as a window of C/2 tokens."""
    chunk = int(_first(cfg, "attention_chunk_size", default=8192) or 0)
    rope = cfg.get("no_rope_layers")
    if rope is None:
        interval = int(_first(cfg, "no_rope_layer_interval", default=4))
        rope = [int((i + 1) % interval != 0) for i in range(num_layers)]
    if not isinstance(rope, list) or len(rope) != num_layers:
        raise ModelSpecError("model config field 'no_rope_layers' must be a list with one entry per layer")
    return tuple(chunk // 2 if uses_rope and chunk > 0 else 0 for uses_rope in rope)


def model_from_hf_config(cfg: Mapping[str, Any], *, name: str | None = None, source: str = "",
                         published_params: float | None = None) -> ModelSpec:
    """Build a ModelSpec from Hugging Face ``config.json`` fields.

    Raises:
        ModelSpecError: the model_type is not supported or a required field is missing.
    """
    if not isinstance(cfg, Mapping):
        raise ModelSpecError(f"model config must be a mapping of config.json fields, got {type(cfg).__name__}")
    model_type = str(cfg.get("model_type", ""))[:64].lower()
    if model_type in MULTIMODAL_WRAPPERS:
        text = cfg.get("text_config")
        if not isinstance(text, Mapping):
            raise ModelSpecError(f"model_type '{model_type}' is a multimodal config: its language model is the "
                                 f"'text_config' mapping (model_type {MULTIMODAL_WRAPPERS[model_type]}), missing here")
        cfg = {**text, "model_type": MULTIMODAL_WRAPPERS[model_type]}
        source = (source + "; " if source else "") + (f"text_config of a multimodal {model_type} config: the vision "
                                                       "encoder is not modelled")
        model_type = MULTIMODAL_WRAPPERS[model_type]
    if model_type not in _TYPE_TRAITS:
        raise ModelSpecError(
            f"unsupported model_type '{model_type or '<missing>'}' (supported: {', '.join(SUPPORTED_MODEL_TYPES)}); "
            "a decoder-only model of another type can be given as the config.json fields of the nearest supported "
            "type (model_type plus hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, "
            "intermediate_size, vocab_size; MoE: num_local_experts, num_experts_per_tok, moe_intermediate_size)"
        )
    act, gated, norm, bias, tied, learned = _TYPE_TRAITS[model_type]
    _check_fields(cfg)
    spec = _build(cfg, model_type, act, gated, norm, bias, tied, learned, name=name, source=source,
                  published_params=published_params)
    _check_shape(spec)
    return spec


def _build(cfg: Mapping[str, Any], model_type: str, act: str, gated: bool, norm: str, bias: bool, tied: bool,
           learned: bool, *, name: str | None, source: str, published_params: float | None) -> ModelSpec:
    """The ModelSpec of config fields already checked by _check_fields."""
    hidden = _require(cfg, "hidden_size", "d_model", "n_embd")
    layers = _require(cfg, "num_hidden_layers", "n_layers", "n_layer")
    heads = _require(cfg, "num_attention_heads", "n_heads", "n_head")
    kv_heads = int(_first(cfg, "num_key_value_heads", "num_query_groups", default=heads))
    default_head_dim = 128 if model_type == "qwen3" else 256 if model_type == "gemma3_text" else hidden // heads
    head_dim = int(_first(cfg, "head_dim", "kv_channels", default=default_head_dim))
    v_head_dim = head_dim
    expansion = int(_first(cfg, "expansion_ratio", default=4))
    ffn = int(_first(cfg, "intermediate_size", "ffn_hidden_size", "n_inner", default=expansion * hidden))
    if model_type == "llama4_text":   # intermediate_size is the expert (and shared expert) width; dense layers differ
        ffn = int(_first(cfg, "intermediate_size_mlp", default=ffn))
    act = str(_first(cfg, "hidden_activation", "hidden_act", "activation_function", default=act))[:64]
    if model_type == "nemotron":
        act = "relu2"
    # The model type fixes the MLP's matrices: transformers' LlamaMLP/MistralMLP/Qwen2MLP/... always hold
    # gate_proj and up_proj and apply hidden_act to the gate, whatever the activation; gpt2/mpt/nemotron never do.

    num_experts = int(_first(cfg, "num_local_experts", "num_experts", "n_routed_experts", default=0) or 0)
    top_k = int(_first(cfg, "num_experts_per_tok", "experts_per_token", "moe_router_topk", default=0) or 0)
    if num_experts and not top_k:
        top_k = 2 if model_type == "mixtral" else 1
    moe_ffn = int(_first(cfg, "moe_intermediate_size", default=ffn)) if num_experts else 0
    if model_type == "llama4_text":
        moe_ffn = int(_first(cfg, "intermediate_size", default=8192))
    num_shared = int(_first(cfg, "n_shared_experts", default=0) or 0)
    if num_experts and model_type in ("qwen2_moe", "llama4_text"):
        num_shared = 1      # one shared expert per MoE layer (Qwen2MoeSparseMoeBlock, Llama4TextMoe)
    shared_ffn = int(_first(cfg, "shared_expert_intermediate_size", default=moe_ffn * num_shared))

    kv_lora = int(_first(cfg, "kv_lora_rank", default=0) or 0) if model_type in ("deepseek_v3", "deepseek_v2") else 0
    q_lora = int(_first(cfg, "q_lora_rank", default=0) or 0) if kv_lora else 0
    rope_dim = 0
    if kv_lora:
        nope = int(_first(cfg, "qk_nope_head_dim", default=128))
        rope_dim = int(_first(cfg, "qk_rope_head_dim", default=64))
        head_dim = nope + rope_dim
        v_head_dim = int(_first(cfg, "v_head_dim", default=128))
        kv_heads = heads

    attention_bias = _flag(cfg, "attention_bias", bias or model_type == "gpt_oss")
    return ModelSpec(
        name=name or str(cfg.get("_name_or_path") or f"{model_type}-{hidden}x{layers}")[:200],
        model_type=model_type,
        hidden_size=hidden,
        num_layers=layers,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        ffn_hidden_size=ffn,
        gated_mlp=gated,
        activation=act,
        norm=norm,
        linear_bias=bias,
        attention_bias=attention_bias,
        qk_norm=model_type in ("qwen3", "qwen3_moe", "gemma3_text"),
        vocab_size=_require(cfg, "vocab_size", "padded_vocab_size"),
        tie_embeddings=_flag(cfg, "tie_word_embeddings", tied),
        learned_positions=int(_first(cfg, "max_position_embeddings", "n_positions", default=1024)) if learned else 0,
        num_experts=num_experts,
        top_k=top_k,
        moe_ffn_hidden_size=moe_ffn,
        num_shared_experts=num_shared,
        shared_expert_ffn_hidden_size=shared_ffn if num_shared else 0,
        moe_layers=_moe_layer_flags(cfg, model_type, layers, num_experts),
        expert_bias=model_type == "gpt_oss",
        # transformers GptOssConfig: swiglu_limit=7.0 (its default, and the value of openai/gpt-oss-*/config.json)
        activation_clamp=_activation_clamp(cfg, model_type),
        q_lora_rank=q_lora,
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=rope_dim,
        attention_windows=_attention_windows(cfg, model_type, layers),
        source=source,
        published_params=published_params,
    )


_FOLDER = resources.files("projection") / "catalog" / "models"


@lru_cache(maxsize=1)
def _file_ids() -> frozenset[str]:
    """The ids the catalog's files are named by (``<id>.yaml``; tests/projection/test_model_catalog_files.py checks
    that each file holds the id it is named by)."""
    return frozenset(item.name.removesuffix(".yaml") for item in _FOLDER.iterdir() if item.name.endswith(".yaml"))


@lru_cache(maxsize=None)
def _entry_in_file(model_id: str) -> dict[str, Any]:
    """The entry of one catalog file, read once (the full catalog reuses it)."""
    return load_catalog((_FOLDER / f"{model_id}.yaml").read_text())


@lru_cache(maxsize=1)
def _catalog() -> dict[str, dict[str, Any]]:
    entries = (_entry_in_file(model_id) for model_id in sorted(_file_ids()))
    return {entry["id"]: entry for entry in entries}


def _alias_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for model_id, entry in _catalog().items():
        index[model_id.lower()] = model_id
        for alias in entry.get("aliases", []) or []:
            index[str(alias).lower()] = model_id
    return index


def catalog_model_id(name: str) -> str | None:
    """The catalog id that ``name`` (an id or an alias, any case) stands for, or None."""
    key = name.lower()
    if key in _file_ids():       # an id: its file alone (a command naming one model reads 1 of 22 files)
        return key
    return _alias_index().get(key)


def catalog_config(model_id: str) -> dict[str, Any]:
    """The Hugging Face config fields of a catalog model as its entry gives them ({} for a model not in the
    catalog): fields the projection does not use (``rope_theta``) but a launch config must carry."""
    entry = _catalog().get(model_id)
    return dict(entry.get("config") or {}) if entry else {}


def list_model_ids() -> list[str]:
    """Return the catalog's model ids, sorted."""
    return sorted(_catalog())


@lru_cache(maxsize=256)
def _load_catalog_model(model_id: str) -> ModelSpec:
    entry = _entry_in_file(model_id) if model_id in _file_ids() else _catalog()[model_id]
    published = entry.get("published_params_billion")
    return model_from_hf_config(
        entry["config"],
        name=model_id,
        source=str(entry.get("source", "")),
        published_params=float(published) * 1e9 if published is not None else None,
    )


def load_model(model: str | Path | Mapping[str, Any] | ModelSpec) -> ModelSpec:
    """Resolve a catalog id or alias, a config.json path, a field mapping, or a ModelSpec.

    Raises:
        UnknownNameError: a string that is neither a catalog name nor an existing file.
        ModelSpecError: the config cannot be normalised.
    """
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, Mapping):
        if "config" in model and "model_type" not in model:  # a catalog-style entry
            return model_from_hf_config(model["config"], name=model.get("id"))
        return model_from_hf_config(model)
    text = str(model)
    if (model_id := catalog_model_id(text)) is not None:
        return _load_catalog_model(model_id)
    if len(text) > 4096 or "\x00" in text:
        raise UnknownNameError("model", text[:80], list_model_ids())
    path = Path(text)
    from projection.safe_yaml import UNTRUSTED

    if UNTRUSTED.get():   # a remote call: no name reaches the file system, so no answer depends on what exists
        if path.suffix.lower() in (".json", ".yaml", ".yml") or "/" in text or "\\" in text:
            raise ModelSpecError("model files are not read for remote tool calls; name a catalog model id or pass "
                                 "the config.json fields as an object")
        raise UnknownNameError("model", text[:80], list_model_ids())
    try:
        is_file, is_dir = path.is_file(), path.is_dir()
    except OSError:   # a name too long for the file system, say: not a file
        is_file = is_dir = False
    if is_dir:        # a Hugging Face model folder: the file it holds is what is read
        raise ModelSpecError(f"model '{text[:200]}' is a folder: give the path of its config.json, e.g. "
                             f"{(path / 'config.json').as_posix()[:220]}")
    if path.suffix in (".json", ".yaml", ".yml") or is_file:
        if not is_file:
            raise ModelSpecError(f"model config file '{text[:200]}' does not exist")
        from projection.safe_yaml import (YamlLimitError, load_bounded, load_json_bounded, read_text_bounded,
                                          yaml_problem)

        try:   # where it broke, never the file's content
            body = read_text_bounded(path, max_bytes=4 * 1024 * 1024)
            raw = load_json_bounded(body) if path.suffix == ".json" else load_bounded(body)
        except json.JSONDecodeError as err:
            raise ModelSpecError(f"cannot parse model config '{text}': {err.msg} at line {err.lineno} "
                                 f"column {err.colno}") from err
        except yaml.MarkedYAMLError as err:
            line, _ = yaml_problem(err)
            where = f" at line {line}" if line is not None else ""
            raise ModelSpecError(f"cannot parse model config '{text}': not valid YAML{where}") from err
        except (yaml.YAMLError, YamlLimitError, UnicodeDecodeError, ValueError, OSError) as err:
            reason = str(err) if isinstance(err, YamlLimitError) else type(err).__name__
            raise ModelSpecError(f"cannot parse model config '{text}': {reason}") from err
        if not isinstance(raw, Mapping):
            raise ModelSpecError(f"model config '{text}' is not a mapping of config.json fields")
        return load_model(raw) if "config" in raw else model_from_hf_config(raw, name=path.stem)
    raise UnknownNameError("model", text[:80], list_model_ids())
