"""The console script's usage errors: one line on stderr, exit code 2, never a traceback or typer's boxed panel.

A misspelt command or option, a value of the wrong type, a value below an option's minimum and a missing
argument are click's errors, raised before a command runs; `projtune.cli.run_command` turns them into one line
that keeps click's own hint (the nearest command, the possible options) and names the help to read.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "from projtune.cli import main; main()"]
ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)


@pytest.mark.parametrize(("args", "expected"), [
    (("projct",), "No such command 'projct'. Did you mean 'project'?; see 'projtune --help'"),
    (("project", "--modle", "llama3-8b"), "No such option: --modle (Possible options: --compile, --model, --profile)"),
    (("project", "--gpus", "abc"), "Invalid value for '--gpus'"),
    (("search", "-m", "llama3-8b", "-g", "h100-sxm", "-n", "8", "--deadline-s", "-1"),
     "Invalid value for '--deadline-s': Input should be greater than or equal to 0"),
    (("diagnose",), "Missing argument 'source'; see 'projtune diagnose --help'"),
    (("sweeps", "importt"), "No such command 'importt'. Did you mean 'import'?"),
])
def test_click_usage_errors_are_one_line_with_exit_2(args: tuple[str, ...], expected: str) -> None:
    result = _run(*args)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and expected in lines[0], lines[0]
    assert "Traceback" not in result.stderr and "╭" not in result.stderr


def test_exit_codes_of_commands_are_kept() -> None:
    """typer.Exit(n) inside a command still sets the exit code outside click's standalone mode."""
    illegal = _run("project", "-m", "llama3-8b", "-g", "h100-sxm", "-n", "64", "--tp", "3", "--mbs", "1",
                   "--gbs", "256", "--seq-len", "8192")
    assert illegal.returncode == 2 and illegal.stderr.startswith("error: illegal layout")
    assert _run("models").returncode == 0
    help_run = _run("project", "--help")
    assert help_run.returncode == 0 and "--model" in help_run.stdout


def test_count_flags_read_the_number_forms_of_every_other_input() -> None:
    """README "Numbers": one reader for files, flags, logs and requests; `--seq-len 8k --gpus 2^6 --gbs 256` is
    the same job as `--seq-len 8192 --gpus 64 --gbs 256` (flags were plain ints and refused `8k`)."""
    from typer.testing import CliRunner

    from projtune.cli import app

    runner = CliRunner()
    base = ["project", "-m", "llama3-8b", "-g", "h100-sxm", "--tp", "2", "--mbs", "1", "--json"]
    plain = runner.invoke(app, [*base, "-n", "64", "--gbs", "256", "--seq-len", "8192"])
    forms = runner.invoke(app, [*base, "-n", "2^6", "--gbs", "256", "--seq-len", "8k"])
    grouped = runner.invoke(app, [*base, "-n", "64", "--gbs", "256", "--seq-len", "8,192"])
    assert plain.exit_code == forms.exit_code == grouped.exit_code == 0, forms.output
    assert plain.stdout == forms.stdout == grouped.stdout


@pytest.mark.parametrize(("value", "why"), [
    ("8kk", "'8kk' is not a number (write e.g. 8192, 8,192, 8 192, 8k, 1e3 or 2^13)"),
    ("-8", "'-8' must be a positive number without a sign"),
    ("0", "'0' is out of range (allowed 1 or more)"),
])
def test_count_flag_refusals_are_one_line(value: str, why: str) -> None:
    result = _run("search", "-m", "llama3-8b", "-g", "h100-sxm", "-n", "64", "--gbs", "256", "--seq-len", value)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: Invalid value for '--seq-len': {why}; see 'projtune search --help'"]


def test_a_usage_error_under_json_is_also_the_json_error_object() -> None:
    """click refuses `--gpus 0` before the command runs; with --json stdout was empty."""
    import json

    result = _run("project", "--gpus", "0", "--json")
    assert result.returncode == 2
    assert json.loads(result.stdout) == {"ok": False, "error": {
        "message": "Invalid value for '--gpus' / '-n': '0' is out of range (allowed 1 or more); "
                   "see 'projtune project --help'", "exit_code": 2}}
    assert result.stderr.splitlines() == [f"error: {json.loads(result.stdout)['error']['message']}"]
