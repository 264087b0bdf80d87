"""Fit the memory verdict's margins on the development runs (measured peaks and OOM labels).

``python -m evals.memory_calibration evals/data`` prints the samples' spread and the margins
:func:`projection.memory_verdict.fit_margins` finds; ``SHIPPED_MARGINS`` in
``projection/memory_verdict.py`` holds the values fitted on ``evals/data`` (a test checks they
still match).  Only complete runs count (no ``unknown:`` keys, mbs/gbs/seq_len given), as in
``projtune eval``; a run is *ran* when a throughput was measured without an OOM.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evals.runner import run_specs
from evals.sweep_file import load_sweep_files
from projection.device_profile import default_profile
from projection.errors import ProjtuneError
from projection.layout import parallel_dims
from projection.legality import layout_violations
from projection.memory import GIB, MemoryResult, project_memory
from projection.memory_verdict import MemoryMargins, MemorySample, fit_margins


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelledRun:
    """One development run with its projected memory and its memory label."""

    sweep: str
    index: int
    memory: MemoryResult
    sample: MemorySample


def labelled_runs(paths: Sequence[Path | str]) -> list[LabelledRun]:
    """Every complete development run with a measured peak, an OOM label, or a throughput (it ran)."""
    loaded = load_sweep_files(paths)
    out: list[LabelledRun] = []
    for sweep in loaded.sweeps:
        for run in sweep.runs:
            if run.broken is not None or run.missing_keys or run.run is None:
                continue
            measured = run.run.measured.model_dump(exclude_none=True)
            peak, oom, ran = measured.get("peak_memory_gib"), measured.get("oom"), run.metric is not None
            if peak is None and oom is None and not ran:
                continue
            try:
                specs = run_specs(sweep, run)
            except ProjtuneError:
                continue
            if layout_violations(specs.model, specs.hardware, specs.cluster, specs.config):
                continue
            dims = parallel_dims(specs.config, specs.cluster)
            memory = project_memory(specs.model, specs.hardware, specs.config, dims, default_profile(specs.hardware))
            out.append(LabelledRun(sweep=sweep.name, index=run.index, memory=memory, sample=MemorySample(
                projected_bytes=memory.peak_bytes, usable_bytes=memory.capacity_bytes,
                measured_bytes=peak * GIB if peak else None, oom=oom, ran=ran and not oom)))
    return out


def fit_on(paths: Sequence[Path | str]) -> MemoryMargins:
    """The margins fitted on the runs of ``paths``."""
    return fit_margins([r.sample for r in labelled_runs(paths)], note=f"fitted on {', '.join(map(str, paths))}")


def main(argv: Sequence[str]) -> int:
    """Print the fit (and the runs that set each margin)."""
    runs = labelled_runs(argv or ["evals/data"])
    margins = fit_margins([r.sample for r in runs])
    print(f"under={margins.under:.2f} over={margins.over:.2f} peaks={margins.peaks} ran={margins.ran} "
          f"ooms={margins.ooms}")
    for r in sorted(runs, key=lambda r: -r.sample.projected_bytes / r.sample.usable_bytes)[:25]:
        s = r.sample
        print(f"{s.projected_bytes / s.usable_bytes:6.3f} {r.memory.verdict:14s} oom={s.oom} ran={s.ran} "
              f"meas={s.measured_bytes and s.measured_bytes / GIB} {r.sweep} #{r.index}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
