"""The project's source tree as the projection tests see it: its root, and a fresh interpreter run in it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fresh_python_stdout(code: str, *, timeout_s: float = 120) -> str:
    """What ``python -c code`` prints, run in a new interpreter at the repository root (nothing imported yet);
    a non-zero exit raises ``subprocess.CalledProcessError``."""
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                          check=True).stdout


PACKAGES = ("projection", "bench", "tools", "prompts", "agent", "evals", "projtune")
"""The project's code packages, in layer order (tests/test_architecture.py's LAYERS)."""


def source_files() -> list[Path]:
    """Every ``.py`` file of the code packages: package by package, sorted within each."""
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
