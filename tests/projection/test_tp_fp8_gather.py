"""Sequence-parallel all-gathers of FP8 GEMM inputs move 1 B per element (projection/workload.py tp_gather_bytes).

Transformer Engine's fused LayerNorm + column-parallel linear (QKV, FC1) writes its output as FP8 under the FP8
recipe and all-gathers that uint8 tensor across the TP group; the reduce-scatters after the projection and FC2
stay bf16.  Without sequence parallelism the layer all-reduces bf16 outputs; MoE layers gather only their
attention input quantised; frameworks outside Transformer Engine's and other recipes keep bf16.
"""

from __future__ import annotations

import pytest

from projection import workload
from projection.collectives import (all_gather_s, all_reduce_s, network_params_from_hardware, place_group,
                                   reduce_scatter_s)
from projection.compute import device_rates
from projection.device_profile import DeviceProfile
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from projection.workload import AMAX_BYTES, CommGroups, layer_cost, tp_gather_bytes

LLAMA = load_model("llama3-70b")
MIXTRAL = load_model("mixtral-8x7b")
B200 = load_hardware("b200")
PROFILE = DeviceProfile(hardware_id="b200", gemm_efficiency=0.6, low_precision_gemm_efficiency=0.6,
                        attention_efficiency=0.5, moe_efficiency=0.6, kernel_overhead_s=1e-5)
NET = network_params_from_hardware(B200)
TP = place_group(4, 1, NET)


def _tp_comm(model, precision: str, *, framework: str = "megatron", sp: bool = True, ep: int = 1) -> float:
    config = TrainingConfig(framework=framework, tp=4, ep=ep, mbs=1, gbs=64, seq_len=4096, zero=1,
                            precision=precision, sequence_parallel=sp)
    dims = parallel_dims(config, Cluster(gpu="b200", num_gpus=64))
    groups = CommGroups(tp=TP, cp=place_group(1, 4, NET), ep=place_group(ep, 1, NET))
    return layer_cost(model, 0, config, dims, device_rates(B200, PROFILE, precision), NET, groups).tp_comm_s


def _expected(gather_bytes: tuple[float, float], amax_reductions: int = 0) -> float:
    tokens_h = 4096 * LLAMA.hidden_size          # mbs 1, seq 4096
    return (sum(all_gather_s(b * tokens_h, TP, NET) for b in gather_bytes)
            + 2 * reduce_scatter_s(2.0 * tokens_h, TP, NET)
            + amax_reductions * all_reduce_s(AMAX_BYTES, TP, NET))   # current scaling's amax (workload.AMAX_BYTES)


def test_bytes_per_recipe_and_framework() -> None:
    assert tp_gather_bytes(TrainingConfig(framework="megatron", precision="fp8")) == 1.0
    assert tp_gather_bytes(TrainingConfig(framework="nemo", precision="fp8")) == 1.0
    assert tp_gather_bytes(TrainingConfig(framework="megatron", precision="bf16")) == 2.0
    assert tp_gather_bytes(TrainingConfig(framework="megatron", precision="mxfp8")) == 2.0
    assert tp_gather_bytes(TrainingConfig(framework="torchtitan", precision="fp8")) == 2.0


def test_fp8_sequence_parallel_gathers_one_byte() -> None:
    assert _tp_comm(LLAMA, "bf16") == pytest.approx(_expected((2.0, 2.0)))
    assert _tp_comm(LLAMA, "fp8") == pytest.approx(_expected((1.0, 1.0), amax_reductions=2))
    amax = 2 * all_reduce_s(AMAX_BYTES, TP, NET)      # latency-bound: 2 x 18 us at TP 4
    assert _tp_comm(LLAMA, "fp8") - amax < 0.8 * _tp_comm(LLAMA, "bf16")


def test_fails_when_the_term_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    quantised = _tp_comm(LLAMA, "fp8")
    monkeypatch.setattr(workload, "TP_GATHER_QUANTISED_BYTES", {})
    assert _tp_comm(LLAMA, "fp8") > 1.2 * quantised


def test_no_sequence_parallel_all_reduces_bf16() -> None:
    assert _tp_comm(LLAMA, "fp8", sp=False) == pytest.approx(_tp_comm(LLAMA, "bf16", sp=False))
    assert _tp_comm(LLAMA, "fp8", sp=False) == pytest.approx(_expected((2.0, 2.0)))


def test_moe_layer_gathers_only_its_attention_input_quantised() -> None:
    tokens_h = 4096 * MIXTRAL.hidden_size
    expected = (all_gather_s(1.0 * tokens_h, TP, NET) + all_gather_s(2.0 * tokens_h, TP, NET)
                + 2 * reduce_scatter_s(2.0 * tokens_h, TP, NET) + all_reduce_s(AMAX_BYTES, TP, NET))
    assert _tp_comm(MIXTRAL, "fp8", ep=2) == pytest.approx(expected)
