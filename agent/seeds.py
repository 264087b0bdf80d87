"""Deterministic seed trials (Primus-style): a recipe baseline, then single-axis moves away from it.

The baseline is what a Megatron recipe would start from: bf16, selective recompute, micro-batch
1, distributed optimizer (ZeRO 1), 1F1B, experts spread over a node (an NVL72 rack: its NVLink
domain), and the smallest model-parallel size tp*pp (TP first, inside a node) whose memory passes the screen.  The moves
change one axis at a time (recompute sweep, FP8, micro-batch, schedule, TP, PP, EP, ZeRO), the
order Primus's seed planner tries them in.  Every seed is inside the search space of the
request (``LayoutSpace.in_space``), so seeds can enrich the history but never out-rank the search.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agent.space import LayoutSpace
from agent.toolbox import Toolbox, ToolFailed
from projection.legality import tp_span
from projection.memory_verdict import passes_screen
from projection.pipeline_split import DEFAULT_SPLIT
from projection.training_config import TrainingConfig
from projection.vocabulary import RECOMPUTES
from tools.candidates import (
    cp_values,
    expert_options,
    pipeline_options,
    pp_values,
    precision_values,
    recompute_module_sets,
    searched_split,
    split_fields,
    tp_values,
)

MAX_SEEDS = 12
MAX_BASELINE_SCREENS = 24


def _recipe(job: LayoutSpace, tp: int, pp: int, cp: int) -> dict[str, Any]:
    s = job.space
    dp = job.num_gpus // (tp * pp * cp)
    eps = [e for e, et in expert_options(s, tp, cp, dp) if et == 1] or [1]
    node_eps = [e for e in eps if e <= tp_span(job.hardware, job.cluster)] or eps   # one scale-up domain (NVL72: rack)
    precisions = precision_values(s)
    return {"tp": tp, "pp": pp, "cp": cp, "ep": max(node_eps), "mbs": 1, "zero": 1, "recompute": "selective",
            "precision": "bf16" if "bf16" in precisions else (precisions[0] if precisions else "bf16"),
            "sequence_parallel": tp > 1, "pp_schedule": "1f1b",
            **{k: v for k, v in split_fields(searched_split(job.model.num_layers, job.num_gpus, pp, 1)
                                             or DEFAULT_SPLIT).items() if v is not None}}


def _in_space(job: LayoutSpace, raw: dict[str, Any]) -> TrainingConfig | None:
    checked = job.check(raw)
    if checked.config is None or checked.status != "ok" or not job.in_space(checked.config):
        return None
    return checked.config


def baseline(job: LayoutSpace, tools: Toolbox) -> tuple[TrainingConfig | None, str]:
    """The recipe baseline and why it was chosen (None when the request allows no recipe-like layout)."""
    s = job.space
    shapes = sorted(((tp, pp, cp) for cp in cp_values(s) for tp in tp_values(s, cp) for pp in pp_values(s, tp, cp)),
                    key=lambda t: (t[0] * t[1] * t[2], t[1], t[2]))
    roomiest: tuple[float, TrainingConfig] | None = None
    for tp, pp, cp in shapes[:MAX_BASELINE_SCREENS]:
        config = _in_space(job, _recipe(job, tp, pp, cp))
        if config is None:
            continue
        try:
            memory = tools.check_memory(job.plain(config))
        except ToolFailed:   # recorded in tools.failures (the seed node puts it in the state's tool_errors)
            continue
        headroom = memory.headroom_fraction
        if passes_screen(memory.peak_gib, memory.capacity_gib, job.constraints.min_headroom):
            return config, (f"recipe baseline: smallest model-parallel size that fits (tp*pp*cp = {tp * pp * cp}), "
                            f"bf16, selective recompute, mbs 1, ZeRO 1")
        if roomiest is None or headroom > roomiest[0]:
            roomiest = (headroom, config)
    if roomiest is not None:
        return roomiest[1], "recipe baseline (no recipe-like layout fits; this one has the most headroom)"
    return None, ""


def _moves(job: LayoutSpace, c: TrainingConfig) -> Iterator[tuple[dict[str, Any], str]]:
    """Single-axis changes of ``c`` with their reasons, in the seed planner's order."""
    base = c.model_dump(exclude_none=True, exclude={"dp"})
    for recompute in RECOMPUTES:
        if recompute != c.recompute:
            yield {**base, "recompute": recompute, "recompute_num_layers": None}, f"recompute sweep: {recompute}"
    if c.recompute == "selective":
        for modules in recompute_module_sets(job.space):
            if tuple(modules) != tuple(c.recompute_modules):
                yield {**base, "recompute_modules": list(modules)}, f"selective recompute of {', '.join(modules)}"
    for precision in precision_values(job.space):
        if precision != c.precision and precision != "bf16" and c.precision == "bf16":
            yield {**base, "precision": precision}, f"FP8 GEMMs ({precision})"
            break
    if c.precision != "bf16":
        yield {**base, "precision": "bf16"}, "bf16 instead of FP8"
    yield {**base, "mbs": c.mbs * 2}, f"micro-batch {c.mbs * 2}: bigger GEMMs, fewer micro-batches"
    if c.mbs > 1:
        yield {**base, "mbs": c.mbs // 2}, f"micro-batch {c.mbs // 2}: less activation memory"
    for vpp, schedule, split in pipeline_options(job.space, c.pp):
        if (vpp, schedule) != (c.vpp, c.schedule):
            yield ({**base, "vpp": vpp, "pp_schedule": schedule, **split_fields(split)},
                   f"pipeline schedule {schedule} (vpp {vpp})")
    for factor, why in ((0.5, "halve TP: less TP communication"), (2, "double TP: less memory per GPU")):
        tp = int(c.tp * factor)
        if tp >= 1:
            yield {**base, "tp": tp, "sequence_parallel": tp > 1}, why
    for factor, why in ((2, "double PP: less memory per GPU"), (0.5, "halve PP: smaller pipeline bubble")):
        pp = int(c.pp * factor)
        if pp >= 1 and (split := searched_split(job.model.num_layers, job.num_gpus, pp, 1)) is not None:
            yield {**base, "pp": pp, "vpp": 1, "pp_schedule": "1f1b", **split_fields(split)}, why
    if job.model.is_moe:
        for factor, why in ((2, "double EP: fewer experts per GPU"), (0.5, "halve EP: smaller all-to-all")):
            ep = int(c.ep * factor)
            if ep >= 1:
                yield {**base, "ep": ep}, why
    for zero, why in ((0, "ZeRO 0: no optimizer sharding traffic"), (1, "ZeRO 1: distributed optimizer"),
                      (3, "ZeRO 3 (FSDP): shard the weights too")):
        if zero != c.zero:
            yield {**base, "zero": zero}, why


def single_axis_moves(job: LayoutSpace, config: TrainingConfig, *, limit: int, skip: set[str]) -> list[dict[str, Any]]:
    """Up to ``limit`` in-space single-axis moves of ``config`` whose keys are not in ``skip``, as proposals."""
    out: list[dict[str, Any]] = []
    seen = set(skip)
    for raw, reason in _moves(job, config):
        moved = _in_space(job, raw)
        if moved is None or job.key(moved) in seen:
            continue
        seen.add(job.key(moved))
        out.append({"config": job.plain(moved), "reason": reason})
        if len(out) >= limit:
            break
    return out


def seed_proposals(job: LayoutSpace, tools: Toolbox, limit: int = MAX_SEEDS) -> list[dict[str, Any]]:
    """Baseline plus single-axis trials (at most ``limit``), each tagged with source 'seed'."""
    if job.explicit is not None:
        return []  # an explicit candidate set is the whole space; the policy ranks it
    base, why = baseline(job, tools)
    if base is None:
        return []
    seeds = [{"config": job.plain(base), "reason": why, "baseline": True}]
    seeds += single_axis_moves(job, base, limit=limit - 1, skip={job.key(base)})
    return [{**s, "source": "seed", "search_rank": None} for s in seeds]
