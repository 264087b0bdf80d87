"""Sliding-window attention is computed in whole flash-attention tiles (projection/workload.py ATTENTION_TILE).

FlashAttention-2 skips only key tiles a query tile cannot see; with 128 x 128 tiles a 128-key window runs 2 key tiles
(256 keys) per query, twice the keys it attends.  The model FLOPs stay the attended ones; only time follows the tiles.
"""

from __future__ import annotations

import pytest

from projection import workload
from projection.collectives import network_params_from_hardware, place_group
from projection.compute import device_rates
from projection.device_profile import DeviceProfile
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from projection.workload import CommGroups, _attended_keys, _computed_keys, layer_cost

GPT_OSS = load_model("gpt-oss-120b")
B200 = load_hardware("b200")
PROFILE = DeviceProfile(hardware_id="b200", gemm_efficiency=0.6, low_precision_gemm_efficiency=0.6,
                        attention_efficiency=0.5, moe_efficiency=0.6, kernel_overhead_s=1e-5)


def _layer(layer: int):
    cluster = Cluster(gpu="b200", num_gpus=64)
    config = TrainingConfig(framework="megatron", mbs=1, gbs=64, seq_len=4096, ep=8, zero=1)
    dims = parallel_dims(config, cluster)
    net = network_params_from_hardware(B200)
    groups = CommGroups(tp=place_group(1, 1, net), cp=place_group(1, 1, net), ep=place_group(8, 1, net))
    return layer_cost(GPT_OSS, layer, config, dims, device_rates(B200, PROFILE, "bf16"), net, groups)


def test_computed_keys() -> None:
    # 32 query blocks of 128: the first runs 1 key tile, the other 31 run 2: 128 * 63 / 32 = 252 keys per query
    assert _computed_keys(4096, 128) == pytest.approx(128 * 63 / 32)
    assert _attended_keys(4096, 128) == pytest.approx(126.0)
    assert _computed_keys(4096, 0) == _attended_keys(4096, 0) == 2048.0        # plain causal: unchanged
    assert _computed_keys(4096, 8192) == 2048.0
    assert _computed_keys(4096, 1024) > _attended_keys(4096, 1024)


def test_window_layer_pays_its_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    assert GPT_OSS.attention_windows[0] == 128 and GPT_OSS.attention_windows[1] == 0
    tiled, full = _layer(0), _layer(1)
    monkeypatch.setattr(workload, "_computed_keys", _attended_keys)          # the term set to zero
    untiled, full_untiled = _layer(0), _layer(1)
    assert tiled.attention_fwd_s > 1.5 * (untiled.attention_fwd_s - PROFILE.kernel_overhead_s)
    assert tiled.fwd_s > untiled.fwd_s and tiled.bwd_input_s > untiled.bwd_input_s
    assert tiled.flops_fwd == pytest.approx(untiled.flops_fwd)               # model FLOPs: attended keys
    assert full.attention_fwd_s == pytest.approx(full_untiled.attention_fwd_s)
