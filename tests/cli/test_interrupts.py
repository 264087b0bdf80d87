"""Outputs that survive a kill (issue 29): `eval --report` folders swap in whole, `tune --log` streams its
trials, and Ctrl-C at any moment ends with one line and exit code 130.

Kill tests run a writer in a forked process (or the CLI in a subprocess) and kill it at seeded random
moments; afterwards the folder holds the old report or the complete new one, never a mix or nothing,
and every trial line written before the kill is complete JSON.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from projtune.atomic_output import JsonLines, replace_dir

CLI = [sys.executable, "-c", "from projtune.cli import main; main()"]
ROOT = Path(__file__).resolve().parents[2]
OLD = {"report.md": "old report", "a.png": "old plot"}
NEW = {"report.md": "new report", "b.png": "new plot 1", "ranks/c.png": "new plot 2"}


def _state(folder: Path) -> dict[str, str] | None:
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): p.read_bytes().decode("latin-1") for p in folder.rglob("*") if p.is_file()}


def _slow_fill(staging: Path) -> list[Path]:
    written = []
    for name, text in NEW.items():
        path = staging / name
        path.parent.mkdir(parents=True, exist_ok=True)
        time.sleep(0.02)
        path.write_text(text)
        written.append(path)
    return written


def _owned(relative: Path) -> bool:
    return relative.name == "report.md" or relative.suffix == ".png"


@pytest.mark.parametrize("seed", range(6))
def test_a_report_folder_killed_at_any_moment_is_old_or_complete(tmp_path: Path, seed: int) -> None:
    target = tmp_path / "report"
    target.mkdir()
    for name, text in OLD.items():
        (target / name).write_text(text)
    pid = os.fork()
    if pid == 0:   # the writer
        try:
            replace_dir(target, _slow_fill, owned=_owned)
        finally:
            os._exit(0)
    time.sleep(random.Random(seed).uniform(0.0, 0.09))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert _state(target) in (OLD, NEW)


def test_a_folder_of_other_files_is_refused_untouched(tmp_path: Path) -> None:
    (tmp_path / "thesis.tex").write_text("mine")
    with pytest.raises(Exception, match="not a projtune report"):
        replace_dir(tmp_path, _slow_fill, owned=_owned)
    assert _state(tmp_path) == {"thesis.tex": "mine"}


def test_json_lines_written_before_a_kill_are_complete(tmp_path: Path) -> None:
    path = tmp_path / "trials.jsonl"
    pid = os.fork()
    if pid == 0:
        with JsonLines(path) as log:
            for i in range(10_000):
                log.write({"id": i, "pad": "x" * 200})
        os._exit(0)
    time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(len(rows)))


def _start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([*CLI, *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_tune_log_keeps_the_trials_scored_before_a_kill(tmp_path: Path) -> None:
    log = tmp_path / "trials.jsonl"
    process = _start(["tune", "tune llama3 70b on 64 h100", "--offline", "--log", str(log)])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None and not (log.exists() and log.read_text()):
        time.sleep(0.02)
    process.kill()
    process.wait(timeout=10)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert rows and all(r["status"] for r in rows) and [r["id"] for r in rows] == sorted(r["id"] for r in rows)


@pytest.mark.parametrize("delay_s", [0.15, 0.4, 1.5])
def test_ctrl_c_at_any_moment_is_one_line_and_exit_130(delay_s: float) -> None:
    process = _start(["tune", "tune llama3 70b on 64 h100", "--offline"])
    time.sleep(delay_s)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    if process.returncode == 0:
        pytest.skip("finished before the signal")
    lines = [line for line in stderr.splitlines() if not line.startswith("round ")]
    assert process.returncode == 130, stderr[-500:]
    assert len(lines) == 1 and lines[0].startswith("interrupted"), stderr[-500:]


def test_eval_report_killed_mid_run_keeps_a_complete_report(tmp_path: Path) -> None:
    report = tmp_path / "report"
    args = ["eval", "evals/data/korthikanti-2022.yaml", "--report", str(report)]
    first = _start(args)
    assert first.wait(timeout=120) == 0, first.stderr.read() if first.stderr else ""
    complete = _state(report)
    assert complete and "report.md" in complete
    again = _start(args)
    time.sleep(random.Random(7).uniform(1.0, 4.0))
    again.kill()
    again.wait(timeout=10)
    assert set(_state(report) or {}) == set(complete)
