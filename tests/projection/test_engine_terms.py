"""Each step-time term is pinned to an independent estimate: set any of them to zero and a test fails.

Iteration time = pipeline makespan (compute + exposed TP/CP/EP comm + bubble) + exposed DP comm +
optimizer step + step overhead.  Every expectation below is worked out from first principles
(bytes over a link at its achieved bandwidth, bytes through HBM, FLOPs at a fraction of peak)
with a fixed profile, so the shipped (fitted) profiles do not move them.
"""

from __future__ import annotations

import pytest

from projection.compute import device_rates
from projection.device_profile import DeviceProfile
from projection.engine import project
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.model_spec import load_model
from projection.params import total_params
from projection.training_config import Cluster, TrainingConfig
from projection.workload import CAST_BYTES_PER_ELEMENT, fp8_cast_elements

H100 = load_hardware("h100-sxm")
LLAMA8 = load_model("llama3-8b")
# No overlap anywhere, so each comm term is exposed in full; round numbers for the hand estimates.
PROFILE = DeviceProfile(hardware_id="h100-sxm", gemm_efficiency=0.7, low_precision_gemm_efficiency=0.35,
                        attention_efficiency=0.5, comm_efficiency=0.8, dp_overlap_fraction=0.0,
                        tp_overlap_fraction=0.0, kernel_overhead_s=5e-6, step_overhead_s=0.05,
                        scale_up_latency_s=5e-6, scale_out_latency_s=1.5e-5)


def _project(num_gpus: int, profile: DeviceProfile = PROFILE, **config):
    base = {"mbs": 1, "gbs": num_gpus, "seq_len": 4096, "framework": "megatron"}
    return project(LLAMA8, Cluster(gpu="h100-sxm", num_gpus=num_gpus), TrainingConfig(**{**base, **config}),
                   hardware=H100, profile=profile)


def test_iteration_is_the_sum_of_its_terms() -> None:
    p = _project(16, zero=0)
    assert p.iteration_time_s == pytest.approx(sum(p.breakdown.as_dict().values()), rel=1e-9)


def test_step_overhead_is_added_once_per_step() -> None:
    with_overhead, without = _project(8, zero=1), _project(8, PROFILE.model_copy(update={"step_overhead_s": 0}),
                                                             zero=1)
    assert with_overhead.breakdown.overhead_s == 0.05
    assert with_overhead.iteration_time_s - without.iteration_time_s == pytest.approx(0.05, rel=1e-9)


# Adam's step per parameter, counted by hand (mixed-precision Adam, Megatron-core distributed optimizer): read the
# fp32 master weight, fp32 gradient, exp_avg and exp_avg_sq (4 x 4 B), write master, exp_avg, exp_avg_sq (3 x 4 B)
# and the bf16 model weight (2 B) = 30 B; not the engine's constant, so a change to it fails here.
ADAM_STEP_BYTES = 4 * 4 + 3 * 4 + 2


def test_optimizer_step_streams_adam_state_through_hbm() -> None:
    # ZeRO-1 over 8 GPUs: each GPU updates 1/8 of the parameters; Adam moves 30 B per parameter at
    # 25% of HBM bandwidth (Primus: MI355X Adam at 21%).  The engine counts one vocab matrix: within 10%.
    p = _project(8, zero=1)
    expected = ADAM_STEP_BYTES * total_params(LLAMA8) / 8 / (H100.hbm_bandwidth_bytes_per_s * 0.25)
    assert p.breakdown.optimizer_s == pytest.approx(expected, rel=0.1)
    assert p.breakdown.optimizer_s > 0.01


def test_dp_gradient_all_reduce_is_bytes_over_the_nic() -> None:
    # 16 H100 = 2 nodes, DDP (zero 0), one micro-batch, no overlap: the fp32 gradient all-reduce is
    # hierarchical - reduce-scatter in the node over NVLink, all-reduce of 1/8 across 2 nodes on each
    # GPU's own 400 Gb/s NIC, all-gather in the node.  The NIC part dominates:
    # 2 * (1/2) * (4 B * params / 8) / (50 GB/s * 0.8), plus the NVLink phases 2 * 7/8 * bytes / 360 GB/s.
    p = _project(16, zero=0)
    grad_bytes = 4.0 * (total_params(LLAMA8) - LLAMA8.vocab_size * LLAMA8.hidden_size)
    nic = 2 * 0.5 * grad_bytes / 8 / (50e9 * 0.8)
    nvlink = 2 * 7 / 8 * grad_bytes / (450e9 * 0.8)
    assert p.breakdown.dp_comm_s == pytest.approx(nic + nvlink, rel=0.2)
    overlapped = _project(16, PROFILE.model_copy(update={"dp_overlap_fraction": 0.5}), zero=0)
    assert overlapped.breakdown.dp_comm_s < 0.6 * p.breakdown.dp_comm_s


def test_tp_all_reduces_are_counted_per_layer_forward_and_backward() -> None:
    # TP8 in one node, no SP: 2 all-reduces of the (tokens x hidden) bf16 activations per layer forward,
    # as many in backward; ring on NVSwitch: 2 * 7 * latency + 2 * 7/8 * bytes / (450 GB/s * 0.8);
    # gbs 8 on DP 1: 8 micro-batches.
    p = _project(8, tp=8)
    message = 2.0 * 4096 * LLAMA8.hidden_size
    one = 2 * 7 * 5e-6 + 2 * 7 / 8 * message / (450e9 * 0.8)
    expected = 8 * 2 * 2 * LLAMA8.num_layers * one
    assert p.breakdown.tp_comm_s == pytest.approx(expected, rel=0.05)


def test_fp8_casts_add_their_hbm_traffic() -> None:
    # FP8 at half the BF16 fraction of its (double) peak runs compute-bound GEMMs exactly as fast as
    # BF16, so what FP8 adds to a layer's forward is the casting of every GEMM input.
    from projection.collectives import place_group
    from projection.engine import network_for
    from projection.workload import CommGroups, layer_cost

    cluster = Cluster(gpu="h100-sxm", num_gpus=8)
    net = network_for(H100, cluster, PROFILE)
    costs = {}
    for precision in ("bf16", "fp8"):
        config = TrainingConfig(mbs=4, gbs=32, seq_len=4096, precision=precision)
        dims = parallel_dims(config, cluster)
        rates = device_rates(H100, PROFILE, precision)
        groups = CommGroups(tp=place_group(1, 1, net), cp=place_group(1, 1, net), ep=place_group(1, 1, net))
        costs[precision] = layer_cost(LLAMA8, 0, config, dims, rates, net, groups)
    tokens = 4 * 4096
    cast = CAST_BYTES_PER_ELEMENT["fp8"] * fp8_cast_elements(LLAMA8, tokens, 1, 0.0)
    expected = cast / (H100.hbm_bandwidth_bytes_per_s * PROFILE.memory_efficiency)
    assert costs["fp8"].fwd_s - costs["bf16"].fwd_s == pytest.approx(expected, rel=0.25)


def test_fp8_recipes_no_longer_project_alike() -> None:
    def times(gpu: str, recipes: tuple[str, ...]) -> dict[str, float]:
        cluster = Cluster(gpu=gpu, num_gpus=8)
        return {p: project(LLAMA8, cluster, TrainingConfig(mbs=1, gbs=64, seq_len=4096, precision=p)).iteration_time_s
                for p in recipes}

    blackwell = times("b200", ("fp8", "fp8-blockwise", "mxfp8"))
    # Transformer Engine emulates Float8BlockScaling with MXFP8 on SM100 (projection/compute.py MX_GEMM_FRACTION)
    assert blackwell["fp8-blockwise"] == blackwell["mxfp8"] != blackwell["fp8"], blackwell
    hopper = times("h100-sxm", ("fp8", "fp8-blockwise"))
    assert hopper["fp8"] != hopper["fp8-blockwise"], hopper
