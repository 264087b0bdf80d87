"""The search space as column arrays: every legal layout of a job as one row of small integer codes.

:func:`enumerate_columns` walks the same axis functions, in the same nesting, as the space rules of
:mod:`tools.candidates` (its module docstring), but only down to the last axis that depends on the ones
above it (the ``fsdp_size``/dispatcher level).  The two innermost axes, precision and the recompute
variants of the pipeline depth, are a plain product: they are laid out with numpy (``np.repeat`` and
index arithmetic), so a space of a million layouts costs a few tens of thousands of Python steps.

Rows come in the order :func:`tools.candidates.enumerate_candidates` yields them (it reads them from
here: :func:`enumerate_candidates`), so candidate indices, groups and tie-breaks are the same on both paths.  A typed
:class:`projection.training_config.TrainingConfig` is built only for the rows that are asked for
(:meth:`CandidateColumns.config`: layouts that are projected, returned, or stand for a key of the batch
memory screen); everything else (grouping by recompute, the memory screen, the sharding of each layout)
reads the columns.

Columns (``int32``, one entry per layout): ``cp tp pp dp ep etp vpp mbs zero fsdp`` (0 = no HSDP size),
``schedule split dispatcher precision recompute`` (indices into :attr:`CandidateColumns.schedules`,
``splits``, ``dispatchers``, ``precisions``, ``recomputes``), ``microbatches`` (gbs / (mbs * dp)),
``low_precision`` (1 for the 8- and 4-bit recipes: what activation memory reads of the precision), ``switches``
(index into :attr:`CandidateColumns.switch_choices`: the run-time switch settings the layout is searched with,
best first, :func:`tools.switch_rules.switch_choices`; a row carries the first).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from projection.hardware import HardwareSpec
from projection.layout import ParallelDims
from projection.model_spec import ModelSpec
from projection.packed_keys import packed_ids
from projection.pipeline_split import PipelineSplit
from projection.training_config import Cluster, TrainingConfig
from projection.vocabulary import RECOMPUTE_LEVEL
from tools.constraints import Constraints
from tools.candidates import (
    SearchSpace,
    job_template,
    cp_values,
    dispatchers,
    expert_options,
    fsdp_sizes,
    mbs_values,
    pipeline_options,
    pp_values,
    precision_values,
    recompute_variants,
    schedule_fits,
    split_fields,
    tp_values,
    zero_values,
)

_INT_FIELDS = frozenset({"tp", "pp", "cp", "ep", "etp", "vpp", "dp", "mbs", "zero"})   # a column each, as ints
_RECOMPUTE_FIELDS = ("recompute", "recompute_num_layers", "recompute_modules")       # a RecomputeVariant's
_SPLIT_FIELDS = frozenset(split_fields(PipelineSplit()))                               # split_fields' names

OUTER = ("cp", "tp", "pp", "dp", "ep", "etp", "vpp", "schedule", "split", "mbs", "zero", "fsdp", "dispatcher")
"""Columns fixed by the outer loops (one entry per precision x recompute block)."""
SHARDING = ("tp", "pp", "vpp", "split", "cp", "ep", "etp", "dp", "zero", "fsdp", "precision")
"""Columns the static memory of a layout depends on (the job's fields are the same for every row)."""
RecomputeVariant = tuple[str, int | None, tuple[str, ...]]


class _Codes:
    """Values of one categorical column, coded in order of first appearance."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self._index: dict[Any, int] = {}

    def __call__(self, value: Any) -> int:
        code = self._index.get(value)
        if code is None:
            code = self._index[value] = len(self.values)
            self.values.append(value)
        return code


@dataclass(slots=True)
class CandidateColumns:
    """Every layout of one search as columns, and the typed config of any row on demand."""

    template: TrainingConfig                  # the job's fields (every layout carries them)
    columns: dict[str, np.ndarray]
    schedules: list[str]
    splits: list[PipelineSplit]
    dispatchers: list[str]
    precisions: list[str]
    recomputes: list[RecomputeVariant]
    variants: dict[int, list[int]]            # pp -> its recompute-variant codes, in enumeration order
    block_starts: np.ndarray                  # first row of every (outer row, precision) block, ascending
    switch_choices: list[tuple[dict[str, Any], ...]] = field(default_factory=lambda: [({},)])  # best first
    _configs: dict[int, TrainingConfig] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.columns["tp"])

    def __getitem__(self, i: int) -> TrainingConfig:
        return self.config(i)

    def config(self, i: int, keep: bool = True) -> TrainingConfig:
        """The typed layout of row ``i`` (equal to what the scalar enumeration yields); ``keep``: cache it (the
        batch screen builds one per key and drops it)."""
        config = self._configs.get(i)
        if config is None:
            config = self._configs[i] = self.template.model_copy(update=self._fields(i))
            if not keep:
                del self._configs[i]
        return config

    def values_of(self, rows: np.ndarray, names: Sequence[str]) -> list[tuple[Any, ...]]:
        """The fields ``names`` of each row's typed layout (:meth:`config`'s, the same objects), without building it,
        read column by column (:meth:`_fields`' values)."""
        return list(zip(*(self._field_of(name, rows) for name in names), strict=True))

    def _field_of(self, name: str, rows: np.ndarray) -> list[Any]:
        """One field of :meth:`_fields` (else the template's) for each of ``rows``."""
        c = self.columns
        if name in _INT_FIELDS:
            return c[name][rows].tolist()
        if name == "fsdp_size":
            return [fsdp or None for fsdp in c["fsdp"][rows].tolist()]
        if name == "sequence_parallel":
            return (c["tp"][rows] > 1).tolist()
        coded = {"precision": ("precision", self.precisions), "pp_schedule": ("schedule", self.schedules),
                 "moe_dispatcher": ("dispatcher", self.dispatchers)}
        if name in coded:
            column, decoded = coded[name]
            return [decoded[k] for k in c[column][rows].tolist()]
        if name in _RECOMPUTE_FIELDS:
            at = _RECOMPUTE_FIELDS.index(name)
            return [self.recomputes[k][at] for k in c["recompute"][rows].tolist()]
        if name in _SPLIT_FIELDS:
            decoded = [split_fields(split)[name] for split in self.splits]
            return [decoded[k] for k in c["split"][rows].tolist()]
        default = getattr(self.template, name)
        decoded = [choices[0].get(name, default) for choices in self.switch_choices]
        return [decoded[k] for k in c["switches"][rows].tolist()]

    def _fields(self, i: int) -> dict[str, Any]:
        """What row ``i``'s layout sets on top of the job's template."""
        c = self.columns
        tp = int(c["tp"][i])
        recompute, rnl, modules = self.recomputes[c["recompute"][i]]
        fsdp = int(c["fsdp"][i])
        return dict(
            tp=tp, pp=int(c["pp"][i]), cp=int(c["cp"][i]), ep=int(c["ep"][i]), etp=int(c["etp"][i]),
            vpp=int(c["vpp"][i]), dp=int(c["dp"][i]), mbs=int(c["mbs"][i]),
            precision=self.precisions[c["precision"][i]], recompute=recompute, recompute_num_layers=rnl,
            recompute_modules=modules, sequence_parallel=tp > 1, zero=int(c["zero"][i]),
            pp_schedule=self.schedules[c["schedule"][i]], fsdp_size=fsdp or None,
            moe_dispatcher=self.dispatchers[c["dispatcher"][i]], **split_fields(self.splits[c["split"][i]]),
            **self.switch_choices[c["switches"][i]][0],
        )

    def dims(self, i: int) -> ParallelDims:
        """:func:`projection.layout.parallel_dims` of row ``i``, from the columns."""
        c = self.columns
        return ParallelDims(tp=int(c["tp"][i]), pp=int(c["pp"][i]), cp=int(c["cp"][i]), dp=int(c["dp"][i]),
                            ep=int(c["ep"][i]), etp=int(c["etp"][i]), vpp=int(c["vpp"][i]),
                            num_microbatches=int(c["microbatches"][i]), split=self.splits[c["split"][i]])

    def key_ids(self, names: Sequence[str], rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(first row of each distinct key, key id of every row) of the columns ``names`` over ``rows`` (all rows
        when None); distinct keys in ascending packed order."""
        rows = np.arange(len(self)) if rows is None else rows
        first, inverse = packed_ids([self.columns[name][rows] for name in names], names)
        return rows[first], inverse


    def groups(self) -> list[list[int]]:
        """Indices of the layouts that differ only in recompute, each from least to most recompute: the groups
        of :func:`tools.search_core.group_by_recompute` (same groups, same order), read off the blocks: the rows
        of one (outer row, precision) block are the recompute variants of its pipeline depth."""
        starts = self.block_starts
        block_pp = self.columns["pp"][starts]
        positions: list[np.ndarray] = []
        members: list[list[int]] = []
        for pp, codes in self.variants.items():
            mine = np.flatnonzero(block_pp == pp)
            levels = [_level(self.recomputes[k]) for k in codes]
            if None in levels or len(set(levels)) != len(levels):   # no recompute order: single layouts
                rows = (starts[mine][:, None] + np.arange(len(codes))[None, :]).reshape(-1)
                positions.append(np.repeat(mine, len(codes)))
                members += [[r] for r in rows.tolist()]
                continue
            order = [k for _, k in sorted(zip(levels, range(len(codes)), strict=True))]
            positions.append(mine)
            members += (starts[mine][:, None] + np.asarray(order, dtype=np.int64)[None, :]).tolist()
        if not members:
            return []
        return [members[k] for k in np.argsort(np.concatenate(positions), kind="stable").tolist()]


    def group_arrays(self) -> GroupArrays:
        """:meth:`groups` as flat arrays (no Python list per group): the same groups, in the same order."""
        starts = self.block_starts
        sizes = np.diff(starts, append=len(self)) if len(starts) else np.zeros(0, dtype=np.int64)
        block_pp = self.columns["pp"][starts]
        width = max((len(codes) for codes in self.variants.values()), default=1)
        lookup = np.zeros((max(self.variants, default=0) + 1, width), dtype=np.int64)  # pp, place -> variant
        single = np.zeros(len(lookup), dtype=bool)                # pp without a recompute order: one group a row
        for pp, codes in self.variants.items():
            levels = [_level(self.recomputes[k]) for k in codes]
            if None in levels or len(set(levels)) != len(levels):
                single[pp] = True
                lookup[pp, :len(codes)] = np.arange(len(codes))
                continue
            lookup[pp, :len(codes)] = [k for _, k in sorted(zip(levels, range(len(codes)), strict=True))]
        offsets = np.cumsum(sizes) - sizes
        place = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(offsets, sizes)
        members = np.repeat(starts, sizes) + lookup[np.repeat(block_pp, sizes), place]
        # a block is one group, or (no recompute order) one group per row
        group_sizes = np.repeat(np.where(single[block_pp], 1, sizes), np.where(single[block_pp], sizes, 1))
        return GroupArrays(members=members, starts=np.cumsum(group_sizes) - group_sizes, sizes=group_sizes)


@dataclass(frozen=True, slots=True)
class GroupArrays:
    """Recompute groups as flat arrays: every group's members (candidate indices, least recompute first) one after
    the other, where each group starts and how many it has; indexing gives a group's members as a list."""

    members: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, g: int) -> list[int]:
        start = int(self.starts[g])
        return self.members[start:start + int(self.sizes[g])].tolist()

    def __iter__(self) -> Iterator[list[int]]:
        return (self[g] for g in range(len(self)))


def _level(variant: RecomputeVariant) -> tuple[int, int] | None:
    """Recompute order of a variant (:func:`tools.search_core.group_by_recompute`'s, read off the variant)."""
    recompute, rnl, modules = variant
    level = RECOMPUTE_LEVEL.get((recompute, rnl is not None))
    if level is None:
        return None
    return level, len(modules) if recompute == "selective" else 0


def enumerate_columns(space: SearchSpace, template: TrainingConfig) -> CandidateColumns:
    """Every legal layout of ``space`` as columns, in :func:`tools.candidates.enumerate_candidates` order.

    ``template``: the job's fields (:func:`tools.candidates.job_template`) that every layout carries.
    """
    precisions = precision_values(space)
    n = space.cluster.num_gpus
    schedules, splits, disps, recs = _Codes(), _Codes(), _Codes(), _Codes()
    variants: dict[int, list[int]] = {}
    outer: list[tuple[int, ...]] = []
    for cp in cp_values(space):
        for tp in tp_values(space, cp):
            for pp in pp_values(space, tp, cp):
                dp = n // (tp * cp * pp)
                if space.gbs % dp or not space.constraints.allows("dp", dp):
                    continue
                if pp not in variants:
                    variants[pp] = [recs(v) for v in recompute_variants(space, pp)]
                for ep, etp in expert_options(space, tp, cp, dp):
                    for vpp, schedule, split in pipeline_options(space, pp):
                        s_code, p_code = schedules(schedule), splits(split)
                        for mbs in mbs_values(space, dp, cp):
                            if not schedule_fits(schedule, pp, space.gbs // (mbs * dp)):
                                continue
                            for zero in zero_values(space, tp, pp):
                                for fsdp in fsdp_sizes(space, tp, cp, dp, zero):
                                    for dispatcher in dispatchers(space, ep, etp):
                                        outer.append((cp, tp, pp, dp, ep, etp, vpp, s_code, p_code, mbs, zero,
                                                      fsdp or 0, disps(dispatcher)))
    table = np.asarray(outer, dtype=np.int32).reshape(-1, len(OUTER))   # small codes: half the bytes of int64
    depth = table[:, OUTER.index("pp")]
    # per pp: recompute variants (a block's size) and their codes, padded into one lookup table
    size_of = np.zeros(max(variants, default=0) + 1, dtype=np.int64)
    lookup = np.zeros((len(size_of), max((len(v) for v in variants.values()), default=1)), dtype=np.int64)
    for pp, codes in variants.items():
        size_of[pp] = len(codes)
        lookup[pp, :len(codes)] = codes
    block = size_of[depth]                                   # rows of one (outer row, precision) block
    per_row = len(precisions) * block                        # rows of one outer row
    columns = {name: np.repeat(table[:, k], per_row) for k, name in enumerate(OUTER)}
    row_start = np.cumsum(per_row) - per_row
    inner = np.arange(int(per_row.sum()), dtype=np.int64) - np.repeat(row_start, per_row)  # place in its row
    rec_count = np.maximum(np.repeat(block, per_row), 1)
    columns["precision"] = (inner // rec_count).astype(np.int32)
    columns["recompute"] = lookup[columns["pp"], inner % rec_count].astype(np.int32)
    del inner, rec_count
    columns["microbatches"] = np.maximum(1, space.gbs // (columns["mbs"].astype(np.int64) * columns["dp"])
                                         ).astype(np.int32)
    low = [int(template.model_copy(update={"precision": p}).is_low_precision) for p in precisions]
    columns["low_precision"] = np.asarray(low or [0], dtype=np.int32)[columns["precision"]]
    k = np.arange(len(precisions), dtype=np.int64)
    block_starts = (row_start[:, None] + k[None, :] * block[:, None]).reshape(-1)
    block_starts = block_starts[np.repeat(block, len(precisions)) > 0]
    columns["switches"] = np.zeros(len(columns["tp"]), dtype=np.int64)
    result = CandidateColumns(template=template, columns=columns, schedules=schedules.values, splits=splits.values,
                              dispatchers=disps.values, precisions=list(precisions), recomputes=recs.values,
                              variants=variants, block_starts=block_starts)
    _choose_switches(space, result)
    return result


SWITCH_KEYS = ("recompute", "ep", "zero", "pp", "vpp", "dispatcher")
"""Columns the switch rules read (tools/switch_rules.py: CUDA graphs' recompute, EP and ZeRO exclusions; the
expert overlap's EP, VPP, recompute and dispatcher rules); the pins come with the template."""


def _choose_switches(space: SearchSpace, columns: CandidateColumns) -> None:
    """Fill the ``switches`` column: each distinct :data:`SWITCH_KEYS` key's :func:`tools.switch_rules.switch_choices`
    (computed once on its first row, with the template's switches)."""
    from tools.switch_rules import switch_choices

    if not len(columns):
        return
    # every column of the key but recompute is the same on all rows of a block (its rows are the recompute variants
    # of its depth, in order): distinct keys are (a block key, one of its depth's variants), in the packed order of
    # SWITCH_KEYS, each with the choices of its first row
    c, starts = columns.columns, columns.block_starts
    sizes = np.diff(starts, append=len(columns))
    outer = SWITCH_KEYS[1:]
    reps, block_key = columns.key_ids(outer, starts)
    pairs = []    # (key values, block key, recompute code, row)
    for b, rep in enumerate(reps.tolist()):
        values = tuple(int(c[name][rep]) for name in outer)
        for place, code in enumerate(columns.variants[values[outer.index("pp")]]):
            pairs.append(((code, *values), b, code, rep + place))
    pairs.sort()
    codes = _Codes()
    table = np.zeros((len(reps), max(len(columns.recomputes), 1)), dtype=np.int64)
    for _, b, code, row in pairs:
        table[b, code] = codes(tuple(tuple(sorted(choice.items())) for choice in
                                     switch_choices(space.framework, space.model, columns.config(row, keep=False),
                                                    ep_overlap_hides=space.ep_overlap_hides)))
    columns.switch_choices = [tuple(dict(choice) for choice in choices) for choices in codes.values]
    columns.columns["switches"] = table[np.repeat(block_key, sizes), c["recompute"]]


def iterate_configs(columns: CandidateColumns) -> Iterator[TrainingConfig]:
    """The typed config of every row, in order (builds each; for callers that need them all)."""
    for i in range(len(columns)):
        yield columns.config(i)


def enumerate_candidates(model: ModelSpec, hardware: HardwareSpec, cluster: Cluster, constraints: Constraints,
                         gbs: int, seq_len: int, finetune: str | None = None, *,
                         packed_document_tokens: int | None = None, framework: str | None = None,
                         ep_overlap_hides: bool = True) -> Iterator[TrainingConfig]:
    """Yield every legal layout of the job within ``constraints``, each once (see :mod:`tools.candidates`' docstring): the rows of
    :func:`enumerate_columns` as typed configs.

    ``finetune`` ('sft', 'lora' or None for pre-training) and ``packed_document_tokens`` (mean tokens per packed
    fine-tuning document, at most ``seq_len``; None = unpacked) and ``framework`` (the recipe framework whose
    profile and traits price the layouts; None = megatron) are part of the job, not knobs: every layout carries
    them.  ``ep_overlap_hides``: :attr:`tools.candidates.SearchSpace.ep_overlap_hides`.
    """
    space = SearchSpace(model=model, hardware=hardware, cluster=cluster, constraints=constraints, gbs=gbs,
                        seq_len=seq_len, framework=framework, ep_overlap_hides=ep_overlap_hides)
    columns = enumerate_columns(space, job_template(space, finetune, packed_document_tokens))
    for i in range(len(columns)):
        yield columns.config(i)
