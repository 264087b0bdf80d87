"""Model FLOPs per training step: the numerator of model TFLOP/s/GPU and MFU.

Two formulas:
- ``"6nd"`` (default): 6 x active matmul parameters per token (forward 2, backward 4, as
  in Kaplan et al. 2020 / PaLM appendix B) plus causal attention, 3 x the forward
  ``2 * heads * keys_attended * (d_qk + d_v)`` per token and layer (keys halved by the
  causal mask).  Embedding lookups are not FLOPs; the LM head is.  Recompute is not
  counted (it is hardware FLOPs, not model FLOPs).
- ``"megatron"``: Megatron-LM ``training.py num_floating_point_operations`` (core 0.12):
  the same matmul terms but attention counted without the causal halving.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from projection.errors import UnknownNameError
from projection.model_spec import ModelSpec
from projection.params import active_params, embedding_params

FlopsFormula = Literal["6nd", "megatron"]
FLOPS_FORMULAS: tuple[str, ...] = ("6nd", "megatron")


@lru_cache(maxsize=1024)
def attention_flops_per_token(model: ModelSpec, seq_len: int, *, causal_halving: bool = True) -> float:
    """Forward attention-score FLOPs per token summed over layers (QK^T and PV)."""
    total = 0.0
    windows = model.attention_windows
    two_heads, width = 2.0 * model.num_attention_heads, model.head_dim + model.v_head_dim
    terms: dict[int, float] = {}   # per distinct window: the same product, added layer by layer in order
    for layer in range(model.num_layers):
        window = windows[layer] if windows else 0
        term = terms.get(window)
        if term is None:
            keys = float(min(window, seq_len) if window else seq_len)
            if causal_halving:
                keys = keys / 2.0 if not window or window >= seq_len else window - window * window / (2.0 * seq_len)
            term = terms[window] = two_heads * keys * width
        total += term
    return total


def model_flops_per_token(model: ModelSpec, seq_len: int, formula: FlopsFormula = "6nd") -> float:
    """Training FLOPs (forward + backward) per token.

    Raises:
        UnknownNameError: ``formula`` is not one of :data:`FlopsFormula`'s values (an unknown name would
            otherwise be priced silently as the ``megatron`` formula).
    """
    if formula not in FLOPS_FORMULAS:
        raise UnknownNameError("FLOP formula", str(formula), list(FLOPS_FORMULAS))
    matmul_params = active_params(model) - embedding_params(model)
    if model.tie_embeddings:
        matmul_params += model.vocab_size * model.hidden_size  # the tied LM head still multiplies
    attention = attention_flops_per_token(model, seq_len, causal_halving=formula == "6nd")
    return 6.0 * matmul_params + 3.0 * attention


def model_flops_per_step(model: ModelSpec, seq_len: int, global_batch: int, formula: FlopsFormula = "6nd") -> float:
    """Training FLOPs of one optimizer step over ``global_batch`` sequences."""
    return model_flops_per_token(model, seq_len, formula) * seq_len * global_batch
