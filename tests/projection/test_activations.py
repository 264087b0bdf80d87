"""Activation memory reproduces Korthikanti et al. 2022 (arXiv 2205.05198) Table 2 exactly."""

from __future__ import annotations

import pytest

from projection.activations import (
    ActivationContext,
    full_recompute_layer_bytes,
    layer_activation_bytes,
)
from projection.model_spec import model_from_hf_config

# GPT-3 175B (Korthikanti Table 3): h=12288, a=96, s=2048, L=96.
GPT3 = model_from_hf_config({"model_type": "gpt2", "hidden_size": 12288, "num_hidden_layers": 96,
                             "num_attention_heads": 96, "intermediate_size": 4 * 12288, "vocab_size": 51200})


def _ctx(t: int, sp: bool, modules: frozenset[str] = frozenset()) -> ActivationContext:
    # The paper's setting: fp16 activations, dropout, no flash attention.
    return ActivationContext(seq_len=2048, micro_batch=1, tp=t, sequence_parallel=sp, flash_attention=False,
                             dropout=True, gemm_input_bytes=2, recompute_modules=modules)


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_no_recompute_no_sp_matches_eq2(t: int) -> None:
    s, b, h, a = 2048, 1, 12288, 96
    expected = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    assert layer_activation_bytes(GPT3, 0, _ctx(t, sp=False)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_no_recompute_with_sp_matches_table2(t: int) -> None:
    s, b, h, a = 2048, 1, 12288, 96
    expected = s * b * h / t * (34 + 5 * a * s / h)
    assert layer_activation_bytes(GPT3, 0, _ctx(t, sp=True)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_selective_recompute_matches_table2(t: int) -> None:
    s, b, h = 2048, 1, 12288
    selective = frozenset({"core_attn"})
    assert layer_activation_bytes(GPT3, 0, _ctx(t, sp=False, modules=selective)) == pytest.approx(
        s * b * h * (10 + 24 / t), rel=1e-12)
    assert layer_activation_bytes(GPT3, 0, _ctx(t, sp=True, modules=selective)) == pytest.approx(
        s * b * h * 34 / t, rel=1e-12)


@pytest.mark.parametrize("t", [1, 8])
def test_full_recompute_keeps_layer_input(t: int) -> None:
    s, b, h = 2048, 1, 12288
    assert full_recompute_layer_bytes(GPT3, _ctx(t, sp=False)) == 2 * s * b * h
    assert full_recompute_layer_bytes(GPT3, _ctx(t, sp=True)) == 2 * s * b * h / t


def test_flash_attention_and_gqa_shrink_memory() -> None:
    llama = model_from_hf_config({"model_type": "llama", "hidden_size": 8192, "num_hidden_layers": 80,
                                  "num_attention_heads": 64, "num_key_value_heads": 8,
                                  "intermediate_size": 28672, "vocab_size": 128256})
    mha = model_from_hf_config({"model_type": "llama", "hidden_size": 8192, "num_hidden_layers": 80,
                                "num_attention_heads": 64, "intermediate_size": 28672, "vocab_size": 128256})
    flash = ActivationContext(seq_len=8192, micro_batch=1, tp=8, sequence_parallel=True)
    eager = ActivationContext(seq_len=8192, micro_batch=1, tp=8, sequence_parallel=True, flash_attention=False)
    assert layer_activation_bytes(llama, 0, flash) < layer_activation_bytes(llama, 0, eager)
    assert layer_activation_bytes(llama, 0, flash) < layer_activation_bytes(mha, 0, flash)


def test_fp8_saves_gemm_inputs() -> None:
    bf16 = ActivationContext(seq_len=4096, micro_batch=2, tp=1, sequence_parallel=False)
    fp8 = ActivationContext(seq_len=4096, micro_batch=2, tp=1, sequence_parallel=False, gemm_input_bytes=1)
    assert layer_activation_bytes(GPT3, 0, fp8) < layer_activation_bytes(GPT3, 0, bf16)


def test_torchtitan_op_sac_saves_every_compute_output_but_every_second_mm() -> None:
    # torchtitan per-op SAC on a Llama block (wq, wk, wv, wo, w1, w3, w2): wq, wv, w1, w2 outputs,
    # the SDPA output and fp32 log-sum-exp, and the block input are kept.
    from projection.model_spec import load_model

    llama = load_model("llama3.1-8b")
    ctx = ActivationContext(seq_len=8192, micro_batch=2, tp=1, sequence_parallel=False, op_sac=True)
    tokens, h = 8192 * 2, 4096
    expected = 2 * tokens * (h + 4096 + 1024 + 14336 + h + 4096) + 4 * tokens * 32
    assert layer_activation_bytes(llama, 0, ctx) == pytest.approx(expected, rel=1e-12)
    full = layer_activation_bytes(llama, 0, ActivationContext(seq_len=8192, micro_batch=2, tp=1,
                                                                sequence_parallel=False))
    assert expected < 0.6 * full
