"""Why a search found nothing: the constraint that excludes everything, or the GPU count that would fit.

Two kinds of empty result:
- no legal layout at all: either a constraint (tried one at a time) excludes every legal
  layout, or the job itself cannot be split (gbs not divisible by any data-parallel degree);
- legal layouts exist but none passes the memory screen: the headroom asked for is too
  high, or more GPUs are needed (the smallest multiple of gpus_per_node for which some
  layout fits), or a constraint excludes every layout that would fit.
The fit checks look at the most memory-frugal layout of each group of layouts that share
their weight/optimizer sharding (mbs 1, most recompute, 1F1B first), and stop at the first fit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from projection.memory import GIB
from projection.memory_verdict import passes_screen
from projection.training_config import TrainingConfig
from projection.vocabulary import PIPELINE_SCHEDULES, RECOMPUTE_LEVEL
from tools.candidates import SearchSpace, cp_values, pp_values, tp_values
from tools.candidate_columns import enumerate_candidates
from tools.constraints import Constraints
from tools.search_core import screen_memory

if TYPE_CHECKING:
    from projection.job import Job
    from tools.search_request import SearchRequest

MAX_GPUS = 1 << 17            # largest GPU count the "how many GPUs would fit" search tries
_MOST_RECOMPUTE = max(RECOMPUTE_LEVEL.values())
_SCHEDULE_RANK = {"1f1b": 0, "interleaved": 1, "zero-bubble": 2}


def _candidates(job: Job, request: SearchRequest, constraints: Constraints) -> Iterator[TrainingConfig]:
    return enumerate_candidates(job.model, job.hardware, job.cluster, constraints, request.gbs, request.seq_len)


def _frugal(configs: Iterator[TrainingConfig]) -> list[TrainingConfig]:
    """The least memory-hungry layout of each sharding group (same tp, pp, cp, ep, etp, dp, zero, precision)."""
    best: dict[tuple[object, ...], tuple[tuple[int, int, int, int], TrainingConfig]] = {}
    for c in configs:
        key = (c.tp, c.pp, c.cp, c.ep, c.etp, c.dp, c.zero, c.precision)
        recompute = _MOST_RECOMPUTE - RECOMPUTE_LEVEL[(c.recompute, c.recompute_num_layers is not None)]  # most first
        score = (c.mbs, recompute, _SCHEDULE_RANK.get(c.schedule, 3), c.vpp)
        if key not in best or score < best[key][0]:
            best[key] = (score, c)
    return [c for _, c in best.values()]


def roomiest_layout(job: Job, request: SearchRequest, constraints: Constraints
                    ) -> tuple[float, TrainingConfig] | None:
    """(headroom, layout) of the frugal layout with the most free memory, or None when there is no layout."""
    best: tuple[float, TrainingConfig] | None = None
    for config in _frugal(_candidates(job, request, constraints)):
        headroom = screen_memory(job, config).headroom_fraction
        if best is None or headroom > best[0]:
            best = (headroom, config)
    return best


def fitting_layout(job: Job, request: SearchRequest, constraints: Constraints) -> TrainingConfig | None:
    """A layout that passes the memory screen (the first found among the frugal ones), or None."""
    for config in _frugal(_candidates(job, request, constraints)):
        memory = screen_memory(job, config)
        if passes_screen(memory.peak_bytes, memory.capacity_bytes, constraints.min_headroom, memory.margins):
            return config
    return None


def smallest_gpu_count(job: Job, request: SearchRequest, constraints: Constraints) -> int | None:
    """The smallest multiple of gpus_per_node above num_gpus for which some layout fits (None up to MAX_GPUS)."""
    step = request.gpus_per_node
    low = request.num_gpus // step          # in units of nodes; low itself does not fit
    high = max(1, low) * 2
    while high * step <= MAX_GPUS and fitting_layout(job.resized(high * step), request, constraints) is None:
        low, high = high, high * 2
    if high * step > MAX_GPUS:
        return None
    while high - low > 1:                   # fits is monotone in GPU count up to divisibility; bisect
        middle = (low + high) // 2
        if fitting_layout(job.resized(middle * step), request, constraints) is None:
            low = middle
        else:
            high = middle
    return high * step


def _one(name: str, constraints: Constraints) -> str:
    return Constraints(**{name: getattr(constraints, name)}).describe()[0]


def _split_reason(job: Job, request: SearchRequest) -> str:
    space = SearchSpace(model=job.model, hardware=job.hardware, cluster=job.cluster, constraints=Constraints(),
                        gbs=request.gbs, seq_len=request.seq_len)
    n = job.cluster.num_gpus
    dps = sorted({n // (t * c * p) for c in cp_values(space) for t in tp_values(space, c)
                  for p in pp_values(space, t, c)})
    if not dps:
        return (f"{n} GPUs cannot be split into tp*pp*cp model-parallel groups for {job.model.name} "
                f"(tp must divide {job.model.num_attention_heads} heads and fit a node; pp must split "
                f"{job.model.num_layers} layers evenly)")
    return (f"gbs={request.gbs} is not divisible by any data-parallel degree this job allows "
            f"(dp = {n}/(tp*pp*cp) in {dps[:12]}{' ...' if len(dps) > 12 else ''})")


def _runs(framework: str, job: Job, probe: TrainingConfig, schedule: str) -> bool:
    """Whether a launch framework's rules (:mod:`tools.framework_rules`) accept ``schedule`` on a pipelined layout of
    the job (``probe``, with vpp 2 for zbv, else 1)."""
    from tools.framework_rules import framework_violations

    vpp = 2 if schedule == "zbv" else probe.vpp if schedule == "interleaved" else 1
    config = probe.model_copy(update={"pp_schedule": schedule, "vpp": vpp})
    return not any(r.startswith(f"pp_schedule={schedule}")
                   for r in framework_violations(framework, job.model, job.cluster, config))


def _unsearched_schedule(job: Job, request: SearchRequest, searched: list[str], probe: TrainingConfig | None,
                         job_text: str) -> str | None:
    """The one line for a ``pp_schedule`` constraint that names only schedules the search never enumerates for the
    job and framework (zbv: :func:`tools.candidates.pipeline_options` tries 1f1b, zero-bubble with vpp 1 and
    interleaved; a launch framework keeps those its rules accept), else None.  The search space is not widened
    (that would move the benchmark figures): the line says what it holds and which launch frameworks run the
    schedule asked for."""
    from tools.framework_rules import FRAMEWORKS, launch_framework_of

    rule = request.constraints.rule("pp_schedule")
    if rule is None:
        return None
    asked = [s for s in PIPELINE_SCHEDULES if rule(s)]
    launch = launch_framework_of(request.framework) if request.framework else None
    neutral = searched
    if launch is not None and probe is not None:
        searched = [s for s in searched if s == "1f1b" or _runs(launch, job, probe, s)]
    if not asked or any(s in searched for s in asked):
        return None
    where = ("is not in the search space" if not any(s in neutral for s in asked) else
             f"is searched, but {launch} does not run it")
    runners = ""
    for schedule in asked if probe is not None else []:
        names = [f for f in FRAMEWORKS if _runs(f, job, probe, schedule)]
        runners += f"; {', '.join(names) or 'no launch framework'} run{'s' if len(names) <= 1 else ''} {schedule}"
    framework = f" with {request.framework}" if request.framework else ""
    vpp = " --vpp 2" if asked[0] == "zbv" else ""
    return (f"pp_schedule={','.join(asked)} {where}: for {job_text}{framework} the search enumerates "
            f"{', '.join(searched) or 'no schedule'} only{runners}; project a layout with it instead "
            f"(projtune project ... --schedule {asked[0]}{vpp})")


def _no_legal_layout(job: Job, request: SearchRequest) -> str:
    c = request.constraints
    base, searched, probe = 0, set(), None
    for config in _candidates(job, request, Constraints(min_headroom=c.min_headroom)):
        base += 1
        searched.add(config.schedule)
        probe = config if probe is None and config.pp > 1 else probe
    job_text = f"{job.model.name} on {job.cluster.num_gpus} x {job.hardware.id}"
    if base == 0:
        return f"no legal layout of {job_text}: {_split_reason(job, request)}"
    unsearched = _unsearched_schedule(job, request, [s for s in PIPELINE_SCHEDULES if s in searched], probe, job_text)
    if unsearched is not None:
        return unsearched
    names = [name for name in c.active() if name != "min_headroom"]
    culprits = [name for name in names if next(_candidates(job, request, c.without(name)), None) is not None]
    if culprits:
        listed = " and ".join(f"'{_one(name, c)}'" for name in culprits)
        return (f"no legal layout satisfies the constraints: {listed} excludes every legal layout of {job_text} "
                f"({base} legal layouts without constraints)")
    return (f"the constraints {', '.join(c.describe())} together exclude every legal layout of {job_text} "
            f"({base} legal layouts without them)")


def _nothing_fits(job: Job, request: SearchRequest) -> str:
    c = request.constraints
    capacity_gib = job.hardware.hbm_capacity_bytes / GIB
    n = job.cluster.num_gpus
    closest = ""
    roomiest = roomiest_layout(job, request, c)
    if roomiest is not None:
        headroom, config = roomiest
        closest = f"closest: {_layout(job, config)} needs {(1 - headroom) * capacity_gib:.1f} GiB per GPU"
        if c.min_headroom > 0 and headroom >= 0:
            return (f"layouts fit in memory but none leaves the {c.min_headroom:.0%} headroom asked for; the roomiest, "
                    f"{_layout(job, config)}, leaves {headroom:.1%} of {capacity_gib:.1f} GiB")
    parts = [f"no layout of {job.model.name} fits in {capacity_gib:.1f} GiB per {job.hardware.id} on {n} GPUs"]
    needed = smallest_gpu_count(job, request, c)
    if needed is not None:
        within = " within the constraints" if any(k != "allow_fp8" for k in c.active()) else ""
        parts.append(f"the smallest layout that fits{within} needs {needed} GPUs; you gave {n}")
    elif c.active():
        parts.append(f"no GPU count up to {MAX_GPUS} fits within the constraints")
    names = [name for name in c.active() if name != "min_headroom"]
    for name in names:
        found = fitting_layout(job, request, c.without(name))
        if found is not None:
            parts.append(f"constraint '{_one(name, c)}' excludes every layout that fits here "
                         f"(without it, e.g. {_layout(job, found)} fits)")
    if closest:
        parts.append(closest)
    return "; ".join(parts)


def explain_empty(request: SearchRequest, job: Job, *, enumerated: int,
                  roomiest: tuple[float, TrainingConfig] | None) -> str:
    """Say why a search returned no layout, with numbers (see the module docstring)."""
    if request.candidates is not None:
        if not request.candidates:
            return "no candidates given"
        if roomiest is None:
            return "none of the given candidates is legal within the constraints (see rejected)"
        return _nothing_fits_explicit(job, roomiest)
    if enumerated == 0:
        return _no_legal_layout(job, request)
    return _nothing_fits(job, request)


def _nothing_fits_explicit(job: Job, roomiest: tuple[float, TrainingConfig]) -> str:
    headroom, config = roomiest
    capacity_gib = job.hardware.hbm_capacity_bytes / GIB
    return (f"none of the given candidates passes the memory screen on {job.cluster.num_gpus} x {job.hardware.id}; "
            f"the roomiest, {_layout(job, config)}, needs {(1 - headroom) * capacity_gib:.1f} "
            f"of {capacity_gib:.1f} GiB")


def _layout(job: Job, config: TrainingConfig) -> str:
    from tools.formatting import layout_text

    dp = config.data_parallel(job.cluster.num_gpus)
    return layout_text(config.model_dump(exclude_none=True) | {"dp": dp})
