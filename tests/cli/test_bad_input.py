"""Typical user mistakes on the commands that did not yet name the nearest valid value (exit 2, one line)."""

from __future__ import annotations

from typer.testing import CliRunner

from projtune.cli import app

runner = CliRunner()
LAYOUT = ["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "64", "--tp", "2", "--mbs", "1", "--gbs", "256",
          "--seq-len", "8192"]


def _one_line_error(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_tune_misspelt_framework_names_the_nearest() -> None:
    line = _one_line_error(["tune", "tune llama3 8b on 64 h100", "--framework", "torchtitn"])
    assert line == ("error: --framework: 'torchtitn' is not one of megatron, megatron-bridge, primus, torchtitan, "
                    "maxtext; did you mean 'torchtitan'?")


def test_chat_misspelt_framework_names_the_nearest() -> None:
    line = _one_line_error(["chat", "--framework", "maxtxt"])
    assert line.endswith("did you mean 'maxtext'?")


def test_export_misspelt_framework_names_the_nearest() -> None:
    line = _one_line_error(["export", *LAYOUT, "--framework", "torchtitn"])
    assert line.endswith("(got 'torchtitn'); did you mean 'torchtitan'?")
