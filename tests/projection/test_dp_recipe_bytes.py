"""DP communication as the Megatron-core performance recipes run it.

- FP8 primary weights gathered as 1 B (``fp8_param_gather``; ``fp8_param_gather_precisions``),
- the interleaved schedule's chunk-wise gradient / parameter sync window (``_dp_window_microbatches``),
- the memory side reading the same gradient-buffer dtype and FP8 primary weights.

Each test fails when its term is set to zero (gather bytes back to 2, the window back to one micro-batch).
"""

from __future__ import annotations

import pytest

from projection.device_profile import DeviceProfile
from projection.engine import (FP8_PARAM_GATHER_BYTES, GRAD_REDUCE_BYTES, PARAM_GATHER_BYTES, _dp_comm,
                               _dp_window_microbatches, network_for, project)
from projection.framework import framework_profile
from projection.hardware import load_hardware
from projection.layout import ParallelDims, parallel_dims
from projection.memory import project_memory
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig

B200 = load_hardware("b200")
LLAMA70 = load_model("llama3-70b")
PROFILE = DeviceProfile(hardware_id="b200", dp_overlap_fraction=0.0, scale_out_efficiency=0.8,
                        scale_up_efficiency=0.8, step_overhead_s=0.0)
CLUSTER = Cluster(gpu="b200", num_gpus=64)
MEGATRON = framework_profile("megatron")
BF16_GATHER = MEGATRON.model_copy(update={"fp8_param_gather_precisions": ()})


def _dp_total(config: TrainingConfig, framework) -> float:  # noqa: ANN001
    dims = parallel_dims(config, CLUSTER)
    return _dp_comm(LLAMA70, config, dims, network_for(B200, CLUSTER, PROFILE), framework)


def test_megatron_recipes_gather_fp8_primary_weights() -> None:
    assert "fp8" in MEGATRON.fp8_param_gather_precisions
    assert "mxfp8" not in MEGATRON.fp8_param_gather_precisions      # version-dependent: left at bf16
    assert "fp8" in framework_profile("nemo").fp8_param_gather_precisions   # NeMo shares the Megatron-core profile
    assert framework_profile("torchtitan").fp8_param_gather_precisions == ()
    assert (GRAD_REDUCE_BYTES, PARAM_GATHER_BYTES, FP8_PARAM_GATHER_BYTES) == (4, 2, 1)


def test_fp8_primary_weights_halve_the_distributed_optimizer_all_gather() -> None:
    # TP2 PP4, DP 8 across nodes, distributed optimizer: reduce-scatter (4 B) + all-gather (2 B, FP8: ~1 B).
    bf16 = TrainingConfig(tp=2, pp=4, mbs=1, gbs=64, seq_len=4096, zero=1, precision="bf16", framework="megatron")
    fp8 = bf16.model_copy(update={"precision": "fp8"})
    reference = _dp_total(bf16, MEGATRON)
    assert _dp_total(fp8, BF16_GATHER) == pytest.approx(reference, rel=1e-9)
    # 4 B + ~1 B: the embedding share (vocab x hidden / tp on the first stage) still gathers in bf16
    assert reference * 5 / 6 < _dp_total(fp8, MEGATRON) < reference * 5.3 / 6


def test_interleaved_window_counts_the_chunks_after_the_first_chunk_is_done() -> None:
    dims = ParallelDims(tp=8, pp=4, cp=1, dp=4, ep=1, etp=1, vpp=12, num_microbatches=8)
    # last group of min(pp, m) = 4 micro-batches, 12 chunks: (1 + 11 * 4) / 12 micro-batches of work
    assert _dp_window_microbatches(dims, "interleaved") == pytest.approx(45 / 12)
    assert _dp_window_microbatches(dims, "1f1b") == 1.0
    flat = ParallelDims(tp=8, pp=4, cp=1, dp=4, ep=1, etp=1, vpp=1, num_microbatches=8)
    assert _dp_window_microbatches(flat, "1f1b") == 1.0
    few = ParallelDims(tp=8, pp=4, cp=1, dp=4, ep=1, etp=1, vpp=2, num_microbatches=2)
    assert _dp_window_microbatches(few, "interleaved") == pytest.approx((1 + 1 * 2) / 2)


def test_interleaving_hides_more_dp_comm_than_one_microbatch(monkeypatch: pytest.MonkeyPatch) -> None:
    # PP4 VPP10 on slow (50 Gb/s) NICs, overlap fraction 0.9: exposure = max(10% of the total, total - window),
    # the window binding with one micro-batch, much wider with the chunk-wise sync.
    profile = PROFILE.model_copy(update={"dp_overlap_fraction": 0.9})
    slow = Cluster(gpu="b200", num_gpus=64, nic_gbps=50)
    config = TrainingConfig(tp=2, pp=4, vpp=10, mbs=1, gbs=64, seq_len=4096, zero=1, precision="bf16",
                            sequence_parallel=True, framework="megatron")
    interleaved = project(LLAMA70, slow, config, hardware=B200, profile=profile)
    import projection.engine as engine
    monkeypatch.setattr(engine, "_dp_window_microbatches", lambda dims, schedule: 1.0)
    one = project(LLAMA70, slow, config, hardware=B200, profile=profile)
    assert interleaved.breakdown.dp_comm_s < 0.8 * one.breakdown.dp_comm_s


def test_memory_holds_no_bf16_copy_of_fp8_primary_weights() -> None:
    config = TrainingConfig(tp=2, pp=4, mbs=1, gbs=64, seq_len=4096, zero=1, precision="bf16", framework="megatron")
    dims = parallel_dims(config, CLUSTER)
    bf16 = project_memory(LLAMA70, B200, config, dims, PROFILE).stages[1]
    fp8 = project_memory(LLAMA70, B200, config.model_copy(update={"precision": "fp8"}), dims, PROFILE).stages[1]
    # FP8 primary weights: only the norms stay in bf16 (< 0.1% of a middle stage's weights)
    assert fp8.weights_bytes < 0.001 * bf16.weights_bytes
    # FP8 data, 1 B: B200's FP8 GEMMs take non-TN layouts, so TE keeps no transpose (memory_terms.fp8_copy_bytes)
    assert 0.45 * bf16.weights_bytes < fp8.fp8_copies_bytes < 0.55 * bf16.weights_bytes
    assert fp8.gradients_bytes == bf16.gradients_bytes
    mx = project_memory(LLAMA70, B200, config.model_copy(update={"precision": "mxfp8"}), dims, PROFILE).stages[1]
    assert mx.weights_bytes == bf16.weights_bytes                # MXFP8 keeps its bf16 weights here
