"""Read the device script's ``gpu_results.json`` into measurement files and a fitted device profile.

``benchmarks/gpu_check.py`` runs on the GPU machine with torch alone and writes raw timings;
this module (project dependencies, any machine, no device time) turns them into what the
rest of projtune reads: one :class:`bench.measurement.Measurement` per plan case (the
target layout reduced to the one measuring GPU, layers timed at the target's per-GPU
slice, B/W split by the engine's ratio) and the microbenchmark sweep as
:class:`bench.device.SweepPoint` values for :func:`bench.device.device_profile`.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from bench.analytic import analytic_layout
from bench.device import SweepPoint
from bench.layer_timing import HeadRun, LayerRun
from bench.measurement import Measurement
from bench.reduction import reduce_layout
from bench.runner import _timing, build_measurement
from bench.runtime import RuntimeInfo, detect_hardware_id
from projection.errors import ProjtuneError
from projection.model_spec import ModelSpec, load_model
from projection.training_config import Cluster, TrainingConfig

RESULTS_KIND = "projtune-gpu-check-results"
_RUN_FIELDS = set(LayerRun.__dataclass_fields__)
_HEAD_FIELDS = set(HeadRun.__dataclass_fields__)


def load_results(path: Path) -> dict[str, Any]:
    """Read a results file (or the ``gpu_results.json`` inside a folder).

    Raises:
        ProjtuneError: missing, unreadable, or not a gpu_check results file.
    """
    path = path / "gpu_results.json" if path.is_dir() else path
    if not path.is_file():
        raise ProjtuneError(f"results file '{path}' does not exist (benchmarks/gpu_check.py writes gpu_results.json)")
    try:
        data = json.loads(path.read_text())
    except ValueError as err:
        raise ProjtuneError(f"'{path}' is not JSON: {err}") from err
    if not isinstance(data, dict) or data.get("kind") != RESULTS_KIND:
        raise ProjtuneError(f"'{path}' is not a benchmarks/gpu_check.py results file (kind != {RESULTS_KIND})")
    return data


def runtime_of(results: dict[str, Any]) -> RuntimeInfo:
    """The measuring machine as :class:`bench.runtime.RuntimeInfo`."""
    rt = results["runtime"]
    name = rt.get("device_name", "unknown")
    return RuntimeInfo(device_type=rt.get("device_type", "cpu"), device_name=name,
                       hardware_id=detect_hardware_id(name) if rt.get("device_type") == "cuda" else None,
                       num_devices=int(rt.get("num_devices", 1)), torch_version=rt.get("torch", ""),
                       runtime_version=rt.get("cuda") or rt.get("hip"), driver_version=rt.get("driver"))


def provenance(results: dict[str, Any]) -> dict[str, str]:
    """GPU, driver, torch, CUDA, date, command and code version of the run (strings)."""
    rt = results["runtime"]
    keys = ("device_name", "driver", "torch", "cuda", "date", "command", "code_version", "host")
    out = {k: str(rt.get(k)) for k in keys if rt.get(k) is not None}
    out["results_representative"] = str(results.get("representative", False))
    return out


def layer_backend(results: dict[str, Any]) -> str:
    """The attention backend most benchmarked layers ran ('' when none ran)."""
    seen = Counter(layer["run"].get("attention_backend", "") for case in results.get("cases", [])
                   for layer in case.get("layers", []))
    seen.pop("", None)
    return seen.most_common(1)[0][0] if seen else ""


def sweep_points(results: dict[str, Any], *, fit_only: bool = True) -> list[SweepPoint]:
    """The microbenchmarks that ran (measured time > 0), as sweep points.

    ``fit_only``: attention points only of the backend the layers ran (the profile then describes the
    kernel the restored layers use); the others stay in the results for the report.
    """
    names = set(SweepPoint.model_fields)
    backend = layer_backend(results) if fit_only else ""
    have = {p.get("info", {}).get("backend") for p in results.get("micro", []) if p.get("measured_s", 0.0) > 0}
    points = []
    for p in results.get("micro", []):
        if p.get("measured_s", 0.0) <= 0:
            continue
        ran = p.get("info", {}).get("backend", "")
        if p["kind"].startswith("attention") and backend in have and ran != backend:
            continue
        data = {k: v for k, v in p.items() if k in names}
        data["backend"] = p.get("info", {}).get("backend", "")
        points.append(SweepPoint(**data))
    return points


def _plan_cases(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in plan["cases"]}


def measurements(results: dict[str, Any], plan: dict[str, Any]) -> list[tuple[dict[str, Any], Measurement]]:
    """(plan case, measurement) of every case that measured all its layer kinds."""
    info = runtime_of(results)
    cases = _plan_cases(plan)
    representative = bool(results.get("representative"))
    out = []
    for entry in results.get("cases", []):
        case = cases.get(entry["id"])
        if case is None:
            raise ProjtuneError(f"results case '{entry['id']}' is not in the plan; pass the plan the run used")
        if len(entry.get("layers", [])) != len(case["layers"]):
            continue   # incomplete (errors or skipped): not a measurement
        model = ModelSpec.model_validate(case["model_spec"]) if "model_spec" in case else load_model(case["model"])
        cluster = Cluster(**case["cluster"])
        config = TrainingConfig(**case["config"])
        reduction = reduce_layout(model, cluster, config, 1, local_gpu=info.hardware_id)
        timed = analytic_layout(model, cluster.model_copy(update={"gpu": reduction.bench_cluster.gpu}), config)
        layers = tuple(
            _timing((bool(layer["kind"][0]), int(layer["kind"][1])),
                    LayerRun(**{k: v for k, v in layer["run"].items() if k in _RUN_FIELDS}), timed, case["frozen"])
            for layer in entry["layers"])
        head = entry.get("head")
        head_run = HeadRun(**{k: v for k, v in head["run"].items() if k in _HEAD_FIELDS}) if head else None
        dtype = torch.bfloat16 if info.device_type == "cuda" else torch.float32
        measurement = build_measurement(
            model=model, config=config, reduction=reduction, info=info, dtype=dtype,
            layers=layers, head=head_run, collectives=[], representative=representative, compute_slice="target",
            options={"warmup": results["options"].get("warmup"), "iters": results["options"].get("iters"),
                     "collectives": False, "slice": "target", "quick": results.get("quick", False)},
            version=results["runtime"].get("code_version", ""),
            shape_note="" if representative else "benchmarks/gpu_check.py --quick/--cpu: tiny shapes",
            provenance=provenance(results))
        out.append((case, measurement))
    return out
