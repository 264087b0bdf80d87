"""NVIDIA HybridEP's token exchange inside one NVLink domain: the rows it sends and the bandwidth it reaches.

Two facts about HybridEP (the ``hybrid-ep`` branch of deepseek-ai/DeepEP, Megatron-core's flex dispatcher backend
``--moe-flex-dispatcher-backend hybridep``) that the plain all-to-all price does not hold:

1. **One row per token and destination rank, not per routed expert.**  Its dispatch returns, on each rank, one
   hidden row for every source token that has at least one expert there, together with a per-token map of the
   local experts (deepseek-ai/DeepEP@94a9f8f6 docs/Hybrid-EP_Implementation.md, "Buffer Management": the
   intra-node token buffer holds ``max_num_of_tokens_per_rank x ranks`` rows, and ``local_expert_routing_map``;
   tests/test_hybrid_ep.py ``buffer.dispatch(...)`` -> ``dispatched_hidden``).  Megatron-core's alltoall
   dispatcher permutes a copy per routed expert before its all-to-all, so it sends ``top_k`` rows per token.
   With routing spread over the experts (the benchmark's router: ``torch.randperm(num_of_experts)[:topk]`` per
   token, same file), a token reaches ``ep * (1 - C(E - E/ep, k) / C(E, k))`` distinct ranks (E experts, k of them
   routed, E/ep on each rank; the local rank among them).
2. **Its measured bandwidth inside the domain.**  The same README (docs/README_Hybrid-EP.md, "GB200 Platform",
   16 SMs, the Torch API columns; 4096 tokens of hidden 7168, top-8 of 8 local experts per rank) gives the
   algorithm bandwidth, i.e. received bytes (local rows included; tests/test_hybrid_ep.py
   ``nvl_dispatch = dispatched_hidden.numel() * 2``) per second, BF16 dispatch / combine in GB/s:
   8 ranks 550.10 / 538.44, 16: 472.84 / 474.48, 24: 441.89 / 444.40, 32: 485.50 / 423.19, 36: 469.96 / 418.27.
   Over NVLink 5's 900 GB/s per direction that is the fraction ``HYBRIDEP_NVLINK_FRACTION`` below (the mean of
   dispatch and combine).  16 SMs is Megatron-core's default (``TransformerConfig.moe_hybridep_num_sms = 16``, "In
   pure NVL scenarios, 16 SMs can generally achieve good bandwidth").  The B200 table of the same README (8 ranks,
   16 SMs: 535.94 / 530.86) is within 2% of GB200's 8-rank row.  The fraction is used as a property of the kernel
   on any NVLink domain; only Blackwell was measured.

So inside one domain a HybridEP dispatch (or combine) takes ``distinct ranks x tokens x hidden x 2 B`` over
``fraction x line rate``; across domains it keeps DeepEP's price (``projection.workload.DEEPEP_A2A_FACTOR``).
"""

from __future__ import annotations

from math import comb

# Ranks in the EP group -> HybridEP's achieved fraction of the NVLink line rate (see the module docstring).
HYBRIDEP_NVLINK_FRACTION: tuple[tuple[int, float], ...] = (
    (8, (550.10 + 538.44) / 2 / 900),
    (16, (472.84 + 474.48) / 2 / 900),
    (24, (441.89 + 444.40) / 2 / 900),
    (32, (485.50 + 423.19) / 2 / 900),
    (36, (469.96 + 418.27) / 2 / 900),
)


def ranks_reached_per_token(num_experts: int, top_k: int, ep: int) -> float:
    """Expected number of EP ranks (the local one included) holding at least one of a token's ``top_k`` experts.

    ``num_experts`` spread evenly over ``ep`` ranks, the ``top_k`` experts drawn without replacement.
    """
    if ep <= 1:
        return 1.0
    per_rank = num_experts // ep
    missed = comb(num_experts - per_rank, top_k) / comb(num_experts, top_k)
    return ep * (1.0 - missed)


def nvlink_fraction(ranks: int) -> float:
    """HybridEP's measured fraction of the NVLink line rate for an EP group of ``ranks`` (the nearest measured
    group size at or below it; the 8-rank row below 8, the 36-rank row above 36)."""
    fraction = HYBRIDEP_NVLINK_FRACTION[0][1]
    for measured, value in HYBRIDEP_NVLINK_FRACTION:
        if ranks >= measured:
            fraction = value
    return fraction


def in_domain_exchange_s(routed_bytes: float, num_experts: int, top_k: int, ep: int,
                         line_bytes_per_s: float, latency_s: float) -> float:
    """Seconds of one HybridEP dispatch (or combine) inside one NVLink domain.

    ``routed_bytes``: what Megatron-core's alltoall dispatcher would send per rank (one row per routed expert,
    ``top_k`` per token); HybridEP sends the rows of ``ranks_reached_per_token`` ranks instead, at
    ``nvlink_fraction(ep)`` of ``line_bytes_per_s`` (the GPU's NVLink bandwidth per direction), plus one
    ``latency_s``.
    """
    if ep <= 1:
        return 0.0
    rows = routed_bytes * ranks_reached_per_token(num_experts, top_k, ep) / top_k
    return latency_s + rows / (nvlink_fraction(ep) * line_bytes_per_s)
