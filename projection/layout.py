"""Derived facts of a legal layout: parallel degrees, micro-batches, and layers per pipeline chunk.

Rank order follows Megatron-core (``parallel_state.RankGenerator`` order 'tp-cp-ep-dp-pp'):
TP innermost (stride 1), then CP (stride tp), then DP (stride tp*cp), PP outermost.  Expert
parallel groups are folded out of the tp*cp*dp ranks of a stage (MoE parallel folding,
Megatron-core >= 0.10), with ETP innermost.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from projection.pipeline_split import DEFAULT_SPLIT, PipelineSplit, stage_counts
from projection.training_config import Cluster, TrainingConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelDims:
    """Parallel degrees of one layout and the group strides in global rank order."""

    tp: int
    pp: int
    cp: int
    dp: int
    ep: int
    etp: int
    vpp: int
    num_microbatches: int     # per pipeline per step: gbs / (mbs * dp)
    split: PipelineSplit = DEFAULT_SPLIT   # the layout's stated pipeline split (projection/pipeline_split.py)

    @property
    def expert_dp(self) -> int:
        """Data-parallel degree of expert weights: tp*cp*dp / (ep*etp)."""
        return max(1, self.tp * self.cp * self.dp // (self.ep * self.etp))

    @property
    def world(self) -> int:
        """GPUs in the job."""
        return self.tp * self.pp * self.cp * self.dp


def effective_schedule(config: TrainingConfig) -> str:
    """The schedule the simulator runs: Primus's zero-bubble with two virtual chunks is ZB-V."""
    schedule = config.schedule
    return "zbv" if schedule == "zero-bubble" and config.vpp == 2 else schedule


def parallel_dims(config: TrainingConfig, cluster: Cluster) -> ParallelDims:
    """Resolve DP and the micro-batch count of a layout (assumes it is legal)."""
    dp = config.dp or max(1, cluster.num_gpus // (config.tp * config.pp * config.cp))
    return ParallelDims(
        tp=config.tp, pp=config.pp, cp=config.cp, dp=dp, ep=config.ep, etp=config.etp, vpp=config.vpp,
        num_microbatches=max(1, config.gbs // (config.mbs * dp)), split=config.pipeline_split,
    )


@lru_cache(maxsize=4096)
def chunk_layers(num_layers: int, pp: int, vpp: int, split: PipelineSplit = DEFAULT_SPLIT
                 ) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Layer indices of each (pipeline rank, virtual chunk): ``result[rank][chunk]``.

    Virtual stage ``chunk*pp + rank`` holds a contiguous block of layers, as many as
    :func:`projection.pipeline_split.stage_counts` gives it: the stated split (Megatron's first/last
    stage layers or a layout string), else equal stages, equal after counting the embedding and the
    loss as one layer each (Megatron-Bridge ``account_for_embedding/loss_in_pipeline_split``), or the
    remainder on the middle virtual stages, one layer each.
    """
    bounds: list[tuple[int, ...]] = []
    first = 0
    for count in stage_counts(num_layers, pp, vpp, split):
        bounds.append(tuple(range(first, first + count)))
        first += count
    # rank r holds virtual stages r, pp + r, ..., (vpp - 1) * pp + r: the stride-pp slice from r
    return tuple(tuple(bounds[rank::pp]) for rank in range(pp))


def recomputed_layers(config: TrainingConfig, layers: tuple[int, ...], stage_layers: int, position: int) -> int:
    """How many of ``layers`` (a chunk starting at ``position`` within its stage) run full recompute."""
    if config.recompute != "full":
        return 0
    if config.recompute_num_layers is None:
        return len(layers)
    budget = min(config.recompute_num_layers, stage_layers)
    # Megatron 'block' method: the first recompute_num_layers layers of the stage recompute.
    return max(0, min(len(layers), budget - position))
