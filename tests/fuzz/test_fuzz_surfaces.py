"""The issue-29 fuzz targets in CI, small and seeded: diagnose inputs per framework, training logs, request
number forms and remote path arguments, each with its meaning oracle (benchmarks/fuzz_surfaces.py).

``python benchmarks/fuzz.py --inputs 10000`` runs the long version (README: figures).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import fuzz  # noqa: E402 - benchmarks/ is not a package

TARGETS = ["diagnose", "training_logs", "request_numbers", "remote_paths"]
PROBLEMS = ("traceback", "hang", "non_finite", "leak", "blowup", "misread", "invalid_import", "roundtrip")


def test_surfaces_hold_on_a_seeded_sample() -> None:
    counts = fuzz.run(160, seed=0, hang_s=10.0, only=TARGETS)
    assert set(counts) == set(TARGETS)
    for target, seen in counts.items():
        assert seen["inputs"] > 0
        assert {p: seen[p] for p in PROBLEMS if seen[p]} == {}, target
