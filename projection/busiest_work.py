"""The busiest pipeline rank's work of one micro-batch, for many layouts at once, as arrays: the search's bound.

A rank's forward + backward-input + backward-weight time per micro-batch is the sum, over the layers it holds, of
a per-layer term, plus the embedding on rank 0 and the LM head on the head rank (:func:`projection.engine._stage_times`
adds the same terms chunk by chunk):
- a layer that is not fully recomputed: ``fwd + bwd_input + bwd_weight + selective`` (its selective recompute);
- a fully recomputed layer: ``2 fwd + bwd_input + bwd_weight`` (its forward, communication included, runs again
  before its backward; no selective recompute on top).

The per-layer terms (:class:`LayerWork`) depend on what the layer costs read (micro-batch, TP, CP, EP, precision,
dispatcher, switches, recompute modules), not on the pipeline; which rank holds which layer and which layers are
fully recomputed (:class:`StageLayers`) depend on the pipeline alone (PP, VPP, split, recompute, schedule).  A
search has a few thousand of the first and a few dozen of the second over hundreds of thousands of layouts, so
:func:`busiest_work` builds each once and combines them in numpy: per rank, prefix-sum differences at each chunk's
bounds, added chunk by chunk (elementwise operations only, so a layout gets the same bits in any batch).

The sums run in another order than the stage times', so a result may differ from theirs in the last bits;
:data:`FLOAT_SLACK` takes that off, so the bound stays at or below the projected time
(tests/projection/test_pinned_terms.py, tests/projection/test_busiest_work.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from projection.layout import ParallelDims, chunk_layers, effective_schedule, recomputed_layers
from projection.training_config import TrainingConfig

FLOAT_SLACK = 1e-12
"""Relative amount taken off every result: summing ~100 positive terms in another order moves a float64 sum by
at most ~1e-14 of itself (100 roundings of 2**-53 each), so the bound stays below the stage times' own sum."""


@dataclass(frozen=True, slots=True)
class LayerWork:
    """Per-layer work of one micro-batch of a layout, seconds: prefix sums over the model's layers (from 0.0)."""

    plain: np.ndarray    # (num_layers + 1,) cumulative fwd + bwd_input + bwd_weight + selective recompute
    full: np.ndarray     # (num_layers + 1,) cumulative 2 fwd + bwd_input + bwd_weight (full recompute)
    embed: float         # embedding forward + backward, on rank 0
    head: float          # final norm, LM head and loss forward + backward-input + backward-weight, on the head rank


def layer_work(distinct: Sequence[tuple[float, ...]], kinds: Sequence[int], head: tuple[float, float, float],
               embed: tuple[float, float]) -> LayerWork:
    """:class:`LayerWork` from the engine's per-layer terms (:func:`projection.engine._layer_terms`: per distinct
    cost (fwd, bwd-input, bwd-weight, selective, ...) with communication included, and each layer's index into
    them) and the head's and embedding's costs (:func:`projection.workload.head_cost`, ``embedding_cost``)."""
    terms = np.asarray(distinct, dtype=np.float64)[:, :4]
    fwd, b_in, b_w, selective = terms.T
    per_kind = np.stack([fwd + b_in + b_w + selective, fwd + fwd + b_in + b_w])   # (2, distinct)
    prefix = np.zeros((2, len(kinds) + 1))
    np.cumsum(per_kind[:, np.asarray(kinds, dtype=np.intp)], axis=1, out=prefix[:, 1:])
    return LayerWork(plain=prefix[0], full=prefix[1], embed=embed[0] + embed[1], head=head[0] + head[1] + head[2])


@dataclass(frozen=True, slots=True)
class StageLayers:
    """Which layers each pipeline rank holds, chunk by chunk: per (rank, chunk) the layer bounds ``lo <= mid <=
    hi``, layers ``[lo, mid)`` fully recomputed, ``[mid, hi)`` not; and the rank that holds the LM head."""

    lo: np.ndarray       # (pp, vpp) first layer of each chunk
    mid: np.ndarray      # (pp, vpp) first layer after the chunk's fully recomputed prefix
    hi: np.ndarray       # (pp, vpp) one past the chunk's last layer
    head_rank: int


def stage_layers(num_layers: int, config: TrainingConfig, dims: ParallelDims) -> StageLayers:
    """:class:`StageLayers` of a layout (:func:`projection.layout.chunk_layers`, ``recomputed_layers``; the head on
    rank 0 under ZB-V, else on the last rank, as :func:`projection.engine._stage_times` places it)."""
    lo, mid, hi = (np.zeros((dims.pp, dims.vpp), dtype=np.intp) for _ in range(3))
    for rank, chunks in enumerate(chunk_layers(num_layers, dims.pp, dims.vpp, dims.split)):
        stage_layer_count = sum(len(c) for c in chunks)
        position = 0
        for c, chunk in enumerate(chunks):
            start = chunk[0] if chunk else 0
            lo[rank, c] = start
            mid[rank, c] = start + recomputed_layers(config, chunk, stage_layer_count, position)
            hi[rank, c] = start + len(chunk)
            position += len(chunk)
    head_rank = 0 if effective_schedule(config) == "zbv" else dims.pp - 1
    return StageLayers(lo=lo, mid=mid, hi=hi, head_rank=head_rank)


def busiest_work(works: Sequence[LayerWork], work_ids: np.ndarray, stages: Sequence[StageLayers],
                 stage_ids: np.ndarray) -> np.ndarray:
    """Per layout, the busiest rank's work of one micro-batch, seconds: layout ``i`` has the per-layer work
    ``works[work_ids[i]]`` and the pipeline ``stages[stage_ids[i]]``; less :data:`FLOAT_SLACK`."""
    work_ids, stage_ids = np.asarray(work_ids, dtype=np.intp), np.asarray(stage_ids, dtype=np.intp)
    result = np.empty(len(work_ids))
    if not len(work_ids):
        return result
    plain = np.stack([w.plain for w in works])
    full = np.stack([w.full for w in works])
    embed = np.array([w.embed for w in works])
    head = np.array([w.head for w in works])
    for s in np.unique(stage_ids).tolist():
        rows = np.flatnonzero(stage_ids == s)
        used, which = np.unique(work_ids[rows], return_inverse=True)     # the per-layer works this pipeline meets
        layers = stages[s]
        p, f = plain[used], full[used]
        # per (work, rank, chunk): recomputed prefix plus the rest, then per rank chunk by chunk from 0.0
        chunk = (f[:, layers.mid] - f[:, layers.lo]) + (p[:, layers.hi] - p[:, layers.mid])
        per_rank = np.zeros(chunk.shape[:2])
        for c in range(chunk.shape[2]):
            per_rank += chunk[:, :, c]
        per_rank[:, 0] += embed[used]
        per_rank[:, layers.head_rank] += head[used]
        result[rows] = per_rank.max(axis=1)[which.reshape(-1)]
    return result * (1.0 - FLOAT_SLACK)
