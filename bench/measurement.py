"""The measurement file: per-layer-kind times, collectives and optimizer step of one benchmark run.

Times are milliseconds (the unit is in every name). Layer times are compute only, for one
micro-batch of the benchmark layout on one GPU; the TP all-reduce and EP all-to-all are
measured on their own and stored with their message sizes. Results are cached under
``$PROJTUNE_CACHE`` (or ``~/.cache/projtune/bench``) keyed by device, driver and torch
version, the benchmark code's version (a hash of ``bench/*.py``) and everything that changes
the result: the layout and shapes, dtype and precision, warm-up and timed iterations, whether
collectives were timed.

Schema 2 (this version) adds per-layer attention backend, GEMM precision, expert GEMM path,
useful FLOPs and achieved TFLOP/s, the head/embedding timing, which slice was timed and the
run's provenance; schema-1 files still read (the new fields take their defaults).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench.reduction import Reduction
from bench.version import code_version
from projection.errors import ProjtuneError, not_a_file, validation_problems

SCHEMA_VERSION = 2
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
    attention_backend: str = Field("", description="SDPA backend pinned for the core: flash|cudnn|efficient|math|flex.")
    gemm_precision: str = Field("", description="What the dense GEMMs ran in: fp8|bf16|fp32|mixed ('' = unknown).")
    expert_precision: str = Field("", description="What the routed-expert GEMMs ran in ('' for dense layers).")
    expert_gemm: str = Field("", description="grouped_mm, or 'per-expert loop (why)'.")
    flops_fwd: float = Field(0.0, ge=0, description="Useful forward FLOPs of the layer (engine's flops_fwd).")
    forward_tflops: float = Field(0.0, ge=0, description="Achieved forward TFLOP/s (useful FLOPs).")
    backward_tflops: float = Field(0.0, ge=0, description="Achieved backward TFLOP/s (2x forward FLOPs; B only "
                                                         "when weights are frozen).")
    attention_tflops: float = Field(0.0, ge=0, description="Achieved attention-core forward TFLOP/s.")

    @property
    def key(self) -> tuple[bool, int]:
        """The engine's layer kind: (MoE?, window)."""
        return self.kind == "moe", self.window


class HeadTiming(BaseModel):
    """Embedding (first stage) and final norm + LM head + cross-entropy (last stage), one micro-batch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    embedding_forward_ms: float = Field(ge=0)
    embedding_backward_ms: float = Field(ge=0)
    head_forward_ms: float = Field(ge=0, description="Norm + LM head + loss forward.")
    head_backward_ms: float = Field(ge=0, description="B + W of the same.")
    gemm_precision: str = ""
    flops_fwd: float = Field(0.0, ge=0, description="LM head GEMM FLOPs.")
    head_tflops: float = Field(0.0, ge=0, description="Achieved LM head + loss forward TFLOP/s.")


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
    head: HeadTiming | None = Field(None, description="Embedding and LM head + loss; None: not measured.")
    compute_slice: Literal["bench", "target"] = Field(
        "bench", description="target: layers timed at the target's per-GPU shapes (TP/EP shards on one GPU); "
                             "bench: at the reduced layout's shapes (restored by the analytic ratio).")
    measured_precision: str = Field("", description="GEMM precision the layers really ran in ('' = as dtype).")
    options: dict[str, object] = Field(default_factory=dict, description="warmup, iters, collectives, ...")
    code_version: str = Field("", description="Hash of the benchmark code (bench/*.py).")
    provenance: dict[str, str] = Field(default_factory=dict, description="command, date, GPU, driver, ...")
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
    from projection.safe_yaml import read_text_bounded

    if not path.is_file():
        raise ProjtuneError(not_a_file("measurement file", path))
    try:
        return Measurement.model_validate_json(read_text_bounded(path))
    except ValidationError as err:    # which fields, not "9 validation errors for Measurement"
        raise ProjtuneError(f"'{path}' is not a projtune measurement file: {validation_problems(err)}") from err
    except ValueError as err:          # not UTF-8 text, or too large
        raise ProjtuneError(f"'{path}' is not a projtune measurement file: {err}") from err


def cache_dir() -> Path:
    """``$PROJTUNE_CACHE/bench`` when set, else ``~/.cache/projtune/bench``."""
    from projection.settings import cache_folder

    return cache_folder("bench")


def cache_key(*, device_name: str, driver_version: str | None, torch_version: str, what: dict[str, object],
              options: dict[str, object] | None = None, version: str | None = None) -> str:
    """Stable key of one run: machine identity, code version, what was measured (layout, shapes, dtype,
    precision) and how (``options``: warm-up, iterations, collectives on/off, ...)."""
    text = json.dumps({"device": device_name, "driver": driver_version, "torch": torch_version, "what": what,
                       "options": options or {}, "code": version if version is not None else code_version()},
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
