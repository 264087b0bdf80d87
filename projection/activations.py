"""Activation memory held for the backward pass, per layer and micro-batch (bytes).

Generalises Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models" (arXiv 2205.05198), Sec. 4: a GPT layer with TP degree t stores
``s*b*h*(10 + 24/t + 5*a*s/(h*t))`` bytes (Eq. 2); with sequence parallelism
``s*b*h*(34/t + 5*a*s/(h*t))`` (Eq. 3 region terms); selective recompute drops the
``5*a*s^2*b/t`` attention-core term (Eq. 6); full recompute keeps only the ``2*s*b*h``
layer input (``/t`` with SP).  The generalisation keeps every term apart so it extends to
GQA (narrower K and V), gated MLPs (gate and up outputs), MoE (top-k routed copies, EP
dispatch), MLA (compressed latents), flash attention (no s^2 terms, an fp32 log-sum-exp per
row), sliding windows and CP (local sequence ``s/cp``), and FP8 (GEMM inputs saved as 1-byte
copies, as Transformer Engine does).  Token-drop MoE routing pads every expert's input to its
capacity (``expert_capacity`` = ``moe_capacity_factor``).
"""

from __future__ import annotations

from dataclasses import dataclass

from projection.model_spec import ModelSpec

BF16_BYTES = 2      # activations are stored in 16-bit in mixed-precision training
FP32_BYTES = 4      # softmax statistics and logits for the loss
MASK_BYTES = 1      # dropout masks are stored as bytes (Korthikanti Sec. 4.1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ActivationContext:
    """The layout facts activation memory depends on."""

    seq_len: int                 # local sequence per GPU (already divided by cp), tokens
    micro_batch: int             # sequences per micro-batch
    tp: int
    sequence_parallel: bool      # Megatron SP: norm/dropout regions sharded over TP
    flash_attention: bool = True
    dropout: bool = False        # GPT-3 style hidden/attention dropout (Korthikanti's setup)
    gemm_input_bytes: int = BF16_BYTES   # 1 for FP8 recipes (saved FP8 copies)
    recompute_modules: frozenset[str] = frozenset()   # selective recompute modules in effect
    expert_capacity: float = 1.0  # routed-token padding: moe_capacity_factor with token-drop, else 1 (dropless)
    score_bytes: int = BF16_BYTES  # bytes per attention score kept without flash attention (XLA: fp32 + bf16)
    frozen_mlp: bool = False      # LoRA on the attention projections: the frozen MLP GEMMs need no saved inputs
    op_sac: bool = False          # torchtitan per-op selective AC: save every compute op's output but every 2nd mm


def _attention_terms(model: ModelSpec, ctx: ActivationContext, window: int) -> tuple[float, float, float]:
    """Return (replicated-region, TP-sharded, attention-core) bytes of the attention block."""
    s, b, t, h = ctx.seq_len, ctx.micro_batch, ctx.tp, model.hidden_size
    tokens = s * b
    g = ctx.gemm_input_bytes
    drop = "layernorm" in ctx.recompute_modules
    replicated = BF16_BYTES * tokens * h + (0 if drop else g * tokens * h)  # norm input, QKV GEMM input
    if ctx.dropout:
        replicated += MASK_BYTES * tokens * h  # attention output dropout mask
    a = model.num_attention_heads
    if model.uses_mla:
        latent = model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim
        replicated += (BF16_BYTES + g) * tokens * latent  # latent norm inputs and up-projection inputs
        qkv = 0 if "mla_up_proj" in ctx.recompute_modules else BF16_BYTES * tokens * a * (
            2 * model.head_dim + model.v_head_dim)
    else:
        qkv = BF16_BYTES * tokens * (model.q_width + model.num_kv_heads * (model.head_dim + model.v_head_dim))
    out_proj_input = g * tokens * a * model.v_head_dim
    keys = min(window, s) if window else s
    if ctx.flash_attention:
        core = FP32_BYTES * a * s * b  # log-sum-exp per query row
    else:
        scores = a * s * keys * b
        core = ctx.score_bytes * scores + (MASK_BYTES + BF16_BYTES) * scores * ctx.dropout
    if "core_attn" in ctx.recompute_modules:
        core = 0.0
    return replicated, (qkv + out_proj_input) / t, core / t


def _mlp_bytes(model: ModelSpec, tokens: float, ffn: int, ctx: ActivationContext, *, act_dropped: bool) -> float:
    """Bytes of one (dense or expert) MLP's GEMM outputs and second GEMM input.

    A frozen MLP (LoRA) computes no weight gradient, so its second GEMM's input is not saved.
    """
    act_inputs = BF16_BYTES * tokens * ffn * (2 if model.gated_mlp else 1)
    fc2_input = 0 if act_dropped or ctx.frozen_mlp else ctx.gemm_input_bytes * tokens * ffn
    return act_inputs + fc2_input


def op_sac_layer_bytes(model: ModelSpec, ctx: ActivationContext) -> float:
    """Bytes a dense layer keeps under torchtitan's per-op selective AC, one micro-batch.

    torchtitan ``_apply_ac_to_transformer_block`` (selective_ac_option "op"): "Saves output of all
    compute ops, except every second mm"; the save list is ``aten.mm``, the SDPA kernels and
    ``reduce_scatter``.  A Llama block runs wq, wk, wv, wo, w1, w3, w2, so the outputs of wq, wv,
    w1 and w2 are saved (odd mm counts), with the SDPA output and its fp32 log-sum-exp and the
    block input (the checkpoint's argument); every element-wise op and wk, wo, w3 are recomputed.
    """
    s, b, t, h = ctx.seq_len, ctx.micro_batch, ctx.tp, model.hidden_size
    tokens = s * b
    sp_div = t if ctx.sequence_parallel else 1
    sharded = model.q_width + model.num_kv_heads * model.v_head_dim + model.ffn_hidden_size + model.q_width
    lse = FP32_BYTES * tokens * model.num_attention_heads / t
    return BF16_BYTES * tokens * (2 * h / sp_div + sharded / t) + lse


def layer_activation_bytes(model: ModelSpec, layer: int, ctx: ActivationContext) -> float:
    """Bytes one GPU keeps for the backward of ``layer`` for one micro-batch, no full recompute."""
    if ctx.op_sac and not (model.moe_layers and model.moe_layers[layer]):
        return op_sac_layer_bytes(model, ctx)
    s, b, t, h = ctx.seq_len, ctx.micro_batch, ctx.tp, model.hidden_size
    tokens = s * b
    sp_div = t if ctx.sequence_parallel else 1
    window = model.attention_windows[layer] if model.attention_windows else 0
    attn_replicated, attn_sharded, core = _attention_terms(model, ctx, window)
    mods = ctx.recompute_modules
    mlp_replicated = BF16_BYTES * tokens * h  # pre-MLP norm input
    mlp_replicated += 0 if "layernorm" in mods or ctx.frozen_mlp else ctx.gemm_input_bytes * tokens * h  # fc1 input
    if ctx.dropout:
        mlp_replicated += MASK_BYTES * tokens * h
    if model.moe_layers and model.moe_layers[layer]:
        mlp_sharded = 0.0 if "mlp" in mods or "shared_experts" in mods else (
            _mlp_bytes(model, tokens, model.shared_expert_ffn_hidden_size, ctx, act_dropped=False) / t)
        # Tokens arriving at this GPU after dispatch; with token-drop routing every expert computes on its
        # full capacity (Megatron ``moe_pad_expert_input_to_capacity``; MaxText dense path ``capacity_factor``).
        routed_tokens = tokens * model.top_k / t * ctx.expert_capacity
        experts = 0.0
        if "moe" not in mods:
            experts = _mlp_bytes(model, routed_tokens, model.moe_ffn_hidden_size, ctx,
                                 act_dropped="moe_act" in mods)
            experts += (ctx.gemm_input_bytes + BF16_BYTES) * routed_tokens * h  # permuted input, expert output
            experts += FP32_BYTES * tokens / t * model.num_experts  # router logits / probabilities
        mlp_total = mlp_sharded + experts
    else:
        mlp_total = 0.0 if "mlp" in mods else _mlp_bytes(model, tokens, model.ffn_hidden_size, ctx,
                                                        act_dropped=False) / t
    return (attn_replicated + mlp_replicated) / sp_div + attn_sharded + core + mlp_total


def full_recompute_layer_bytes(model: ModelSpec, ctx: ActivationContext) -> float:
    """Bytes kept per layer under full recompute: the layer input only (Korthikanti Sec. 5)."""
    sp_div = ctx.tp if ctx.sequence_parallel else 1
    return BF16_BYTES * ctx.seq_len * ctx.micro_batch * model.hidden_size / sp_div


def embedding_activation_bytes(model: ModelSpec, ctx: ActivationContext) -> float:
    """Embedding output (and its dropout mask) kept on the first stage, per micro-batch."""
    sp_div = ctx.tp if ctx.sequence_parallel else 1
    per_token = BF16_BYTES + (MASK_BYTES if ctx.dropout else 0)
    return per_token * ctx.seq_len * ctx.micro_batch * model.hidden_size / sp_div


def output_activation_bytes(model: ModelSpec, ctx: ActivationContext, loss_bytes_per_logit: float = 6.0) -> float:
    """Final norm and LM-head input, plus the logits live during the loss (Korthikanti Sec. 4.3: 4sbv/t for fp32).

    ``loss_bytes_per_logit`` is the framework's: 6 for a fused bf16-logits/fp32-softmax loss, 10 unfused.
    """
    sp_div = ctx.tp if ctx.sequence_parallel else 1
    tokens = ctx.seq_len * ctx.micro_batch
    head_input = (BF16_BYTES * tokens * model.hidden_size) / sp_div + BF16_BYTES * tokens * model.hidden_size
    logits = loss_bytes_per_logit * tokens * model.vocab_size / ctx.tp
    return head_input + logits
