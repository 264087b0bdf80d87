"""`projtune eval --anchor-one`: anchored vs unanchored, in-sweep and restore from the smallest scale (issue 27)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from evals.anchor_eval import evaluate_anchored
from projtune.cli import app

FILE = "evals/data/megatron-bridge-26.02.yaml"


@pytest.fixture(scope="module")
def result():
    return evaluate_anchored([FILE])


def test_every_in_sweep_pair_anchors_on_another_run_of_the_same_sweep(result) -> None:
    pairs = [p for p in result.pairs if p.kind == "in-sweep"]
    assert pairs
    for p in pairs:
        assert p.anchor is not p.target and p.anchor.sweep == p.target.sweep and p.anchor.series == p.target.series
        assert p.anchor_class == "same-scale"


def test_an_anchored_run_reproduces_its_anchor(result) -> None:
    """The anchored projection of the anchor itself is its measurement (unless the prior clips the factor)."""
    from evals.anchor_eval import _pair

    p = result.pairs[0]
    own = _pair("in-sweep", p.anchor, p.anchor)
    if not own.corrections.notes:
        assert own.anchored == pytest.approx(p.anchor.measured, rel=1e-9)


def test_restore_pairs_anchor_on_the_smallest_scale(result) -> None:
    for p in (p for p in result.pairs if p.kind == "restore"):
        assert p.anchor.num_gpus < p.target.num_gpus and p.anchor.series == p.target.series


def test_json_reports_both_figures_and_the_series() -> None:
    out = CliRunner().invoke(app, ["eval", FILE, "--anchor-one", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    for key in ("mape_anchored", "mape_unanchored", "coverage_anchored", "top1_anchored", "top1_unanchored",
                "rankable_sweeps"):
        assert key in data["in_sweep"]
    assert {"mape_anchored", "mape_unanchored"} <= data["restore_from_smallest"].keys()
    assert data["series"] >= 1 and "scaling_series" in data and data["by_source"]["in_sweep"]


def test_bands_out_needs_anchor_one(tmp_path) -> None:
    out = CliRunner().invoke(app, ["eval", FILE, "--bands-out", str(tmp_path / "b.yaml")])
    assert out.exit_code == 2 and "--anchor-one" in out.output
