"""The run-time switches of a layout, resolved: the config's value, else the framework's documented default.

A sweep run or a request may leave any switch unset (``None``); the framework's catalog record
(``projection/catalog/frameworks/*.yaml``, :class:`projection.framework_profile.FrameworkProfile` ``default_*``
fields, each with its source) then says what that framework does out of the box.  The physics that prices each
switch lives next to what it changes:

- ``comm_overlap``: which exposed-communication terms may hide under compute (:func:`overlap_fraction`,
  projection/engine.py: TP/CP/EP per layer, PP send/receive per chunk, DP gradient/parameter collectives);
- ``cuda_graphs``: one host launch per layer pass instead of one per op, and a shorter per-kernel launch gap
  (projection.compute.CUDA_GRAPH_GAP_SAVING_S);
- ``compile``: the element-wise code of an eager framework runs fused (``FrameworkProfile.eager_elementwise`` off);
- ``attention_backend``: fused flash, Triton flash (:data:`TRITON_ATTENTION_SPEED`) or unfused attention
  (projection.compute.unfused_attention_fwd_bwd_s; memory: s x s scores kept, projection.activations);
- ``grad_reduce_in_fp32``: bytes per gradient element in the DP collectives and the gradient buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

from projection.framework_profile import FrameworkProfile
from projection.training_config import TrainingConfig

FP32_GRAD_BYTES = 4.0   # fp32 gradients: Megatron-LM --accumulate-allreduce-grads-in-fp32, NeMo grad_reduce_in_fp32
LOW_GRAD_BYTES = 2.0    # gradients reduced in the bf16/fp16 training dtype

# Triton flash attention relative to the fused flash kernel of the same chip: FlashAttention-2 (Dao 2023, arXiv
# 2307.08691, Sec. 4.1, A100) "is 1.7-3.0x faster than FlashAttention, 1.3-2.5x faster than FlashAttention in
# Triton, and 3-10x faster than a standard attention implementation"; the geometric middle of 1.3-2.5x is 1.8x,
# i.e. a Triton kernel reaches 1/1.8 = 0.56 of the fused kernel's throughput (forward and backward alike).
TRITON_ATTENTION_SPEED = 1 / 1.8



@dataclass(frozen=True, slots=True)
class Switches:
    """The switches in effect for one projection (plain data)."""

    overlaps: frozenset[str]
    cuda_graphs: bool
    compile: bool
    attention_backend: str
    grad_reduce_bytes: float

    def overlapped(self, comm: str) -> bool:
        """Whether ``comm`` (dp, tp, pp, ep, cp) is overlapped with compute."""
        return comm in self.overlaps


def ep_overlap_blockers(config: TrainingConfig) -> list[str]:
    """Why megatron-core refuses ``overlap_moe_expert_parallel_comm`` for a layout (megatron-core 0.16.1
    TransformerConfig.__post_init__; empty = allowed)."""
    return [why for bad, why in ((config.ep == 1, "it needs expert parallelism"),
                                 (config.pp > 1 and config.vpp == 1, "it needs VPP under PP"),
                                 (config.recompute == "full", "it excludes full recompute"),
                                 (config.moe_dispatcher == "allgather", "it needs the alltoall or flex (DeepEP / "
                                  "HybridEP) dispatcher")) if bad]


def resolve_switches(config: TrainingConfig, framework: FrameworkProfile) -> Switches:
    """The config's switches, each unset one taken from the framework's record (a default EP overlap only where the
    framework can run it: :func:`ep_overlap_blockers` under megatron-core's rules)."""
    if config.comm_overlap is not None:
        overlaps = config.comm_overlap
    else:
        overlaps = framework.default_comm_overlap
        if framework.megatron_core_ep_overlap_rules and ep_overlap_blockers(config):
            overlaps = tuple(c for c in overlaps if c != "ep")
    graphs = config.cuda_graphs if config.cuda_graphs is not None else framework.default_cuda_graphs
    compiled = config.compile if config.compile is not None else framework.default_compile
    backend = config.attention_backend or framework.default_attention_backend
    if config.grad_reduce_in_fp32 is None:
        grad = framework.grad_reduce_bytes or FP32_GRAD_BYTES
    else:
        grad = FP32_GRAD_BYTES if config.grad_reduce_in_fp32 else LOW_GRAD_BYTES
    return Switches(overlaps=frozenset(overlaps), cuda_graphs=graphs, compile=compiled, attention_backend=backend,
                    grad_reduce_bytes=grad)


def overlap_fraction(switches: Switches, comm: str, fraction_when_on: float) -> float:
    """Share of a communication hidden under compute: the profile's share when the switch is on (what the
    overlapping implementation achieves against its window), 0 when it is off (the collective runs on the
    compute stream, between kernels: fully exposed)."""
    return fraction_when_on if switches.overlapped(comm) else 0.0


def host_op_s(framework_host_op_s: float, measured_host_op_s: float | None) -> float:
    """Host time to dispatch one op, seconds: the user's measured cost (``projtune bench host``, Cluster.host_op_s)
    when given, else the framework's ``host_launch_s`` (0 for XLA, which runs one compiled program)."""
    return framework_host_op_s if measured_host_op_s is None else measured_host_op_s


def grad_buffer_bytes(config: TrainingConfig, framework: FrameworkProfile, traits_grad_bytes: float) -> float:
    """Bytes per element of the DP gradient buffer: fp32 (4) or the training dtype (2) when the run says, else the
    framework profile's reduce dtype, else its memory traits' main-gradient bytes."""
    if config.grad_reduce_in_fp32 is None:
        return framework.grad_reduce_bytes or traits_grad_bytes
    return FP32_GRAD_BYTES if config.grad_reduce_in_fp32 else LOW_GRAD_BYTES
