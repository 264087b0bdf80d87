"""Shared arguments for the tool tests: one small job every tool can run on quickly."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
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


MEGATRON_LM = Path(__file__).parents[1] / "fixtures" / "megatron_lm"


@pytest.fixture()
def megatron_validate_args(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A function (Megatron-LM export, gpu, gpus) -> args: the launcher's training command (after the entry point)
    parsed by Megatron-LM core_v0.16.1's ``parse_args`` and checked by its ``validate_args``
    (tests/fixtures/megatron_lm, on megatron-core 0.16.1), with WORLD_SIZE and CUDA_DEVICE_MAX_CONNECTIONS as the
    launcher sets them and the target GPU's compute capability.  Raises what validate_args raises."""
    pytest.importorskip("megatron.core")
    import megatron

    from projection.hardware import load_hardware
    from tools.launch_shell import command_words, run_script

    monkeypatch.setattr(megatron, "__path__", [*megatron.__path__, str(MEGATRON_LM / "megatron")])
    for name in [m for m in sys.modules if m.startswith("megatron.training")]:
        monkeypatch.delitem(sys.modules, name)
    from megatron.training import arguments, utils

    def check(exported: Any, gpu: str, num_gpus: int) -> Any:
        commands, state = run_script(exported.text)
        assert commands[-1].words[0] == "torchrun" and "pretrain_gpt.py" in commands[-1].words
        family = load_hardware(gpu).family
        major = {"ampere": 8, "hopper": 9}.get(family, 10 if "blackwell" in family else 9)
        monkeypatch.setattr(utils, "DEVICE_ARCH", major)
        monkeypatch.setattr("torch.cuda.get_device_capability", lambda *_: (major, 0))
        for key, value in {"WORLD_SIZE": str(num_gpus), "RANK": "0", "LOCAL_RANK": "0"}.items():
            monkeypatch.setenv(key, value)
        if "CUDA_DEVICE_MAX_CONNECTIONS" in state.scalars:
            monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", state.scalars["CUDA_DEVICE_MAX_CONNECTIONS"])
        else:
            monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
        monkeypatch.setattr(sys, "argv", ["pretrain_gpt.py", *command_words(exported.text)[0]])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            args = arguments.parse_args()
            arguments.validate_args(args)
        return args

    return check
