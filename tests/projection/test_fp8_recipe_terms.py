"""What a per-tensor current-scaling FP8 quantisation costs beyond a block recipe's, term by term (issue 27's
FP8-recipe miss; projection/workload.py CAST_KERNELS_PER_TENSOR, cast_chain_s, cast_bytes_per_element,
sp_amax_reduce_s; projection/compute.py GPU_KERNEL_GAP_S, NON_TN_FP8_GEMM_FAMILIES).

- Transformer Engine's current scaling runs memset, amax, scale and cast per input (4 dependent GPU operations),
  MXFP8 one kernel: each extra operation pays the GPU's launch-to-launch gap, once per local expert's split;
- on datacenter Blackwell (non-TN FP8 GEMMs) the per-tensor FP8 copy has no transpose: 1 B per element less;
- with sequence parallelism each column-parallel input (and row-parallel grad output) all-reduces its amax over TP.
Each term is checked by zeroing it (the layer gets cheaper or dearer by exactly the term) and by its direction.
"""

from __future__ import annotations

import pytest

from projection import workload
from projection.collectives import all_reduce_s, network_params_from_hardware, place_group
from projection.compute import GPU_KERNEL_GAP_S, device_rates, fp8_transpose_free
from projection.device_profile import DeviceProfile
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from projection.workload import (AMAX_BYTES, CAST_KERNELS_PER_TENSOR, FP8_TRANSPOSE_BYTES, CommGroups,
                                 cast_bytes_per_element, cast_chain_s, layer_cost)

QWEN = load_model("qwen3-235b-a22b")
LLAMA = load_model("llama3-8b")
B200, H100 = load_hardware("b200"), load_hardware("h100-sxm")
# Fixed round-number profile so shipped refits do not move these comparisons.
PROFILE = DeviceProfile(hardware_id="b200", gemm_efficiency=0.6, low_precision_gemm_efficiency=0.6,
                        attention_efficiency=0.5, moe_efficiency=0.6, kernel_overhead_s=5e-6)


def _config(precision: str, framework: str = "megatron", **extra) -> TrainingConfig:
    return TrainingConfig(**{"framework": framework, "mbs": 1, "gbs": 64, "seq_len": 4096, "zero": 1,
                             "precision": precision, **extra})


def _layer(model, precision: str, *, hardware=B200, ep: int = 1, tp: int = 1, framework: str = "megatron",
           layer: int = 0):
    config = _config(precision, framework, ep=ep, tp=tp, sequence_parallel=tp > 1)
    dims = parallel_dims(config, Cluster(gpu=hardware.id, num_gpus=64))
    net = network_params_from_hardware(hardware)
    groups = CommGroups(tp=place_group(tp, 1, net), cp=place_group(1, tp, net), ep=place_group(ep, tp, net))
    return layer_cost(model, layer, config, dims, device_rates(hardware, PROFILE, precision), net, groups)


def _total(cost) -> float:
    return cost.fwd_s + cost.bwd_input_s + cost.bwd_weight_s


def test_current_scaling_runs_four_dependent_operations_block_recipes_one() -> None:
    assert CAST_KERNELS_PER_TENSOR == {"fp8": 4, "fp8-blockwise": 1, "mxfp8": 1, "nvfp4": 1}
    assert GPU_KERNEL_GAP_S == pytest.approx(0.5e-6)        # 3.4 us per 2.9 us kernel replayed from a graph
    assert cast_chain_s("fp8", 36) == pytest.approx(3 * 36 * 0.5e-6)
    assert cast_chain_s("mxfp8", 36) == cast_chain_s("fp8-blockwise", 36) == cast_chain_s("nvfp4", 36) == 0.0


def test_quantisation_chain_costs_its_gaps_per_local_expert(monkeypatch: pytest.MonkeyPatch) -> None:
    # Qwen3-235B-A22B at EP 8: 16 local experts, so fc1 and fc2 quantise 2 x 16 splits, plus QKV and proj: 34 inputs.
    with_term = _layer(QWEN, "fp8", ep=8)
    monkeypatch.setattr(workload, "GPU_KERNEL_GAP_S", 0.0)
    without = _layer(QWEN, "fp8", ep=8)
    chain = 3 * 34 * 0.5e-6
    assert with_term.fwd_s - without.fwd_s == pytest.approx(chain, rel=1e-6)
    assert with_term.bwd_input_s - without.bwd_input_s == pytest.approx(2 * chain, rel=1e-6)   # grad outputs


def test_more_local_experts_widen_the_gap_between_current_scaling_and_mxfp8() -> None:
    # Per-expert splits multiply the chains: at EP 8 (16 local experts) current scaling loses more to MXFP8 than at
    # EP 64 (2 local experts), all else equal.
    def gap(ep: int) -> float:
        return cast_chain_s("fp8", 2 + 2 * 128 // ep) - cast_chain_s("mxfp8", 2 + 2 * 128 // ep)
    assert gap(8) > gap(64) > 0.0
    ep8 = _total(_layer(QWEN, "fp8", ep=8)) / _total(_layer(QWEN, "mxfp8", ep=8))
    ep64 = _total(_layer(QWEN, "fp8", ep=64)) / _total(_layer(QWEN, "mxfp8", ep=64))
    assert ep8 > ep64


def test_blackwell_per_tensor_fp8_writes_no_transpose(monkeypatch: pytest.MonkeyPatch) -> None:
    assert fp8_transpose_free(B200) and fp8_transpose_free(load_hardware("gb300"))
    assert not fp8_transpose_free(H100) and not fp8_transpose_free(load_hardware("mi355x"))
    b200, h100 = device_rates(B200, PROFILE, "fp8"), device_rates(H100, PROFILE, "fp8")
    assert FP8_TRANSPOSE_BYTES == 1.0
    assert cast_bytes_per_element(_config("fp8"), b200) == pytest.approx(2 + 2 + 1)        # amax read, cast, data
    assert cast_bytes_per_element(_config("fp8"), h100) == pytest.approx(2 + 2 + 1 + 1)    # + the transpose
    assert cast_bytes_per_element(_config("fp8", "torchtitan"), b200) == pytest.approx(6)  # not TE's quantizer
    mx = device_rates(B200, PROFILE, "mxfp8")
    assert cast_bytes_per_element(_config("mxfp8"), mx) == pytest.approx(2 + 2 * (1 + 1 / 32))   # both copies
    with_term = _layer(LLAMA, "fp8")
    monkeypatch.setattr(workload, "FP8_TRANSPOSE_BYTES", 0.0)
    without = _layer(LLAMA, "fp8")
    assert with_term.fwd_s < without.fwd_s and with_term.bwd_input_s < without.bwd_input_s


def test_sequence_parallel_amax_reduction(monkeypatch: pytest.MonkeyPatch) -> None:
    net = network_params_from_hardware(B200)
    one = all_reduce_s(AMAX_BYTES, place_group(2, 1, net), net)
    assert one > 0.0
    dense, moe = _layer(LLAMA, "fp8", tp=2), _layer(QWEN, "fp8", tp=2, ep=8, layer=0)
    mx_dense = _layer(LLAMA, "mxfp8", tp=2)
    monkeypatch.setattr(workload, "AMAX_BYTES", 0.0)
    monkeypatch.setattr(workload, "all_reduce_s", lambda *args: 0.0)
    assert dense.tp_comm_s - _layer(LLAMA, "fp8", tp=2).tp_comm_s == pytest.approx(2 * one)   # QKV and FC1 inputs
    assert moe.tp_comm_s - _layer(QWEN, "fp8", tp=2, ep=8).tp_comm_s == pytest.approx(one)   # QKV only
    # block recipes reduce no amax; without sequence parallelism there is none either
    assert mx_dense.tp_comm_s == pytest.approx(_layer(LLAMA, "mxfp8", tp=2).tp_comm_s)


def test_no_amax_reduction_without_tensor_parallelism() -> None:
    config = _config("fp8")
    net = network_params_from_hardware(B200)
    groups = CommGroups(tp=place_group(1, 1, net), cp=place_group(1, 1, net), ep=place_group(1, 1, net))
    assert workload.sp_amax_reduce_s(config, net, groups, False) == 0.0


def test_blackwell_per_tensor_fp8_weight_copies_have_no_transpose(monkeypatch: pytest.MonkeyPatch) -> None:
    from projection import memory_terms
    from projection.memory import project_memory
    from projection.memory_terms import FP8_COPY_BYTES, fp8_copy_bytes, stage_memory

    config = _config("fp8", tp=1, pp=4)
    assert fp8_copy_bytes(config, True) == pytest.approx(1.0)                 # row-wise data only
    assert fp8_copy_bytes(config, False) == pytest.approx(FP8_COPY_BYTES["fp8"]) == 2.0   # + transpose
    assert fp8_copy_bytes(_config("fp8", "torchtitan"), True) == 2.0          # not TE's quantizer
    assert fp8_copy_bytes(_config("mxfp8"), True) == pytest.approx(FP8_COPY_BYTES["mxfp8"])
    dims = parallel_dims(config, Cluster(gpu="b200", num_gpus=8))
    free = stage_memory(LLAMA, config, dims, PROFILE, 1, transpose_free=True)
    tn = stage_memory(LLAMA, config, dims, PROFILE, 1, transpose_free=False)
    assert free.fp8_copies_bytes == pytest.approx(tn.fp8_copies_bytes / 2, rel=0.01)   # amax history aside
    assert project_memory(LLAMA, B200, config, dims, PROFILE).peak.fp8_copies_bytes == pytest.approx(
        stage_memory(LLAMA, config, dims, PROFILE, 0, transpose_free=True).fp8_copies_bytes)
    monkeypatch.setattr(memory_terms, "FP8_TRANSPOSE_BYTES", 0.0)
    assert stage_memory(LLAMA, config, dims, PROFILE, 1, transpose_free=True).fp8_copies_bytes == pytest.approx(
        tn.fp8_copies_bytes)
