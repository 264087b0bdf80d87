"""Terms that a one-line change used to survive (issue 24 item 5), each pinned to an expectation worked out here.

- TP must divide the K/V heads (GQA: each TP rank holds whole K/V heads);
- the embedding's share of the DP gradient reduction under pipeline parallelism;
- the context-parallel K/V exchange inside one NVLink domain and on an xGMI mesh (one link per ring step);
- :func:`projection.engine.iteration_time_lower_bound`, the bound the search's pruning relies on, never exceeds the
  projected iteration time.
"""

from __future__ import annotations

import itertools

import pytest

from projection.collectives import place_group
from projection.compute import device_rates
from projection.device_profile import DeviceProfile
from projection.engine import iteration_time_lower_bound, network_for, project
from projection.framework_profile import FrameworkProfile
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.legality import layout_violations, tp_degrees
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from projection.workload import CommGroups, layer_cost
from tools.candidate_columns import enumerate_candidates
from tools.constraints import Constraints

H100 = load_hardware("h100-sxm")


# ---- TP divides the K/V heads --------------------------------------------------------------------------------


def test_tp_must_divide_the_kv_heads() -> None:
    # Qwen3-30B-A3B: 32 query heads, 4 K/V heads.  TP 8 splits the query heads (4 each) but not the 4 K/V heads,
    # so Megatron-core refuses it; TP 4 (1 K/V head per rank) is fine.
    model = load_model("qwen3-30b-a3b")
    assert (model.num_attention_heads, model.num_kv_heads) == (32, 4)
    cluster = Cluster(gpu="h100-sxm", num_gpus=8)
    eight = layout_violations(model, H100, cluster, TrainingConfig(tp=8, mbs=1, gbs=8, seq_len=4096))
    assert any("num_kv_heads=4" in r for r in eight), eight
    four = layout_violations(model, H100, cluster, TrainingConfig(tp=4, mbs=1, gbs=8, seq_len=4096))
    assert not any("num_kv_heads" in r for r in four), four
    assert tp_degrees(model, 8) == [1, 2, 4]


# ---- the embedding's share of the DP gradient reduction -------------------------------------------------------

# No overlap, one bucket per collective (latency paid once), so the DP time is linear in the reduced bytes.
_PROFILE = DeviceProfile(hardware_id="h100-sxm", dp_overlap_fraction=0.0, tp_overlap_fraction=0.0)
_ONE_BUCKET = FrameworkProfile(name="megatron", grad_bucket_elements=1e15)


def _dp_s(vocab: int, pp: int) -> float:
    model = load_model("llama3-8b").model_copy(update={"vocab_size": vocab})
    config = TrainingConfig(pp=pp, dp=8, mbs=1, gbs=8 * pp, seq_len=4096, zero=0)
    cluster = Cluster(gpu="h100-sxm", num_gpus=8 * pp)
    return project(model, cluster, config, hardware=H100, profile=_PROFILE,
                   framework=_ONE_BUCKET).breakdown.dp_comm_s


@pytest.mark.parametrize(("pp", "share"), [(1, 1.0), (2, 1 / 2), (4, 1 / 3), (8, 1 / 5)])
def test_the_embedding_share_of_the_dp_reduction_under_pipelining(pp: int, share: float) -> None:
    # Extra vocabulary rows add (extra rows x hidden) gradient elements to the DP all-reduce of the ranks that
    # hold the embedding; the engine charges each GPU 1 / (pp // 2 + 1) of one embedding matrix: the whole
    # matrix at pp 1, half at pp 2, a third at pp 4, a fifth at pp 8 (written out, not computed from the rule).
    # The same 8-GPU DP group (one node) in every case, so the seconds per element are those of pp 1.
    extra = 64_000
    per_matrix = _dp_s(128_256 + extra, 1) - _dp_s(128_256, 1)
    assert per_matrix > 0
    assert _dp_s(128_256 + extra, pp) - _dp_s(128_256, pp) == pytest.approx(share * per_matrix, rel=1e-6)


# ---- the context-parallel exchange inside one NVLink domain ---------------------------------------------------


def _cp_ring_cost(gpu: str):
    # Llama 3 8B (8 K/V heads x 128), CP 4 in one node, seq 16384: each rank holds 4096 tokens and passes its
    # K and V (bf16) to its ring neighbour in cp - 1 = 3 point-to-point steps.
    model = load_model("llama3-8b")
    cluster = Cluster(gpu=gpu, num_gpus=8)
    profile = DeviceProfile(hardware_id=gpu)
    config = TrainingConfig(framework="megatron", cp=4, seq_len=16384, mbs=1, gbs=2, zero=1)
    hardware = load_hardware(gpu)
    net = network_for(hardware, cluster, profile)
    dims = parallel_dims(config, cluster)
    groups = CommGroups(tp=place_group(1, 1, net), cp=place_group(4, 1, net), ep=place_group(1, 1, net))
    assert groups.cp.num_domains == 1
    return layer_cost(model, 0, config, dims, device_rates(hardware, profile, "bf16"), net, groups), net


KV_BYTES_PER_STEP = 2 * 4096 * 2 * 8 * 128                  # bf16 x tokens x (K, V) x heads x head dim


def test_cp_exchange_inside_one_nvlink_domain_is_the_kv_ring_over_nvlink() -> None:
    # NVSwitch: each step runs at the achieved per-GPU NVLink bandwidth (line rate x scale-up efficiency).
    cost, net = _cp_ring_cost("h100-sxm")
    step_s = net.scale_up_latency_s + KV_BYTES_PER_STEP / (net.scale_up_bytes_per_s * net.scale_up_efficiency)
    assert cost.cp_comm_s == pytest.approx(3 * step_s, rel=1e-12)
    assert cost.cp_comm_s > 0


def test_cp_exchange_on_an_xgmi_mesh_uses_one_link_per_ring_step() -> None:
    # MI300X: 7 xGMI links x 64 GB/s per direction (catalog); a ring neighbour is one peer, so each step moves
    # the K/V over one link (64 GB/s x efficiency), not the 448 GB/s sum of the seven.
    cost, net = _cp_ring_cost("mi300x")
    one_link = net.scale_up_bytes_per_s / net.scale_up_num_links
    assert one_link == pytest.approx(64e9)
    step_s = net.scale_up_latency_s + KV_BYTES_PER_STEP / (one_link * net.scale_up_efficiency)
    assert cost.cp_comm_s == pytest.approx(3 * step_s, rel=1e-12)
    assert cost.cp_comm_s > 3 * KV_BYTES_PER_STEP / (net.scale_up_bytes_per_s * net.scale_up_efficiency)


# ---- the search's lower bound -----------------------------------------------------------------------------------

_BOUND_JOBS = [("llama3-8b", "h100-sxm", 16, 64, 4096), ("mixtral-8x7b", "mi300x", 16, 64, 4096),
               ("qwen3-30b-a3b", "b200", 32, 128, 8192)]


@pytest.mark.parametrize(("model_id", "gpu", "n", "gbs", "seq"), _BOUND_JOBS, ids=[j[0] for j in _BOUND_JOBS])
def test_the_lower_bound_never_exceeds_the_projected_time(model_id: str, gpu: str, n: int, gbs: int,
                                                          seq: int) -> None:
    """Over every 23rd enumerated layout (all axes, precisions, recompute, ZeRO, schedules), and for a framework
    other than the default: the bound the search prunes with is at most the projected iteration time."""
    model, hardware = load_model(model_id), load_hardware(gpu)
    cluster = Cluster(gpu=gpu, num_gpus=n)
    checked = 0
    for framework in (None, "torchtitan"):
        layouts = enumerate_candidates(model, hardware, cluster, Constraints(), gbs, seq, framework=framework)
        for config in itertools.islice(layouts, 0, None, 23):
            bound = iteration_time_lower_bound(model, cluster, config, hardware=hardware)
            projected = project(model, cluster, config, hardware=hardware, check=False).iteration_time_s
            assert 0 < bound <= projected * (1 + 1e-12), (config, bound, projected)
            checked += 1
    assert checked >= 40


def test_the_lower_bound_counts_fsdp_communication(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ZeRO 3 the bound adds the DP communication the step exposes at least (engine.fsdp_exposed_floor):
    tighter than the busiest rank's work alone, still at most the projected time; nothing below ZeRO 3."""
    from projection import engine

    model, hardware = load_model("qwen3-30b-a3b"), load_hardware("mi355x")
    cluster = Cluster(gpu="mi355x", num_gpus=16)
    fsdp = TrainingConfig(tp=1, pp=1, cp=1, ep=8, mbs=1, gbs=64, seq_len=8192, precision="bf16", zero=3)
    floor, alone = engine.fsdp_exposed_floor(model, cluster, fsdp, hardware=hardware)
    assert 0 < floor <= alone
    bound = iteration_time_lower_bound(model, cluster, fsdp, hardware=hardware)
    projected = project(model, cluster, fsdp, hardware=hardware, check=False)
    assert bound <= projected.iteration_time_s
    assert bound - floor * projected.dims.num_microbatches >= projected.breakdown.optimizer_s
    ddp = fsdp.model_copy(update={"zero": 1})
    assert engine.fsdp_exposed_floor(model, cluster, ddp, hardware=hardware) == (0.0, 0.0)
    monkeypatch.setattr(engine, "fsdp_exposed_floor", lambda *args, **kwargs: (0.0, 0.0))
    assert bound > iteration_time_lower_bound(model, cluster, fsdp, hardware=hardware)   # the floor tightens it


def test_the_lower_bound_holds_and_counts_the_pipeline_fill_and_drain_on_every_schedule() -> None:
    """Deep pipelines on every schedule the simulator runs (1F1B, interleaved, GPipe, ZB-H1, ZB-V), with and without
    recompute: the bound (busiest_work.makespan_floor: a rank's work plus the forward fill before it and, where
    backward and weight gradient are one op, the backward drain after it) stays at most the projected time, and
    with few micro-batches it is close to it (the busiest rank's work alone would be ~m / (m + pp - 1) of it)."""
    from projection.layout import effective_schedule

    model, hardware = load_model("llama3-8b"), load_hardware("h100-sxm")
    cluster = Cluster(gpu="h100-sxm", num_gpus=32)
    ratios: dict[str, float] = {}
    for schedule, vpp, recompute in itertools.product(("1f1b", "interleaved", "gpipe", "zero-bubble"), (1, 2),
                                                      ("none", "full")):
        if (schedule == "interleaved") != (vpp > 1) and schedule != "zero-bubble":
            continue
        config = TrainingConfig(tp=1, pp=8, vpp=vpp, mbs=1, gbs=32, seq_len=4096, pp_schedule=schedule,
                                recompute=recompute)          # dp 4: 8 micro-batches through 8 stages
        bound = iteration_time_lower_bound(model, cluster, config, hardware=hardware)
        projected = project(model, cluster, config, hardware=hardware).iteration_time_s
        assert bound <= projected * (1 + 1e-12), (config, bound, projected)
        name = effective_schedule(config)
        ratios[name] = min(ratios.get(name, 1.0), bound / projected)
    assert set(ratios) == {"1f1b", "interleaved", "gpipe", "zero-bubble", "zbv"}
    assert min(ratios["1f1b"], ratios["gpipe"], ratios["interleaved"]) > 0.9, ratios   # fill and drain
    assert min(ratios["zero-bubble"], ratios["zbv"]) > 0.7, ratios                     # fill only
