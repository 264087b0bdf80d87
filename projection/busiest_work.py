"""The busiest pipeline rank's work of one micro-batch, for many layouts at once, as arrays, and the pipeline makespan
floor built on it (:func:`makespan_floor`): the search's bound.

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
:func:`busiest_work` and :func:`makespan_floor` build each once and combine them in numpy: per rank, prefix-sum differences at each chunk's
bounds, added chunk by chunk (elementwise operations only, so a layout gets the same bits in any batch).

The sums run in another order than the stage times', so a result may differ from theirs in the last bits;
:data:`FLOAT_SLACK` takes that off, so the bound stays at or below the projected time
(tests/projection/test_pinned_terms.py, tests/projection/test_busiest_work.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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
    forward: np.ndarray  # (num_layers + 1,) cumulative fwd (a chunk's forward op)
    embed: float         # embedding forward + backward, on rank 0
    head: float          # final norm, LM head and loss forward + backward-input + backward-weight, on the head rank


def layer_work(distinct: Sequence[tuple[float, ...]], kinds: Sequence[int], head: tuple[float, float, float],
               embed: tuple[float, float]) -> LayerWork:
    """:class:`LayerWork` from the engine's per-layer terms (:func:`projection.engine._layer_terms`: per distinct
    cost (fwd, bwd-input, bwd-weight, selective, ...) with communication included, and each layer's index into
    them) and the head's and embedding's costs (:func:`projection.workload.head_cost`, ``embedding_cost``)."""
    terms = np.asarray(distinct, dtype=np.float64)[:, :4]
    fwd, b_in, b_w, selective = terms.T
    per_kind = np.empty((3, len(terms)))             # (3, distinct)
    per_kind[0] = fwd + b_in + b_w + selective
    per_kind[1] = fwd + fwd + b_in + b_w
    per_kind[2] = fwd
    prefix = np.zeros((3, len(kinds) + 1))
    np.cumsum(per_kind[:, np.asarray(kinds, dtype=np.intp)], axis=1, out=prefix[:, 1:])
    return LayerWork(plain=prefix[0], full=prefix[1], forward=prefix[2], embed=embed[0] + embed[1],
                     head=head[0] + head[1] + head[2])


@dataclass(frozen=True, slots=True)
class StageLayers:
    """Which layers each pipeline rank holds, chunk by chunk: per (rank, chunk) the layer bounds ``lo <= mid <=
    hi``, layers ``[lo, mid)`` fully recomputed, ``[mid, hi)`` not; and the rank that holds the LM head."""

    lo: np.ndarray       # (pp, vpp) first layer of each chunk
    mid: np.ndarray      # (pp, vpp) first layer after the chunk's fully recomputed prefix
    hi: np.ndarray       # (pp, vpp) one past the chunk's last layer
    head_rank: int
    drains: bool         # the schedule runs each backward with its weight gradient as one op (not zero-bubble, ZB-V)


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
    schedule = effective_schedule(config)
    head_rank = 0 if schedule == "zbv" else dims.pp - 1
    return StageLayers(lo=lo, mid=mid, hi=hi, head_rank=head_rank, drains=schedule not in SPLIT_WEIGHT_SCHEDULES)


SPLIT_WEIGHT_SCHEDULES = frozenset({"zero-bubble", "zbv"})
"""Schedules whose weight-gradient ops run apart from the backward (projection/pipeline_plan.py ``_rank_arrays``:
W ops deferred); the others run backward and weight gradient as one op."""


def _rank_work(works: Sequence[LayerWork], work_ids: np.ndarray, stages: Sequence[StageLayers],
               stage_ids: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray, StageLayers, np.ndarray, np.ndarray,
                                                     np.ndarray]]:
    """Per pipeline met: (its layouts' positions, each one's row in the arrays that follow, its layers, per (work,
    rank) the work of one micro-batch, and per (work, rank) the forward and the whole of chunk 0)."""
    plain = np.stack([w.plain for w in works])
    full = np.stack([w.full for w in works])
    forward = np.stack([w.forward for w in works])
    embed = np.array([w.embed for w in works])
    head = np.array([w.head for w in works])
    for s in np.unique(stage_ids).tolist():
        rows = np.flatnonzero(stage_ids == s)
        used, which = np.unique(work_ids[rows], return_inverse=True)     # the per-layer works this pipeline meets
        layers = stages[s]
        p, f, fw = plain[used], full[used], forward[used]
        # per (work, rank, chunk): recomputed prefix plus the rest, then per rank chunk by chunk from 0.0
        chunk = (f[:, layers.mid] - f[:, layers.lo]) + (p[:, layers.hi] - p[:, layers.mid])
        per_rank = np.zeros(chunk.shape[:2])
        for c in range(chunk.shape[2]):
            per_rank += chunk[:, :, c]
        per_rank[:, 0] += embed[used]
        per_rank[:, layers.head_rank] += head[used]
        first = fw[:, layers.hi[:, 0]] - fw[:, layers.lo[:, 0]]
        yield rows, which.reshape(-1), layers, per_rank, first, chunk[:, :, 0]


def busiest_work(works: Sequence[LayerWork], work_ids: np.ndarray, stages: Sequence[StageLayers],
                 stage_ids: np.ndarray) -> np.ndarray:
    """Per layout, the busiest rank's work of one micro-batch, seconds: layout ``i`` has the per-layer work
    ``works[work_ids[i]]`` and the pipeline ``stages[stage_ids[i]]``; less :data:`FLOAT_SLACK`."""
    work_ids, stage_ids = np.asarray(work_ids, dtype=np.intp), np.asarray(stage_ids, dtype=np.intp)
    result = np.empty(len(work_ids))
    if not len(work_ids):
        return result
    for rows, which, _, per_rank, _, _ in _rank_work(works, work_ids, stages, stage_ids):
        result[rows] = per_rank.max(axis=1)[which]
    return result * (1.0 - FLOAT_SLACK)


def makespan_floor(works: Sequence[LayerWork], work_ids: np.ndarray, stages: Sequence[StageLayers],
                   stage_ids: np.ndarray, microbatches: np.ndarray) -> np.ndarray:
    """Per layout, a lower bound of the pipeline makespan of ``microbatches`` micro-batches, seconds (layouts as in
    :func:`busiest_work`; less :data:`FLOAT_SLACK`).

    A rank runs its ops one at a time: ``m`` times its work of one micro-batch.  Its first op waits for the forward
    of a micro-batch through chunk 0 of every rank before it (a forward needs the one of the virtual stage before:
    projection/pipeline.py simulate_pipeline; chunk 0 of rank ``s`` is virtual stage ``s`` in every schedule), the
    fill.  Where backward and weight gradient run as one op (:attr:`StageLayers.drains`), a rank's last op is a
    backward (each forward's backward runs after it on the same rank), after which that micro-batch's backward
    still runs through chunk 0 of every rank before it, the drain.  So the makespan is at least, over the ranks,
    fill + m * work + drain (p2p latencies, bubbles elsewhere and the embedding and LM head of chunk 0 left out).
    """
    work_ids, stage_ids = np.asarray(work_ids, dtype=np.intp), np.asarray(stage_ids, dtype=np.intp)
    m = np.asarray(microbatches, dtype=np.float64)
    result = np.empty(len(work_ids))
    if not len(work_ids):
        return result
    for rows, which, layers, per_rank, first, chunk0 in _rank_work(works, work_ids, stages, stage_ids):
        before = first if not layers.drains else chunk0          # chunk 0's forward (and backward) of each rank
        edges = np.zeros_like(before)
        edges[:, 1:] = np.cumsum(before[:, :-1], axis=1)         # summed over the ranks before each rank
        result[rows] = (edges[which] + m[rows, None] * per_rank[which]).max(axis=1)
    return result * (1.0 - FLOAT_SLACK)
