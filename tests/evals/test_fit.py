"""The joint fitter: overlap fractions the data can see move, ones it cannot see stay at their defaults.

Runs: the Megatron-Bridge Qwen3-235B-A22B rows on 256 H100 (TP2 PP8 EP32: expert all-to-all across
nodes, about half the step with no overlap) and the Megatron-Bridge Llama3-8B rows (no EP at all).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evals.fit import (
    FitRun,
    collect_fit_runs,
    fit_profiles,
    pristine_framework,
    pristine_profile,
    projected_value,
)
from evals.sweep_file import load_sweep_files
from projection.device_profile import FITTABLE

DATA = Path(__file__).resolve().parents[2] / "evals" / "data"
FILES = [DATA / f"megatron-bridge-{r}.yaml" for r in ("25.11", "26.02", "26.02.01")]


def _runs(model: str) -> list[FitRun]:
    runs = collect_fit_runs(load_sweep_files(FILES).sweeps)
    return [r for r in runs if f"-{model}-h100-sxm-" in r.sweep.name]


def test_ep_overlap_is_fitted_where_expert_all_to_all_is_exposed(monkeypatch: pytest.MonkeyPatch) -> None:
    import evals.fit

    assert "ep_overlap_fraction" in FITTABLE
    runs = [r for r in _runs("qwen3-235b-a22b") if evals.fit.ep_overlapped(r)]   # the recipes that set moe_a2a_overlap
    assert len(runs) >= 3
    # three runs buy one parameter (gemm_efficiency) under MIN_RUNS_PER_PARAM = 3 ...
    assert evals.fit.fitted_parameters(runs) == ("gemm_efficiency",)
    # ... with the overlap first in line, the overlap the runs expose is what gets fitted
    monkeypatch.setattr(evals.fit, "PARAM_PRIORITY", ("ep_overlap_fraction", *evals.fit.PARAM_PRIORITY[:-1]))
    assert evals.fit.fitted_parameters(runs) == ("ep_overlap_fraction",)
    start = pristine_profile("h100-sxm")
    assert start.ep_overlap_fraction == 0.0
    # With no overlap these runs project well below their measured throughput.
    assert all(projected_value(r, start, pristine_framework("megatron")) < 0.9 * r.measured for r in runs)
    fitted = fit_profiles(runs, max_evaluations=8).device_profiles["h100-sxm"]
    assert fitted.ep_overlap_fraction > 0.1


def test_parameters_the_runs_cannot_see_stay_at_their_defaults() -> None:
    runs = _runs("llama3-8b")  # one H100 node, no EP, no TP
    assert runs
    fitted = fit_profiles(runs, max_evaluations=5).device_profiles["h100-sxm"]
    # least_squares keeps iterates strictly inside the bounds, so "at the default of 0" means within 1e-6
    assert fitted.ep_overlap_fraction == pytest.approx(0.0, abs=1e-6)
    assert fitted.tp_overlap_fraction == pytest.approx(0.0, abs=1e-6)

