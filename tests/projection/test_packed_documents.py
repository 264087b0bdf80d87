"""Packed fine-tuning sequences attend per document (TrainingConfig.packed_document_tokens).

NeMo's packed SFT/PEFT datasets hand the document boundaries (cu_seqlens) to the fused attention kernel, so a query
attends only to its own document: attention work follows the document length, not the packed sequence length.
Setting the term to zero (no packed_document_tokens) restores the full causal sequence.
"""

from __future__ import annotations

import pytest

from projection.collectives import network_params_from_hardware, place_group
from projection.compute import device_rates
from projection.device_profile import DeviceProfile
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from projection.workload import ATTENTION_TILE, CommGroups, _document_keys, layer_cost

LLAMA = load_model("llama2-7b")
H100 = load_hardware("h100-sxm")
PROFILE = DeviceProfile(hardware_id="h100-sxm", gemm_efficiency=0.6, low_precision_gemm_efficiency=0.6,
                        attention_efficiency=0.5, moe_efficiency=0.6, kernel_overhead_s=1e-5)


def _layer(doc: int | None):
    cluster = Cluster(gpu="h100-sxm", num_gpus=8)
    config = TrainingConfig(framework="nemo", finetune="lora", mbs=1, gbs=32, seq_len=4096, zero=1,
                            packed_document_tokens=doc)
    dims = parallel_dims(config, cluster)
    net = network_params_from_hardware(H100)
    one = place_group(1, 1, net)
    groups = CommGroups(tp=one, cp=one, ep=one)
    return layer_cost(LLAMA, 0, config, dims, device_rates(H100, PROFILE, "bf16"), net, groups)


def test_document_keys() -> None:
    assert _document_keys(ATTENTION_TILE) == (pytest.approx(64.5), pytest.approx(128.0))   # one diagonal tile
    attended, computed = _document_keys(200)      # 2 query blocks: 1 + 2 key tiles
    assert attended == pytest.approx(100.5)
    assert computed == pytest.approx(128 * 128 * 3 / 200)


def test_packed_documents_cut_attention() -> None:
    full, packed = _layer(None), _layer(200)
    assert packed.attention_fwd_s < 0.2 * full.attention_fwd_s
    assert packed.fwd_s < full.fwd_s and packed.bwd_input_s < full.bwd_input_s
    assert _layer(4096).attention_fwd_s == pytest.approx(full.attention_fwd_s)    # one document per sequence
