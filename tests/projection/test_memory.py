"""Peak memory: every pipeline rank, Megatron's formulas, and one test per memory term.

Golden values reproduce Megatron-LM ``megatron/training/theoretical_memory_usage.py``
(``compute_weight_and_optimizer_memory``), transcribed below for dense GQA and MoE models.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projection.hardware import load_hardware
from projection.layout import ParallelDims, chunk_layers
from projection.memory import (
    AMAX_HISTORY_BYTES,
    DEEPEP_BUFFER_BYTES,
    GIB,
    STATIC_TERMS,
    moe_dispatch_buffer_bytes,
    project_memory,
    stage_memory,
)
from projection.framework import memory_traits
from projection.model_spec import ModelSpec, load_model, model_from_hf_config
from projection.params import layer_param_table
from projection.training_config import TrainingConfig
from memory_setup import H100, MIXTRAL, PROFILE

# Llama-3-70B shape with a vocabulary Megatron would not pad further at tp <= 8 (128 * 8 * 126).
LLAMA = model_from_hf_config({"model_type": "llama", "hidden_size": 8192, "num_hidden_layers": 80,
                              "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 28672,
                              "vocab_size": 129024})


def _dims(config: TrainingConfig, world: int) -> ParallelDims:
    dp = world // (config.tp * config.pp * config.cp)
    return ParallelDims(tp=config.tp, pp=config.pp, cp=config.cp, dp=dp, ep=config.ep, etp=config.etp,
                        vpp=config.vpp, num_microbatches=max(1, config.gbs // (config.mbs * dp)))


def megatron_weight_and_optimizer_bytes(model: ModelSpec, tp: int, pp: int, dp: int, distributed: bool) -> float:
    """Megatron-LM ``compute_weight_and_optimizer_memory`` (theoretical_memory_usage.py), transcribed.

    GQA self-attention ``2 h^2 (1 + g/a) (q/h)``, MLP ``2 h f * 3/2`` (SwiGLU), MoE ``2 h f_moe E 3/2``,
    norms ``2 h`` per layer and ``h`` final (RMSNorm); untied embedding and head; the most loaded
    shard is ``(block/pp + embedding)/tp`` (+ head at pp = 1); ``18`` bytes per parameter, or
    ``6 + 12/dp`` with the distributed optimizer.
    """
    h, a, g = model.hidden_size, model.num_attention_heads, model.num_kv_heads
    q_ratio = model.head_dim * a / h
    self_attn = 2 * h * h * ((1 + g / a) * q_ratio)
    mult = 1.5 if model.gated_mlp else 1.0
    dense_layer = 2 * h * (model.ffn_hidden_size * mult + 1) + self_attn
    moe_layer = 2 * h * (model.moe_ffn_hidden_size * model.num_experts * mult + 1) + self_attn
    moe = model.num_moe_layers
    block = dense_layer * (model.num_layers - moe) + moe_layer * moe + h
    embedding = h * model.vocab_size
    shard = (block / pp + embedding) / tp
    if not model.tie_embeddings and pp == 1:
        shard += embedding / tp
    per_param = 6 + 12 / dp if distributed else 18
    return shard * per_param


def _states(stage) -> float:
    return stage.weights_bytes + stage.gradients_bytes + stage.optimizer_bytes


# Megatron divides the norms by TP although every TP rank holds them, and does not count the MoE
# router (h x E per layer); both are < 0.05% of these models' parameters.
@pytest.mark.parametrize(("tp", "pp", "dp", "zero"), [(8, 1, 8, 1), (4, 4, 4, 1), (8, 1, 8, 0), (2, 8, 4, 1)])
def test_dense_states_match_megatron_theoretical_memory(tp: int, pp: int, dp: int, zero: int) -> None:
    config = TrainingConfig(tp=tp, pp=pp, mbs=1, gbs=dp * pp, seq_len=4096, zero=zero)
    memory = project_memory(LLAMA, H100, config, _dims(config, tp * pp * dp), PROFILE)
    expected = megatron_weight_and_optimizer_bytes(LLAMA, tp, pp, dp, distributed=zero >= 1)
    assert _states(memory.stages[0]) == pytest.approx(expected, rel=5e-4)


@pytest.mark.parametrize(("dp", "zero"), [(8, 1), (8, 0)])
def test_moe_states_match_megatron_theoretical_memory(dp: int, zero: int) -> None:
    config = TrainingConfig(tp=1, pp=1, ep=1, mbs=1, gbs=dp, seq_len=4096, zero=zero)
    memory = project_memory(MIXTRAL, H100, config, _dims(config, dp), PROFILE)
    expected = megatron_weight_and_optimizer_bytes(MIXTRAL, 1, 1, dp, distributed=zero >= 1)
    assert _states(memory.stages[0]) == pytest.approx(expected, rel=5e-4)


def test_expert_optimizer_shards_over_the_expert_dp_group() -> None:
    # Megatron-LM PR #4687: expert weights' optimizer states shard over the expert-DP group
    # tp*cp*dp/(ep*etp), dense ones over dp*cp.  TP2 EP8 on 64 GPUs: dp 32, expert-DP 8.
    config = TrainingConfig(tp=2, pp=1, ep=8, mbs=1, gbs=32, seq_len=4096, zero=1)
    dims = _dims(config, 64)
    stage = project_memory(MIXTRAL, H100, config, dims, PROFILE).stages[0]
    table = layer_param_table(MIXTRAL)
    experts = sum(p.experts for p in table) / 8
    dense = sum((p.attention + p.mlp + p.shared_experts) / 2 + p.replicated for p in table)
    dense += (MIXTRAL.vocab_size * MIXTRAL.hidden_size * 2 + MIXTRAL.hidden_size * 2) / 2
    assert stage.optimizer_bytes == pytest.approx(12 * (dense / 32 + experts / 8), rel=1e-3)
    assert stage.gradients_bytes == pytest.approx(4 * (dense + experts), rel=1e-3)


# --- every rank, exactly ----------------------------------------------------------------------

_MODELS = [load_model("llama3-8b"), LLAMA, MIXTRAL, load_model("qwen3-30b-a3b")]


@settings(max_examples=60)
@given(model=st.sampled_from(_MODELS), pp=st.integers(1, 32), vpp=st.sampled_from([1, 2, 3]),
       tp=st.sampled_from([1, 2, 4, 8]), mbs=st.integers(1, 4), micro=st.integers(1, 64),
       recompute=st.sampled_from(["none", "selective", "full"]), zero=st.integers(0, 3),
       precision=st.sampled_from(["bf16", "fp8", "mxfp8"]), rnl=st.sampled_from([None, 1, 3]),
       framework=st.sampled_from([None, "torchtitan", "jax"]))
def test_peak_is_the_maximum_over_every_pipeline_rank(model: ModelSpec, pp: int, vpp: int, tp: int, mbs: int,
                                                      micro: int, recompute: str, zero: int, precision: str,
                                                      rnl: int | None, framework: str | None) -> None:
    vpp = vpp if pp > 1 and pp * vpp <= model.num_layers else 1
    micro = pp * max(1, micro // pp) if vpp > 1 else micro   # interleaved: m a multiple of pp
    ep = 8 if model.is_moe else 1
    config = TrainingConfig(tp=tp, pp=pp, vpp=vpp, ep=ep, mbs=mbs, gbs=micro * mbs * 2, seq_len=2048,
                            recompute=recompute, recompute_num_layers=rnl if recompute == "full" else None,
                            zero=zero, precision=precision, framework=framework,
                            pp_schedule="interleaved" if vpp > 1 else "1f1b")
    dims = _dims(config, tp * pp * 2)
    memory = project_memory(model, H100, config, dims, PROFILE)
    assert [s.rank for s in memory.stages] == list(range(pp))
    independent = [stage_memory(model, config, dims, PROFILE, r).total_bytes for r in range(pp)]
    assert memory.peak_bytes == max(independent)
    assert memory.peak.total_bytes == memory.peak_bytes
    for stage in memory.stages:
        assert sum(stage.terms().values()) == pytest.approx(stage.total_bytes, rel=1e-12)
        assert min(stage.terms().values()) >= 0
        assert stage.static_bytes <= stage.total_bytes
    assert memory.static_peak_bytes <= memory.peak_bytes


def test_heaviest_rank_can_be_a_middle_rank_that_sampling_would_miss() -> None:
    # 61 layers on 13 ranks: ranks 2-10 hold 5 layers, the others 4; with 13 micro-batches rank 2
    # (5 layers x 11 in flight) outweighs rank 0 (4 x 13 + embedding).
    model = load_model("deepseek-v3")
    config = TrainingConfig(tp=1, pp=13, ep=8, mbs=1, gbs=104, seq_len=4096, zero=1)
    dims = _dims(config, 13 * 8)
    memory = project_memory(model, H100, config, dims, PROFILE)
    counts = [len(chunk) for rank in chunk_layers(61, 13, 1) for chunk in rank]
    assert len(memory.stages) == 13 and sum(counts) == 61
    heaviest = memory.peak.rank
    assert heaviest not in {0, 1, 6, 11, 12}   # the five ranks the old screen sampled
    assert memory.peak_bytes > max(memory.stages[r].total_bytes for r in (0, 1, 6, 11, 12))


# --- one test per term: zeroing any term breaks one of these ----------------------------------

def _llama_fp8(**update) -> tuple[TrainingConfig, ParallelDims]:
    config = TrainingConfig(tp=4, pp=4, vpp=5, mbs=1, gbs=32, seq_len=4096, precision="fp8",
                            sequence_parallel=True, zero=1, **update)
    return config, _dims(config, 32)


def test_weights_and_gradients_are_megatron_mixed_precision_bytes() -> None:
    config, dims = _llama_fp8()
    stage = stage_memory(LLAMA, config, dims, PROFILE, 1)   # a middle rank: 20 layers, no embedding
    gemm = sum(p.attention + p.mlp for p in layer_param_table(LLAMA)[:20]) / 4
    norms = sum(p.replicated for p in layer_param_table(LLAMA)[:20])
    params = gemm + norms
    # FP8 primary weights (fp8_param_gather): no bf16 copy of the GEMM weights (their FP8 data is in ``fp8``)
    assert stage.weights_bytes == pytest.approx(2 * norms, rel=1e-9)
    assert stage.gradients_bytes == pytest.approx(4 * params, rel=1e-9)
    assert stage.optimizer_bytes == pytest.approx(12 * params / 2, rel=1e-9)


def test_fp8_copies_are_data_plus_transpose_and_the_delayed_scaling_history() -> None:
    config, dims = _llama_fp8()
    stage = stage_memory(LLAMA, config, dims, PROFILE, 1)
    gemm = sum(p.attention + p.mlp for p in layer_param_table(LLAMA)[:20]) / 4
    assert stage.fp8_copies_bytes == pytest.approx(2 * gemm + AMAX_HISTORY_BYTES * 4 * 20, rel=1e-9)
    bf16 = stage_memory(LLAMA, config.model_copy(update={"precision": "bf16"}), dims, PROFILE, 1)
    assert bf16.fp8_copies_bytes == 0


def test_activations_are_layers_times_microbatches_in_flight() -> None:
    config, dims = _llama_fp8()
    from projection.activations import layer_activation_bytes
    from projection.memory import activation_context

    per_layer = layer_activation_bytes(LLAMA, 0, activation_context(LLAMA, config))
    stage = stage_memory(LLAMA, config, dims, PROFILE, 1)
    # interleaved warm-up on rank 1 of 4 with vpp 5: (4-1-1)*2 + (5-1)*4 + 1 = 21 chunks of 4 layers
    assert stage.activations_bytes == pytest.approx(21 * 4 * per_layer, rel=1e-9)


def test_buffers_hold_the_loss_on_the_last_rank_and_the_recompute_rebuild() -> None:
    config, dims = _llama_fp8()
    middle, last = (stage_memory(LLAMA, config, dims, PROFILE, r) for r in (1, 3))
    assert middle.transient_bytes == 0
    logits = 6 * 4096 * LLAMA.vocab_size / 4   # fused vocab-parallel cross-entropy, bf16 + fp32
    assert last.transient_bytes > logits
    full, _ = _llama_fp8(recompute="full")
    assert stage_memory(LLAMA, full, dims, PROFILE, 1).transient_bytes > 0


def test_workspace_and_allocator_are_explicit_terms() -> None:
    config, dims = _llama_fp8()
    stage = stage_memory(LLAMA, config, dims, PROFILE, 1)
    assert stage.workspace_bytes == 3 * GIB
    assert stage.allocator_bytes == pytest.approx(0.08 * (stage.activations_bytes + stage.transient_bytes))
    jax = stage_memory(LLAMA, config.model_copy(update={"framework": "jax"}), dims, PROFILE, 1)
    assert jax.workspace_bytes == jax.allocator_bytes == 0   # XLA: in temp memory / the usable capacity


def test_static_terms_are_the_recompute_invariant_ones() -> None:
    config, dims = _llama_fp8()
    stage = stage_memory(LLAMA, config, dims, PROFILE, 1)
    assert stage.static_bytes == pytest.approx(sum(stage.terms()[t] for t in STATIC_TERMS))
    full = stage_memory(LLAMA, config.model_copy(update={"recompute": "full"}), dims, PROFILE, 1)
    assert full.static_bytes == stage.static_bytes and full.total_bytes < stage.total_bytes


def test_lora_freezes_the_base_and_keeps_fp8_base_weights_in_fp8() -> None:
    config = TrainingConfig(tp=1, pp=1, cp=2, mbs=1, gbs=8, seq_len=8192, precision="fp8", finetune="lora",
                            zero=1)
    dims = _dims(config, 8)
    stage = stage_memory(LLAMA, config, dims, PROFILE, 0)
    sft = stage_memory(LLAMA, config.model_copy(update={"finetune": "sft"}), dims, PROFILE, 0)
    assert stage.gradients_bytes < sft.gradients_bytes / 100 and stage.optimizer_bytes < sft.optimizer_bytes / 100
    # 1 B FP8 base without the cached transpose, instead of the SFT run's FP8 data + transpose (2 B)
    assert stage.weights_bytes + stage.fp8_copies_bytes < 0.6 * (sft.weights_bytes + sft.fp8_copies_bytes)
    assert stage.activations_bytes < sft.activations_bytes  # frozen MLP GEMMs save no inputs


def test_capacity_factor_pads_expert_activations() -> None:
    base = TrainingConfig(tp=1, pp=1, ep=8, mbs=1, gbs=8, seq_len=4096, zero=1, moe_routing="token-drop")
    dims = _dims(base, 8)
    plain = stage_memory(MIXTRAL, base, dims, PROFILE, 0).activations_bytes
    padded = stage_memory(MIXTRAL, base.model_copy(update={"moe_capacity_factor": 2.0}), dims, PROFILE, 0)
    assert padded.activations_bytes > plain * 1.2


def test_moe_dispatch_buffers() -> None:
    deepseek = load_model("deepseek-v3")
    config = TrainingConfig(tp=1, pp=1, ep=8, mbs=7, gbs=448, seq_len=4096, zero=3, framework="jax",
                            recompute="full")
    dims = _dims(config, 64)
    rows = 8 * 7 * 4096 * 8
    assert moe_dispatch_buffer_bytes(deepseek, config, dims, True) == pytest.approx(
        2 * rows * (7168 + 2 * 2048))
    dcn = config.model_copy(update={"ep": 32, "mbs": 2})
    assert moe_dispatch_buffer_bytes(deepseek, dcn, _dims(dcn, 64), True, 8) == pytest.approx(
        3 * 2 * 32 * 2 * 4096 * 8 * (7168 + 2 * 2048))
    deepep = config.model_copy(update={"moe_dispatcher": "deepep", "framework": "megatron"})
    assert moe_dispatch_buffer_bytes(deepseek, deepep, dims, True) == DEEPEP_BUFFER_BYTES
    assert moe_dispatch_buffer_bytes(LLAMA, config, dims, True) == 0


def test_framework_traits_change_bytes_per_parameter() -> None:
    assert (memory_traits("torchtitan").weight_bytes, memory_traits("torchtitan").optimizer_bytes) == (4, 8)
    assert memory_traits(None) == memory_traits("megatron") == memory_traits("nemo")
    config = TrainingConfig(tp=1, pp=1, mbs=1, gbs=8, seq_len=4096, zero=3, framework="torchtitan")
    dims = _dims(config, 8)
    stage = stage_memory(load_model("llama3-8b"), config, dims, PROFILE, 0)
    assert stage.weights_bytes + stage.gradients_bytes + stage.optimizer_bytes == pytest.approx(
        16 * 8.03e9 / 8, rel=0.01)


def test_jax_usable_memory_is_the_bfc_share() -> None:
    mi355x = load_hardware("mi355x")
    config = TrainingConfig(tp=1, pp=1, mbs=1, gbs=64, seq_len=4096, zero=3, framework="jax")
    memory = project_memory(load_model("llama3-8b"), mi355x, config, _dims(config, 64), PROFILE)
    assert memory.capacity_bytes == pytest.approx(mi355x.hbm_capacity_bytes * 268 / 288)
    assert memory.hbm_bytes == mi355x.hbm_capacity_bytes


def test_torchtitan_llama31_8b_matches_its_measured_peak() -> None:
    # torchtitan benchmarks/llama3_h100_202412_torchtitan.md: Llama-3.1-8B, 8 x H100 96 GB, FSDP2,
    # local batch 2, per-op selective AC, bf16: 82.4 GiB (seq_len 8192, torchtitan's default).
    hw = load_hardware("h100-96gb-500w")
    config = TrainingConfig(tp=1, pp=1, mbs=2, gbs=16, seq_len=8192, zero=3, framework="torchtitan",
                            recompute="selective")
    memory = project_memory(load_model("llama3.1-8b"), hw, config, _dims(config, 8), PROFILE)
    assert memory.peak_bytes / GIB == pytest.approx(82.4, rel=0.10)
    assert memory.verdict == "fits"


def test_torchtitan_tp_shards_the_layer_inputs_over_the_sequence() -> None:
    config = TrainingConfig(tp=8, pp=1, mbs=1, gbs=32, seq_len=8192, zero=3, framework="torchtitan",
                            recompute="full")
    megatron = config.model_copy(update={"framework": "megatron"})
    dims = _dims(config, 256)
    titan = stage_memory(LLAMA, config, dims, PROFILE, 0).activations_bytes
    assert titan == pytest.approx(stage_memory(LLAMA, megatron, dims, PROFILE, 0).activations_bytes / 8, rel=0.01)


def test_zero3_gather_and_fp8_lora_transpose_are_one_layer_of_weights() -> None:
    """Pinned on Llama 3 8B (a layer: attention 4096 x (4096 + 2 x 1024) + 4096 x 4096 = 41,943,040, SwiGLU MLP
    3 x 4096 x 14,336 = 176,160,768 parameters), in the production path and the one-rank reference alike.

    ZeRO-3 over 8 GPUs gathers the current and the prefetched layer in bf16, of which the other 7 shards hold 7/8:
    2 x 2 B x 218,103,808 x 7/8.  FP8 LoRA at TP 2 transposes the running layer's frozen weights once, 1 B each:
    218,103,808 / 2.  Either term zeroed fails here."""
    model, hardware = load_model("llama3-8b"), load_hardware("h100-sxm")

    def transient(config: TrainingConfig) -> tuple[float, float]:
        dims = _dims(config, 8)
        return (project_memory(model, hardware, config, dims, PROFILE).stages[0].transient_bytes,
                stage_memory(model, config, dims, PROFILE, 0).transient_bytes)

    zero3 = TrainingConfig(tp=1, pp=1, mbs=1, gbs=8, seq_len=4096, zero=3)
    gathered = [a - b for a, b in zip(transient(zero3), transient(zero3.model_copy(update={"zero": 2})), strict=True)]
    assert gathered == [2 * 2 * 218_103_808 * 7 / 8] * 2
    lora = TrainingConfig(tp=2, pp=1, mbs=1, gbs=8, seq_len=4096, zero=1, precision="fp8", finetune="lora")
    transposed = [a - b for a, b in zip(transient(lora), transient(lora.model_copy(update={"precision": "bf16"})),
                                        strict=True)]
    assert transposed == [218_103_808 / 2] * 2
