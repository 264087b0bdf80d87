"""The search loop: memory screen, projection and pruning over recompute siblings, serial or on 2 processes.

One process unless the space is large and a core is idle (:func:`default_workers`).

Candidates that differ only in recompute (none < selective < full on half the layers < full)
form a *group*.  Two engine facts make pruning safe:
- with ZeRO 0/1, more recompute never makes a step faster (it only adds forward work to
  every pipeline op), so a projected sibling with less recompute bounds the throughput of
  the rest of the group from above (with a 1% margin for float and schedule effects).  Not
  with FSDP (ZeRO 3): there the engine hides parameter gathers under the whole step, so
  more compute can hide more communication (up to ~4% faster seen), and those groups are
  never pruned;
- recompute, micro-batch size and schedule do not change weights, gradients, optimizer
  states or FP8 copies, so those plus the profile's fixed memory overhead bound the group's
  headroom from above; when they alone do not fit, no layout with the same sharding (tp, pp,
  vpp, cp, ep, etp, dp, zero, precision) fits, whatever its mbs, schedule or recompute.
Phase 1 screens each group from the least recompute up and queues the first variant that
fits (its *lead*) with an upper bound of its throughput from the engine's iteration-time lower
bound (:func:`projection.engine.iteration_time_lower_bound`, computed for every lead of the search in one
batch with the same bits by :meth:`Evaluator.throughput_bounds`: numpy over the leads,
:mod:`projection.busiest_work`); leads are then projected from
the highest bound down, and a lead whose bound is already dominated is pruned.  Phase 2 visits
the remaining variants from the most memory headroom down (:meth:`Evaluator.phase2`): one whose
throughput bound (the smaller of its lead's throughput and its own engine bound; under FSDP its own engine
bound alone) is below the k-th best
*and* that a projected point dominates (more throughput and more headroom) can be neither in the
top-k nor on the Pareto front, so it is counted as pruned, unprojected; the bounds grow with every
projection, so the front is built from its roomy end and the decisions are the same on every path.
tests/tools/test_search_core.py checks both facts and that pruning changes no result.

The memory screen reads batch peaks (:func:`screen_memories`, :mod:`projection.memory_batch`: numpy over
the candidates, bit-for-bit the scalar model's); only leads that are projected get the full scalar
memory result, checked equal to the batch peak.
"""

from __future__ import annotations

import gc
import heapq
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np

from projection import engine, fast_paths, module_heap
from projection.busiest_work import LayerWork, StageLayers, makespan_floor, stage_layers
from projection.engine import Projection, iteration_time_lower_bound, project
from projection.framework import framework_profile
from projection.layout import parallel_dims
from projection.memory import GIB, MemoryResult, project_memory
from projection.memory_batch import MemoryBatcher, PeakBatch, batcher_for
from projection.memory_verdict import SHIPPED_MARGINS, could_pass, screen_passes
from projection.switches import resolve_switches
from projection.training_config import (
    MICROBATCH_WORK,
    RECOMPUTE_KNOB,
    STATIC_MEMORY,
    TrainingConfig,
    fields_with,
    fields_without,
)
from projection.vocabulary import RECOMPUTE_LEVEL
from projection.workload import selective_recompute_modules
from tools.anchoring import anchored, slowest_factor
from tools.candidate_columns import SHARDING, CandidateColumns, GroupArrays, packed_ids

BOUND_MARGIN = 0.01              # a sibling bound must clear the k-th best by this much to prune
PARALLEL_MIN_CANDIDATES = 20000  # below this a second process costs more than it saves (a search of < ~1 s)
IDLE_CORES_FOR_WORKER = 1.5      # idle cores (CPUs minus load average, this search included) to add a worker
_TASK_GROUPS = 64                # groups per task handed to a worker (progress granularity)
_SERIAL_GROUPS = 8192            # groups per phase-1 call in one process (numpy rounds; progress, deadline checks)
_REFRESH_EVERY = 32              # projections between refreshes of the top-k / Pareto bounds
_OWN_BOUND_BATCH = 16384         # phase-2 variants looked ahead for their own engine bounds in one batch
# FP8 recipes the engine models identically (same peak, efficiency and byte widths): one evaluation serves all.
# Empty since issue 11: the recipes' casts move different bytes (projection/workload.py CAST_BYTES_PER_ELEMENT).
ENGINE_ALIKE_PRECISIONS: frozenset[str] = frozenset()
# The keys below derive from the field classification next to the model (projection/training_config.py
# FIELD_EFFECTS), so a new config field cannot silently drop out of them.
# What a recompute group shares: every field but the recompute knobs (the schedule in effect, not pp_schedule) and
# the run-time switches the search chooses per layout (tools/switch_rules.py): CUDA graphs only without recompute,
# the expert overlap not with full recompute, so a sibling with less recompute has at least the switches of one with
# more, and its throughput still bounds theirs from above (every switch is never slower).
SEARCHED_SWITCHES = ("comm_overlap", "cuda_graphs")
_GROUP_FIELDS = tuple(name for name in fields_without(RECOMPUTE_KNOB) if name not in SEARCHED_SWITCHES)
# What the static memory of a layout depends on (weights, gradients, optimizer, FP8 copies, workspace, capacity).
_SHARDING_FIELDS = fields_with(STATIC_MEMORY)
# What the per-micro-batch stage times read (projection/engine.py _stage_times, workload): not dp, gbs, ZeRO, FSDP.
_WORK_FIELDS = fields_with(MICROBATCH_WORK)
# ... split in two (projection/busiest_work.py): what places layers on ranks and picks the fully recomputed ones
# (the pipeline's fields), and what the per-layer terms read: the rest, with recompute as what the switches and the
# selective terms read of it (full or not, the selective modules), and whether PP runs without VPP (with full
# recompute, it keeps the framework's default EP overlap off: projection/switches.py ep_overlap_blockers)
_PIPELINE_FIELDS = ("pp", "vpp", "pp_first_stage_layers", "pp_last_stage_layers", "pp_layout", "pp_schedule",
                    "recompute", "recompute_num_layers")
_LAYER_WORK_FIELDS = tuple(name for name in _WORK_FIELDS if name not in _PIPELINE_FIELDS + ("recompute_modules",))
# the same keys on the columns (tools/candidate_columns.py; sequence parallelism follows tp there), and what the
# optimizer step reads (engine._optimizer_s)
_PIPELINE_COLUMNS = ("pp", "vpp", "split", "schedule", "recompute")
_LAYER_WORK_COLUMNS = ("mbs", "tp", "cp", "ep", "etp", "precision", "dispatcher", "switches")
_OPTIMIZER_COLUMNS = ("tp", "pp", "cp", "dp", "ep", "etp", "zero", "fsdp")
# what the ZeRO-3 DP floor reads (projection/engine.py fsdp_exposed_floor: the DP collectives' sizes and groups,
# their dtype, the switches' overlap and gradient bytes, full recompute's re-gathers), on the columns and the configs
_FSDP_COLUMNS = ("tp", "pp", "cp", "dp", "ep", "etp", "fsdp", "precision", "switches")
_FSDP_FIELDS = ("tp", "pp", "cp", "dp", "ep", "etp", "zero", "fsdp_size", "precision", "comm_overlap",
                "grad_reduce_in_fp32", "finetune", "framework")


def _recompute_terms(recompute: str, modules: tuple[str, ...]) -> tuple[bool, tuple[str, ...]]:
    """What the per-layer terms read of a recompute setting: full or not, and the selective modules."""
    return recompute == "full", tuple(modules) if recompute == "selective" else ()


def _recompute_code(codes: dict[tuple[str, ...], int], recompute: str, modules: tuple[str, ...]) -> int:
    """An integer for a recompute setting: in its lowest bit, full recompute or not; above, a code of the selective
    modules (what the per-layer terms read of it, :func:`_recompute_terms`)."""
    full, selective = _recompute_terms(recompute, modules)
    return codes.setdefault(selective, len(codes)) << 1 | full


def _layer_work_values(config: TrainingConfig) -> tuple[Any, ...]:
    return (*_layer_work_fields(config), _recompute_terms(config.recompute, config.recompute_modules),
            config.pp > 1 and config.vpp == 1)


# attrgetter builds each key as one C-level tuple (the keys are read for every candidate)
_group_values = attrgetter(*("schedule" if name == "pp_schedule" else name for name in _GROUP_FIELDS))
_sharding_values = attrgetter(*_SHARDING_FIELDS)
_pipeline_values = attrgetter(*_PIPELINE_FIELDS)
_layer_work_fields = attrgetter(*_LAYER_WORK_FIELDS)
_optimizer_values = attrgetter("tp", "pp", "cp", "dp", "ep", "etp", "zero", "fsdp_size")
_fsdp_fields = attrgetter(*_FSDP_FIELDS)


def _fsdp_values(config: TrainingConfig) -> tuple[Any, ...]:
    return _fsdp_fields(config), config.recompute == "full"
_PRECISION_AT = _SHARDING_FIELDS.index("precision")
_SCREEN_ROWS = 1 << 17           # rows of the columns per batch-screen call (~40 MiB of temporaries)
_HEAD_LEADS_PER_K = 4            # leads per top-k slot projected serially before the rest is split


@dataclass(frozen=True, slots=True)
class Outcome:
    """A projected candidate, compactly: its index in the candidate list, throughput and headroom."""

    index: int
    tokens_per_s_per_gpu: float
    headroom_fraction: float


@dataclass(slots=True, kw_only=True)
class Leads:
    """Group leads waiting to be projected, as arrays (one entry per lead): the first variant of each group that
    fits memory."""

    group: np.ndarray            # the group's id
    position: np.ndarray         # the lead's place in its group (0: least recompute)
    index: np.ndarray            # its candidate index
    headroom: np.ndarray         # its memory headroom (the memory result stays in the screening process)
    static_headroom: np.ndarray
    tps_bound: np.ndarray        # set for every lead of the search at once (:meth:`Evaluator.bound_leads`)

    def __len__(self) -> int:
        return len(self.group)

    def take(self, which: Any) -> Leads:
        """The leads ``which`` (an index array or a slice), in that order."""
        return Leads(group=self.group[which], position=self.position[which], index=self.index[which],
                     headroom=self.headroom[which], static_headroom=self.static_headroom[which],
                     tps_bound=self.tps_bound[which])

    @staticmethod
    def joined(parts: Sequence[Leads]) -> Leads:
        """The leads of ``parts``, one after the other."""
        names = ("group", "position", "index", "headroom", "static_headroom", "tps_bound")
        if not parts:
            return Leads(**{name: np.zeros(0, dtype=np.int64 if k < 3 else np.float64)
                            for k, name in enumerate(names)})
        return Leads(**{name: np.concatenate([getattr(p, name) for p in parts]) for name in names})


LeadRecord = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""What phase 2 reads of some leads: (group ids, positions, throughput or its bound, static headroom) arrays."""


def lead_table(records: Sequence[LeadRecord], groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group id below ``groups``: whether it has a lead, and its (position, throughput or bound, static headroom)
    (a later record of a group replaces an earlier one)."""
    has = np.zeros(groups, dtype=bool)
    table = np.zeros((groups, 3))
    for group, position, tps, static in records:
        has[group] = True
        table[group, 0], table[group, 1], table[group, 2] = position, tps, static
    return has, table


@dataclass(slots=True)
class Tally:
    """What happened to the candidates of some groups."""

    outcomes: list[Outcome] = field(default_factory=list)
    screened_out: int = 0
    pruned: int = 0
    visited: int = 0
    roomiest: tuple[float, int] | None = None          # (headroom, index) of the roomiest screened-out layout
    leads: list[LeadRecord] = field(default_factory=list)   # per group (position, tps or bound, static headroom)
    pending: list[Leads] = field(default_factory=list)      # phase-1 leads to project, in parts
    projections: dict[int, Projection] = field(default_factory=dict)         # serial runs keep them
    complete: bool = True                                                      # False: stopped at the deadline

    def merge(self, other: Tally) -> None:
        """Add another tally (from a worker) into this one."""
        self.outcomes += other.outcomes
        self.screened_out += other.screened_out
        self.pruned += other.pruned
        self.visited += other.visited
        if other.roomiest is not None and (self.roomiest is None or other.roomiest > self.roomiest):
            self.roomiest = other.roomiest
        self.leads += other.leads
        self.pending += other.pending
        self.projections.update(other.projections)


@dataclass(frozen=True, slots=True)
class Bounds:
    """Phase-1 facts phase 2 prunes against: the k-th best throughput and the Pareto front."""

    kth_best: float
    neg_front_tps: tuple[float, ...]    # minus the front's throughputs, ascending (for searchsorted)
    front_headroom: tuple[float, ...]   # ascending, aligned with neg_front_tps

    def dominated(self, tps_bound: Any, headroom: Any) -> Any:
        """Whether layouts with at most ``tps_bound`` and ``headroom`` (arrays, or one of each) can be neither top-k
        nor on the front: a bool array."""
        tps_bound, headroom = np.asarray(tps_bound, dtype=np.float64), np.asarray(headroom, dtype=np.float64)
        below = tps_bound < self.kth_best
        if not self.front_headroom:
            return np.zeros_like(below)
        # front points with tps >= tps_bound are a prefix (tps descending); its last has the most headroom
        count = np.searchsorted(np.asarray(self.neg_front_tps), -tps_bound, side="right")
        front = np.asarray(self.front_headroom)[np.maximum(count - 1, 0)]
        return below & (count > 0) & (front >= headroom)


def _dominated_by(bounds: Sequence[Bounds], tps_bound: np.ndarray, headroom: np.ndarray) -> np.ndarray:
    """Per layout, whether any of ``bounds`` dominates it (:meth:`Bounds.dominated`), a bool array."""
    mask = np.zeros(len(tps_bound), dtype=bool)
    for b in bounds:
        mask |= b.dominated(tps_bound, headroom)
    return mask


def _first_undominated(bounds: Sequence[Bounds], tps_bound: np.ndarray, headroom: np.ndarray, start: int) -> int:
    """The first position from ``start`` whose layout none of ``bounds`` dominates (``len(tps_bound)``: none), read
    in windows that grow while everything in them is dominated (a search prunes long runs between projections)."""
    window = 256
    while start < len(tps_bound):
        stop = min(len(tps_bound), start + window)
        free = np.flatnonzero(~_dominated_by(bounds, tps_bound[start:stop], headroom[start:stop]))
        if len(free):
            return start + int(free[0])
        start, window = stop, window * 4
    return len(tps_bound)


def bounds_from(outcomes: Sequence[Outcome], top_k: int) -> Bounds:
    """The k-th best throughput (-inf when fewer than k) and the Pareto front of ``outcomes``."""
    ordered = sorted(outcomes, key=lambda o: (-o.tokens_per_s_per_gpu, -o.headroom_fraction, o.index))
    kth = ordered[top_k - 1].tokens_per_s_per_gpu if len(ordered) >= top_k else float("-inf")
    front_t: list[float] = []
    front_h: list[float] = []
    for o in ordered:
        if not front_h or o.headroom_fraction > front_h[-1]:
            front_t.append(-o.tokens_per_s_per_gpu)
            front_h.append(o.headroom_fraction)
    return Bounds(kth_best=kth, neg_front_tps=tuple(front_t), front_headroom=tuple(front_h))


def group_by_recompute(configs: Sequence[TrainingConfig]) -> list[list[int]]:
    """Indices of candidates that differ only in recompute, each group ordered from least to most recompute.

    Meant for enumerated candidates (one variant per recompute level, default modules); a group
    that does not have that shape is split into single candidates, which prunes nothing.
    """
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault(group_key(c), []).append(i)
    ordered: list[list[int]] = []
    for members in groups.values():
        # selective variants chain by module count (candidates.recompute_module_sets: each set extends the last)
        levels = [_level(configs[i]) for i in members]
        if None in levels or len(set(levels)) != len(levels):
            ordered += [[i] for i in members]
            continue
        ordered.append([i for _, i in sorted(zip(levels, members, strict=True))])
    return ordered


def group_key(config: TrainingConfig) -> tuple[Any, ...]:
    """What the members of a recompute group share: every field but the recompute knobs, schedule resolved."""
    return _group_values(config)


def _level(config: TrainingConfig) -> tuple[int, int] | None:
    """Recompute order of a candidate: RECOMPUTE_LEVEL, then (selective) how many modules re-run."""
    level = RECOMPUTE_LEVEL.get((config.recompute, config.recompute_num_layers is not None))
    if level is None:
        return None
    return level, len(config.recompute_modules) if config.recompute == "selective" else 0


def screen_memory(job: Any, config: TrainingConfig) -> MemoryResult:
    """The memory screen of one layout on the job's cluster: every search call site goes through here.

    (Or through :func:`screen_memories`, its batch form: the place for a vectorised screen.)
    """
    return project_memory(job.model, job.hardware, config, parallel_dims(config, job.cluster), job.profile)


def screen_memories(job: Any, configs: Sequence[TrainingConfig], batcher: MemoryBatcher | None = None) -> PeakBatch:
    """Peak and static peak memory of many layouts at once (:mod:`projection.memory_batch`).

    Bit-for-bit the ``peak_bytes``, ``static_peak_bytes`` and ``capacity_bytes`` of :func:`screen_memory`
    for each layout (tests/projection/test_memory_batch.py); ``batcher`` keeps its per-key rows between
    calls of one job.  The verdict of the screen follows from these (:func:`passes_screen`).
    """
    batcher = batcher or MemoryBatcher(job.model, job.hardware, job.profile)
    return batcher.peaks(configs, [parallel_dims(c, job.cluster) for c in configs])


def sharding_ids(columns: CandidateColumns) -> np.ndarray:
    """Per candidate, an integer equal for equal :meth:`Evaluator.sharding_key` (FP8 recipes the engine models
    alike count as one)."""
    names = list(SHARDING)
    if ENGINE_ALIKE_PRECISIONS:
        codes = [columns.precisions.index(p) if p not in ENGINE_ALIKE_PRECISIONS else -1
                 for p in columns.precisions]
        columns.columns["sharding_precision"] = np.asarray(codes, dtype=np.int64)[columns.columns["precision"]]
        names[names.index("precision")] = "sharding_precision"
    # every row of a (outer row, precision) block has the block's sharding (the blocks' rows are its recompute
    # variants, candidate_columns.CandidateColumns.block_starts): key ids of the blocks' first rows, repeated
    starts = columns.block_starts
    if not len(starts):
        return np.zeros(len(columns), dtype=np.intp)
    sizes = np.diff(starts, append=len(columns))
    return np.repeat(columns.key_ids(names, starts)[1], sizes)


def group_order(columns: CandidateColumns, groups: list[list[int]] | GroupArrays) -> list[int]:
    """The order :func:`evaluate` visits groups in (see its ``order``), from the columns: by the repr of the
    sharding key, then mbs, schedule, dispatcher and sequence parallelism, ties in group order (a stable sort)."""
    if not groups:
        return []
    firsts = (groups.members[groups.starts] if isinstance(groups, GroupArrays)
              else np.fromiter((g[0] for g in groups), dtype=np.int64, count=len(groups)))
    reps, inverse = columns.key_ids(SHARDING, firsts)
    text = [repr(sharding_key_of(values)) for values in columns.values_of(reps, _SHARDING_FIELDS)]
    shard_rank = np.argsort(np.argsort(np.array(text, dtype=object), kind="stable"), kind="stable")[inverse]
    c = columns.columns

    def rank(values: list[str], codes: np.ndarray) -> np.ndarray:
        order = sorted(range(len(values)), key=values.__getitem__)
        ranks = np.empty(len(values), dtype=np.int64)
        ranks[order] = np.arange(len(values))
        return ranks[codes]

    return np.lexsort((c["tp"][firsts] > 1, rank(columns.dispatchers, c["dispatcher"][firsts]),
                       rank(columns.schedules, c["schedule"][firsts]), c["mbs"][firsts], shard_rank)).tolist()


def sharding_key_of(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """:meth:`Evaluator.sharding_key` of a layout's ``_SHARDING_FIELDS`` values (FP8 recipes the engine models alike
    count as one)."""
    if values[_PRECISION_AT] in ENGINE_ALIKE_PRECISIONS:
        return (*values[:_PRECISION_AT], "fp8", *values[_PRECISION_AT + 1:])
    return values


def engine_alike(config: TrainingConfig) -> TrainingConfig:
    """A layout as the engine sees it: FP8 recipes it models alike share one evaluation."""
    if config.precision in ENGINE_ALIKE_PRECISIONS:
        return config.model_copy(update={"precision": "fp8"})
    return config


class DeadlineReached(Exception):
    """The search ran past its deadline (:attr:`Evaluator.deadline`); the caller reports a partial result."""


class Evaluator:
    """Screens and projects candidates of one job (the state a worker process inherits)."""

    def __init__(self, job: Any, configs: Sequence[TrainingConfig], groups: list[list[int]] | GroupArrays,
                 min_headroom: float, keep_projections: bool, deadline: float | None = None, corrections: Any = None,
                 columns: CandidateColumns | None = None) -> None:
        self.job, self.configs, self.groups = job, configs, groups
        # the groups as flat arrays: every group's members one after the other, where each starts, how many
        if isinstance(groups, GroupArrays):
            self._members, self._group_starts, self._group_sizes = groups.members, groups.starts, groups.sizes
        else:
            self._group_sizes = np.fromiter(map(len, groups), dtype=np.int64, count=len(groups))
            self._group_starts = np.cumsum(self._group_sizes) - self._group_sizes
            self._members = np.fromiter(chain.from_iterable(groups), dtype=np.int64,
                                        count=int(self._group_sizes.sum()))
        # the candidates as columns (tools/candidate_columns.py; ``configs`` is then the same object): the batch
        # screen and the sharding of each layout read them, and a typed config is built only where one is read
        self.columns = columns if fast_paths.enabled() else None
        self._sharding_ids = None if self.columns is None else sharding_ids(self.columns)
        self._screened_live = False
        # anchors (tools/anchoring.py): projections are corrected, throughput bounds divided by the smallest factor
        # (an anchored step is at least that times the unanchored one) and peaks screened with the memory offset
        self.corrections = corrections
        self._bound_scale = 1.0 if corrections is None else 1.0 / slowest_factor(corrections)
        self._memory_offset = 0.0 if corrections is None else corrections.memory_offset_gib * GIB
        self.min_headroom, self.keep = min_headroom, keep_projections
        self.deadline = deadline     # time.perf_counter() value past which a search stops (None: never)
        self.capacity = job.hardware.hbm_capacity_bytes
        self.static_misfits: set[tuple[Any, ...]] = set()   # sharding keys whose static memory alone misfits
        self._memory_cache: dict[TrainingConfig, MemoryResult] = {}
        # the batch screen (fast paths on): peak, static peak and usable bytes per candidate, NaN until screened
        # the job's shared batcher: its rows serve the fallbacks' screen and the leads' memory results too
        self._batcher = batcher_for(job.model, job.hardware, job.profile)
        self._peaks = np.full((len(configs), 3), np.nan)
        self._screen_memo: dict[Any, Any] = {}    # the batch screen's per-layout terms by key (peaks_of_rows)
        self._projection_cache: dict[TrainingConfig, Projection] = {}
        self._layer_works: dict[tuple[Any, ...], LayerWork] = {}      # per-layer work by its key (the bound's)
        self._stage_layers: dict[tuple[Any, ...], StageLayers] = {}   # layers of each rank by pipeline key
        self._optimizers: dict[tuple[Any, ...], float] = {}           # optimizer step seconds by its key
        self._works_by_terms: dict[tuple[Any, ...], LayerWork] = {}   # ... by what it reads (_layer_work_of)
        self._work_inputs: dict[tuple[Any, ...], Any] = {}   # engine.work_inputs by what they read (_layer_work_of)
        # columns: recompute code -> code of _recompute_terms, full recompute in its lowest bit (_recompute_code)
        self._recompute_codes: np.ndarray | None = None
        self._switch_code_of: dict[tuple[int, ...], int] = {}   # columns: what the switches read -> their code
        self._switch_ids: dict[Any, int] = {}                   # switches in effect -> code
        self._fsdp_floor_cache: dict[tuple[Any, ...], tuple[float, float]] = {}   # ZeRO-3 DP floors by key

    @staticmethod
    def sharding_key(config: TrainingConfig) -> tuple[Any, ...]:
        """What the static memory (weights, gradients, optimizer, FP8 copies) of a layout depends on."""
        return sharding_key_of(_sharding_values(config))

    def shardings_of(self, indices: np.ndarray) -> list[Any]:
        """:meth:`sharding_key` of each candidate (from the columns: an integer standing for it)."""
        if self._sharding_ids is not None:
            return self._sharding_ids[indices].tolist()
        return [self.sharding_key(self.configs[i]) for i in indices.tolist()]

    def zeros_of(self, indices: np.ndarray) -> np.ndarray:
        """The candidates' ZeRO levels (int64)."""
        if self.columns is not None:
            return self.columns.columns["zero"][indices]
        return np.fromiter((self.configs[i].zero for i in indices.tolist()), dtype=np.int64, count=len(indices))

    def transient_config(self, index: int) -> TrainingConfig:
        """A candidate's typed config, not kept by the columns (a bound reads it once; a million kept would cost
        hundreds of MiB): built again if read again."""
        return self.configs[index] if self.columns is None else self.columns.config(index, keep=False)

    def canonical(self, index: int) -> TrainingConfig:
        """The candidate as the engine sees it (:func:`engine_alike`)."""
        return engine_alike(self.configs[index])

    def memory(self, index: int) -> MemoryResult:
        key = self.canonical(index)
        cached = self._memory_cache.get(key)
        if cached is None:
            cached = self._memory_cache[key] = screen_memory(self.job, self.configs[index])
        return cached

    def screen(self, indices: Iterable[int]) -> None:
        """Batch-screen the candidates not screened yet (:func:`screen_memories`); no-op with fast paths off."""
        if not fast_paths.enabled():
            return
        if self.columns is not None and not self._screened_live:
            self._screen_live()
        rows = indices if isinstance(indices, np.ndarray) else np.fromiter(indices, dtype=np.int64)
        rows = rows[np.isnan(self._peaks[rows, 0])]        # NaN: not screened yet
        if not len(rows):
            return
        if self.columns is not None:
            self._screen_rows(rows)
            return
        batch = screen_memories(self.job, [self.configs[i] for i in rows.tolist()], self._batcher)
        self._peaks[rows, 0] = batch.peak_bytes
        self._peaks[rows, 1] = batch.static_peak_bytes
        self._peaks[rows, 2] = batch.capacity_bytes

    def _screen_live(self) -> None:
        """Columns: screen, in a few numpy passes, every layout whose sharding's static memory could pass (one
        layout per sharding tells); the rest are screened only if read (:meth:`screen`)."""
        self._screened_live = True
        assert self.columns is not None and self._sharding_ids is not None
        if not len(self.configs):
            return
        # the first row of each sharding (its ids count from 0 up): the first row of its first block
        starts = self.columns.block_starts
        _, first_block = np.unique(self._sharding_ids[starts], return_index=True)
        firsts = starts[first_block]
        self._peaks[firsts] = self._batcher.peaks_of_rows(self.columns, firsts, self._screen_memo).stacked()
        live = could_pass(self._peaks[firsts, 1] + self._memory_offset, self._peaks[firsts, 2], self.min_headroom,
                          SHIPPED_MARGINS)
        rows = np.flatnonzero(live[self._sharding_ids] & np.isnan(self._peaks[:, 0]))
        if len(rows):
            self._screen_rows(rows)

    def _screen_rows(self, rows: np.ndarray) -> None:
        """Batch-screen rows of the columns, ``_SCREEN_ROWS`` at a time (caps the screen's temporaries: ~300 bytes
        a row; the batcher keeps its per-key rows between the pieces)."""
        assert self.columns is not None
        for start in range(0, len(rows), _SCREEN_ROWS):
            part = rows[start:start + _SCREEN_ROWS]
            self._peaks[part] = self._batcher.peaks_of_rows(self.columns, part, self._screen_memo).stacked()

    def screened(self) -> np.ndarray:
        """Per candidate, whether the batch screen has its peak (columns: every layout whose sharding's static memory
        could pass is screened up front, :meth:`_screen_live`)."""
        return ~np.isnan(self._peaks[:, 0])

    def peak(self, index: int) -> tuple[float, float, float]:
        """(peak, static peak, usable capacity) bytes of a candidate: from the batch screen, else the scalar one."""
        if fast_paths.enabled():
            if self._peaks[index, 0] != self._peaks[index, 0]:
                self.screen((index,))
            peak, static, capacity = self._peaks[index].tolist()
            return peak, static, capacity
        memory = self.memory(index)
        return memory.peak_bytes, memory.static_peak_bytes, memory.capacity_bytes

    def peaks_of(self, indices: np.ndarray) -> np.ndarray:
        """(n, 3): :meth:`peak` of many candidates."""
        if fast_paths.enabled():
            self.screen(indices)
            return self._peaks[indices]
        return np.array([self.peak(i) for i in indices.tolist()], dtype=np.float64).reshape(-1, 3)

    def survivor_memory(self, index: int, peak: float) -> MemoryResult:
        """The full (scalar) memory result of a candidate that passed the screen; it must match the batch peak."""
        memory = self.memory(index)
        if memory.peak_bytes != peak:
            raise RuntimeError(f"batch memory screen disagrees with projection.memory for {self.configs[index]}: "
                               f"{peak!r} vs {memory.peak_bytes!r} bytes (a bug in projection/memory_batch.py)")
        return memory

    def lead_memory(self, index: int) -> MemoryResult | None:
        """The memory result a lead is projected with: computed now (batch screen: only for leads that are
        projected, checked against the batch peak), cached from the scalar screen, or None (the engine's own)."""
        if fast_paths.enabled():
            peak = float(self._peaks[index, 0])
            return None if peak != peak else self.survivor_memory(index, peak)
        return self._memory_cache.get(self.canonical(index))

    def check_deadline(self) -> None:
        """Raise :class:`DeadlineReached` once the deadline has passed."""
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise DeadlineReached

    def headroom(self, peak: float, capacity: float) -> float:
        """1 - peak / capacity, the peak with the anchors' memory offset (as the anchored projections have it)."""
        return 1.0 - (peak + self._memory_offset) / capacity

    def passes(self, peak: Any, capacity: Any) -> Any:
        """The screen's verdict on peaks, a bool array (:func:`projection.memory_verdict.screen_passes` with the
        margins project_memory uses; plus the anchors' memory offset)."""
        return screen_passes(peak + self._memory_offset, capacity, self.min_headroom, SHIPPED_MARGINS)

    def project(self, index: int, tally: Tally, memory: MemoryResult | None = None) -> Projection:
        job = self.job
        key = self.canonical(index)
        p = self._projection_cache.get(key)
        if p is None:
            p = project(job.model, job.cluster, self.configs[index], hardware=job.hardware, profile=job.profile,
                        check=False, memory=memory)
            if self.corrections is not None:
                p = anchored(p, self.corrections)
            self._projection_cache[key] = p
            if self.keep:
                tally.projections[index] = p
        tally.outcomes.append(Outcome(index, p.tokens_per_s_per_gpu, p.memory.headroom_fraction))
        return p

    def throughput_bound(self, index: int) -> float:
        """Upper bound of a candidate's tokens/s/GPU from the engine's iteration-time lower bound."""
        job, config = self.job, self.configs[index]
        seconds = iteration_time_lower_bound(job.model, job.cluster, config, hardware=job.hardware,
                                             profile=job.profile)
        return config.gbs * config.seq_len / seconds / job.cluster.num_gpus * self._bound_scale

    def throughput_bounds(self, indices: Sequence[int]) -> list[float]:
        """:meth:`throughput_bound` of many candidates at once, with the same bits.

        The bound is the pipeline makespan floor (:func:`projection.busiest_work.makespan_floor`: a rank's work
        of ``m`` micro-batches plus the fill and drain through chunk 0 of the ranks before it), with under ZeRO 3
        the DP communication exposed at least (:meth:`_fsdp_floors`), + optimizer + step overhead
        (:func:`projection.engine.iteration_time_lower_bound`), over the batch: per-layer terms built once per
        distinct :meth:`work_key` first half (micro-batch, TP, CP, EP, precision, switches, ...), the
        ranks' layers once per pipeline (second half); the optimizer step once per sharding; the rest
        elementwise in numpy (the scalar path's operations in its order;
        tests/tools/test_search_core_vector.py).
        """
        if not len(indices):
            return []
        if not fast_paths.enabled():
            return [self.throughput_bound(i) for i in indices]
        job = self.job
        rows = np.asarray(indices, dtype=np.int64)
        work_keys, pipeline_keys, optimizer_keys = self._column_keys(rows)
        works, work_ids = self._distinct(rows, work_keys, _layer_work_values, self._layer_works, self._layer_work_of)
        stages, stage_ids = self._distinct(rows, pipeline_keys, _pipeline_values, self._stage_layers,
                                           self._stage_layers_of)
        optimizers, optimizer_ids = self._distinct(rows, optimizer_keys, _optimizer_values, self._optimizers,
                                                   self._optimizer_of)
        if self.columns is not None:
            microbatches = self.columns.columns["microbatches"][rows].astype(np.float64)
        else:
            microbatches = np.array([parallel_dims(self.configs[i], job.cluster).num_microbatches for i in indices],
                                    dtype=np.float64)
        makespan = makespan_floor(works, work_ids, stages, stage_ids, microbatches)
        optimizer = np.asarray(optimizers)[optimizer_ids]
        floor, alone = self._fsdp_floors(rows)
        tokens = float(self.template_tokens())
        seconds = (np.maximum(makespan + microbatches * floor, microbatches * alone) + optimizer
                   + job.profile.step_overhead_s)
        return (tokens / seconds / job.cluster.num_gpus * self._bound_scale).tolist()

    def _fsdp_floors(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:func:`projection.engine.fsdp_exposed_floor` of every row (zeros below ZeRO 3), once per distinct key of
        the ZeRO-3 rows."""
        floor, alone = np.zeros(len(rows)), np.zeros(len(rows))
        fsdp = np.flatnonzero(self.zeros_of(rows) >= 3)
        if len(fsdp):
            keys = None
            if self.columns is not None:    # full recompute: the lowest bit of the recompute code (_column_keys)
                assert self._recompute_codes is not None
                c, sub = self.columns.columns, rows[fsdp]
                keys = [c[name][sub] for name in _FSDP_COLUMNS] + [self._recompute_codes[c["recompute"][sub]] & 1]
            values, ids = self._distinct(rows[fsdp], keys, _fsdp_values, self._fsdp_floor_cache, self._fsdp_floor_of)
            pairs = np.asarray(values, dtype=np.float64).reshape(-1, 2)[ids]
            floor[fsdp], alone[fsdp] = pairs[:, 0], pairs[:, 1]
        return floor, alone

    def _fsdp_floor_of(self, config: TrainingConfig) -> tuple[float, float]:
        job = self.job
        return engine.fsdp_exposed_floor(job.model, job.cluster, config, hardware=job.hardware, profile=job.profile)

    def template_tokens(self) -> int:
        """Tokens of one step (gbs * seq_len: the same for every candidate of a search)."""
        config = self.configs[0] if self.columns is None else self.columns.template
        return config.gbs * config.seq_len

    def _distinct(self, rows: np.ndarray, keys: list[np.ndarray] | None, values: Callable[[TrainingConfig], Any],
                  cache: dict[tuple[Any, ...], Any], build: Callable[[TrainingConfig], Any]) -> tuple[list[Any], np.ndarray]:
        """(a value per distinct key, the key's position for every row): keys from the per-row integer arrays
        ``keys`` (the columns), else from the config fields ``values`` reads; each value built once (``build`` of
        a layout with that key) and kept in ``cache``."""
        if keys is not None:
            first, ids = packed_ids(keys)
            found_keys = list(zip(*(k[first].tolist() for k in keys), strict=True))
            reps = rows[first].tolist()
        else:
            positions: dict[tuple[Any, ...], int] = {}
            found_keys, reps, ids_list = [], [], []
            for i in rows.tolist():
                key = values(self.configs[i])
                at = positions.get(key)
                if at is None:
                    at = positions[key] = len(found_keys)
                    found_keys.append(key)
                    reps.append(i)
                ids_list.append(at)
            ids = np.asarray(ids_list, dtype=np.intp)
        found = []
        for key, rep in zip(found_keys, reps, strict=True):
            value = cache.get(key)
            if value is None:
                value = cache[key] = build(engine_alike(self.transient_config(rep)))
            found.append(value)
        return found, ids

    def _column_keys(self, rows: np.ndarray) -> tuple[list[np.ndarray], ...] | tuple[None, None, None]:
        """The per-layer work's, the pipeline's and the optimizer's keys of ``rows``, from the columns (None
        without them): the columns the keys' fields are, plus the derived parts of the per-layer work's key."""
        if self.columns is None:
            return None, None, None
        c, columns = self.columns.columns, self.columns
        if self._recompute_codes is None:
            codes: dict[tuple[Any, ...], int] = {}
            self._recompute_codes = np.array([_recompute_code(codes, r, modules) for r, _, modules in
                                              columns.recomputes], dtype=np.int64)
        work = [c[name][rows] for name in _LAYER_WORK_COLUMNS]
        work += [self._switch_codes(rows), self._recompute_codes[c["recompute"][rows]] >> 1]
        return (work, [c[name][rows] for name in _PIPELINE_COLUMNS], [c[name][rows] for name in _OPTIMIZER_COLUMNS])

    def _switch_codes(self, rows: np.ndarray) -> np.ndarray:
        """Columns: per row, a code of the switches in effect (:func:`projection.switches.resolve_switches`), resolved
        once per distinct value of what they read: the searched switches and the expert overlap's rules (EP, PP
        without VPP, full recompute, dispatcher; projection.switches.ep_overlap_blockers)."""
        assert self.columns is not None and self._recompute_codes is not None
        c = self.columns.columns
        pp = c["pp"][rows]
        reads = [c["switches"][rows], (c["ep"][rows] > 1).astype(np.int64),
                 ((pp > 1) & (c["vpp"][rows] == 1)).astype(np.int64), self._recompute_codes[c["recompute"][rows]] & 1,
                 c["dispatcher"][rows]]
        first, ids = packed_ids(reads)
        codes = np.empty(len(first), dtype=np.int64)
        for k, (key, rep) in enumerate(zip(zip(*(r[first].tolist() for r in reads), strict=True),
                                          rows[first].tolist(), strict=True)):
            code = self._switch_code_of.get(key)
            if code is None:
                config = self.transient_config(rep)
                switches = resolve_switches(config, framework_profile(config.framework))
                code = self._switch_code_of[key] = self._switch_ids.setdefault(switches, len(self._switch_ids))
            codes[k] = code
        return codes[ids]

    def _layer_work_of(self, config: TrainingConfig) -> LayerWork:
        """The per-layer work of a layout, built once per distinct (per-layer work fields, switches in effect,
        selective recompute modules): what :func:`projection.engine.layer_work` reads.  Its work key also has
        the full-recompute flag and whether PP runs without VPP, which it reads only through the switches in
        effect, so keys that differ there alone share one build; the engine's work inputs (per-layer costs,
        head, embedding) are shared by every recompute setting with the same switches."""
        job = self.job
        base = (_layer_work_fields(config), resolve_switches(config, framework_profile(config.framework)))
        key = (base, selective_recompute_modules(config))
        work = self._works_by_terms.get(key)
        if work is None:
            inputs = self._work_inputs.get(base)
            if inputs is None:
                inputs = self._work_inputs[base] = engine.work_inputs(job.model, job.cluster, config,
                                                                      hardware=job.hardware, profile=job.profile)
            work = self._works_by_terms[key] = engine.layer_work(job.model, job.cluster, config,
                                                                 hardware=job.hardware, profile=job.profile,
                                                                 inputs=inputs)
        return work

    def _stage_layers_of(self, config: TrainingConfig) -> StageLayers:
        return stage_layers(self.job.model.num_layers, config, parallel_dims(config, self.job.cluster))

    def _optimizer_of(self, config: TrainingConfig) -> float:
        job = self.job
        return engine._optimizer_s(job.model, config, parallel_dims(config, job.cluster), job.hardware, job.profile)

    def bound_leads(self, leads: Leads) -> None:
        """Set the throughput bound of every lead, in one :meth:`throughput_bounds` call."""
        leads.tps_bound = np.asarray(self.throughput_bounds(leads.index.tolist()), dtype=np.float64).reshape(-1)

    @staticmethod
    def work_key(config: TrainingConfig) -> tuple[Any, ...]:
        """What the per-rank compute of one micro-batch depends on: everything but dp, gbs, ZeRO, FSDP size (the
        per-layer terms' key, then the pipeline's)."""
        return _layer_work_values(config), _pipeline_values(config)

    def project_leads(self, pending: Leads, top_k: int, tally: Tally,
                      known: Sequence[Outcome] = (), done: Mapping[int, Outcome] | None = None) -> None:
        """Project group leads from the highest throughput bound down; skip those that cannot matter.

        A lead whose bound is dominated by what is already projected (top-k and Pareto front)
        is counted as pruned; its bound still bounds its group's other variants in phase 2.
        Bounds are refreshed every few projections (stale bounds prune less, never wrongly).
        ``done``: outcomes already projected (by workers, by candidate index), reused instead of
        projecting again; the decisions, hence the counts, are those of this serial order.
        """
        seen = list(known)
        bounds = bounds_from(seen, top_k)
        since_refresh = 0
        ordered = pending.take(np.argsort(-pending.tps_bound, kind="stable"))
        tps_bound = ordered.tps_bound * (1.0 + BOUND_MARGIN)
        headroom = ordered.headroom
        at = 0
        while at < len(ordered):
            nxt = _first_undominated([bounds], tps_bound, headroom, at)
            tally.pruned += nxt - at
            if nxt > at:
                tally.leads.append((ordered.group[at:nxt], ordered.position[at:nxt], ordered.tps_bound[at:nxt],
                                    ordered.static_headroom[at:nxt]))
            if nxt == len(ordered):
                break
            index = int(ordered.index[nxt])
            self.check_deadline()
            reused = None if done is None else done.get(index)
            if reused is not None:
                tally.outcomes.append(reused)
                tps = reused.tokens_per_s_per_gpu
            else:
                tps = self.project(index, tally, self.lead_memory(index)).tokens_per_s_per_gpu
            tally.leads.append((ordered.group[nxt:nxt + 1], ordered.position[nxt:nxt + 1], np.array([tps]),
                                ordered.static_headroom[nxt:nxt + 1]))
            since_refresh += 1
            if since_refresh >= _REFRESH_EVERY or len(tally.outcomes) <= top_k:
                bounds = bounds_from([*seen, *tally.outcomes], top_k)
                since_refresh = 0
            at = nxt + 1

    def phase1(self, group_ids: Iterable[int]) -> Tally:
        """For each group: screen from the least recompute up, queue the first variant that fits (its lead).

        In rounds over the groups at once (numpy): round ``p`` reads the peaks of the ``p``-th variant of every group
        without a lead yet, so the peaks read (batch-screened per round, or the scalar results with the fast paths
        off) are those a group-by-group walk reads.  First, one group per sharding key tells which shardings misfit
        statically (the static memory of a sharding, weights, gradients, optimizer, FP8 copies and workspace, is the
        same for all its variants: when it alone would not pass, no variant passes); the other groups of those are
        counted screened out unread.  Only the leads get the full scalar memory result later (the engine needs it),
        checked equal to the batch peak.  Counts and the roomiest screened-out layout are the walk's (ties: the
        first in visiting order).
        """
        tally = Tally()
        ids = np.fromiter(group_ids, dtype=np.int64)
        if not len(ids):
            return tally
        starts, sizes = self._group_starts[ids], self._group_sizes[ids]
        key_of = self.shardings_of(self._members[starts])
        codes: dict[Any, int] = {}
        key = np.fromiter((codes.setdefault(k, len(codes)) for k in key_of), dtype=np.int64, count=len(ids))
        keys = list(codes)
        misfit = np.array([k in self.static_misfits for k in keys], dtype=bool)
        # the first group of each sharding not known to misfit: its least-recompute variant tells
        _, first_group = np.unique(key, return_index=True)
        probe = first_group[~misfit[key[first_group]]]
        peaks = self.peaks_of(self._members[starts[probe]])
        static_misfit = ~could_pass(peaks[:, 1] + self._memory_offset, peaks[:, 2], self.min_headroom,
                                    SHIPPED_MARGINS)
        found = static_misfit & ~self.passes(peaks[:, 0], peaks[:, 2])    # (a variant that passes is a lead)
        new_misfits = key[probe[found]]
        self.static_misfits.update(keys[k] for k in new_misfits.tolist())
        # (group's place in ``ids``, position, headroom, index) of every read that did not pass
        failed: list[tuple[np.ndarray, int, np.ndarray, np.ndarray]] = []
        failed.append((probe[found], 0, self.headroom(peaks[found, 0], peaks[found, 2]),
                       self._members[starts[probe[found]]]))
        misfit[new_misfits] = True
        dropped = misfit[key]
        tally.screened_out += int(sizes[dropped].sum())
        tally.visited += int(sizes[dropped].sum())
        # rounds over the rest: position p of every group still without a lead
        live = np.flatnonzero(~dropped)
        lead_position = np.full(len(ids), -1, dtype=np.int64)
        lead_peaks = np.zeros((len(ids), 3))
        active, position = live, 0
        while len(active):
            active = active[sizes[active] > position]
            if not len(active):
                break
            rows = self._members[starts[active] + position]
            peaks = self.peaks_of(rows)
            ok = self.passes(peaks[:, 0], peaks[:, 2])
            lead_position[active[ok]] = position
            lead_peaks[active[ok]] = peaks[ok]
            failed.append((active[~ok], position, self.headroom(peaks[~ok, 0], peaks[~ok, 2]), rows[~ok]))
            active = active[~ok]
            position += 1
        led = lead_position >= 0
        heads, unled = np.flatnonzero(led), live[~led[live]]
        tally.visited += int((lead_position[heads] + 1).sum() + sizes[unled].sum())
        tally.screened_out += int(lead_position[heads].sum() + sizes[unled].sum())
        headroom = np.concatenate([f[2] for f in failed])
        if len(headroom):     # the roomiest screened-out read, the first in visiting order among equals
            place = np.concatenate([f[0] for f in failed])
            at_position = np.concatenate([np.full(len(f[0]), f[1], dtype=np.int64) for f in failed])
            index = np.concatenate([f[3] for f in failed])
            best = np.flatnonzero(headroom == headroom.max())
            at = best[np.lexsort((at_position[best], place[best]))[0]]
            tally.roomiest = (float(headroom[at]), int(index[at]))
        positions = lead_position[heads]
        indices = self._members[starts[heads] + positions]
        peak, static, capacity = lead_peaks[heads, 0], lead_peaks[heads, 1], lead_peaks[heads, 2]
        tally.pending.append(Leads(group=ids[heads], position=positions, index=indices,
                                   headroom=np.asarray(self.headroom(peak, capacity), dtype=np.float64),
                                   static_headroom=np.asarray(self.headroom(static, capacity), dtype=np.float64),
                                   tps_bound=np.full(len(heads), np.nan)))
        return tally

    def phase2(self, group_ids: Sequence[int], leads: Sequence[LeadRecord], top_k: int,
               tally: Tally) -> None:
        """Visit the variants after each group's lead, from the most memory headroom down, into ``tally``;
        prune those that the projections so far prove irrelevant.

        A variant's throughput is at most its group lead's (more recompute is never faster, ZeRO < 3) and at most
        its own engine bound (computed in batches, only for variants their lead's bound leaves undominated); under FSDP, where more recompute can hide more
        communication, by its own engine bound alone.  A group whose lead's bound and static headroom (an upper bound of every
        variant's headroom) are dominated by phase 1 is pruned whole.  The variants of the others that pass
        the memory screen are then visited from the most headroom down (ties in ``group_ids`` order, then by
        recompute): every layout projected before a variant has at least its headroom, so the variant is
        dominated as soon as one of them reaches its bound (and the bound is below the k-th best): the
        Pareto front is built from its roomy end and prunes all it can.  Bounds are refreshed as projections
        land (stale bounds prune less, never wrongly); the order, hence every decision, depends only on the
        projected numbers and the peaks, the same on every path.
        """
        bounds = bounds_from(tally.outcomes, top_k)
        # the groups with a lead, in ``group_ids`` order: lead position, throughput (or bound), static headroom
        ids = np.fromiter(group_ids, dtype=np.int64)
        has, table = lead_table(leads, len(self._group_sizes))
        ids = ids[has[ids]]
        lead = table[ids]
        at, tps, static_headroom = lead[:, 0].astype(np.int64), lead[:, 1], lead[:, 2]
        zero = self.zeros_of(self._members[self._group_starts[ids]])
        group_bound = np.where(zero < 3, tps * (1.0 + BOUND_MARGIN), np.inf)
        rest = self._group_sizes[ids] - at - 1
        # a bool per group (np.broadcast_to: also for a scalar from a replaced `dominated`, as tests do)
        whole = np.broadcast_to(np.asarray(bounds.dominated(group_bound, static_headroom), dtype=bool), ids.shape)
        skipped = int(rest[whole].sum())
        tally.visited += skipped
        tally.pruned += skipped
        keep = ~whole & (rest > 0)
        live, lead_bounds, counts = ids[keep], group_bound[keep], rest[keep]
        # every variant after its lead, in (group, position) order: screened, then queued by headroom if it passes
        first = self._group_starts[live] + at[keep] + 1
        offsets = np.cumsum(counts) - counts
        step = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(offsets, counts)
        indices = self._members[np.repeat(first, counts) + step]
        rank_of = np.repeat(np.arange(len(live), dtype=np.int64), counts)
        position_of = np.repeat(at[keep] + 1, counts) + step
        peaks = self.peaks_of(indices)
        peak, capacity = peaks[:, 0], peaks[:, 2]
        headroom = self.headroom(peak, capacity)
        passing = self.passes(peak, capacity)
        tally.visited += len(indices)
        failed = np.flatnonzero(~passing)
        if len(failed):
            tally.screened_out += len(failed)
            roomiest = int(failed[np.argmax(headroom[failed])])      # the first of the roomiest, as one by one
            if tally.roomiest is None or headroom[roomiest] > tally.roomiest[0]:
                tally.roomiest = (float(headroom[roomiest]), int(indices[roomiest]))
        order = np.flatnonzero(passing)
        order = order[np.lexsort((position_of[order], rank_of[order], -headroom[order]))]
        # (-headroom, rank, position), ascending.  A variant's bound is the smaller of its lead's and its own engine
        # bound (more recompute: more work; under FSDP its only one); the own bounds are computed, in batches, only
        # for the variants that their lead's bound alone leaves undominated when the scan reaches them (a larger
        # bound prunes less, never wrongly: the same decisions)
        variants = indices[order]
        lead_bound = lead_bounds[rank_of[order]]
        bound = lead_bound.copy()
        settled = np.zeros(len(variants), dtype=bool)
        room = headroom[order]
        top: list[float] = sorted(o.tokens_per_s_per_gpu for o in tally.outcomes)[-top_k:]   # min-heap of the top-k
        best_roomier = float("-inf")     # the most throughput projected in this phase (all with >= the headroom)

        def roomier_bounds() -> Bounds:
            """The layouts projected in this phase as one front point: their best throughput, with at least the
            headroom of every variant still queued (the queue runs from the most headroom down)."""
            kth = top[0] if len(top) >= top_k else float("-inf")
            return Bounds(kth_best=kth, neg_front_tps=(-best_roomier,), front_headroom=(float("inf"),))

        roomier = roomier_bounds()
        since_refresh = 0
        position = 0
        while position < len(variants):
            nxt = _first_undominated([roomier, bounds], bound, room, position)
            tally.pruned += nxt - position
            position = nxt
            if nxt == len(variants):
                break
            if not settled[nxt]:      # its own bound, and those of the next undominated ones, then look again
                span = np.arange(nxt, min(len(variants), nxt + _OWN_BOUND_BATCH))
                span = span[~settled[span] & ~_dominated_by([roomier, bounds], bound[span], room[span])]
                own = np.asarray(self.throughput_bounds(variants[span].tolist()), dtype=np.float64).reshape(-1)
                bound[span] = np.minimum(lead_bound[span], own * (1.0 + BOUND_MARGIN))
                settled[span] = True
                continue
            self.check_deadline()
            tps_now = self.project(int(variants[nxt]), tally).tokens_per_s_per_gpu
            best_roomier = max(best_roomier, tps_now)
            if len(top) < top_k:
                heapq.heappush(top, tps_now)
            elif tps_now > top[0]:
                heapq.heapreplace(top, tps_now)
            roomier = roomier_bounds()
            since_refresh += 1
            if since_refresh >= _REFRESH_EVERY:
                bounds = bounds_from(tally.outcomes, top_k)
                since_refresh = 0
            position = nxt + 1


_WORKER: Evaluator | None = None   # set in the parent before forking; inherited by the workers


def _phase1_task(group_ids: list[int]) -> Tally:
    assert _WORKER is not None
    return _WORKER.phase1(group_ids)


def _leads_task(args: tuple[Leads, int, list[Outcome]]) -> Tally:
    assert _WORKER is not None
    pending, top_k, known = args
    tally = Tally()
    _WORKER.project_leads(pending, top_k, tally, known)
    return tally


def idle_cores() -> float:
    """CPUs this process may use minus the 1-minute load average (which counts this process while it runs)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        return cpus - os.getloadavg()[0]
    except OSError:        # no load average on this platform: assume busy
        return 0.0


def default_workers(num_candidates: int) -> int:
    """One process, unless the space is large, fork is safe (no other threads) and a second core is idle.

    A second forked worker only pays when it gets a core of its own: on a loaded 2-core machine two
    workers were 1.4-2.1x slower in wall time than one (issue 14), and most searches finish in a
    second or two, less than the fork and the result transfer save.
    """
    if num_candidates < PARALLEL_MIN_CANDIDATES or threading.active_count() > 1:
        return 1
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return 2 if idle_cores() >= IDLE_CORES_FOR_WORKER else 1


def evaluate(evaluator: Evaluator, top_k: int, progress: Callable[[int], None] | None, workers: int) -> Tally:
    """Run both phases over every group; serial or on ``workers`` forked processes.

    The candidates, groups and catalog objects built so far live as long as the search: they are
    moved to the collector's permanent generation (``gc.freeze``) for its duration, so the full
    collections a search triggers do not rescan them (~0.1 s of a 1 s search) and forked workers do
    not touch, and so copy, their pages.  They are moved back after, unless the caller had frozen objects
    first (:func:`projection.module_heap.freeze_heap`, asked in O(1)): an unfreeze would move those back too.
    With a deadline (:attr:`Evaluator.deadline`) the search stops at the first check past it (between
    chunks of groups and before each lead's projection) and returns what it has, marked
    ``complete=False``: the candidates visited so far, the projections done so far.
    """
    frozen_before = module_heap.heap_frozen()
    gc.freeze()
    partial = Tally()
    try:
        return _evaluate(evaluator, top_k, progress, workers, partial)
    except DeadlineReached:
        partial.complete = False
        return partial
    finally:
        if not frozen_before:
            gc.unfreeze()


def _evaluate(evaluator: Evaluator, top_k: int, progress: Callable[[int], None] | None, workers: int,
              total: Tally) -> Tally:
    global _WORKER
    # groups of one sharding go to the same task, so each worker's static-misfit cache covers them
    def order(g: int) -> tuple[str, int, str, str, bool]:
        config = evaluator.configs[evaluator.groups[g][0]]
        # sharding first (shared static-misfit cache), then what else tells layouts apart, so
        # FP8-recipe twins (same key, precision aside) land in the same task and share evaluations
        return (repr(evaluator.sharding_key(config)), config.mbs, config.schedule, config.moe_dispatcher,
                config.sequence_parallel)

    group_ids = (sorted(range(len(evaluator.groups)), key=order) if evaluator.columns is None
                 else group_order(evaluator.columns, evaluator.groups))
    size = _TASK_GROUPS if workers > 1 else _SERIAL_GROUPS
    chunks = [group_ids[i:i + size] for i in range(0, len(group_ids), size)]

    def absorb(part: Tally) -> None:
        total.merge(part)
        if progress is not None:
            progress(total.visited)
        evaluator.check_deadline()

    if workers <= 1:
        for chunk in chunks:
            absorb(evaluator.phase1(chunk))
        pending = Leads.joined(total.pending)
        evaluator.bound_leads(pending)
        evaluator.project_leads(pending, top_k, total)
        evaluator.phase2(group_ids, total.leads, top_k, total)
        if progress is not None:
            progress(total.visited)
        return total
    evaluator.screen(())   # columns: the whole-space screen runs once, here; forked workers inherit its peaks
    _WORKER = evaluator
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            # imap, not imap_unordered: the parts merge in the serial order of the chunks, so the leads
            # queue (and its ties of equal bounds) is the serial run's, whichever worker finishes first
            for part in pool.imap(_phase1_task, chunks):
                absorb(part)
            pending = Leads.joined(total.pending)
            evaluator.bound_leads(pending)
            # The most promising leads first, here, to set the bounds; the rest split over the workers
            # (each prunes against those bounds plus its own results: stale bounds only prune less, so
            # they project what the serial order projects, and some more).  Then the serial decisions are
            # replayed over the whole queue, reusing those projections: the counts, the top-k and the
            # front are the serial run's for any number of workers (the extra projections are not counted).
            ordered = pending.take(np.argsort(-pending.tps_bound, kind="stable"))
            head, rest = ordered.take(slice(None, _HEAD_LEADS_PER_K * top_k)), ordered.take(
                slice(_HEAD_LEADS_PER_K * top_k, None))
            speculative = Tally()
            evaluator.project_leads(head, top_k, speculative)
            known = list(speculative.outcomes)
            parts = [(rest.take(slice(w, None, workers)), top_k, known) for w in range(workers)]
            for part in pool.imap(_leads_task, parts):
                speculative.merge(part)
                evaluator.check_deadline()
            total.projections.update(speculative.projections)
            evaluator.project_leads(pending, top_k, total, done={o.index: o for o in speculative.outcomes})
        # phase 2 in this process: one queue over every group (its decisions depend on every projection before)
        evaluator.phase2(group_ids, total.leads, top_k, total)
        if progress is not None:
            progress(total.visited)
    finally:
        _WORKER = None
    return total
