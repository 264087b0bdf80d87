"""FP8 recipes cost what their kernels do (projection/workload.py CAST_*, projection/compute.py block scaling).

- per-tensor current scaling reads each GEMM input twice (amax, then cast); the block recipes once;
- block-scaled GEMMs run below per-tensor ones (MXFP8 on Blackwell, software-emulated blocks on Hopper);
- a grouped GEMM's input is quantised expert by expert.
So on a large dense model (GEMM bound) per-tensor FP8 wins, while on a narrow MoE (cast bound) MXFP8 wins.
"""

from __future__ import annotations

import pytest

from projection.compute import HOPPER_BLOCKWISE_GEMM_FRACTION, MX_GEMM_FRACTION, block_scaling_fraction, device_rates
from projection.device_profile import DeviceProfile
from projection.engine import project
from projection.hardware import load_hardware
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from projection.workload import CAST_BYTES_PER_ELEMENT, cast_kernels

B200 = load_hardware("b200")
# Fixed round-number profile so shipped refits do not move these comparisons.
PROFILE = DeviceProfile(hardware_id="b200", gemm_efficiency=0.6, low_precision_gemm_efficiency=0.6,
                        attention_efficiency=0.5, moe_efficiency=0.6, comm_efficiency=0.8, kernel_overhead_s=5e-6,
                        step_overhead_s=0.02)


def _tokens_per_s(model: str, precision: str, **config) -> float:
    base = {"mbs": 1, "gbs": 64, "seq_len": 4096, "framework": "megatron", "precision": precision}
    cfg = TrainingConfig(**{**base, **config})
    return project(load_model(model), Cluster(gpu="b200", num_gpus=8), cfg, hardware=B200,
                   profile=PROFILE).tokens_per_s_per_gpu


def test_current_scaling_reads_the_input_twice_block_recipes_once() -> None:
    # bytes per element cast: bf16 reads + fp8 writes (+ scales)
    assert CAST_BYTES_PER_ELEMENT["fp8"] == pytest.approx(2 + 2 + 1 + 1)
    assert CAST_BYTES_PER_ELEMENT["fp8-blockwise"] == pytest.approx(2 + 2 * (1 + 4 / 128))
    assert CAST_BYTES_PER_ELEMENT["mxfp8"] == pytest.approx(2 + 2 * (1 + 1 / 32))
    assert CAST_BYTES_PER_ELEMENT["fp8"] - CAST_BYTES_PER_ELEMENT["mxfp8"] > 1.9   # one bf16 read more


def test_block_scaled_gemms_run_below_per_tensor_ones() -> None:
    hopper, amd = load_hardware("h100-sxm"), load_hardware("mi300x")
    assert block_scaling_fraction(B200, "mxfp8") == block_scaling_fraction(B200, "fp8-blockwise") == MX_GEMM_FRACTION
    assert block_scaling_fraction(hopper, "fp8-blockwise") == HOPPER_BLOCKWISE_GEMM_FRACTION
    assert 0.9 < MX_GEMM_FRACTION < 0.95 and 0.7 < HOPPER_BLOCKWISE_GEMM_FRACTION < 0.8
    for hw, precision in ((B200, "fp8"), (B200, "bf16"), (hopper, "fp8"), (amd, "fp8-blockwise")):
        assert block_scaling_fraction(hw, precision) == 1.0
    fp8 = device_rates(B200, PROFILE, "fp8").gemm_efficiency
    assert device_rates(B200, PROFILE, "mxfp8").gemm_efficiency == pytest.approx(fp8 * MX_GEMM_FRACTION)


def test_grouped_gemm_inputs_are_quantised_expert_by_expert() -> None:
    # 6 low-precision GEMMs, two of them grouped over 16 local experts: 4 + 2 * 16 = 36 inputs
    assert cast_kernels("mxfp8", 6, 36) == (30, 30)             # 30 casts beyond one per GEMM
    assert cast_kernels("fp8", 6, 36) == (30, 4 * 36 - 6)       # current scaling: memset + amax + scale + cast
    assert cast_kernels("fp8", 4, 4) == (0, 12)                 # dense layer: only the host sees the extra launches
    assert cast_kernels("fp8-blockwise", 4, 4) == (0, 0)


def test_dense_model_prefers_per_tensor_fp8_narrow_moe_prefers_mxfp8() -> None:
    # Llama 3 8B: wide GEMMs, the MX GEMM fraction outweighs the saved amax read.
    assert _tokens_per_s("llama3-8b", "fp8", mbs=2, seq_len=8192) > _tokens_per_s("llama3-8b", "mxfp8", mbs=2,
                                                                                    seq_len=8192)
    # Qwen3-30B-A3B (h 2048, expert FFN 768, 16 experts per GPU): casts weigh more than the GEMM fraction.
    moe = {"mbs": 4, "gbs": 512, "ep": 8, "moe_routing": "token-drop"}
    assert _tokens_per_s("qwen3-30b-a3b", "mxfp8", **moe) > _tokens_per_s("qwen3-30b-a3b", "fp8", **moe)
