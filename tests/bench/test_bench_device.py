"""Device profile fitting: recovers known parameters, and a tiny CPU sweep writes a loadable profile."""

from __future__ import annotations

import json

import pytest

from bench.device import (
    SweepPoint,
    _predict,
    attention_points,
    copy_points,
    device_profile,
    fit_profile,
    gemm_points,
    profile_yaml,
    run_sweep,
)
from bench.runtime import detect_hardware_id
from projection.device_profile import default_profile, load_profile
from projection.hardware import load_hardware

TRUTH = dict(gemm_efficiency=0.62, attention_efficiency=0.41, memory_efficiency=0.71, kernel_overhead_s=9e-6,
             low_precision_gemm_efficiency=0.5, scale_up_efficiency=0.7, scale_up_latency_s=8e-6)


def test_fit_recovers_the_parameters_that_generated_the_times() -> None:
    hardware = load_hardware("h100-sxm")
    base = default_profile(hardware)
    truth = base.model_copy(update=TRUTH)
    points = gemm_points() + attention_points() + copy_points()
    points += [SweepPoint(kind="gemm", name="small", m=256, n=256, k=256),
               SweepPoint(kind="copy", name="small copy", num_bytes=65536.0)]
    points += [p.model_copy(update={"kind": "gemm_fp8"}) for p in gemm_points()]
    points += [SweepPoint(kind="all_reduce", name=f"ar {b}", num_bytes=float(b), group_size=8)
               for b in (2**16, 2**24, 2**27, 2**29)]
    points = [p.model_copy(update={"measured_s": _predict(p, hardware, truth)}) for p in points]
    fitted = fit_profile(points, hardware, base)
    for name, value in TRUTH.items():
        assert getattr(fitted, name) == pytest.approx(value, rel=1e-3), name


def test_tiny_cpu_sweep_writes_a_profile_that_records_its_points(tmp_path) -> None:
    hardware = load_hardware("h200")
    points = run_sweep(device="cpu", tiny=True, warmup=1, iters=2)
    assert {p.kind for p in points} == {"gemm", "attention", "copy"}
    profile = device_profile(points, hardware, default_profile(hardware), device_name="cpu", representative=False)
    path = tmp_path / "profile.yaml"
    path.write_text(profile_yaml(profile, points, hardware))
    loaded = load_profile(path)
    assert loaded.hardware_id == "h200" and "NOT REPRESENTATIVE" in loaded.fit_note
    recorded = [json.loads(line[2:]) for line in path.read_text().splitlines() if line.startswith("# {")]
    assert len(recorded) == len(points) and all(r["measured_s"] > 0 for r in recorded)


@pytest.mark.parametrize(("name", "expected"), [
    ("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("AMD Instinct MI300X", "mi300x"), ("AMD Instinct MI355X", "mi355x"), ("NVIDIA B200", "b200"),
    ("NVIDIA GeForce RTX 4090", None),
])
def test_device_names_map_to_catalog_ids(name: str, expected: str | None) -> None:
    assert detect_hardware_id(name) == expected
