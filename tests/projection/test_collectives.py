"""Tests for projection/collectives.py: invariants, placements and one nccl-tests number."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from projection.collectives import (
    GroupPlacement,
    NetworkParams,
    _flat_ring_phase_s,
    _hierarchical_phase_s,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    network_params_from_hardware,
    p2p_s,
    place_group,
    reduce_scatter_s,
)

GIB = 2**30

# 8xH100 HGX: NVLink4 450 GB/s per GPU per direction (900 GB/s bidirectional,
# shared/notes/primus-projection.md section 7), 8 x 400 Gbit/s rail NICs.
H100_NODE = NetworkParams(
    fabric="nvswitch", scale_up_bytes_per_s=450e9, scale_up_num_links=18,
    scale_up_domain_gpus=8, gpus_per_node=8, nics_per_node=8, nic_bytes_per_s=50e9,
)
# GB200 NVL72: 72 GPUs in one NVLink5 domain (1.8 TB/s bidirectional per GPU,
# primus-projection.md section 7), 4 GPUs and 4 x 400 Gbit/s NICs per compute tray.
GB200_NVL72 = NetworkParams(
    fabric="nvswitch", scale_up_bytes_per_s=900e9, scale_up_num_links=18,
    scale_up_domain_gpus=72, gpus_per_node=4, nics_per_node=4, nic_bytes_per_s=50e9,
)
# MI300X: 7 xGMI links x 64 GB/s = 448 GB/s per-GPU egress, 8 x 400 Gbit/s NICs
# (Primus mi300x.yaml, primus-projection.md section 2.3).
MI300X_NODE = NetworkParams(
    fabric="xgmi-mesh", scale_up_bytes_per_s=448e9, scale_up_num_links=7,
    scale_up_domain_gpus=8, gpus_per_node=8, nics_per_node=8, nic_bytes_per_s=50e9,
)
NETS = [H100_NODE, GB200_NVL72, MI300X_NODE]
NET_IDS = ["h100", "nvl72", "mi300x"]

Collective = Callable[[float, GroupPlacement, NetworkParams], float]
COLLECTIVES: list[Collective] = [all_reduce_s, reduce_scatter_s, all_gather_s, all_to_all_s]


@pytest.mark.parametrize("net", NETS, ids=NET_IDS)
@pytest.mark.parametrize("op", COLLECTIVES)
def test_zero_at_size_one(op: Collective, net: NetworkParams) -> None:
    assert op(GIB, place_group(1, 1, net), net) == 0.0


@pytest.mark.parametrize(
    ("net", "size", "stride", "expected"),
    [
        (H100_NODE, 8, 1, GroupPlacement(8, 8, 1)),     # tp=8 on one node
        (H100_NODE, 16, 8, GroupPlacement(16, 1, 16)),  # dp=16 behind tp=8: one per node
        (H100_NODE, 4, 2, GroupPlacement(4, 4, 1)),     # cp=4 behind tp=2
        (H100_NODE, 32, 1, GroupPlacement(32, 8, 4)),
        (GB200_NVL72, 16, 4, GroupPlacement(16, 16, 1)),  # 72 // 4 = 18 >= 16
        (GB200_NVL72, 64, 1, GroupPlacement(64, 64, 1)),  # all inside one NVLink domain
        (GB200_NVL72, 16, 8, GroupPlacement(16, 8, 2)),   # 9 fit; rounded to divisor 8
        (GB200_NVL72, 4, 72, GroupPlacement(4, 1, 4)),
    ],
)
def test_place_group(net: NetworkParams, size: int, stride: int,
                     expected: GroupPlacement) -> None:
    assert place_group(size, stride, net) == expected


def test_place_group_rejects_bad_size() -> None:
    with pytest.raises(ValueError, match="size=0"):
        place_group(0, 1, H100_NODE)


def test_group_placement_checks_product() -> None:
    with pytest.raises(ValueError, match="size=8"):
        GroupPlacement(8, 4, 3)


def test_h100_all_reduce_matches_nccl_tests_bus_bandwidth() -> None:
    # nccl-tests (doc/PERFORMANCE.md): busbw = algbw * 2(n-1)/n for all-reduce, so a ring
    # at bus bandwidth 450e9 * 0.8 = 360e9 B/s takes 2(n-1)/n * bytes / 360e9, plus
    # 2(n-1) ring steps of scale_up_latency_s.
    expected_s = 2 * (7 / 8) * GIB / 360e9 + 2 * 7 * H100_NODE.scale_up_latency_s
    got_s = all_reduce_s(GIB, place_group(8, 1, H100_NODE), H100_NODE)
    assert got_s == pytest.approx(expected_s, abs=1e-9)


@pytest.mark.parametrize("op", COLLECTIVES)
def test_eight_across_nodes_slower_than_one_node(op: Collective) -> None:
    one_node = place_group(8, 1, H100_NODE)
    eight_nodes = place_group(8, 8, H100_NODE)
    assert (one_node.num_domains, eight_nodes.num_domains) == (1, 8)
    assert op(GIB, eight_nodes, H100_NODE) > op(GIB, one_node, H100_NODE)


def test_xgmi_pair_gets_one_seventh_of_the_node_bandwidth() -> None:
    net = dataclasses.replace(MI300X_NODE, scale_up_latency_s=0.0)

    def achieved_bytes_per_s(size: int) -> float:
        # Reduce-scatter moves (n-1)/n of the buffer through each GPU's links.
        return (size - 1) / size * GIB / reduce_scatter_s(GIB, place_group(size, 1, net), net)

    assert achieved_bytes_per_s(2) == pytest.approx(achieved_bytes_per_s(8) / 7)
    assert achieved_bytes_per_s(8) == pytest.approx(448e9 * net.scale_up_efficiency)


def test_xgmi_p2p_uses_one_link() -> None:
    net = dataclasses.replace(MI300X_NODE, scale_up_latency_s=0.0)
    assert p2p_s(GIB, cross_domain=False, net=net) == pytest.approx(
        GIB / (448e9 / 7 * net.scale_up_efficiency))


@pytest.mark.parametrize("net", NETS, ids=NET_IDS)
def test_p2p_cross_domain_slower(net: NetworkParams) -> None:
    assert p2p_s(GIB, cross_domain=True, net=net) > p2p_s(GIB, cross_domain=False, net=net)


def test_nvl72_group_of_64_stays_on_nvlink() -> None:
    group = place_group(64, 1, GB200_NVL72)
    expected_s = (2 * 63 * GB200_NVL72.scale_up_latency_s
                  + 2 * 63 / 64 * GIB / (900e9 * GB200_NVL72.scale_up_efficiency))
    assert all_reduce_s(GIB, group, GB200_NVL72) == pytest.approx(expected_s)


@pytest.mark.parametrize("net", NETS, ids=NET_IDS)
@pytest.mark.parametrize(("num_domains", "members_per_domain"), [(2, 8), (8, 8), (4, 1)])
def test_hierarchical_not_slower_than_flat(
    net: NetworkParams, num_domains: int, members_per_domain: int,
) -> None:
    # Stride domain // members puts exactly `members_per_domain` ranks in each domain.
    stride = net.scale_up_domain_gpus // members_per_domain
    group = place_group(num_domains * members_per_domain, stride, net)
    assert (group.gpus_per_domain, group.num_domains) == (members_per_domain, num_domains)
    flat_s = _flat_ring_phase_s(GIB, group, net)
    hier_s = _hierarchical_phase_s(GIB, group, net)
    assert hier_s <= flat_s
    assert all_reduce_s(GIB, group, net) == pytest.approx(2 * hier_s)


@pytest.mark.parametrize("net", NETS, ids=NET_IDS)
@pytest.mark.parametrize("op", COLLECTIVES)
def test_monotone_in_size_across_domains(op: Collective, net: NetworkParams) -> None:
    # One member per domain (stride = domain size), then whole domains (stride 1 on
    # NVSwitch, where the per-GPU bandwidth does not depend on the group size).
    strides = [net.scale_up_domain_gpus] + ([1] if net.fabric == "nvswitch" else [])
    for stride in strides:
        times_s = [op(GIB, place_group(2**k, stride, net), net) for k in range(9)]
        assert times_s == sorted(times_s)


@pytest.mark.parametrize("net", NETS, ids=NET_IDS)
@pytest.mark.parametrize(("size", "stride"), [(8, 1), (16, 8), (64, 1), (256, 1)])
def test_all_reduce_is_reduce_scatter_plus_all_gather(
    net: NetworkParams, size: int, stride: int,
) -> None:
    group = place_group(size, stride, net)
    assert all_reduce_s(GIB, group, net) == pytest.approx(
        reduce_scatter_s(GIB, group, net) + all_gather_s(GIB, group, net))


def test_all_to_all_intra_node_formula() -> None:
    net = dataclasses.replace(H100_NODE, scale_up_latency_s=0.0)
    assert all_to_all_s(GIB, place_group(8, 1, net), net) == pytest.approx(
        7 / 8 * GIB / (450e9 * net.scale_up_efficiency))


def test_all_to_all_across_nodes_is_nic_bound() -> None:
    net = dataclasses.replace(H100_NODE, scale_out_latency_s=0.0)
    group = place_group(16, 1, net)  # 2 nodes x 8: half of each rank's bytes leave the node
    assert all_to_all_s(GIB, group, net) == pytest.approx(
        0.5 * GIB / (50e9 * net.scale_out_efficiency))


def test_network_params_from_hardware_applies_overrides() -> None:
    hw = SimpleNamespace(
        scale_up_fabric="xgmi-mesh", scale_up_bytes_per_s=448e9, scale_up_num_links=7,
        scale_up_domain_gpus=8, gpus_per_node=8, nics_per_node=8, nic_bytes_per_s=50e9,
    )
    net = network_params_from_hardware(hw, nics_per_node=4, nic_gbit_per_s=200,
                                       scale_out_efficiency=0.9)
    assert net == dataclasses.replace(MI300X_NODE, nics_per_node=4, nic_bytes_per_s=25e9,
                                      scale_out_efficiency=0.9)


@pytest.mark.parametrize(
    ("fabric", "overrides", "match"),
    [("nvswitch", {"bogus_s": 1.0}, "bogus_s"), ("pcie", {}, "pcie")],
)
def test_network_params_from_hardware_rejects(fabric: str, overrides: dict[str, float],
                                              match: str) -> None:
    hw = SimpleNamespace(
        scale_up_fabric=fabric, scale_up_bytes_per_s=450e9, scale_up_num_links=18,
        scale_up_domain_gpus=8, gpus_per_node=8, nics_per_node=8, nic_bytes_per_s=50e9,
    )
    with pytest.raises(ValueError, match=match):
        network_params_from_hardware(hw, **overrides)


def test_network_params_rejects_bad_efficiency() -> None:
    with pytest.raises(ValueError, match="scale_up_efficiency=1.5"):
        dataclasses.replace(H100_NODE, scale_up_efficiency=1.5)


nets = st.builds(
    NetworkParams,
    fabric=st.sampled_from(["nvswitch", "xgmi-mesh"]),
    scale_up_bytes_per_s=st.floats(1e9, 2e12),
    scale_up_num_links=st.integers(1, 18),
    scale_up_domain_gpus=st.sampled_from([1, 2, 4, 8, 16, 72]),
    gpus_per_node=st.sampled_from([1, 2, 4, 8]),
    nics_per_node=st.integers(1, 8),
    nic_bytes_per_s=st.floats(1e9, 1e11),
    scale_up_latency_s=st.floats(0.0, 1e-4),
    scale_out_latency_s=st.floats(0.0, 1e-4),
    scale_up_efficiency=st.floats(0.1, 1.0),
    scale_out_efficiency=st.floats(0.1, 1.0),
)
message_bytes = st.floats(0.0, 1e12)


@given(net=nets, size=st.integers(1, 1024), stride=st.integers(1, 256),
       nbytes=message_bytes, extra=message_bytes, cross=st.booleans())
def test_outputs_finite_nonnegative_and_monotone_in_bytes(
    net: NetworkParams, size: int, stride: int, nbytes: float, extra: float, cross: bool,
) -> None:
    group = place_group(size, stride, net)
    assert group.gpus_per_domain * group.num_domains == size
    for op in COLLECTIVES:
        small_s, large_s = op(nbytes, group, net), op(nbytes + extra, group, net)
        assert math.isfinite(small_s)
        assert math.isfinite(large_s)
        assert 0.0 <= small_s <= large_s
    if group.num_domains > 1:
        phase_s = min(_flat_ring_phase_s(nbytes, group, net),
                      _hierarchical_phase_s(nbytes, group, net))
        assert all_reduce_s(nbytes, group, net) == pytest.approx(2 * phase_s)
    p2p = p2p_s(nbytes, cross_domain=cross, net=net)
    assert math.isfinite(p2p)
    assert p2p >= 0.0
