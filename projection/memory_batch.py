"""Peak and static memory of many layouts at once, bit-for-bit equal to :func:`projection.memory.project_memory`.

The memory screen of a search needs, per candidate, only the heaviest pipeline rank's total
(``MemoryResult.peak_bytes``) and its recompute-invariant part (``static_peak_bytes``).  Both are
sums of per-rank terms (:class:`projection.memory.StageMemory`) that depend on few fields each:

- weights / gradients / optimizer / FP8 copies: the sharding (tp, pp, vpp, ep, etp, dp, cp, ZeRO,
  FSDP size), precision, fine-tuning and framework;
- activations: the activation context (:func:`projection.memory.activation_context`), the pipeline
  split and recompute layers (per-rank saved bytes of all chunks) times the schedule's peak sets
  in flight (:func:`projection.pipeline.peak_in_flight_closed_form`), plus the embedding output;
- buffers: the loss (last rank), the recompute rebuild, ZeRO-3 gathers, the FP8 transpose of a
  frozen LoRA layer and the MoE dispatch buffers.

Each such per-rank row is computed once per distinct key.  The states and the activations of a search's
columns are built for every distinct key at once in numpy (:meth:`MemoryBatcher.states_rows_of`,
:meth:`MemoryBatcher.activation_rows_of`: :func:`projection.memory_terms.states_bytes`, the same function the
one-rank :func:`projection.memory.stage_memory` calls, on arrays of every rank of every key; the chunks' saved bytes
as stage_memory adds them); a one-layout row is the same code with one key.  The other rows use the scalar module's
own functions (:func:`projection.memory.stage_params`, ``recomputed_layers``, ...).  The rows of
all candidates with the same ``pp`` are combined in numpy with the same IEEE operations in the same
order as :func:`projection.memory.stage_memory` and ``StageMemory.total_bytes`` (adding an exact
0.0 for a term the scalar path skips), so the results are identical, not close
(tests/projection/test_memory_batch.py checks every candidate of several searches and random layouts).
Every config family the scalar model knows is covered; none is routed elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from projection.activations import embedding_activation_bytes, output_activation_bytes
from projection.compute import fp8_transpose_free
from projection.device_profile import DeviceProfile
from projection.framework import memory_traits
from projection.hardware import HardwareSpec
from projection.layout import ParallelDims, chunk_layers, effective_schedule
from projection.memory_terms import (
    BF16_BYTES,
    GIB,
    StageMemory,
    _layer_tables_for,
    StageParams,
    _shards,
    _stage_layers,
    shard_sizes,
    states_bytes,
    activation_context,
    cuda_graph_buffer_bytes,
    gathered_layer_params,
    local_layer_params,
    loss_bytes_per_logit,
    moe_dispatch_buffer_bytes,
    stage_params,
    switch_buffer_bytes,
    usable_capacity_bytes,
)
from projection.model_spec import ModelSpec
from projection.params import layer_param_table
from projection.pipeline import peak_in_flight_closed_form
from projection.training_config import TrainingConfig


@dataclass(frozen=True, slots=True)
class PeakBatch:
    """Per candidate (aligned with the input): peak and static peak bytes per GPU, usable capacity bytes."""

    peak_bytes: np.ndarray
    static_peak_bytes: np.ndarray
    capacity_bytes: np.ndarray

    def stacked(self) -> np.ndarray:
        """(n, 3): peak, static peak and capacity bytes of every candidate."""
        return np.stack([self.peak_bytes, self.static_peak_bytes, self.capacity_bytes], axis=1)

    def headroom_fraction(self, i: int) -> float:
        """``MemoryResult.headroom_fraction`` of candidate ``i`` (same operations)."""
        return 1.0 - float(self.peak_bytes[i]) / float(self.capacity_bytes[i])


@dataclass(frozen=True, slots=True)
class _RankChunks:
    """The chunks of every pipeline rank of one (pp, vpp, split) as (pp, chunks) arrays: first layer, layer count,
    layers before the chunk in its stage; per rank the stage's layer count and whether it holds an MoE layer."""

    starts: np.ndarray
    lengths: np.ndarray
    positions: np.ndarray
    stage_layers: np.ndarray
    has_moe: np.ndarray
    order: np.ndarray          # every rank's layers, rank by rank
    offsets: np.ndarray        # where each rank with layers starts in ``order``
    holds: np.ndarray          # ranks with at least one layer

    @staticmethod
    def of(model: ModelSpec, pp: int, vpp: int, split: Any) -> _RankChunks:
        chunks = chunk_layers(model.num_layers, pp, vpp, split)   # every rank has vpp chunks
        shape = (pp, len(chunks[0]))
        lengths = np.array([len(c) for rank in chunks for c in rank], dtype=np.int64).reshape(shape)
        starts = np.array([c[0] if c else 0 for rank in chunks for c in rank], dtype=np.int64).reshape(shape)
        sizes = lengths.sum(axis=1)
        holds = sizes > 0
        order = np.array([layer for rank in chunks for c in rank for layer in c], dtype=np.int64)
        offsets = (np.cumsum(sizes) - sizes)[holds]
        has_moe = np.zeros(pp)
        if len(order) and model.is_moe:
            moe = np.array([bool(m) for m in model.moe_layers[:model.num_layers]], dtype=np.float64)
            has_moe[holds] = np.maximum.reduceat(moe[order], offsets)
        return _RankChunks(starts=starts, lengths=lengths, positions=np.cumsum(lengths, axis=1) - lengths,
                           stage_layers=sizes, has_moe=has_moe, order=order, offsets=offsets, holds=holds)

    def largest(self, per_layer: np.ndarray) -> np.ndarray:
        """Per rank, the largest ``per_layer`` value over its layers (0 for a rank without layers); ``per_layer``
        (layers,) or (m, layers) for m layouts at once."""
        out = np.zeros((*per_layer.shape[:-1], len(self.holds)))
        if len(self.order):
            out[..., self.holds] = np.maximum.reduceat(per_layer[..., self.order], self.offsets, axis=-1)
        return out


class MemoryBatcher:
    """Batch peak memory of one (model, hardware, profile); keeps its per-key rows between calls."""

    def __init__(self, model: ModelSpec, hardware: HardwareSpec, profile: DeviceProfile) -> None:
        self.model, self.hardware, self.profile = model, hardware, profile
        self.scale_up = hardware.scale_up_domain_gpus
        self._ids: dict[tuple[Any, ...], int] = {}   # key -> position in _store
        self._store: list[Any] = []
        self._ends_cache: dict[tuple[Any, ...], tuple[float, float]] = {}
        self._contexts: dict[Any, Any] = {}
        self._table_arrays: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}   # kept alive by the lru cache
        self._rank_chunks: dict[tuple[Any, ...], _RankChunks] = {}
        self._params: dict[tuple[Any, ...], np.ndarray] = {}   # (pp, vpp, split, tp, ep, etp) -> (5, pp) params

    # --- per-key rows (each computed once with the scalar module's functions) -------------------------------
    def _row(self, key: tuple[Any, ...], build: Any) -> int:
        """The id of a key's row (built on first use)."""
        row = self._ids.get(key)
        if row is None:
            row = self._ids[key] = len(self._store)
            self._store.append(build())
        return row

    def _gather(self, ids: np.ndarray) -> np.ndarray:
        """The rows of ``ids`` stacked (each distinct row copied once, then fancy-indexed)."""
        if len(ids) == 1:   # one layout (`stages`): its row, without numbering distinct ids (packed_keys stays unloaded)
            return self._store[int(ids[0])][None]
        distinct, inverse = self._distinct_rows(ids)
        return distinct[inverse]

    def _distinct_rows(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the distinct rows of ``ids`` stacked, ascending by id; each id's position among them)."""
        first, inverse = _packed_ids([ids])
        return np.stack([self._store[k] for k in ids[first].tolist()]), inverse

    def _states_row(self, config: TrainingConfig, dims: ParallelDims) -> int:
        """(4, pp): weights, gradients, optimizer, FP8 copies of every rank (:meth:`_states_rows` of one layout)."""
        key = _states_key(dims.pp, dims.vpp, dims.split, dims.tp, dims.ep, dims.etp, dims.dp, dims.cp, config.zero,
                          config.fsdp_size, config.precision, config)
        row = self._ids.get(key)
        if row is None:
            dense, expert = _shards(config, dims)
            params = self._stage_params((dims.pp, dims.vpp, dims.split, dims.tp, dims.ep, dims.etp))
            row = self._states_rows([key], dims.pp, params[None], np.array([config.zero]), np.array([dense]),
                                    np.array([expert]), config)[0]
        return row

    def _states_rows(self, keys: list[tuple[Any, ...]], pp: int, params: np.ndarray, zero: np.ndarray,
                     dense: np.ndarray, expert: np.ndarray, config: TrainingConfig) -> list[int]:
        """Store the states rows of ``keys`` (layouts of depth ``pp`` that share ``config``'s precision, fine-tuning,
        framework and gradient dtype) and return their ids: :func:`projection.memory_terms.states_bytes` of every
        rank of every layout at once.  ``params``: (m, 5, pp) :data:`_PARAM_FIELDS` per rank; ``zero``, ``dense``,
        ``expert``: (m,) ZeRO level and shard sizes."""
        stage = StageParams(**{name: params[:, k, :] for k, name in enumerate(_PARAM_FIELDS)})
        terms = states_bytes(stage, zero[:, None], dense[:, None], expert[:, None], config,
                             memory_traits(config.framework), transpose_free=fp8_transpose_free(self.hardware))
        out = np.empty((len(keys), 4, pp))
        for k, term in enumerate(terms):
            out[:, k, :] = term
        ids = []
        for key, row in zip(keys, out, strict=True):
            ids.append(self._row(key, lambda row=row: row))
        return ids

    def _stage_params(self, key: tuple[Any, ...]) -> np.ndarray:
        """(5, pp): :func:`projection.memory_terms.stage_params` (:data:`_PARAM_FIELDS`) of every rank of a
        (pp, vpp, split, tp, ep, etp)."""
        table = self._params.get(key)
        if table is None:
            pp, vpp, split, tp, ep, etp = key
            model = self.model
            ranks = [stage_params(model, _stage_layers(model.num_layers, pp, vpp, rank, split), tp, ep, etp, pp,
                                  rank == 0, rank == pp - 1) for rank in range(pp)]
            table = self._params[key] = np.array([[getattr(p, name) for p in ranks] for name in _PARAM_FIELDS],
                                                 dtype=np.float64).reshape(len(_PARAM_FIELDS), pp)
        return table

    def states_rows_of(self, candidates: Any, reps: np.ndarray) -> np.ndarray:
        """:meth:`_states_row` of the rows ``reps`` of a :class:`tools.candidate_columns.CandidateColumns`, read off
        the columns (a typed config only per precision): the rows not stored yet built in one
        :meth:`_states_rows` call per (pp, precision)."""
        c, template = candidates.columns, candidates.template
        cols = {name: c[name][reps] for name in _ROW_KEYS[0]}
        values = {name: col.tolist() for name, col in cols.items()}
        splits, precisions = candidates.splits, candidates.precisions
        keys = [_states_key(pp, vpp, splits[s], tp, ep, etp, dp, cp, zero, fsdp or None, precisions[p], template)
                for pp, vpp, s, tp, ep, etp, dp, cp, zero, fsdp, p in zip(
                    *(values[name] for name in ("pp", "vpp", "split", "tp", "ep", "etp", "dp", "cp", "zero", "fsdp",
                                                "precision")), strict=True)]
        ids = np.array([self._ids.get(key, -1) for key in keys], dtype=np.int64)
        missing = np.flatnonzero(ids < 0)
        if not len(missing):
            return ids
        # expert-DP group size (projection.layout.ParallelDims.expert_dp): once per distinct (tp, cp, dp, ep, etp)
        first, inverse = _packed_ids([cols[name][missing] for name in ("tp", "cp", "dp", "ep", "etp")])
        expert_dp = np.array([candidates.dims(int(reps[missing[j]])).expert_dp for j in first.tolist()],
                             dtype=np.int64)[inverse]
        dense, expert = shard_sizes(cols["fsdp"][missing].astype(np.int64), cols["dp"][missing].astype(np.int64),
                                    cols["cp"][missing].astype(np.int64), expert_dp)
        group_first, group = _packed_ids([cols["pp"][missing], cols["precision"][missing]])
        for g, at in enumerate(group_first.tolist()):
            mine = np.flatnonzero(group == g)
            pp = values["pp"][missing[at]]
            params = np.stack([self._stage_params((pp, values["vpp"][j], splits[values["split"][j]], values["tp"][j],
                                                   values["ep"][j], values["etp"][j]))
                               for j in missing[mine].tolist()])
            config = candidates.config(int(reps[missing[at]]), keep=False)
            ids[missing[mine]] = self._states_rows([keys[j] for j in missing[mine].tolist()], pp, params,
                                                   cols["zero"][missing[mine]].astype(np.int64), dense[mine],
                                                   expert[mine], config)
        return ids

    def _activation_row(self, config: TrainingConfig, dims: ParallelDims, ctx: Any) -> int:
        """(4, pp): saved bytes of all chunks, chunk count, recompute rebuild, has-MoE of every rank
        (:meth:`_activation_rows` of one layout)."""
        key = _activation_key(ctx, dims.pp, dims.vpp, dims.split, config.recompute, config.recompute_num_layers)
        row = self._ids.get(key)
        if row is None:
            row = self._activation_rows([key], [ctx])[0]
        return row

    def _activation_rows(self, keys: list[tuple[Any, ...]], contexts: list[Any]) -> list[int]:
        """Store the activation rows of ``keys`` (:func:`_activation_key`s of one (pp, vpp, split); ``contexts``:
        their activation contexts) and return their ids: every layout at once, chunk by chunk as
        :func:`projection.memory.stage_memory` adds them."""
        _, pp, vpp, split = keys[0][:4]
        ranks = self._ranks((pp, vpp, split))
        tables = [_layer_tables_for(self.model, ctx) for ctx in contexts]
        arrays = [self._tables(t) for t in tables]
        prefix = np.stack([a[0] for a in arrays])                              # (m, layers + 1)
        full_input = np.array([t.full_input for t in tables])
        recompute = np.array([key[4] for key in keys])
        is_full = (recompute == "full")[:, None, None]
        # recomputed_layers: all layers of a chunk, or Megatron's 'block' method (the first layers of the stage)
        budget = np.array([ranks.stage_layers.max() if key[5] is None else key[5] for key in keys])
        budget = np.minimum(budget[:, None], ranks.stage_layers[None, :])[:, :, None]
        full = np.where(is_full, np.maximum(0, np.minimum(ranks.lengths[None], budget - ranks.positions[None])), 0)
        starts, at = ranks.starts[None], np.arange(len(keys))[:, None, None]
        kept = prefix[at, starts + ranks.lengths[None]] - prefix[at, starts + full]
        per_chunk = kept + full * full_input[:, None, None]
        out = np.zeros((len(keys), 4, pp))
        out[:, 0] = np.cumsum(per_chunk, axis=2)[:, :, -1]   # an empty chunk adds 0.0: cumsum adds in order
        out[:, 1] = ranks.starts.shape[1]
        rebuilt = np.stack([a[1] if r == "full" else a[2] for a, r in zip(arrays, recompute.tolist(), strict=True)])
        out[:, 2] = np.where((recompute != "none")[:, None], ranks.largest(rebuilt), 0.0)
        out[:, 3] = ranks.has_moe
        return [self._row(key, lambda row=row: row) for key, row in zip(keys, out, strict=True)]

    def activation_rows_of(self, candidates: Any, reps: np.ndarray) -> np.ndarray:
        """:meth:`_activation_row` of the rows ``reps`` of a :class:`tools.candidate_columns.CandidateColumns`, read
        off the columns (a typed config only per activation context): the rows not stored yet built in one
        :meth:`_activation_rows` call per (pp, vpp, split)."""
        c = candidates.columns
        first, context_of = _packed_ids([c[name][reps] for name in _SCALAR_KEYS[0][0]])
        contexts = [self._context(candidates.config(int(reps[j]), keep=False)) for j in first.tolist()]
        values = {name: c[name][reps].tolist() for name in ("pp", "vpp", "split", "recompute")}
        splits, variants = candidates.splits, candidates.recomputes
        keys = [_activation_key(contexts[k], pp, vpp, splits[s], variants[r][0], variants[r][1])
                for k, pp, vpp, s, r in zip(context_of.tolist(), values["pp"], values["vpp"], values["split"],
                                            values["recompute"], strict=True)]
        ids = np.array([self._ids.get(key, -1) for key in keys], dtype=np.int64)
        missing = np.flatnonzero(ids < 0)
        if not len(missing):
            return ids
        group_first, group = _packed_ids([c[name][reps[missing]] for name in ("pp", "vpp", "split")])
        for g in range(len(group_first)):
            mine = missing[group == g].tolist()
            ids[mine] = self._activation_rows([keys[j] for j in mine],
                                              [contexts[k] for k in context_of[mine].tolist()])
        return ids

    def _tables(self, tables: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(kept prefix sums, kept, rebuilt) bytes per layer of one activation context, as arrays."""
        arrays = self._table_arrays.get(id(tables))
        if arrays is None:
            arrays = self._table_arrays[id(tables)] = (np.asarray(tables.kept_prefix, dtype=np.float64),
                                                       np.asarray(tables.kept, dtype=np.float64),
                                                       np.asarray(tables.rebuilt, dtype=np.float64))
        return arrays

    def _ranks(self, key: tuple[int, int, Any]) -> _RankChunks:
        """The chunks of every pipeline rank of a (pp, vpp, split), as arrays."""
        ranks = self._rank_chunks.get(key)
        if ranks is None:
            ranks = self._rank_chunks[key] = _RankChunks.of(self.model, *key)
        return ranks

    def _in_flight_row(self, config: TrainingConfig, dims: ParallelDims) -> int:
        schedule = effective_schedule(config)
        key = ("F", schedule, dims.pp, dims.vpp, dims.num_microbatches)
        return self._row(key, lambda: np.array(
            [peak_in_flight_closed_form(schedule, dims.pp, dims.vpp, dims.num_microbatches, rank)
             for rank in range(dims.pp)], dtype=np.float64))

    def _ends(self, config: TrainingConfig, ctx: Any) -> tuple[float, float]:
        """(embedding output bytes of the first rank, logits + loss bytes of the last)."""
        key = ("E", id(ctx), config.framework)
        ends = self._ends_cache.get(key)
        if ends is None:
            ends = self._ends_cache[key] = self._build_ends(config, ctx)
        return ends

    def _build_ends(self, config: TrainingConfig, ctx: Any) -> tuple[float, float]:
        return (embedding_activation_bytes(self.model, ctx),
                output_activation_bytes(self.model, ctx, loss_bytes_per_logit(config.framework)))

    def _zeros_row(self, pp: int) -> int:
        return self._row(("0", pp), lambda: np.zeros(pp))

    def _gather_row(self, config: TrainingConfig, dims: ParallelDims) -> int:
        """ZeRO-3 gathered weights (current + prefetched layer) of every rank (zeros below ZeRO 3)."""
        if not _gathers_weights(config.zero):
            return self._zeros_row(dims.pp)
        dense_shard, expert_shard = _shards(config, dims)
        key = ("Z", dims.pp, dims.vpp, dims.split, dims.tp, dims.ep, dims.etp, dense_shard, expert_shard)
        return self._row(key, lambda: 2 * BF16_BYTES * self._largest_layer_per_rank(
            dims, lambda p: gathered_layer_params(p, dims, dense_shard, expert_shard)))

    def _lora_row(self, config: TrainingConfig, dims: ParallelDims) -> int:
        """FP8 transpose of the running frozen LoRA layer of every rank (zeros without FP8 LoRA)."""
        if not _transposes_lora(config.finetune, config.is_low_precision):
            return self._zeros_row(dims.pp)
        key = ("L", dims.pp, dims.vpp, dims.split, dims.tp, dims.ep, dims.etp)
        return self._row(key, lambda: self._largest_layer_per_rank(dims, lambda p: local_layer_params(p, dims)))

    def _largest_layer_per_rank(self, dims: ParallelDims, value: Callable[[Any], float]) -> np.ndarray:
        """Per pipeline rank, the largest ``value`` (of a layer's parameter counts) over the rank's layers; 0 for a
        rank without layers."""
        table = layer_param_table(self.model)
        out = np.zeros(dims.pp)
        for rank in range(dims.pp):
            layers = _stage_layers(self.model.num_layers, dims.pp, dims.vpp, rank, dims.split)
            if layers:
                out[rank] = max(value(table[layer]) for layer in layers)
        return out

    # --- the batch ----------------------------------------------------------------------------------------
    def _context(self, config: TrainingConfig) -> Any:
        """The layout's activation context, one instance per distinct context (cheap key compares)."""
        ctx = activation_context(self.model, config)
        return self._contexts.setdefault(ctx, ctx)

    def _scalars(self, config: TrainingConfig, dims: ParallelDims) -> tuple[float, ...]:
        """A layout's per-layout scalars: micro-batches, vpp, embedding, loss, MoE buffer, workspace, fragmentation,
        usable capacity, CUDA-graph hidden-state bytes, expert-overlap bytes (memory_terms.switch_buffer_bytes)."""
        ctx = self._context(config)
        emb, loss = self._ends(config, ctx)
        caching = memory_traits(config.framework).caching_allocator
        profile = self.profile
        return (dims.num_microbatches, dims.vpp, emb, loss,
                moe_dispatch_buffer_bytes(self.model, config, dims, True, self.scale_up),
                profile.memory_overhead_gib * GIB if caching else 0.0,
                profile.memory_fragmentation if caching else 0.0, usable_capacity_bytes(self.hardware, config),
                *switch_buffer_bytes(self.model, config, ctx))

    def _row_ids(self, config: TrainingConfig, dims: ParallelDims) -> list[int]:
        """A layout's row ids: states, activations, in flight, ZeRO-3 gather, LoRA transpose."""
        return [self._states_row(config, dims), self._activation_row(config, dims, self._context(config)),
                self._in_flight_row(config, dims), self._gather_row(config, dims), self._lora_row(config, dims)]

    def peaks(self, configs: Sequence[TrainingConfig], dims: Sequence[ParallelDims]) -> PeakBatch:
        """Peak and static peak bytes of every layout (``dims``: :func:`projection.layout.parallel_dims` of each)."""
        ids = np.array([self._row_ids(c, d) for c, d in zip(configs, dims, strict=True)],
                       dtype=np.int64).reshape(-1, 5)
        cols = np.array([self._scalars(c, d) for c, d in zip(configs, dims, strict=True)],
                        dtype=np.float64).reshape(-1, _SCALARS)
        return self._combine(np.array([d.pp for d in dims], dtype=np.int64), ids, cols)

    def peaks_of_rows(self, candidates: Any, rows: np.ndarray, memo: dict[Any, Any] | None = None) -> PeakBatch:
        """:meth:`peaks` of the rows ``rows`` of a :class:`tools.candidate_columns.CandidateColumns`, equal bit for
        bit, read off the columns: each term is built once per distinct key of the columns it depends on (from
        the first layout with that key), then gathered for every row.  ``memo``: where a caller that screens the
        same columns in pieces keeps the per-layout terms built (by term and key), so a piece builds only the keys
        new to it (empty at first; one per columns object)."""
        ids = np.empty((len(rows), 5), dtype=np.int64)
        cols = np.empty((len(rows), _SCALARS), dtype=np.float64)
        c = candidates.columns
        read = {name: c[name][rows] for name in _COLUMNS_READ}   # each column read once for every term's key

        def key_ids(names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
            first, inverse = _packed_ids([read[name] for name in names], names)
            return rows[first], inverse

        cols[:, 0] = read["microbatches"]
        cols[:, 1] = read["vpp"]
        for k, rows_of in enumerate((self.states_rows_of, self.activation_rows_of)):   # every layout's at once
            reps, inverse = key_ids(_ROW_KEYS[k])
            ids[:, k] = rows_of(candidates, reps)[inverse]
        builders = (self._in_flight_row, self._gather_row, self._lora_row)
        for k, (names, build) in enumerate(zip(_ROW_KEYS[2:], builders, strict=True), start=2):
            reps, inverse = key_ids(names)
            values = np.empty(len(reps), dtype=np.int64)
            built = np.ones(len(reps), dtype=bool)
            if k >= 3:      # ZeRO-3 gathers, FP8 LoRA transposes: zero rows (of the depth) where the layout has none
                built = (_gathers_weights(c["zero"][reps]) if k == 3
                         else _transposes_lora(candidates.template.finetune, c["low_precision"][reps] == 1))
                depth = c["pp"][reps]
                for pp in np.unique(depth[~built]).tolist():
                    values[~built & (depth == pp)] = self._zeros_row(pp)
            where = np.flatnonzero(built)
            values[where] = self._memoised(memo, k, names, c, reps[where],
                                           lambda r, build=build: build(candidates.config(r, keep=False),
                                                                        candidates.dims(r)))
            ids[:, k] = values[inverse]
        for names, at in _SCALAR_KEYS:
            reps, inverse = key_ids(names)
            values = np.array(self._memoised(memo, names, names, c, reps,
                                             lambda r: self._scalars(candidates.config(r, keep=False),
                                                                     candidates.dims(r))),
                              dtype=np.float64).reshape(-1, _SCALARS)
            cols[:, at] = values[:, at][inverse]
        return self._combine(c["pp"][rows], ids, cols)

    @staticmethod
    def _memoised(memo: dict[Any, Any] | None, term: Any, names: Sequence[str], columns: dict[str, np.ndarray],
                  reps: np.ndarray, build: Callable[[int], Any]) -> list[Any]:
        """``build(rep)`` of each of ``reps`` (the first rows of distinct keys of the columns ``names``), taken from
        ``memo`` where a rep with the same key of ``term`` was built before."""
        if memo is None:
            return [build(r) for r in reps.tolist()]
        out = []
        for r, key in zip(reps.tolist(), zip(*(columns[name][reps].tolist() for name in names)), strict=True):
            value = memo.get((term, key))
            if value is None:
                value = memo[(term, key)] = build(r)
            out.append(value)
        return out

    def stages(self, config: TrainingConfig, dims: ParallelDims) -> tuple[StageMemory, ...]:
        """Every pipeline rank's :class:`projection.memory.StageMemory` of one layout: :meth:`peaks`'s arithmetic on
        one layout, every term kept (the path :func:`projection.memory.project_memory` runs; equal, field by field,
        to :func:`projection.memory.stage_memory` of each rank: tests/projection/test_memory_every_rank.py)."""
        ids = self._row_ids(config, dims)
        states = self._store[ids[0]]
        scalars = self._scalars(config, dims)
        workspace = scalars[5]
        pp = dims.pp
        activations, buffers, allocator, in_flight = (
            term[0] for term in self._rank_bytes(pp, np.array([ids], dtype=np.int64),
                                                 np.array([scalars], dtype=np.float64)))
        layers = self._ranks((dims.pp, dims.vpp, dims.split)).stage_layers.tolist()
        columns = zip(range(pp), layers, *(row.tolist() for row in states), activations.tolist(), buffers.tolist(),
                      allocator.tolist(), (in_flight / scalars[1]).tolist(), strict=True)
        return tuple(StageMemory(rank=rank, layers=n, weights_bytes=w, gradients_bytes=g, optimizer_bytes=o,
                                 fp8_copies_bytes=f, activations_bytes=a, transient_bytes=b, workspace_bytes=workspace,
                                 allocator_bytes=al, microbatches_in_flight=mif)
                     for rank, n, w, g, o, f, a, b, al, mif in columns)

    def _combine(self, pp_of: np.ndarray, ids: np.ndarray, cols: np.ndarray) -> PeakBatch:
        """Peaks from per-layout row ids (n, 5) and scalars (n, _SCALARS): stage_memory's arithmetic, layouts of one pp at
        a time, the same operations in the same order."""
        n = len(pp_of)
        peak, static, capacity = np.empty(n), np.empty(n), np.empty(n)
        capacity[:] = cols[:, 7]
        for pp in np.unique(pp_of).tolist():
            for index in _chunks(np.flatnonzero(pp_of == pp), pp):
                self._combine_one(pp, index, ids, cols, peak, static)
        return PeakBatch(peak_bytes=peak, static_peak_bytes=static, capacity_bytes=capacity)

    def _rank_bytes(self, pp: int, ids: np.ndarray, col: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(activations, transient buffers, allocator, micro-batches in flight), bytes per layout and rank (m, pp), of
        layouts of pipeline depth ``pp`` with row ids ``ids`` (m, 5) and scalars ``col`` (m, _SCALARS): stage_memory's
        arithmetic, the same operations in the same order; the one form for :meth:`stages` (one layout) and
        :meth:`_combine_one` (a batch)."""
        m = len(ids)
        acts, in_flight = self._gather(ids[:, 1]), self._gather(ids[:, 2])
        activations = in_flight * acts[:, 0] / acts[:, 1]
        activations[:, 0] = activations[:, 0] + np.minimum(in_flight[:, 0], col[:, 0]) * col[:, 2] / col[:, 1]
        buffers = np.zeros((m, pp))
        buffers[:, pp - 1] = buffers[:, pp - 1] + col[:, 3]
        buffers = buffers + acts[:, 2]
        zeros = self._ids.get(("0", pp))
        for k in (3, 4):   # ZeRO-3 gathers, LoRA transposes (adding their zeros row would change no bit: skipped)
            if zeros is None or (ids[:, k] != zeros).any():
                buffers = buffers + self._gather(ids[:, k])
        moe = acts[:, 3] > 0
        buffers = buffers + np.where(moe, col[:, 4:5], 0.0)
        if col[:, 8].any():   # 0 x ... without graphs
            buffers = buffers + cuda_graph_buffer_bytes(col[:, 8:9], in_flight)
        if col[:, 9].any():
            buffers = buffers + np.where(moe, col[:, 9:10], 0.0)
        allocator = col[:, 6:7] * (activations + buffers)
        return activations, buffers, allocator, in_flight

    def _combine_one(self, pp: int, index: np.ndarray, ids: np.ndarray, cols: np.ndarray, peak: np.ndarray,
                     static: np.ndarray) -> None:
        """:meth:`_combine` of the layouts ``index`` (all with pipeline depth ``pp``) into ``peak`` and ``static``."""
        m = len(index)
        states, states_at = self._distinct_rows(ids[index, 0])
        held = (states[:, 0] + states[:, 1] + states[:, 2] + states[:, 3])[states_at]   # w + g + o + f, per rank
        col = cols[index]
        activations, buffers, allocator, _ = self._rank_bytes(pp, ids[index], col)
        workspace = np.broadcast_to(col[:, 5:6], (m, pp))
        total = held + activations + buffers + workspace + allocator
        fixed = held + workspace
        peak[index] = total.max(axis=1)
        static[index] = fixed.max(axis=1)


_PARAM_FIELDS = ("dense", "experts", "gemm_dense", "gemm_modules", "adapters")   # StageParams, in its order


def _gathers_weights(zero: Any) -> Any:
    """Whether a layout gathers sharded weights layer by layer (ZeRO 3 / FSDP); an int or an array of them."""
    return zero >= 3


def _transposes_lora(finetune: str | None, low_precision: Any) -> Any:
    """Whether a layout makes the FP8 transpose of its running frozen LoRA layer (LoRA with an FP8 recipe);
    ``low_precision`` a bool or a bool array."""
    return (finetune == "lora") & low_precision


def _activation_key(ctx: Any, pp: int, vpp: int, split: Any, recompute: str, recompute_num_layers: int | None
                    ) -> tuple[Any, ...]:
    """The key of a layout's activation row: its activation context, pipeline split and recompute variant."""
    return ("A", pp, vpp, split, recompute, recompute_num_layers if recompute == "full" else None, id(ctx))


def _states_key(pp: int, vpp: int, split: Any, tp: int, ep: int, etp: int, dp: int, cp: int, zero: int,
                fsdp_size: int | None, precision: str, job: TrainingConfig) -> tuple[Any, ...]:
    """The key of a layout's states row: its sharding, precision and the job's fine-tuning, framework and
    gradient dtype (``job``: any layout of the job)."""
    return ("S", pp, vpp, split, tp, ep, etp, dp, cp, zero, fsdp_size, precision, job.finetune, job.framework,
            job.grad_reduce_in_fp32)


def _packed_ids(values: Sequence[np.ndarray], names: Sequence[str] = ()) -> tuple[np.ndarray, np.ndarray]:
    """:func:`projection.packed_keys.packed_ids`, imported where first used: the one-layout memory path
    (``projtune project``) never runs it (tests/cli/test_startup.py pins that command's modules)."""
    from projection.packed_keys import packed_ids

    return packed_ids(values, names)


_SCALARS = 10              # per-layout scalars (MemoryBatcher._scalars)
_CHUNK_ELEMENTS = 1 << 19   # (layout, rank) cells per combine step: bounds the temporaries (~4 MiB each)


def _chunks(index: np.ndarray, pp: int) -> list[np.ndarray]:
    """``index`` in pieces of at most ``_CHUNK_ELEMENTS // pp`` layouts."""
    step = max(1, _CHUNK_ELEMENTS // pp)
    return [index[k:k + step] for k in range(0, len(index), step)]


_BATCHER_CACHE: dict[tuple[int, int, int], tuple[tuple[Any, Any, Any], MemoryBatcher]] = {}
_MAX_BATCHERS = 16          # (model, hardware, profile) triples kept
_MAX_ROWS = 100_000         # per-key rows a kept batcher may hold before it starts afresh


def batcher_for(model: ModelSpec, hardware: HardwareSpec, profile: DeviceProfile) -> MemoryBatcher:
    """The shared batcher of a (model, hardware, profile): its rows serve every later layout of the same job."""
    key = (id(model), id(hardware), id(profile))
    hit = _BATCHER_CACHE.get(key)
    if hit is not None and hit[0][0] is model and hit[0][1] is hardware and hit[0][2] is profile \
            and len(hit[1]._store) < _MAX_ROWS:
        return hit[1]
    if len(_BATCHER_CACHE) >= _MAX_BATCHERS:
        _BATCHER_CACHE.pop(next(iter(_BATCHER_CACHE)))
    batcher = MemoryBatcher(model, hardware, profile)
    _BATCHER_CACHE[key] = ((model, hardware, profile), batcher)
    return batcher


# The columns (tools/candidate_columns.py) each term of a layout depends on (the job's fields are the same for
# every row of a search): per-rank rows (states: the sharding; activations: the activation context, the split and
# the recompute variant; in flight: schedule, depth, micro-batches; ZeRO-3 gathers, LoRA transposes: the sharding),
# then the per-layout scalars (embedding, loss, workspace, fragmentation, capacity: the activation context; the
# MoE dispatch buffer: dispatcher, expert and context sharding, micro-batch).
_ROW_KEYS: tuple[tuple[str, ...], ...] = (
    ("tp", "pp", "vpp", "split", "cp", "ep", "etp", "dp", "zero", "fsdp", "precision"),
    ("cp", "mbs", "tp", "low_precision", "recompute", "pp", "vpp", "split"),
    ("schedule", "pp", "vpp", "microbatches"),
    ("zero", "fsdp", "dp", "cp", "tp", "pp", "vpp", "split", "ep", "etp"),
    ("precision", "pp", "vpp", "split", "tp", "ep", "etp"),
)
_SCALAR_KEYS: tuple[tuple[tuple[str, ...], list[int]], ...] = (
    (("cp", "mbs", "tp", "low_precision", "recompute"), [2, 3, 5, 6, 7]),
    (("dispatcher", "ep", "etp", "mbs", "cp"), [4]),
    (("cp", "mbs", "tp", "ep", "switches"), [8, 9]),
)
_COLUMNS_READ = tuple(sorted({name for names in _ROW_KEYS for name in names}
                             | {name for names, _ in _SCALAR_KEYS for name in names} | {"microbatches", "vpp"}))
