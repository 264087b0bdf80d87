"""ZeRO-3 as DeepSpeed ran it in 2021 (the six DeepSpeed runs of Narayanan et al. SC21).

- ``zero3_gathers_block_host``: every parameter all-gather follows a ``torch.cuda.synchronize()``, so the
  gathers are exposed whole instead of hiding under compute (microsoft/DeepSpeed PR #1188, issue #1069);
- ``zero3_list_collectives``: list-based all_gather / reduce_scatter, one per weight matrix, cost one
  host-dispatched copy per rank of the group (PyTorch ProcessGroupNCCL of 2021).

Each test fails when its term is set to zero (the flag ignored, or the per-rank cost dropped).
"""

from __future__ import annotations

import pytest

from projection.device_profile import DeviceProfile
from projection.engine import _dp_comm, _dp_comm_parts, _zero3_tensors, network_for, project
from projection.framework import framework_profile
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.model_spec import model_from_hf_config
from projection.training_config import Cluster, TrainingConfig

A100 = load_hardware("a100-80gb")
GPT = model_from_hf_config({"model_type": "gpt2", "hidden_size": 5120, "num_hidden_layers": 40,
                             "num_attention_heads": 40, "intermediate_size": 20480, "vocab_size": 51200},
                            name="gpt-13b-test")
PROFILE = DeviceProfile(hardware_id="a100-80gb", dp_overlap_fraction=0.8, step_overhead_s=0.0)
CLUSTER = Cluster(gpu="a100-80gb", num_gpus=64, nic_gbps=200, nics_per_node=8)
CONFIG = TrainingConfig(tp=1, pp=1, mbs=2, gbs=128, seq_len=2048, zero=3, precision="fp16", framework="deepspeed")
DEEPSPEED = framework_profile("deepspeed")
PLAIN = DEEPSPEED.model_copy(update={"zero3_gathers_block_host": False, "zero3_list_collectives": False})


def _parts(framework) -> tuple[float, float, float]:  # noqa: ANN001
    dims = parallel_dims(CONFIG, CLUSTER)
    return _dp_comm_parts(GPT, CONFIG, dims, network_for(A100, CLUSTER, PROFILE), framework)


def test_shipped_deepspeed_profile_is_the_2021_zero3() -> None:
    assert DEEPSPEED.zero3_gathers_block_host and DEEPSPEED.zero3_list_collectives
    for name in ("megatron", "torchtitan", "nemo"):
        profile = framework_profile(name)
        assert not profile.zero3_gathers_block_host and not profile.zero3_list_collectives


def test_blocking_gathers_are_exposed_whole() -> None:
    gathers, rest, host = _parts(DEEPSPEED)
    gathers, rest = gathers / DEEPSPEED.dp_comm_efficiency, rest / DEEPSPEED.dp_comm_efficiency
    assert gathers > 0 and rest > 0 and host > 0
    blocking = project(GPT, CLUSTER, CONFIG, profile=PROFILE, framework=DEEPSPEED)
    hidden = project(GPT, CLUSTER, CONFIG, profile=PROFILE,
                     framework=DEEPSPEED.model_copy(update={"zero3_gathers_block_host": False}))
    # the reduce-scatter keeps the device's 80% overlap; the gathers do not hide at all
    assert blocking.breakdown.dp_comm_s == pytest.approx(gathers + host + 0.2 * rest, rel=1e-9)
    assert hidden.breakdown.dp_comm_s == pytest.approx(0.2 * (gathers + rest + host), rel=1e-9)
    assert blocking.iteration_time_s - hidden.iteration_time_s == pytest.approx(0.8 * (gathers + host), rel=1e-9)


def test_list_collectives_cost_one_copy_per_rank_and_matrix() -> None:
    with_copies = _parts(DEEPSPEED)
    without = _parts(DEEPSPEED.model_copy(update={"zero3_list_collectives": False}))
    # 2 gathers (no recompute) + 1 reduce-scatter, per matrix (40 layers x 4 + embedding), 64 ranks, 1 micro-batch
    assert _zero3_tensors(GPT, 40) == 40 * 4 + 1
    expected = 3 * (40 * 4 + 1) * 64 * DEEPSPEED.host_launch_s
    assert with_copies[2] == pytest.approx(expected, rel=1e-9) and without[2] == 0.0
    assert with_copies[:2] == without[:2]
    # it scales with the group (copies per rank), not with the bytes
    assert _dp_comm(GPT, CONFIG, parallel_dims(CONFIG, CLUSTER), network_for(A100, CLUSTER, PROFILE),
                    DEEPSPEED) == pytest.approx(sum(with_copies), rel=1e-12)


def test_plain_zero3_is_unchanged_by_the_split() -> None:
    gathers, rest, host = _parts(PLAIN)
    assert host == 0.0
    plain = project(GPT, CLUSTER, CONFIG, profile=PROFILE, framework=PLAIN)
    assert plain.breakdown.dp_comm_s == pytest.approx(0.2 * (gathers + rest) / PLAIN.dp_comm_efficiency, rel=1e-9)
