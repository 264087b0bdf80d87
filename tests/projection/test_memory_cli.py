"""`projtune memory`: a per-rank breakdown whose terms sum to the peak, naming the heaviest rank."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from projtune.cli import app

# Llama3-70B SFT on 32 H100, TP4 PP4 VPP5, FP8, distributed optimizer (the Megatron-Bridge H100 SFT preset).
ARGS = ["memory", "--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "32", "--tp", "4", "--pp", "4",
        "--vpp", "5", "--precision", "fp8", "--zero", "1", "--sp", "--mbs", "1", "--gbs", "32",
        "--seq-len", "4096", "--finetune", "sft"]
TERMS = {"weights", "gradients", "optimizer", "fp8", "activations", "buffers", "workspace", "allocator"}


def test_memory_json_has_every_term_in_gib_and_they_sum_to_the_peak() -> None:
    result = CliRunner().invoke(app, [*ARGS, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data["peak_terms_gib"]) == TERMS
    assert sum(data["peak_terms_gib"].values()) == pytest.approx(data["peak_gib"], rel=1e-9)
    assert data["heaviest_rank"] == data["peak_rank"] == max(
        range(4), key=lambda r: data["rank_totals_gib"][r])
    assert len(data["rank_totals_gib"]) == len(data["stages"]) == 4
    assert data["margins"]["under"] >= 0 and data["fits_limit_gib"] <= data["usable_gib"]


def test_memory_table_names_the_heaviest_rank_and_the_margins() -> None:
    result = CliRunner().invoke(app, ARGS)
    assert result.exit_code == 0, result.output
    assert "Heaviest pipeline rank: 0" in result.stdout
    assert "sum = peak" in result.stdout and "fits up to" in result.stdout


def test_bad_framework_is_one_clear_line() -> None:
    result = CliRunner().invoke(app, [*ARGS, "--framework", "megatronn"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output and "framework" in result.output
