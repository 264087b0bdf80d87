"""The measurement file: per-layer-kind times, collectives and optimizer step of one benchmark run.

Times are milliseconds (the unit is in every name). Layer times are compute only, for one
micro-batch of the benchmark layout on one GPU; the TP all-reduce and EP all-to-all are
measured on their own and stored with their message sizes. Results are cached under
``$PROJTUNE_CACHE`` (or ``~/.cache/projtune/bench``) keyed by device, driver and torch
version plus what was measured.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bench.reduction import Reduction
from projection.errors import ProjtuneError

SCHEMA_VERSION = 1
Source = Literal["gpu", "cpu", "analytic"]


class LayerTiming(BaseModel):
    """Compute times of one layer of one kind, one micro-batch, one GPU of the benchmark layout."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["dense", "moe"]
    window: int = Field(0, ge=0, description="Attention window in tokens; 0 = full causal.")
    forward_ms: float = Field(ge=0)
    backward_input_ms: float = Field(ge=0, description="Activation-gradient part of the backward (B).")
    backward_weight_ms: float = Field(ge=0, description="Weight-gradient part of the backward (W).")
    backward_split: Literal["measured", "analytic-ratio"] = Field(
        "measured", description="'analytic-ratio': only B+W was timed, split by the engine's B/W ratio.")
    attention_forward_ms: float = Field(ge=0, description="Forward of the attention core (SDPA).")
    expert_forward_ms: float = Field(0.0, ge=0, description="Routed-expert part (permute, grouped GEMMs, unpermute).")
    expert_backward_input_ms: float = Field(0.0, ge=0)
    expert_backward_weight_ms: float = Field(0.0, ge=0)
    optimizer_ms: float = Field(ge=0, description="AdamW step over the layer's parameters.")
    num_params: int = Field(ge=0, description="Parameters of the benchmarked layer on one GPU.")
    peak_memory_bytes: int | None = Field(None, description="torch.cuda.max_memory_allocated; None on CPU.")

    @property
    def key(self) -> tuple[bool, int]:
        """The engine's layer kind: (MoE?, window)."""
        return self.kind == "moe", self.window


class CollectiveTiming(BaseModel):
    """One collective measured over the local GPUs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    op: Literal["all_reduce", "all_to_all"]
    group_size: int = Field(ge=1)
    message_bytes: float = Field(ge=0, description="Per-rank buffer (all-reduce) or bytes sent (all-to-all).")
    time_ms: float = Field(ge=0, description="One collective, slowest rank, mean over the timed iterations.")
    backend: str = ""


class Measurement(BaseModel):
    """Everything one benchmark run measured, with the layout it ran and the machine it ran on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION
    source: Source = Field(description="gpu: real kernels; cpu: plumbing check; analytic: the engine's own costs.")
    representative: bool = Field(description="False for CPU runs and shrunk shapes: not a performance number.")
    device_name: str
    hardware_id: str | None = Field(None, description="Catalog id of the device, when recognised.")
    torch_version: str
    runtime_version: str | None = Field(None, description="CUDA or HIP runtime torch was built with.")
    driver_version: str | None = None
    dtype: str
    model: str = Field(description="Target model name.")
    reduction: Reduction
    shape_note: str = Field("", description="How shapes were shrunk, if they were.")
    layers: tuple[LayerTiming, ...]
    tp_all_reduce: CollectiveTiming | None = None
    ep_all_to_all: CollectiveTiming | None = None
    created: str = ""
    notes: str = ""

    def layer(self, kind: tuple[bool, int]) -> LayerTiming:
        """The timing of one layer kind.

        Raises:
            ProjtuneError: the measurement has no layer of that kind.
        """
        for timing in self.layers:
            if timing.key == kind:
                return timing
        have = ", ".join(f"{t.kind}/w{t.window}" for t in self.layers)
        raise ProjtuneError(f"measurement has no {'moe' if kind[0] else 'dense'} layer with window {kind[1]} "
                            f"(has: {have})")


def write_measurement(measurement: Measurement, path: Path) -> None:
    """Write a measurement as indented JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(measurement.model_dump_json(indent=2) + "\n")


def read_measurement(path: Path) -> Measurement:
    """Read a measurement file.

    Raises:
        ProjtuneError: missing file or not a measurement.
    """
    if not path.is_file():
        raise ProjtuneError(f"measurement file '{path}' does not exist")
    try:
        return Measurement.model_validate_json(path.read_text())
    except ValueError as err:
        raise ProjtuneError(f"'{path}' is not a projtune measurement file: {str(err).splitlines()[0]}") from err


def cache_dir() -> Path:
    """``$PROJTUNE_CACHE/bench`` when set, else ``~/.cache/projtune/bench``."""
    root = os.environ.get("PROJTUNE_CACHE")
    return Path(root) / "bench" if root else Path.home() / ".cache" / "projtune" / "bench"


def cache_key(*, device_name: str, driver_version: str | None, torch_version: str, what: dict[str, object]) -> str:
    """Stable key of one run: machine identity plus what was measured (layout, shapes, dtype)."""
    text = json.dumps({"device": device_name, "driver": driver_version, "torch": torch_version, "what": what},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def cached(key: str) -> Measurement | None:
    """The cached measurement of ``key``, or None."""
    path = cache_dir() / f"{key}.json"
    return read_measurement(path) if path.is_file() else None


def store(key: str, measurement: Measurement) -> Path:
    """Cache a measurement under ``key``; returns the file."""
    path = cache_dir() / f"{key}.json"
    write_measurement(measurement, path)
    return path
