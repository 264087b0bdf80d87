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


def test_tune_anchor_of_another_gpu_is_a_usage_error_before_any_trial() -> None:
    """`project`/`search --anchor` refused it in one line; `tune` ran every round, then answered "no layout:
    search failed: anchor ..." with exit code 1."""
    from pathlib import Path

    sweep = Path(__file__).resolve().parents[2] / "evals" / "data" / "torchtitan.yaml"
    line = _one_line_error(["tune", "tune llama3 8b on 64 h100", "--offline", "--anchor", str(sweep)])
    assert "measured on h100-96gb-500w, the target is h100-sxm; an anchor must be a run on the target's GPU type" \
        in line


def test_malformed_layout_file_names_the_line_without_the_parser_excerpt(tmp_path) -> None:
    """The message was PyYAML's multi-part text with a literal '\\n  in "<unicode string>", line 2, column 6'."""
    layout = tmp_path / "layout.yaml"
    layout.write_text("model: llama3-8b\n  bad: [\n")
    line = _one_line_error(["project", "-c", str(layout)])
    assert line == (f"error: cannot parse layout file '{layout}', line 2: malformed YAML: mapping values are not "
                    "allowed in this context")
