"""Run an eval: load sweep files, project every run, score runs and sweeps, return the result.

`evaluate` is the entry point. Every run ends up either scored or `skipped` with its
reason (broken in the file, incomplete, nothing to compare, or a projection error), so
one bad run never stops the others. With `fill_unknown`, an incomplete run's missing keys
are filled by `fill_missing`: a bounded coordinate search (at most `FILL_BUDGET`
projections) for the legal values with the best projected tokens/s/GPU among layouts
that fit in memory, as a tuned published configuration would be.

The module is a little over 300 lines because the fill search belongs to the run loop
(it needs the run's sweep, profile and skip handling) and is small.
"""

from __future__ import annotations

import fnmatch
import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evals import scoring
from evals.runner import project_run
from evals.scoring import RunScore, SweepScore
from evals.sweep_file import LoadedRun, LoadedSweep, load_sweep_files
from projection.errors import nearest
from projection.device_profile import DeviceProfile, load_profile
from projection.errors import ProjtuneError
from projection.hardware import load_hardware
from projection.memory_verdict import passes_screen

Progress = Callable[[int, int], None]

FILL_BUDGET = 64
"""Most projections the fill search spends on one run."""
FILL_MAX_TRIES = 512
"""Most candidate configs the fill search tries on one run (illegal ones fail before projecting)."""
_NOTHING_TO_COMPARE = "nothing to compare: no throughput metric, peak memory or OOM measured"


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalOptions:
    """What to evaluate and how."""

    sweeps: tuple[str, ...] = ()
    """Sweep names or shell patterns to keep; empty keeps all."""
    gpu: str | None = None
    """Hardware id (or family) to keep; None keeps all."""
    profile: Path | None = None
    """A profile file for every run, or a directory of `<hardware id or family>.yaml`."""
    fill_unknown: bool = False
    agent: bool = False
    measured: Path | None = None
    """A folder of measurement files: measured mode for runs with one of their model and slice (others skip)."""


@dataclass(slots=True, kw_only=True)
class EvalResult:
    """Scored runs and sweeps, with the loader's issues."""

    files: list[str]
    load_issues: list[str]
    runs: list[RunScore] = field(default_factory=list)
    sweeps: list[SweepScore] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Return the `summary` block of the JSON contract."""
        return scoring.summarize(files=len(self.files), runs=self.runs, sweeps=self.sweeps)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON contract (see `projtune eval --help`)."""
        return {
            "summary": self.summary(), "by_gpu": scoring.by_gpu(self.runs),
            "by_family": scoring.by_family(self.runs), "sweeps": [asdict(s) for s in self.sweeps],
            "runs": [asdict(r) for r in self.runs], "load_issues": self.load_issues,
        }


class ProfileSource:
    """Device profiles by hardware id: one file for all, a directory by id/family, or the shipped ones."""

    def __init__(self, path: Path | None) -> None:
        """Check the profiles now: a file that does not load, or a folder with no ``*.yaml`` in it, is refused
        before any run (each run used to be skipped with the same error, or quietly priced with the shipped
        profile, and the eval ended with exit code 0).

        Raises:
            ProjtuneError: the path does not exist, a profile in it is not valid, or a folder holds none.
        """
        self.path = path
        if path is None:
            return
        if not path.exists():
            raise ProjtuneError(f"profile path '{path}' does not exist")
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        if not files:
            raise ProjtuneError(f"profile folder '{path}' holds no <hardware id|family>.yaml profile "
                                "(give a profile file, or a folder such as projection/catalog/profiles)")
        for file in files:
            load_profile(file)

    def file_for(self, gpu: str) -> Path | None:
        """Return the profile file for a hardware id, or None for the shipped default."""
        if self.path is None or self.path.is_file():
            return self.path
        for stem in (gpu, family_of(gpu)):
            if stem and (self.path / f"{stem}.yaml").is_file():
                return self.path / f"{stem}.yaml"
        return None

    def profile_for(self, gpu: str) -> DeviceProfile | None:
        """Return the profile for a hardware id, or None for the shipped default."""
        file = self.file_for(gpu)
        return load_profile(file) if file is not None else None


def family_of(gpu: str) -> str | None:
    """Return the hardware family of a hardware id, or None when the catalog lacks it."""
    try:
        return load_hardware(gpu).family
    except ProjtuneError:
        return None


def hardware_hint(name: str, sweeps: Sequence[LoadedSweep], *, kinds: tuple[str, ...] = ("id", "family")) -> str:
    """``"; did you mean x? (hardware ids and families in these sweeps: ...)"``: what a ``--gpu`` / ``--family``
    name that matched no sweep could have been (``kinds``: hardware ids, families or both); ``""`` for a name
    that is present."""
    present = sorted({n for s in sweeps for kind, n in (("id", s.sweep.cluster.gpu),
                                                        ("family", family_of(s.sweep.cluster.gpu)))
                      if n and kind in kinds})
    if name in present:
        return ""
    near = nearest(name.lower(), present)
    what = " and ".join({"id": "hardware ids", "family": "families"}[k] for k in kinds)
    return (f"; did you mean {near}?" if near else "") + f" ({what} in these sweeps: {', '.join(present)})"


def select_sweeps(sweeps: Sequence[LoadedSweep], options: EvalOptions) -> list[LoadedSweep]:
    """Keep the sweeps matching `--sweep` and `--gpu`; raise ProjtuneError on a pattern matching nothing."""
    names = [s.name for s in sweeps]
    for pattern in options.sweeps:
        if not fnmatch.filter(names, pattern):
            near = nearest(pattern, names)
            raise ProjtuneError(f"no sweep named '{pattern}'" + (f"; did you mean {near}?" if near else ""))
    kept = [s for s in sweeps if not options.sweeps or any(fnmatch.fnmatch(s.name, p) for p in options.sweeps)]
    if options.gpu is not None:
        on_gpu = [s for s in kept if options.gpu in (s.sweep.cluster.gpu, family_of(s.sweep.cluster.gpu))]
        if kept and not on_gpu:
            raise ProjtuneError(f"no sweep on --gpu '{options.gpu}'" + hardware_hint(options.gpu, kept))
        kept = on_gpu
    return kept


def evaluate(paths: Sequence[Path | str], options: EvalOptions | None = None,
             progress: Progress | None = None) -> EvalResult:
    """Project and score every run of the sweep files under `paths`.

    Raises:
        ProjtuneError: a `--sweep` name matches nothing, or the profile path is unreadable.
    """
    options = options or EvalOptions()
    profiles = ProfileSource(options.profile)
    measurements = None
    if options.measured is not None:
        from bench.measured_set import MeasurementSet

        measurements = MeasurementSet(options.measured)
    loaded = load_sweep_files(list(paths))
    sweeps = select_sweeps(loaded.sweeps, options)
    kept = {s.name for s in sweeps}
    issues = [i for i in loaded.errors if i.level == "file" or i.sweep in kept or i.level == "sweep"]
    files = sorted({s.file for s in sweeps} | {i.file for i in issues})
    result = EvalResult(files=files, load_issues=[i.message for i in issues])
    total, done = sum(len(s.runs) for s in sweeps), 0
    for sweep in sweeps:
        runs = []
        for run in sweep.runs:
            runs.append(score_run(sweep, run, profiles=profiles, fill_unknown=options.fill_unknown,
                                  measurements=measurements))
            done += 1
            if progress is not None:
                progress(done, total)
        result.runs += runs
        result.sweeps.append(_score_sweep(sweep, runs, profiles, agent=options.agent))
    return result


def _score_sweep(sweep: LoadedSweep, runs: list[RunScore], profiles: ProfileSource, *, agent: bool) -> SweepScore:
    cluster = sweep.sweep.cluster
    score = scoring.score_sweep(name=sweep.name, file=sweep.file, gpu=cluster.gpu, num_gpus=cluster.num_gpus,
                                runs=runs)
    if agent and score.rank_metric is not None:
        from evals.agent_eval import agent_result

        _, ranked = scoring.rank_runs(runs)
        profile_file = profiles.file_for(cluster.gpu)
        score.agent = agent_result(sweep, ranked, profile_path=str(profile_file) if profile_file else None)
    return score


def score_run(sweep: LoadedSweep, run: LoadedRun, *, profiles: ProfileSource, fill_unknown: bool,
              measurements: Any = None) -> RunScore:
    """Project one run and compare it with its measurements (or say why it is skipped)."""
    gpu = sweep.sweep.cluster.gpu
    measured = run.run.measured.model_dump(exclude_none=True) if run.run is not None else {}
    score = RunScore(
        sweep=sweep.name, index=run.index, config=dict(run.config), metric=run.metric,
        measured=measured.get(run.metric) if run.metric else None, projected=None, ape=None,
        memory_measured_gib=measured.get("peak_memory_gib"), memory_projected_gib=None,
        oom_measured=measured.get("oom"), oom_projected=None, filled=False, skipped=None,
        gpu=gpu, family=family_of(gpu), file=sweep.file, missing_keys=list(run.missing_keys),
    )
    score.skipped = _skip_reason(run, measured, fill_unknown)
    if score.skipped is not None:
        return score
    try:
        profile = profiles.profile_for(gpu)
        if run.missing_keys and measurements is not None:
            raise ProjtuneError("incomplete run: --measured needs every key of the run's per-GPU slice")
        if run.missing_keys:
            score.fill, projection, metrics = fill_missing(sweep, run, profile=profile)
            score.filled = True
        else:
            _, projection, metrics = project_run(sweep, run, profile=profile, measurements=measurements)
    except ProjtuneError as err:
        score.skipped = str(err)
        return score
    except Exception as err:  # noqa: BLE001 - an engine bug in one run must not stop the eval
        score.skipped = f"projection error: {type(err).__name__}: {err}"
        return score
    _compare(score, run, measured, projection.memory.verdict, metrics, _band(projection))
    score.band_reasons = list(projection.band_reasons)
    score.novelty = [n.key for n in projection.band_novelty]
    return score


def _skip_reason(run: LoadedRun, measured: dict[str, Any], fill_unknown: bool) -> str | None:
    if run.broken is not None:
        return f"broken run: {run.broken}"
    if run.missing_keys and not fill_unknown:
        return f"incomplete: missing {', '.join(run.missing_keys)} (use --fill-unknown to fill them)"
    if run.metric is None and "peak_memory_gib" not in measured and "oom" not in measured:
        return _NOTHING_TO_COMPARE
    return None


def _band(projection: Any) -> tuple[float, float]:
    """(low, high) multipliers of the projection's 80% throughput interval (projection/uncertainty.py)."""
    tokens = projection.tokens_per_s_per_gpu
    return projection.tokens_per_sec_per_gpu_low / tokens, projection.tokens_per_sec_per_gpu_high / tokens


def _compare(score: RunScore, run: LoadedRun, measured: dict[str, Any], verdict: str,
             metrics: dict[str, float], band: tuple[float, float] = (1.0, 1.0)) -> None:
    score.verdict = verdict
    score.oom_projected = verdict == scoring.OOM_VERDICT
    score.projected_metrics = metrics
    score.memory_projected_gib = metrics["peak_memory_gib"]
    if run.metric is not None and score.measured is not None:
        score.projected = metrics[run.metric]
        score.ape, score.signed_error = scoring.errors(run.metric, score.measured, score.projected)
        score.projected_low, score.projected_high = scoring.interval(run.metric, score.projected, band)
    baselines = {k: v.model_dump(exclude_none=True) for k, v in run.run.baselines.items()} if run.run else {}
    score.baselines = scoring.baseline_errors(run.metric, measured, baselines)


# ---- fill search (--fill-unknown) ------------------------------------------------------------

_LAYOUT_KEYS = ("tp", "pp", "vpp", "cp", "ep", "etp")
_FIXED_CHOICES: dict[str, tuple[Any, ...]] = {
    "mbs": (1, 2, 4, 8), "vpp": (1, 2, 4), "cp": (1, 2, 4, 8), "ep": (1, 2, 4, 8, 16, 32, 64),
    "etp": (1, 2, 4, 8), "recompute": ("selective", "none", "full"), "zero": (1, 0, 3),
    "sequence_parallel": (True, False),
}
_MAX_PP = 16


def _choices(key: str, sweep: LoadedSweep, run: LoadedRun) -> tuple[Any, ...]:
    """Candidate values of one missing key (gbs is chosen per layout, see `_gbs_choices`)."""
    cluster = sweep.sweep.cluster
    if key in ("seq_len", "precision"):
        # A sweep shares these; take the values its other runs give, else the format default.
        seen = Counter(r.config[key] for r in sweep.runs if r.index != run.index and key in r.config)
        if seen:
            return tuple(v for v, _ in seen.most_common())
        torchtitan = run.config.get("framework") == "torchtitan"
        return (8192 if torchtitan else 4096,) if key == "seq_len" else ("bf16",)
    if key == "tp":
        return tuple(d for d in (1, 2, 4, 8) if d <= cluster.gpus_per_node and cluster.num_gpus % d == 0)
    if key == "pp":
        return tuple(d for d in range(1, _MAX_PP + 1) if cluster.num_gpus % d == 0)
    return _FIXED_CHOICES.get(key, ())


def _batch_step(values: dict[str, Any], num_gpus: int) -> int:
    """Return mbs * dp of a config (gbs must be a multiple of it)."""
    dp = num_gpus // (values.get("tp", 1) * values.get("pp", 1) * values.get("cp", 1)) or 1
    return values.get("mbs", 1) * dp


def _gbs_choices(values: dict[str, Any], num_gpus: int) -> list[int]:
    """Global batches divisible by mbs*dp: 1-8 micro-batches per stage, and powers of two 16..4096."""
    step = _batch_step(values, num_gpus)
    near = {step * values.get("pp", 1) * k for k in (1, 2, 4, 8)}
    powers = {2**i for i in range(4, 13) if 2**i % step == 0}
    return sorted(near | powers)


def fill_missing(sweep: LoadedSweep, run: LoadedRun, *, profile: DeviceProfile | None
                 ) -> tuple[dict[str, Any], Any, dict[str, float]]:
    """Fill the run's missing keys with the legal values projected best; return (fill, projection, metrics).

    Raises:
        ProjtuneError: no legal value set was found within the budget.
    """
    fill_gbs = "gbs" in run.missing_keys
    # Keys without candidates (dp, derived; framework, fsdp_size, ...) keep the format default.
    choices = {k: c for k in run.missing_keys if (c := _choices(k, sweep, run))}
    keys = list(choices)
    groups = [tuple(k for k in keys if k in _LAYOUT_KEYS)] + [(k,) for k in keys if k not in _LAYOUT_KEYS]
    groups = [g for g in groups if g]
    search = _FillSearch(sweep, run, profile, fill_gbs)
    options = [list(itertools.product(*(choices[k] for k in g))) for g in groups]
    current = search.first_legal(groups, options)
    if current is None:
        raise ProjtuneError(f"incomplete: no legal value found for {', '.join(run.missing_keys)} in "
                            f"{search.tried} tries (last: {search.last_error})")
    for _ in range(2):
        before = current
        for group, values in zip(groups, options, strict=True):
            for combo in values:
                current = search.better(current, {**current, **dict(zip(group, combo, strict=True))})
        if fill_gbs:
            for gbs in search.gbs_choices(current):
                current = search.better(current, {**current, "gbs": gbs})
        if current == before or search.exhausted:
            break
    projection, metrics = search.results[_frozen(search.complete(current))]
    return search.complete(current), projection, metrics


def _frozen(values: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(values.items()))


class _FillSearch:
    """Projections of fill candidates, cached, within the budget."""

    def __init__(self, sweep: LoadedSweep, run: LoadedRun, profile: DeviceProfile | None, fill_gbs: bool) -> None:
        self.sweep, self.run, self.profile, self.fill_gbs = sweep, run, profile, fill_gbs
        self.results: dict[tuple[tuple[str, Any], ...], tuple[Any, dict[str, float]] | None] = {}
        self.projected = self.tried = 0
        self.last_error = ""

    @property
    def exhausted(self) -> bool:
        """Return True when the projection budget or the try limit is spent."""
        return self.projected >= FILL_BUDGET or self.tried >= FILL_MAX_TRIES

    def gbs_choices(self, values: dict[str, Any]) -> list[int]:
        """Return the gbs candidates of a fill (with the run's own keys)."""
        return _gbs_choices({**values, **self.run.config}, self.sweep.sweep.cluster.num_gpus)

    def complete(self, values: dict[str, Any]) -> dict[str, Any]:
        """Set gbs, when it is missing, to about 4 micro-batches per stage unless it still divides."""
        if not self.fill_gbs:
            return values
        config = {**values, **self.run.config}
        step = _batch_step(config, self.sweep.sweep.cluster.num_gpus)
        if "gbs" in values and values["gbs"] % step == 0:
            return values
        target = 4 * step * config.get("pp", 1)
        return {**values, "gbs": min(self.gbs_choices(values), key=lambda g: abs(g - target))}

    def score(self, values: dict[str, Any]) -> tuple[bool, float] | None:
        """Return (fits in memory, tokens/s/GPU) of a fill, or None when illegal or over budget."""
        values = self.complete(values)
        key = _frozen(values)
        if key not in self.results:
            if self.exhausted:
                return None
            self.tried += 1
            try:
                _, projection, metrics = project_run(self.sweep, self.run, profile=self.profile, fill=values)
            except (ProjtuneError, ValueError, ArithmeticError) as err:  # illegal, even if legality missed it
                self.results[key] = None
                self.last_error = str(err)
            else:
                self.projected += 1
                self.results[key] = (projection, metrics)
        found = self.results[key]
        if found is None:
            return None
        projection, _ = found
        memory = projection.memory  # the screen the search and the agent use, with no headroom demanded
        fits = passes_screen(memory.peak_bytes, memory.capacity_bytes, 0.0, memory.margins)
        return fits, projection.tokens_per_s_per_gpu

    def better(self, current: dict[str, Any], candidate: dict[str, Any]) -> dict[str, Any]:
        """Return whichever of two fills scores higher (the current one on ties)."""
        new, old = self.score(candidate), self.score(current)
        return self.complete(candidate) if new is not None and old is not None and new > old else current

    def first_legal(self, groups: list[tuple[str, ...]], options: list[list[tuple[Any, ...]]]
                    ) -> dict[str, Any] | None:
        """Return the first legal fill in the product of every group's choices."""
        for combos in itertools.product(*options):
            values = {k: v for group, combo in zip(groups, combos, strict=True)
                      for k, v in zip(group, combo, strict=True)}
            if self.score(values) is not None:
                return self.complete(values)
            if self.exhausted:
                return None
        return None

