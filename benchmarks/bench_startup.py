"""Whole-process start-up and end-to-end time of `projtune` commands: two checkouts, alternated in one run.

Run: ``python benchmarks/bench_startup.py --old DIR --new DIR [--runs N] [--tune-runs M] [--commands help,project,tune]
[--bytecode inherit|cached] [--json]``.

Each command is run as a whole process (the ``projtune`` console script, as a user starts it), with
``PYTHONPATH`` set to the checkout so its packages are the ones imported (checked before timing).
Per round the two checkouts alternate, the first of the pair swapping every round (old-new, new-old,
...), so that a load change on a shared machine falls on both; one untimed warm-up run of each comes
first (disk cache; bytecode when it is written).  Printed per command: the median wall time and the
median CPU time (user + system of the process and its children, from ``getrusage``) of each
checkout, the old/new ratios, and whether the two wrote the same stdout (the figures must not change).

``--bytecode inherit`` (default) runs with the caller's environment (with ``PYTHONDONTWRITEBYTECODE=1``
every module of the checkout is compiled from source on every start); ``cached`` writes and reuses
bytecode under a temporary ``PYTHONPYCACHEPREFIX`` per checkout, as an installed package runs.

Commands (issue 31): ``help`` = ``projtune --help``; ``project`` = one projection of Mixtral 8x22B on
64 MI355X (the README's example); ``tune`` = the offline ``projtune tune "tune Mixtral 8x7B for 64 MI300X"``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS: dict[str, list[str]] = {
    "help": ["--help"],
    "project": ["project", "--model", "mixtral-8x22b", "--gpu", "mi355x", "--gpus", "64", "--tp", "1", "--pp", "4",
                "--vpp", "2", "--ep", "8", "--mbs", "1", "--gbs", "256", "--seq-len", "8192"],
    "tune": ["tune", "tune Mixtral 8x7B for 64 MI300X"],
}
RUNS, TUNE_RUNS = 9, 3


def _script() -> list[str]:
    """The console script (run with this interpreter), else the same entry point through ``-c``."""
    found = shutil.which("projtune")
    if found:
        return [sys.executable, found]
    return [sys.executable, "-c", "import sys; from projtune.cli import main; sys.argv[0] = 'projtune'; main()"]


def checkout_env(root: Path, pycache: Path | None) -> dict[str, str]:
    """The environment that makes ``root``'s packages the imported ones (and, optionally, caches bytecode)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root)
    env["COLUMNS"] = "100"
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def check_checkout(root: Path, env: dict[str, str]) -> None:
    """Fail unless ``projtune`` imports from ``root`` under ``env``."""
    out = subprocess.run([sys.executable, "-c", "import projtune; print(projtune.__file__)"], env=env, cwd=root,
                         capture_output=True, text=True, check=True).stdout.strip()
    if not Path(out).resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"error: with PYTHONPATH={root}, projtune imports from {out}, not from that checkout")


def run_once(argv: list[str], root: Path, env: dict[str, str]) -> tuple[float, float, str, int]:
    """(wall s, CPU s of the process and its children, stdout, exit code) of one whole-process run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=root, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout, done.returncode


def bench(name: str, roots: dict[str, Path], envs: dict[str, dict[str, str]], runs: int) -> dict[str, object]:
    """Alternate whole-process runs of one command on both checkouts; medians and the output check."""
    argv = _script() + COMMANDS[name]
    times: dict[str, list[tuple[float, float]]] = {label: [] for label in roots}
    outputs: dict[str, str] = {}
    codes: dict[str, int] = {}
    for label in roots:                                  # warm-up, untimed
        _, _, outputs[label], codes[label] = run_once(argv, roots[label], envs[label])
    labels = list(roots)
    for i in range(runs):
        for label in (labels if i % 2 == 0 else labels[::-1]):
            wall, cpu, _, _ = run_once(argv, roots[label], envs[label])
            times[label].append((wall, cpu))
    row: dict[str, object] = {"command": "projtune " + " ".join(COMMANDS[name]), "runs": runs}
    for label, pairs in times.items():
        row[f"{label}_wall_s"] = statistics.median(w for w, _ in pairs)
        row[f"{label}_cpu_s"] = statistics.median(c for _, c in pairs)
        row[f"{label}_exit"] = codes[label]
    row["wall_ratio"] = row["old_wall_s"] / row["new_wall_s"]     # type: ignore[operator]
    row["cpu_ratio"] = row["old_cpu_s"] / row["new_cpu_s"]        # type: ignore[operator]
    row["same_stdout"] = outputs["old"] == outputs["new"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="checkout of the earlier commit")
    parser.add_argument("--new", type=Path, required=True, help="checkout of the later commit")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"timed runs per checkout (default {RUNS})")
    parser.add_argument("--tune-runs", type=int, default=TUNE_RUNS, help=f"timed tune runs (default {TUNE_RUNS})")
    parser.add_argument("--commands", default=",".join(COMMANDS), help="comma list of " + ", ".join(COMMANDS))
    parser.add_argument("--bytecode", choices=("inherit", "cached"), default="inherit")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    names = [c.strip() for c in args.commands.split(",") if c.strip()]
    unknown = [c for c in names if c not in COMMANDS]
    if unknown:
        raise SystemExit(f"error: unknown command {unknown[0]!r}; allowed: {', '.join(COMMANDS)}")
    roots = {"old": args.old, "new": args.new}
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp:
        envs = {label: checkout_env(root, Path(tmp) / label if args.bytecode == "cached" else None)
                for label, root in roots.items()}
        for label, root in roots.items():
            check_checkout(root, envs[label])
        rows = [bench(name, roots, envs, args.tune_runs if name == "tune" else args.runs) for name in names]
    if args.json:
        print(json.dumps({"bytecode": args.bytecode, "old": str(args.old), "new": str(args.new), "rows": rows}))
        return
    print(f"bytecode: {args.bytecode}; old = {args.old}, new = {args.new}; medians, runs alternated")
    print(f"{'command':<10} {'runs':>4} {'old wall':>9} {'new wall':>9} {'x wall':>7} {'old cpu':>8} {'new cpu':>8} "
          f"{'x cpu':>6}  same stdout")
    for name, row in zip(names, rows, strict=True):
        print(f"{name:<10} {row['runs']:>4} {row['old_wall_s']:>8.2f}s {row['new_wall_s']:>8.2f}s "
              f"{row['wall_ratio']:>6.2f}x {row['old_cpu_s']:>7.2f}s {row['new_cpu_s']:>7.2f}s {row['cpu_ratio']:>5.2f}x"
              f"  {'yes' if row['same_stdout'] else 'NO'}")


if __name__ == "__main__":
    main()
