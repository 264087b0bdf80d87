"""Alpha-beta cost of NCCL/RCCL collectives on a two-level (scale-up, scale-out) topology.

Every cost is ``steps * latency_s + bytes_on_the_busiest_link / achieved_bytes_per_s``
(the alpha-beta model of Calculon's ``Network.time`` and of Primus's
``collective_model.py``, shared/notes/primus-projection.md 2.3). Where a group sits on the
topology decides the link:

- Inside one scale-up domain on NVSwitch, every GPU gets its full per-GPU bandwidth
  whatever the group size, and NCCL runs rings: ``n - 1`` latency steps per phase.
- Inside one xGMI full mesh (AMD, 7 links per GPU in an 8-GPU node), a group of ``g``
  GPUs drives only the ``g - 1`` links to its peers, so it gets ``(g - 1) / num_links``
  of the per-GPU bandwidth (design.md "Communication"; Primus's mesh derate), and RCCL
  uses direct one-shot algorithms: one latency step per phase.
- Across domains, all-reduce, reduce-scatter and all-gather take the cheaper of a flat
  ring over the slowest link and a hierarchical algorithm (intra-domain reduce-scatter,
  inter-domain collective over the NICs on 1/g of the data, intra-domain all-gather),
  the way NCCL picks the fastest algorithm from its tuning model. NICs are
  rail-optimised: each GPU drives its share ``nics_per_node * nic_bytes_per_s /
  gpus_per_node`` of the node's NIC bandwidth.

Ranks follow Megatron's order (TP innermost, then CP, DP/EP, PP outermost), so a group is
its ``size`` and ``stride`` in global rank; ``place_group`` turns that into members per
domain. Everything is plain float arithmetic: these functions run ~50 times per
projection inside a search over thousands of layouts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from projection.hardware import Fabric

# Peer counts up to this are charged one latency step per peer in an all-to-all; beyond
# it the per-peer steps grow as log2 because NCCL/RCCL post all peer sends in one group
# and they proceed concurrently. Uncalibrated modelling choice (one 8-GPU node), to be
# fitted with the other latency terms (design.md "Calibration").
_A2A_SERIAL_PEERS = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkParams:
    """Everything the collective model needs about one cluster; base units."""

    fabric: Fabric
    """Scale-up fabric: "nvswitch" (uniform per-GPU bandwidth) or "xgmi-mesh" (AMD full mesh)."""
    scale_up_bytes_per_s: float
    """Per-GPU scale-up bandwidth, one direction, summed over all links (bytes/s)."""
    scale_up_num_links: int
    """xGMI links per GPU (7 in an 8-GPU mesh); sets the mesh derate. Unused for nvswitch."""
    scale_up_domain_gpus: int
    """GPUs that share one scale-up fabric: 8 for HGX/MI300X nodes, 72 for GB200/GB300 NVL72."""
    gpus_per_node: int
    """GPUs per node; the NICs of a node are shared among these GPUs."""
    nics_per_node: float
    """Scale-out NICs per node (8 on rail-optimised HGX and MI300X/MI355X nodes); fractional when a cluster's
    "node" groups a different number of GPUs than the catalog's (see :func:`catalog_nics_for`)."""
    nic_bytes_per_s: float
    """Bandwidth of one NIC, one direction (bytes/s); 400 Gbit/s = 50e9."""
    scale_up_latency_s: float = 3e-6
    """Latency of one algorithm step on the scale-up fabric (s). Uncalibrated default, to
    be fitted (design.md "Calibration"); Primus uses node_lat 0.45 us plus a fixed 200 us
    per all-reduce (primus-projection.md 2.3)."""
    scale_out_latency_s: float = 8e-6
    """Latency of one algorithm step across scale-up domains (s). Uncalibrated default, to
    be fitted; Primus uses pod_lat 2 us and cluster_lat 10 us (primus-projection.md 2.3)."""
    scale_up_efficiency: float = 0.8
    """Achieved bus bandwidth / scale-up link bandwidth. Default 0.8: nccl-tests ring busbw
    on 8xH100 NVSwitch is about 0.75-0.85 of the 450 GB/s per-direction peak (not yet
    checked against a logged run); Primus uses bw_eff 0.70 (primus-projection.md 2.3)."""
    scale_out_efficiency: float = 0.85
    """Achieved bandwidth / NIC line rate. Uncalibrated default, to be fitted; Primus uses
    0.70 for collectives and 0.80 for P2P (primus-projection.md 2.3)."""

    def __post_init__(self) -> None:
        """Reject values outside each field's stated range."""
        if self.fabric not in ("nvswitch", "xgmi-mesh"):
            raise ValueError(f"fabric={self.fabric!r} must be 'nvswitch' or 'xgmi-mesh'")
        for name in ("scale_up_num_links", "scale_up_domain_gpus", "gpus_per_node",
                     "nics_per_node"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        for name in ("scale_up_bytes_per_s", "nic_bytes_per_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)} must be > 0")
        for name in ("scale_up_latency_s", "scale_out_latency_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 0")
        for name in ("scale_up_efficiency", "scale_out_efficiency"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name}={getattr(self, name)} must be in (0, 1]")


@dataclass(frozen=True, slots=True)
class GroupPlacement:
    """Where the members of one parallel group sit on the topology."""

    size: int
    """Number of ranks in the group."""
    gpus_per_domain: int
    """Members of the group that share one scale-up domain."""
    num_domains: int
    """Scale-up domains the group spans; size == gpus_per_domain * num_domains."""

    def __post_init__(self) -> None:
        """Reject placements whose counts do not multiply to ``size``."""
        if self.gpus_per_domain < 1 or self.num_domains < 1:
            raise ValueError(f"gpus_per_domain={self.gpus_per_domain} and "
                             f"num_domains={self.num_domains} must be >= 1")
        if self.size != self.gpus_per_domain * self.num_domains:
            raise ValueError(f"size={self.size} must equal gpus_per_domain="
                             f"{self.gpus_per_domain} * num_domains={self.num_domains}")


def place_group(size: int, stride: int, net: NetworkParams) -> GroupPlacement:
    """Place a group of ``size`` ranks spaced ``stride`` apart in Megatron rank order.

    Domains hold consecutive global ranks, so ``scale_up_domain_gpus // stride`` members
    fit in one domain. When that does not divide ``size`` (NVL72: 72 // 8 = 9 for a group
    of 16), the members per domain are rounded down to the largest divisor of ``size``
    (8 + 8 instead of 9 + 7), which keeps every domain alike and errs towards more
    cross-domain traffic. Groups are assumed to start on a domain boundary.
    """
    if size < 1 or stride < 1:
        raise ValueError(f"size={size} and stride={stride} must be >= 1")
    fit = min(size, max(1, net.scale_up_domain_gpus // stride))
    per_domain = next(d for d in range(fit, 0, -1) if size % d == 0)
    return GroupPlacement(size, per_domain, size // per_domain)


def _scale_up_bytes_per_s(gpus: int, net: NetworkParams) -> float:
    """Achieved per-GPU bandwidth of a group with ``gpus`` members in one domain."""
    bytes_per_s = net.scale_up_bytes_per_s * net.scale_up_efficiency
    if net.fabric == "xgmi-mesh":
        bytes_per_s *= min(1.0, (gpus - 1) / net.scale_up_num_links)
    return bytes_per_s


def _scale_out_bytes_per_s(net: NetworkParams) -> float:
    """Achieved per-GPU NIC bandwidth: the GPU's rail share of the node's NICs."""
    return (net.nics_per_node * net.nic_bytes_per_s / net.gpus_per_node
            * net.scale_out_efficiency)


def _intra_phase_s(message_bytes: float, gpus: int, net: NetworkParams) -> float:
    """Time of one reduce-scatter or all-gather of a full buffer inside one domain."""
    if gpus == 1:
        return 0.0
    steps = 1 if net.fabric == "xgmi-mesh" else gpus - 1  # direct one-shot vs ring
    return (steps * net.scale_up_latency_s
            + (gpus - 1) / gpus * message_bytes / _scale_up_bytes_per_s(gpus, net))


def _flat_ring_phase_s(message_bytes: float, group: GroupPlacement,
                       net: NetworkParams) -> float:
    """One ring reduce-scatter or all-gather over all ranks, paced by the slowest link."""
    n, g = group.size, group.gpus_per_domain
    bytes_per_s = _scale_out_bytes_per_s(net)
    if g > 1:
        bytes_per_s = min(bytes_per_s, _scale_up_bytes_per_s(g, net))
    return (n - 1) * net.scale_out_latency_s + (n - 1) / n * message_bytes / bytes_per_s


def _hierarchical_phase_s(message_bytes: float, group: GroupPlacement,
                          net: NetworkParams) -> float:
    """One reduce-scatter (or all-gather): intra-domain phase plus an inter-domain ring on 1/g.

    After the intra-domain reduce-scatter each of the g local members owns 1/g of the
    buffer and runs its own ring with its peers in the other domains, over its own NIC.
    """
    g, m = group.gpus_per_domain, group.num_domains
    inter_s = ((m - 1) * net.scale_out_latency_s
               + (m - 1) / m * (message_bytes / g) / _scale_out_bytes_per_s(net))
    return _intra_phase_s(message_bytes, g, net) + inter_s


def _phase_s(message_bytes: float, group: GroupPlacement, net: NetworkParams) -> float:
    """Cheapest reduce-scatter (== all-gather) of a full buffer over the group."""
    if group.size == 1:
        return 0.0
    if group.num_domains == 1:
        return _intra_phase_s(message_bytes, group.size, net)
    return min(_flat_ring_phase_s(message_bytes, group, net),
               _hierarchical_phase_s(message_bytes, group, net))


def reduce_scatter_s(message_bytes: float, group: GroupPlacement,
                     net: NetworkParams) -> float:
    """Return the time of a reduce-scatter.

    ``message_bytes`` is the full, unsharded input buffer on each rank; each rank ends
    with ``message_bytes / size``. Cost per phase: ``steps * latency + (n-1)/n * bytes /
    bus_bw`` inside a domain, min(flat ring, hierarchical) across domains.
    """
    return _phase_s(message_bytes, group, net)


def all_gather_s(message_bytes: float, group: GroupPlacement, net: NetworkParams) -> float:
    """Return the time of an all-gather.

    ``message_bytes`` is the full, gathered output buffer on each rank; each rank
    contributes ``message_bytes / size``. Same cost as the mirror reduce-scatter.
    """
    return _phase_s(message_bytes, group, net)


def all_reduce_s(message_bytes: float, group: GroupPlacement, net: NetworkParams) -> float:
    """Return the time of an all-reduce.

    ``message_bytes`` is the buffer each rank holds (input size == output size). A ring,
    direct or hierarchical all-reduce is a reduce-scatter followed by an all-gather with
    the same steps and bytes, so inside an NVSwitch domain this is ``2(n-1) * latency +
    2(n-1)/n * bytes / bus_bw``, and the flat/hierarchical choice is the same for both.
    """
    return 2.0 * _phase_s(message_bytes, group, net)


def _a2a_peer_steps(size: int) -> float:
    """Latency steps of an all-to-all among ``size`` ranks (see ``_A2A_SERIAL_PEERS``)."""
    if size <= _A2A_SERIAL_PEERS:
        return float(size - 1)
    return _A2A_SERIAL_PEERS - 1 + math.log2(size / _A2A_SERIAL_PEERS)


def all_to_all_s(message_bytes: float, group: GroupPlacement, net: NetworkParams) -> float:
    """Return the time of a pairwise all-to-all.

    ``message_bytes`` is the total each rank sends, including the ``1/size`` chunk
    addressed to itself, which moves no data (torch ``all_to_all_single`` input size);
    each rank receives as much. Across domains, ``(m-1)/m`` of it crosses the rank's NIC
    share while ``(g-1)/n`` moves over scale-up; both run at once, so the time is the
    larger of the two plus the latency of the peer steps on the slowest link. An xGMI
    domain reaches every peer over its own link in one step.

    The cross-domain term is NCCL's own account of its all-to-all: "the portion that's going through the
    network will determine the global time", busBw -> N/(N-1) x the network bandwidth per GPU over N nodes
    (NVIDIA/nccl-tests issue #130, sjeaugey), and an all-to-all "cannot aggregate the bandwidth of multiple
    NICs" (issue #267), i.e. each rank drives its own rail NIC share; NVIDIA quotes the same per-NIC rate for
    it as for a ring (CX-7 NDR "up to 48-49 GB/s per NIC" in that all-to-all thread, "46-48 GB/s per NIC" for
    a two-node ring in #290), so one ``scale_out_efficiency`` serves both. Megatron-core's alltoall dispatcher
    pays it four times per MoE layer and micro-batch (dispatch + combine, each a
    megatron/core/tensor_parallel/mappings.py ``_AllToAll`` whose backward is another all-to-all). Per-peer
    messages of the cross-node Megatron-Bridge MoE rows are 3.7-5.9 MB, so the latency term is 3-6% of each
    call (evals/data/CHECKS.md 32).
    """
    n, g, m = group.size, group.gpus_per_domain, group.num_domains
    if n == 1:
        return 0.0
    intra_s = 0.0
    if g > 1:
        intra_s = (g - 1) / n * message_bytes / _scale_up_bytes_per_s(g, net)
    if m == 1:
        steps = 1.0 if net.fabric == "xgmi-mesh" else _a2a_peer_steps(n)
        return steps * net.scale_up_latency_s + intra_s
    inter_s = (m - 1) / m * message_bytes / _scale_out_bytes_per_s(net)
    return _a2a_peer_steps(n) * net.scale_out_latency_s + max(intra_s, inter_s)


def p2p_s(message_bytes: float, *, cross_domain: bool, net: NetworkParams) -> float:
    """Return the time of one send/recv of ``message_bytes`` from one rank to one peer.

    Across domains it uses the sender's NIC share. Inside a domain it uses the full
    per-GPU NVSwitch bandwidth, or a single xGMI link on a mesh (Primus's intra-node P2P,
    primus-projection.md 2.3).
    """
    if cross_domain:
        return net.scale_out_latency_s + message_bytes / _scale_out_bytes_per_s(net)
    return net.scale_up_latency_s + message_bytes / _scale_up_bytes_per_s(2, net)


class HardwareNetworkFields(Protocol):
    """The HardwareSpec attributes that ``network_params_from_hardware`` reads."""

    @property
    def scale_up_fabric(self) -> str:
        """Scale-up fabric, "nvswitch" or "xgmi-mesh"."""

    @property
    def scale_up_bytes_per_s(self) -> float:
        """Per-GPU scale-up bandwidth, one direction, all links (bytes/s)."""

    @property
    def scale_up_num_links(self) -> int:
        """Scale-up links per GPU."""

    @property
    def scale_up_domain_gpus(self) -> int:
        """GPUs in one scale-up domain."""

    @property
    def gpus_per_node(self) -> int:
        """GPUs per node."""

    @property
    def nics_per_node(self) -> int:
        """Scale-out NICs per node."""

    @property
    def nic_bytes_per_s(self) -> float:
        """Bandwidth of one NIC, one direction (bytes/s)."""


_OVERRIDABLE = frozenset({"scale_up_latency_s", "scale_out_latency_s",
                          "scale_up_efficiency", "scale_out_efficiency"})
_BITS_PER_BYTE = 8


def _as_fabric(value: str) -> Fabric:
    """Narrow a HardwareSpec fabric string to ``Fabric``."""
    if value == "nvswitch":
        return "nvswitch"
    if value == "xgmi-mesh":
        return "xgmi-mesh"
    raise ValueError(f"scale_up_fabric={value!r} must be 'nvswitch' or 'xgmi-mesh'")


def catalog_nics_for(hw: HardwareNetworkFields, gpus_per_node: int) -> float:
    """The catalog's NICs for a node of ``gpus_per_node`` GPUs, keeping the catalog's NICs per GPU.

    NICs belong to GPUs (rail-optimised designs give each GPU its own NIC: HGX H100/B200 8 per 8,
    GB200/GB300 compute trays 4 per 4), so a sweep that groups a GB200 job as 8 GPUs per node (the
    sweep format's default) does not halve each GPU's scale-out bandwidth.
    """
    return hw.nics_per_node * gpus_per_node / hw.gpus_per_node


def network_params_from_hardware(
    hw: HardwareNetworkFields,
    *,
    gpus_per_node: int | None = None,
    nics_per_node: int | None = None,
    nic_gbit_per_s: float | None = None,
    scale_up_domain_gpus: int | None = None,
    **efficiency_overrides: float,
) -> NetworkParams:
    """Build ``NetworkParams`` from a HardwareSpec-like object and cluster overrides.

    Args:
        hw: Any object with the ``HardwareNetworkFields`` attributes (a HardwareSpec).
        gpus_per_node: Replaces ``hw.gpus_per_node`` when given.
        nics_per_node: Replaces ``hw.nics_per_node`` when given; otherwise the catalog's NICs per GPU are kept
            (:func:`catalog_nics_for`): a GB200 tray has 4 NICs for its 4 GPUs, so a cluster described with
            8 GPUs per node still has one 400 Gbit/s NIC per GPU.
        nic_gbit_per_s: NIC line rate in Gbit/s (decimal), replacing
            ``hw.nic_bytes_per_s``; 400 -> 50e9 bytes/s.
        scale_up_domain_gpus: Replaces ``hw.scale_up_domain_gpus`` when given (a cluster's
            NVLink domain, e.g. 72 for NVL72 or 36 for NVL36).
        **efficiency_overrides: Any of ``scale_up_latency_s``, ``scale_out_latency_s``,
            ``scale_up_efficiency``, ``scale_out_efficiency``.
    """
    unknown = sorted(set(efficiency_overrides) - _OVERRIDABLE)
    if unknown:
        raise ValueError(f"unknown override(s) {unknown}; allowed: {sorted(_OVERRIDABLE)}")
    nic_bytes_per_s = (hw.nic_bytes_per_s if nic_gbit_per_s is None
                       else nic_gbit_per_s * 1e9 / _BITS_PER_BYTE)
    return NetworkParams(
        fabric=_as_fabric(hw.scale_up_fabric),
        scale_up_bytes_per_s=hw.scale_up_bytes_per_s,
        scale_up_num_links=hw.scale_up_num_links,
        scale_up_domain_gpus=hw.scale_up_domain_gpus if scale_up_domain_gpus is None else scale_up_domain_gpus,
        gpus_per_node=hw.gpus_per_node if gpus_per_node is None else gpus_per_node,
        nics_per_node=(catalog_nics_for(hw, hw.gpus_per_node if gpus_per_node is None else gpus_per_node)
                       if nics_per_node is None else nics_per_node),
        nic_bytes_per_s=nic_bytes_per_s,
        **efficiency_overrides,
    )
