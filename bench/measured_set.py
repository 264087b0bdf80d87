"""A folder of measurement files, looked up by a run's model and per-GPU slice (``projtune eval --measured``).

A measurement stands for a run when it was made for the same model and the same per-GPU
slice: the keys in :data:`SLICE_KEYS` (TP, CP, EP, ETP, micro-batch, sequence, precision,
fine-tuning, sequence parallelism) of its target layout equal the run's. PP, VPP, DP, the
global batch and the cluster size are restored analytically, so they may differ. A run
with no such measurement has none: the caller says so (never a silent analytic fallback).
"""

from __future__ import annotations

from pathlib import Path

from bench.measurement import Measurement, read_measurement
from projection.errors import ProjtuneError
from projection.model_spec import ModelSpec
from projection.training_config import TrainingConfig

SLICE_KEYS = ("tp", "cp", "ep", "etp", "mbs", "seq_len", "precision", "finetune", "sequence_parallel")


def slice_of(config: TrainingConfig) -> tuple[object, ...]:
    """The per-GPU slice of a layout (the values of :data:`SLICE_KEYS`)."""
    return tuple(getattr(config, k) for k in SLICE_KEYS)


def slice_text(config: TrainingConfig) -> str:
    """The slice as ``tp=2,cp=1,...`` (for messages)."""
    return ",".join(f"{k}={getattr(config, k)}" for k in SLICE_KEYS)


class MeasurementSet:
    """Every ``*.json`` measurement file in a folder (or one file), indexed by (model, slice)."""

    def __init__(self, path: Path) -> None:
        if not path.exists():
            raise ProjtuneError(f"--measured path '{path}' does not exist (a folder of measurement-*.json files)")
        files = [path] if path.is_file() else sorted(path.glob("*.json"))
        self.path = path
        self.by_key: dict[tuple[object, ...], tuple[Path, Measurement]] = {}
        for file in files:
            try:
                m = read_measurement(file)
            except ProjtuneError:
                continue   # other JSON (compare.json, results) lives beside measurement files
            key = (m.reduction.target_model.name, *slice_of(m.reduction.target_config))
            self.by_key.setdefault(key, (file, m))
        if not self.by_key:
            raise ProjtuneError(f"no measurement file in '{path}' (write them with `projtune bench run` or "
                                "benchmarks/gpu_compare.py --out)")

    @property
    def plumbing(self) -> list[Path]:
        """Files whose measurement is not representative (CPU plumbing runs, shrunk shapes)."""
        return [file for file, m in self.by_key.values() if not m.representative]

    def find(self, model: ModelSpec, config: TrainingConfig) -> tuple[Path, Measurement] | None:
        """The measurement of this model and slice, or None."""
        return self.by_key.get((model.name, *slice_of(config)))

    def missing_reason(self, model: ModelSpec, config: TrainingConfig) -> str:
        """Why a run has no measurement here (one line)."""
        models = sorted({k[0] for k in self.by_key})
        return (f"no measurement in '{self.path}' for {model.name} at {slice_text(config)} "
                f"(measured models: {', '.join(models)})")
