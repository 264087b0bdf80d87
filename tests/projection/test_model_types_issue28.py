"""deepseek_v2, qwen2_moe, gemma3 and llama4 configs: parameter counts match the published totals, and the
architecture traits each needs (shared experts, dense vs MoE layers, sliding / chunked attention) are read."""

from __future__ import annotations

import pytest

from projection.errors import ModelSpecError
from projection.model_spec import model_from_hf_config
from projection.params import active_params, total_params

# config.json fields of the published checkpoints (Hugging Face model cards' config.json)
DEEPSEEK_V2 = {"model_type": "deepseek_v2", "hidden_size": 5120, "num_hidden_layers": 60, "num_attention_heads": 128,
               "num_key_value_heads": 128, "intermediate_size": 12288, "moe_intermediate_size": 1536,
               "n_routed_experts": 160, "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1,
               "moe_layer_freq": 1, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
               "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400}
DEEPSEEK_V2_LITE = {**DEEPSEEK_V2, "hidden_size": 2048, "num_hidden_layers": 27, "num_attention_heads": 16,
                    "num_key_value_heads": 16, "intermediate_size": 10944, "moe_intermediate_size": 1408,
                    "n_routed_experts": 64, "q_lora_rank": None}
QWEN15_MOE = {"model_type": "qwen2_moe", "hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 16,
              "num_key_value_heads": 16, "intermediate_size": 5632, "moe_intermediate_size": 1408,
              "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4,
              "decoder_sparse_step": 1, "vocab_size": 151936, "tie_word_embeddings": False}
QWEN2_57B = {**QWEN15_MOE, "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
             "num_key_value_heads": 4, "intermediate_size": 18944, "moe_intermediate_size": 2560,
             "shared_expert_intermediate_size": 20480, "num_experts": 64, "num_experts_per_tok": 8}
LLAMA4_SCOUT_TEXT = {"model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 48,
                     "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192,
                     "intermediate_size_mlp": 16384, "num_local_experts": 16, "num_experts_per_tok": 1,
                     "interleave_moe_layer_step": 1, "vocab_size": 202048, "attention_chunk_size": 8192}
LLAMA4_MAVERICK_TEXT = {**LLAMA4_SCOUT_TEXT, "num_local_experts": 128, "interleave_moe_layer_step": 2}
GEMMA3_27B_TEXT = {"model_type": "gemma3_text", "hidden_size": 5376, "num_hidden_layers": 62,
                   "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "intermediate_size": 21504,
                   "vocab_size": 262208, "sliding_window": 1024, "sliding_window_pattern": 6}


@pytest.mark.parametrize(("cfg", "total_b", "active_b"), [
    (DEEPSEEK_V2, 236, 21),                                         # DeepSeek-V2 report
    (DEEPSEEK_V2_LITE, 15.7, 2.4 + 0.21),    # card: 2.4B active, without the 0.21B input embedding counted here
    (QWEN15_MOE, 14.3, 2.7), (QWEN2_57B, 57.4, 14.2),              # Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B cards
    (LLAMA4_SCOUT_TEXT, 107.8, 17.2), (LLAMA4_MAVERICK_TEXT, 400, 17.2),   # Llama 4: 109B / 400B, 17B active
    (GEMMA3_27B_TEXT, 27.0, 27.0),                                  # Gemma 3 27B (text decoder ~27B)
])
def test_parameter_counts_match_the_published(cfg: dict, total_b: float, active_b: float) -> None:
    spec = model_from_hf_config(cfg)
    assert total_params(spec) / 1e9 == pytest.approx(total_b, rel=0.05)
    assert active_params(spec) / 1e9 == pytest.approx(active_b, rel=0.08)


def test_the_traits_each_type_needs() -> None:
    v2 = model_from_hf_config(DEEPSEEK_V2)
    assert v2.uses_mla and v2.moe_layers[0] is False and all(v2.moe_layers[1:]) and v2.num_shared_experts == 2
    qwen = model_from_hf_config(QWEN2_57B)
    assert qwen.num_shared_experts == 1 and qwen.shared_expert_ffn_hidden_size == 20480
    maverick = model_from_hf_config(LLAMA4_MAVERICK_TEXT)
    assert maverick.moe_layers[:4] == (False, True, False, True)             # interleave step 2
    assert maverick.ffn_hidden_size == 16384 and maverick.moe_ffn_hidden_size == 8192
    # every 4th layer is NoPE with full attention; RoPE layers attend in 8192-token chunks (priced as a 4096 window)
    assert maverick.attention_windows[:4] == (4096, 4096, 4096, 0)
    gemma = model_from_hf_config(GEMMA3_27B_TEXT)
    assert gemma.attention_windows[:6] == (1024,) * 5 + (0,) and gemma.qk_norm and gemma.tie_embeddings


def test_multimodal_wrappers_read_their_text_config() -> None:
    wrapped = model_from_hf_config({"model_type": "llama4", "text_config": LLAMA4_SCOUT_TEXT,
                                    "vision_config": {"hidden_size": 1408}})
    assert wrapped.model_type == "llama4_text" and "vision encoder is not modelled" in wrapped.source
    assert total_params(wrapped) == total_params(model_from_hf_config(LLAMA4_SCOUT_TEXT))
    with pytest.raises(ModelSpecError, match="text_config"):
        model_from_hf_config({"model_type": "gemma3", "vision_config": {}})
    with pytest.raises(ModelSpecError, match="nearest supported type"):
        model_from_hf_config({"model_type": "mamba", "hidden_size": 8})
