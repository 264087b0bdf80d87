"""Analytical projection engine: memory and step time of a training layout, specs in, results out.

Public names are imported lazily (PEP 562) so that importing one submodule stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "project": "projection.engine", "Projection": "projection.engine", "StepBreakdown": "projection.engine",
    "ProjtuneError": "projection.errors", "UnknownNameError": "projection.errors",
    "IllegalLayoutError": "projection.errors", "ModelSpecError": "projection.errors",
    "HardwareSpec": "projection.hardware", "load_hardware": "projection.hardware",
    "list_hardware": "projection.hardware",
    "LegalAxes": "projection.legality", "legal_axes": "projection.legality",
    "layout_violations": "projection.legality",
    "MemoryResult": "projection.memory", "StageMemory": "projection.memory", "project_memory": "projection.memory",
    "ModelSpec": "projection.model_spec", "load_model": "projection.model_spec",
    "list_model_ids": "projection.model_spec",
    "Cluster": "projection.training_config", "TrainingConfig": "projection.training_config",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'projection' has no attribute {name!r}")
