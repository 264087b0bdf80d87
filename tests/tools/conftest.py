"""Shared arguments for the tool tests: one small job every tool can run on quickly."""

from __future__ import annotations

from typing import Any

import pytest

import agent.tool  # noqa: F401 - registers the agent's `tune` tool (the tools layer never imports the agent)

JOB = {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8}
LAYOUT = {"tp": 2, "pp": 2, "mbs": 1, "gbs": 32, "seq_len": 4096, "sequence_parallel": True, "zero": 1}
LAYOUT_B = {"tp": 4, "pp": 1, "mbs": 2, "gbs": 32, "seq_len": 4096, "sequence_parallel": True, "zero": 1,
            "recompute": "selective"}


@pytest.fixture()
def job() -> dict[str, Any]:
    """Model, GPU and GPU count of the small job."""
    return dict(JOB)


@pytest.fixture()
def layout() -> dict[str, Any]:
    """A legal layout of the small job."""
    return dict(LAYOUT)


@pytest.fixture()
def valid_arguments() -> dict[str, dict[str, Any]]:
    """One valid argument set per tool (fast: small model, small search)."""
    return {
        "list_models": {"contains": "llama"},
        "list_hardware": {"vendor": "amd"},
        "legal_axes": {**JOB, "seq_len": 4096},
        "check_memory": {**JOB, "layout": LAYOUT},
        "project": {**JOB, "layout": LAYOUT},
        "search": {**JOB, "gbs": 32, "seq_len": 4096, "top_k": 3,
                   "constraints": {"precision": "bf16", "pp": "<=2", "tp": ">=2"}},
        "compare": {**JOB, "layouts": [LAYOUT, LAYOUT_B]},
        "explain": {**JOB, "a": LAYOUT, "b": LAYOUT_B},
        "export_launch_config": {**JOB, "layout": LAYOUT, "framework": "megatron"},
        "run_benchmark": {**JOB, "layout": LAYOUT},
        "tune": {**JOB, "gbs": 32, "seq_len": 4096, "top_k": 2, "max_rounds": 1, "constraints": ["precision=bf16"]},
    }
