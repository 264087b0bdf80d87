"""Read anchors (measured runs of a job, :class:`projection.anchor.AnchorRun`) from files: ``--anchor FILE``.

One reader for every kind of evidence, chosen by the file:

- a training log (Megatron-LM / Primus / torchtitan; any file that is not YAML or JSON): through
  :func:`evals.log_import.import_logs`, one run per log;
- a sweep file (``.yaml`` / ``.yml``, shared/specs/sweep-format.md): every complete run with a throughput
  metric; ``FILE#SWEEP`` keeps one sweep, ``FILE#SWEEP#RUN`` one run (0-based index);
- a measured-mode result (``.json``, written by ``projtune bench run``): its benchmark layout restored to its
  target layout by :func:`bench.restore.measured_anchor` (measured mode's restore);
- a folder: every such file in it, sorted.

Measured step time comes from the run's primary metric: seconds per step directly, tokens/s/GPU as
``gbs * seq_len / (tokens/s/GPU * GPUs)``, model TFLOP/s and MFU through the source's FLOP formula
(:func:`evals.runner.source_flops_per_step`), as ``projtune eval`` compares them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evals.log_import import LogImportError, import_logs
from evals.runner import run_specs, source_flops_per_step
from evals.sweep_file import LoadedRun, LoadedSweep, load_sweep_files
from evals.sweep_models import SweepFile, primary_metric
from projection.anchor import AnchorRun
from projection.errors import ProjtuneError

_SWEEP_SUFFIXES = (".yaml", ".yml")
_MEASUREMENT_SUFFIXES = (".json",)
_LOG_SUFFIXES = (".log", ".txt", ".out", ".err")


def measured_time_s(sweep: LoadedSweep, run: LoadedRun) -> float:
    """Seconds per step of a run from its primary metric.

    Raises:
        ProjtuneError: the run measured no throughput, or its config is not projectable.
    """
    measured = run.run.measured if run.run is not None else None
    if measured is None or run.metric is None:
        raise ProjtuneError(f"{sweep.file}: sweep '{sweep.name}' run {run.index} measured no throughput "
                            "(iteration_time_s, tokens_per_sec_per_gpu, model_tflops_per_gpu or mfu)")
    value = getattr(measured, run.metric)
    if run.metric == "iteration_time_s":
        return float(value)
    specs = run_specs(sweep, run)
    gpus = specs.cluster.num_gpus
    if run.metric == "tokens_per_sec_per_gpu":
        return specs.config.gbs * specs.config.seq_len / (value * gpus)
    tflops = value if run.metric == "model_tflops_per_gpu" else value * specs.hardware.peak_flops_for("bf16") / 1e12
    return source_flops_per_step(sweep, specs.model, specs.config) / (tflops * 1e12 * gpus)


def sweep_anchors(sweep: LoadedSweep, run_index: int | None = None) -> list[AnchorRun]:
    """The anchors of a loaded sweep: every complete run with a throughput (or the one run ``run_index``).

    Raises:
        ProjtuneError: ``run_index`` is not a run of the sweep, or that run cannot anchor (incomplete, broken,
            no throughput).
    """
    runs = list(sweep.runs)
    if run_index is not None:
        chosen = [r for r in runs if r.index == run_index]
        if not chosen:
            raise ProjtuneError(f"{sweep.file}: sweep '{sweep.name}' has no run {run_index} "
                                f"(runs 0-{len(runs) - 1})")
        run = chosen[0]
        if not run.complete or run.metric is None:
            why = run.broken or (f"missing {', '.join(run.missing_keys)}" if run.missing_keys else "no throughput")
            raise ProjtuneError(f"{sweep.file}: sweep '{sweep.name}' run {run_index} cannot anchor: {why}")
        runs = chosen
    cluster = sweep.sweep.cluster
    return [AnchorRun(label=f"{Path(sweep.file).name}#{sweep.name}#{run.index}", model=sweep.sweep.model,
                      gpu=cluster.gpu, num_gpus=cluster.num_gpus, gpus_per_node=cluster.gpus_per_node,
                      config=dict(run.config), iteration_time_s=measured_time_s(sweep, run),
                      peak_memory_gib=run.run.measured.peak_memory_gib if run.run is not None else None)
            for run in runs if run.complete and run.metric is not None]


def _loaded(sweepfile: SweepFile, file: str) -> LoadedSweep:
    """A sweep built in memory (an imported log) in the loader's shape."""
    sweep = sweepfile.sweeps[0]
    runs = tuple(LoadedRun(index=i, line=None, run=r, config=sweep.effective_config(r),
                           metric=primary_metric(r.measured),
                           missing_keys=tuple(k for k in r.missing_keys(sweep) if k in ("mbs", "gbs", "seq_len")),
                           broken=None)
                 for i, r in enumerate(sweep.runs))
    return LoadedSweep(file=file, file_source=sweepfile.source, line=None, sweep=sweep, runs=runs)


def _import(path: Path, **kwargs: object) -> SweepFile:
    try:
        return import_logs([path], **kwargs)  # type: ignore[arg-type]
    except LogImportError as err:
        raise _anchor_log_error(path, err) from err


def _anchor_log_error(path: Path, err: LogImportError) -> ProjtuneError:
    """The import's error as an anchor's: what the log lacks is given through `projtune sweeps import` (the
    commands that take anchors have no option for the anchor's own GPU count or model)."""
    text = (f"{err.what}; import it with `projtune sweeps import {path} {err.flag.split()[0]} ... --out run.yaml` "
            "and give run.yaml as the anchor" if err.flag else str(err))
    return ProjtuneError(f"anchor log: {text}" if str(path) in str(err) else f"anchor log {path}: {text}")


def log_anchors(path: Path, *, gpu: str | None = None, num_gpus: int | None = None, model: str | None = None,
                default_gpu: str | None = None) -> list[AnchorRun]:
    """The anchor of one training log; keys the log does not show take the layout defaults, and the label says
    which.  ``default_gpu``: the GPU type of a log that names none (Megatron-LM logs), said in the label.

    Raises:
        ProjtuneError: the log cannot be imported (no iteration lines, GPU type or count not found, ...).
    """
    notes = []
    try:
        sweepfile = import_logs([path], gpu=gpu, num_gpus=num_gpus, model=model)
    except LogImportError as err:
        if default_gpu is None or gpu is not None or "GPU type not found" not in str(err):
            raise _anchor_log_error(path, err) from err
        sweepfile = _import(path, gpu=default_gpu, num_gpus=num_gpus, model=model)
        notes.append(f"GPU type not in the log: taken as the target's, {default_gpu}")
    anchors = sweep_anchors(_loaded(sweepfile, str(path)), 0)
    assumed = sweepfile.sweeps[0].runs[0].unknown
    if assumed:
        notes.append(f"not in the log, defaults taken: {', '.join(assumed)}")
    label = path.name + (f" ({'; '.join(notes)})" if notes else "")
    return [a.model_copy(update={"label": label}) for a in anchors]


def measurement_anchors(path: Path) -> list[AnchorRun]:
    """The anchor of a measured-mode result: its measurement restored to the target layout it was reduced from.

    Raises:
        ProjtuneError: the file is not a measurement, or its model/GPU are unknown.
    """
    from bench.measurement import read_measurement
    from bench.restore import measured_anchor

    try:
        measurement = read_measurement(path)
    except (OSError, ValueError) as err:
        raise ProjtuneError(f"anchor {path}: not a measurement file of `projtune bench run` ({err})") from err
    return [measured_anchor(measurement, label=path.name)]


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        suffixes = (*_SWEEP_SUFFIXES, *_MEASUREMENT_SUFFIXES, *_LOG_SUFFIXES)
        return sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in suffixes
                      and not p.name.lower().startswith("readme"))
    return [path]


def read_anchors(specs: Sequence[str | Path], *, gpu: str | None = None, num_gpus: int | None = None,
                 model: str | None = None, default_gpu: str | None = None) -> list[AnchorRun]:
    """Anchors from files, folders, ``FILE#SWEEP`` or ``FILE#SWEEP#RUN`` (see the module docstring).

    ``gpu``, ``num_gpus`` and ``model`` override what training logs show; ``default_gpu`` is the GPU type of a log
    that names none (Megatron-LM logs), said in the anchor's label.

    Raises:
        ProjtuneError: a path that does not exist, a file that cannot be read as any kind, a sweep or run that is
            not there; the message names the file and what is allowed.
    """
    anchors: list[AnchorRun] = []
    for spec in specs:
        text = str(spec)
        base, _, selector = text.partition("#")
        path = Path(base)
        if not path.exists():
            raise ProjtuneError(f"anchor '{base}' does not exist (give a training log, a sweep file [#SWEEP[#RUN]], "
                                "a measurement .json or a folder of them)")
        for file in _files(path):
            anchors += _read_one(file, selector, gpu=gpu, num_gpus=num_gpus, model=model, default_gpu=default_gpu)
    if not anchors:
        raise ProjtuneError(f"no anchor found in {', '.join(map(str, specs))}: no complete run with a measured "
                            "throughput")
    return anchors


def _read_one(file: Path, selector: str, *, gpu: str | None, num_gpus: int | None, model: str | None,
              default_gpu: str | None) -> list[AnchorRun]:
    suffix = file.suffix.lower()
    if suffix in _MEASUREMENT_SUFFIXES:
        return measurement_anchors(file)
    if suffix not in _SWEEP_SUFFIXES:
        if selector:
            raise ProjtuneError(f"anchor {file}#{selector}: '#SWEEP[#RUN]' selects from a sweep file, not a log")
        return log_anchors(file, gpu=gpu, num_gpus=num_gpus, model=model, default_gpu=default_gpu)
    loaded = load_sweep_files([file])
    if not loaded.sweeps:
        detail = loaded.errors[0].message if loaded.errors else "no sweep in it"
        raise ProjtuneError(f"anchor {file}: not a readable sweep file: {detail}")
    name, _, run = selector.partition("#")
    sweeps = [s for s in loaded.sweeps if not name or s.name == name]
    if not sweeps:
        from projection.errors import nearest

        near = nearest(name, [s.name for s in loaded.sweeps])
        raise ProjtuneError(f"anchor {file}: no sweep named '{name}'" + (f"; did you mean {near}?" if near else ""))
    if run and not run.isdigit():
        raise ProjtuneError(f"anchor {file}#{selector}: run must be a 0-based index, got '{run}'")
    out: list[AnchorRun] = []
    for sweep in sweeps:
        out += sweep_anchors(sweep, int(run) if run else None)
    return out
