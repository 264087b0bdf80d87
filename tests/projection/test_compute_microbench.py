"""Kernel times against the public MI300X kernel measurements in ../shared/data/microbench (Primus-Turbo).

The CDNA3 prior (projection/catalog/priors/priors.yaml) with the tile/wave GEMM model must reproduce
the measured dense GEMM times (median ratio within 10%) and the grouped-GEMM fall-off with tokens
per expert (projection/workload.py GROUPED_GEMM_HALF_M).
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from projection.compute import device_rates, gemm_s
from projection.hardware import load_hardware
from projection.profile_priors import prior_profile
from projection.workload import GROUPED_GEMM_HALF_M

BENCH = Path(__file__).resolve().parents[3] / "shared" / "data" / "microbench" / "primus-turbo-mi300x"
pytestmark = pytest.mark.skipif(not BENCH.is_dir(), reason="shared microbench data not present")


def _shape(label: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", label)}


def _rates():
    profile = prior_profile("mi300x").model_copy(update={"kernel_overhead_s": 0.0})
    return device_rates(load_hardware("mi300x"), profile, "bf16"), profile


def test_dense_gemm_times_match_primus_turbo() -> None:
    rates, _ = _rates()
    ratios = []
    for row in json.loads((BENCH / "gemm.json").read_text())["configs"]:
        s = _shape(row["label"])
        ratios.append(gemm_s(s["M"], s["N"], s["K"], rates) / (row["mean_ms"] / 1e3))
    assert len(ratios) == 84
    assert statistics.median(ratios) == pytest.approx(1.0, abs=0.1)
    assert 0.6 < min(ratios) and max(ratios) < 1.5


def test_grouped_gemm_falls_off_with_tokens_per_expert() -> None:
    rates, profile = _rates()
    by_m: dict[int, list[float]] = {}
    for row in json.loads((BENCH / "grouped_gemm.json").read_text())["configs"]:
        s = _shape(row["label"])
        model_eff = gemm_s(s["M"], s["N"], s["K"], rates, groups=s["B"]) / (row["mean_ms"] / 1e3)
        by_m.setdefault(s["M"], []).append(model_eff * rates.gemm_efficiency)  # achieved fraction of peak
    plateau = statistics.median(by_m[4096])
    measured_drop = statistics.median(by_m[512]) / plateau
    modelled_drop = (512 / (512 + GROUPED_GEMM_HALF_M)) / (4096 / (4096 + GROUPED_GEMM_HALF_M))
    assert modelled_drop == pytest.approx(measured_drop, abs=0.03)
    # the prior's MoE efficiency is the plateau over the dense GEMM fraction
    assert profile.moe_efficiency * profile.gemm_efficiency == pytest.approx(plateau, rel=0.1)
