"""The prepared device script: runs end to end on the CPU without the project's dependencies, and its
results feed the restore-and-compare step (CPU plumbing only; labelled so, never GPU results)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
TORCH_ONLY = ("attention", "fp8", "layers", "layer_timing", "microbench", "selfcheck", "shapes", "version")
CASES = ("--cases", "llama2-70b:tp=2,cp=1", "--cases", "mixtral-8x7b")
# The project's own dependencies: none may be imported by the device script (the GPU machine may lack them).
BLOCKED = ("pydantic", "pydantic_core", "scipy", "yaml", "typer", "rich", "langgraph", "langchain_core",
           "projection", "evals", "tools", "agent", "projtune")

_RUNNER = """
import importlib.abc, runpy, sys
BLOCKED = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked for the device-script test: {name}")
sys.meta_path.insert(0, Block())
sys.argv = [sys.argv[2], *sys.argv[3:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _stdlib_or_torch(name: str) -> bool:
    top = name.split(".")[0]
    return top == "torch" or top in sys.stdlib_module_names or top == "__future__"


def test_torch_only_modules_import_nothing_but_torch_stdlib_and_each_other() -> None:
    for stem in (*TORCH_ONLY, "../benchmarks/gpu_check"):
        path = (ROOT / "bench" / f"{stem}.py").resolve()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                ok = _stdlib_or_torch(name) or (name.startswith("bench.") and name.split(".")[1] in TORCH_ONLY)
                in_type_check = "TYPE_CHECKING" in path.read_text() and name.startswith("projection.")
                assert ok or in_type_check, f"{path.name} imports {name}"


def test_without_a_gpu_it_says_so_in_one_line(capsys) -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    import gpu_check

    assert gpu_check.main(["--out", "/nonexistent-not-written"]) == gpu_check.NO_GPU_EXIT
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and "no GPU" in lines[0] and "--cpu --quick" in lines[0]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gpu-check")
    done = subprocess.run([sys.executable, "-c", _RUNNER, ",".join(BLOCKED), str(SCRIPT), "--cpu", "--quick",
                           *CASES, "--out", str(out)], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "NOT REPRESENTATIVE" in done.stdout
    return out / "gpu_results.json"


def test_cpu_dry_run_writes_its_json_without_the_projects_dependencies(dry_run: Path) -> None:
    data = json.loads(dry_run.read_text())
    assert data["kind"] == "projtune-gpu-check-results" and data["complete"] and not data["representative"]
    assert data["runtime"]["device_type"] == "cpu" and data["runtime"]["code_version"]
    assert data["checks"] and all(c["ok"] for c in data["checks"]), data["checks"]
    kinds = {p["kind"] for p in data["micro"] if p["measured_s"] > 0}
    assert {"gemm", "grouped_gemm", "attention", "attention_bwd", "copy"} <= kinds
    assert {c["id"].split(":")[0] for c in data["cases"]} == {"llama2-70b", "mixtral-8x7b"}
    for case in data["cases"]:
        assert not case["errors"] and case["head"] is not None
        for layer in case["layers"]:
            run = layer["run"]
            assert run["attention_backend"] and run["gemm_precision"] and run["forward_s"] > 0


def test_compare_projects_the_dev_runs_from_the_dry_run_labelled_as_plumbing(dry_run: Path, tmp_path) -> None:
    from evals.gpu_compare import COLUMNS, PLUMBING, compare, markdown

    out = compare(dry_run, out_dir=tmp_path)
    assert out["label"] == PLUMBING and not out["representative"]
    assert out["runs"], "no H200 development run matched the measured slice"
    for row in out["runs"]:
        assert row["gpu"] == "h200" and row["measured"] > 0
        assert all(row["projected"][c] is not None for c in COLUMNS), row["errors"]
        assert any("not representative" in w for w in row["warnings"])
    assert "CPU PLUMBING" in markdown(out)
    written = {p.name for p in tmp_path.iterdir()}
    assert {"compare.json", "compare.md", "profile-h200-cpu-plumbing.yaml"} <= written
    assert sum(n.startswith("measurement-") for n in written) == 2
    from bench.measurement import read_measurement

    m = read_measurement(next(tmp_path.glob("measurement-llama2*.json")))
    assert m.source == "cpu" and not m.representative and m.compute_slice == "target"
    assert m.provenance["code_version"]


def test_the_committed_plan_covers_every_h200_dev_run_at_the_engines_shapes() -> None:
    from evals.gpu_plan import PLAN_FILE, build_plan

    committed = json.loads(PLAN_FILE.read_text())
    fresh = build_plan(with_flops=False)
    runs = lambda plan: {r for c in plan["cases"] for r in c["runs"]}  # noqa: E731
    assert runs(committed) == runs(fresh), "benchmarks/gpu_plan.json is stale: python -m evals.gpu_plan --write"
    by_id = {c["id"]: c for c in fresh["cases"]}
    for case in committed["cases"]:
        assert [layer["shape"] for layer in case["layers"]] == [layer["shape"] for layer in by_id[case["id"]]["layers"]]
        assert all(layer["flops_fwd"] > 0 for layer in case["layers"])


def test_eval_measured_projects_runs_with_a_measurement_and_skips_the_rest(dry_run: Path, tmp_path) -> None:
    from typer.testing import CliRunner

    from evals.gpu_compare import compare
    from projtune.cli import app

    compare(dry_run, out_dir=tmp_path)
    result = CliRunner().invoke(app, ["eval", str(ROOT / "evals" / "data" / "mlperf-training-v4-v5.0.yaml"),
                                      "--gpu", "h200", "--measured", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    scored = [r for r in data["runs"] if r["skipped"] is None]
    skipped = [r for r in data["runs"] if r["skipped"] is not None]
    assert scored and all(r["config"]["tp"] == 2 and r["config"].get("cp", 1) == 1 for r in scored)
    assert any("no measurement in" in r["skipped"] for r in skipped)
    bad = CliRunner().invoke(app, ["eval", str(ROOT / "evals" / "data"), "--measured", str(tmp_path / "nope")])
    assert bad.exit_code == 2 and "does not exist" in bad.output
