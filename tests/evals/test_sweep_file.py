"""Sweep-file models and loader: the development data, and the errors of broken files."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from evals.sweep_file import LoadResult, SweepFormatError, load_sweep_files
from evals.sweep_models import Measured, Run, SweepHeader, primary_metric

DATA = Path(__file__).resolve().parents[2] / "evals" / "data"

HEADER = """\
source: test citation
sweeps:
- name: {name}
  model: {{model_type: llama, hidden_size: 4096, num_hidden_layers: 32, num_attention_heads: 32}}
  cluster: {{gpu: {gpu}, num_gpus: 8}}
  fixed: {{mbs: 1, gbs: 64, seq_len: 4096}}
  runs:
"""


def write_sweep(tmp_path: Path, runs: str, *, name: str = "foo", gpu: str = "h100-sxm",
                file: str = "x.yaml") -> Path:
    path = tmp_path / file
    path.write_text(HEADER.format(name=name, gpu=gpu) + runs)
    return path


@pytest.fixture(scope="module")
def data() -> LoadResult:
    return load_sweep_files([DATA])


def readme_table() -> dict[str, tuple[int, int, int, set[str]]]:
    """Rows of the data README: file -> (sweeps, runs, rankable, GPU ids)."""
    rows = {}
    for line in (DATA / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and re.fullmatch(r"[\w.-]+\.yaml", cells[0]):
            rows[cells[0]] = (int(cells[2]), int(cells[3]), int(cells[4]),
                              {g.strip() for g in cells[5].split(",")})
    return rows


def test_development_data_loads_without_issues(data: LoadResult) -> None:
    assert [str(e) for e in data.errors] == []
    assert all(run.broken is None for sweep in data.sweeps for run in sweep.runs)


def test_development_data_counts(data: LoadResult) -> None:
    # Totals of the README table in evals/data/README.md.
    assert len({s.file for s in data.sweeps}) == 17
    assert len(data.sweeps) == 305
    assert sum(len(s.runs) for s in data.sweeps) == 411
    assert sum(s.rankable for s in data.sweeps) == 68


def test_development_data_matches_readme_rows(data: LoadResult) -> None:
    table = readme_table()
    assert len(table) == 17
    for file, (num_sweeps, num_runs, num_rankable, gpus) in table.items():
        sweeps = [s for s in data.sweeps if Path(s.file).name == file]
        assert (len(sweeps), sum(len(s.runs) for s in sweeps), sum(s.rankable for s in sweeps),
                {s.sweep.cluster.gpu for s in sweeps}) == (num_sweeps, num_runs, num_rankable, gpus), file


def test_development_data_runs_per_gpu(data: LoadResult) -> None:
    runs = Counter()
    for s in data.sweeps:
        runs[s.sweep.cluster.gpu] += len(s.runs)
    assert runs == {"a100-80gb": 45, "b200": 44, "b300": 8, "gb200": 47, "gb300": 29,
                    "h100-96gb-500w": 33, "h100-sxm": 77, "h200": 26, "h800": 3, "mi300x": 10,
                    "mi325x": 9, "mi355x": 80}


def test_unknown_config_key_is_a_run_issue_and_other_runs_load(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, """\
  - config: {tp: 2}
    measured: {iteration_time_s: 2.0}
  - config: {tp: 2, vp: 2}
    measured: {iteration_time_s: 1.9}
  - config: {tp: 4}
    measured: {iteration_time_s: 2.1}
""")
    result = load_sweep_files([path])
    (issue,) = result.errors
    assert issue.level == "run"
    assert (issue.file, issue.sweep, issue.run_index, issue.line) == (str(path), "foo", 1, 10)
    assert str(issue).startswith(f"{path}:10: sweep 'foo' run 1: unknown config key 'vp' (allowed: tp, pp,")
    assert "did you mean vpp?" in str(issue)
    (sweep,) = result.sweeps
    assert [r.broken is None for r in sweep.runs] == [True, False, True]
    assert [r.config["tp"] for r in sweep.runs if r.run] == [2, 4]
    assert len(sweep.sweep.runs) == 2
    assert sweep.rankable


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        ("  - config: {tp: 2}\n    measured: {}\n", "measured: no metric given"),
        ("  - config: {tp: 2}\n", "missing required key 'measured'"),
        ("  - config: {precision: fp9}\n    measured: {mfu: 0.4}\n",
         "config.precision: unknown value 'fp9' (allowed: bf16, fp16, fp8, fp8-blockwise, mxfp8, nvfp4; "
         "did you mean fp8?)"),
        ("  - measured: {mfu: 1.4}\n", "measured.mfu: input should be less than or equal to 1"),
        ("  - measured: {mfu: 0.4, tflops: 3}\n", "unknown metric 'tflops'"),
        ("  - measured: {mfu: 0.4}\n    unknown: [vp]\n", "'unknown' list: unknown config key 'vp'"),
        ("  - config: {tp: 2, dp: 2}\n    measured: {mfu: 0.4}\n",
         "dp=2 must equal num_gpus/(tp*pp*cp) = 8/(2*1*1) = 4"),
    ],
)
def test_bad_run_is_a_run_issue(tmp_path: Path, run: str, expected: str) -> None:
    path = write_sweep(tmp_path, run + "  - measured: {mfu: 0.5}\n")
    result = load_sweep_files([path])
    (issue,) = result.errors
    assert issue.level == "run"
    assert str(issue).startswith(f"{path}:8: sweep 'foo' run 0: ")
    assert expected in str(issue)
    (sweep,) = result.sweeps
    assert sweep.runs[0].broken is not None
    assert sweep.runs[1].broken is None


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("source: x\nsweeps:\n  - name: [a\n    model: llama3-8b\n")
    good = write_sweep(tmp_path, "  - measured: {mfu: 0.5}\n", file="good.yaml")
    result = load_sweep_files([tmp_path])
    (issue,) = result.errors
    assert issue.level == "file"
    assert str(issue).startswith(f"{path}:4: malformed YAML: ")
    assert [s.file for s in result.sweeps] == [str(good)]


@pytest.mark.parametrize("text", ["just text\n", "source: x\n", "source: x\nsweeps: []\n"])
def test_file_without_sweeps_is_skipped(tmp_path: Path, text: str) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(text)
    (issue,) = load_sweep_files([path]).errors
    assert issue.level == "file"
    assert "non-empty 'sweeps' list" in str(issue)


def test_unknown_gpu_is_a_sweep_issue_with_nearest_name(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, "  - measured: {mfu: 0.5}\n", gpu="h100")
    result = load_sweep_files([path])
    (issue,) = result.errors
    assert issue.level == "sweep"
    assert str(issue).startswith(f"{path}:3: sweep 'foo': cluster.gpu: unknown gpu 'h100'")
    assert "did you mean h100-sxm?" in str(issue)
    assert result.sweeps == []


def test_bad_model_is_a_sweep_issue(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("source: s\nsweeps:\n- name: m\n  model: {hidden_size: 8}\n"
                    "  cluster: {gpu: b200, num_gpus: 8}\n  runs: [{measured: {mfu: 0.5}}]\n")
    (issue,) = load_sweep_files([path]).errors
    assert issue.level == "sweep"
    assert "model: must be a catalog id" in str(issue)


def test_duplicate_sweep_name_across_files(tmp_path: Path) -> None:
    first = write_sweep(tmp_path, "  - measured: {mfu: 0.5}\n", file="a.yaml")
    second = write_sweep(tmp_path, "  - measured: {mfu: 0.5}\n", file="b.yaml")
    result = load_sweep_files([first, second])
    (issue,) = result.errors
    assert (issue.level, issue.file) == ("sweep", str(second))
    assert f"duplicate sweep name (first defined in {first})" in str(issue)
    assert len(result.sweeps) == 1


def test_raise_for_issues(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, "  - config: {vp: 2}\n    measured: {mfu: 0.5}\n")
    result = load_sweep_files([path])
    with pytest.raises(SweepFormatError, match=r"sweep 'foo' run 0: unknown config key 'vp'") as err:
        result.raise_for_issues()
    assert err.value.issues == result.errors


def test_incomplete_runs(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("""\
source: s
sweeps:
- name: inc
  model: llama3-8b
  cluster: {gpu: a100-80gb, num_gpus: 8}
  fixed: {gbs: 64}
  runs:
  - config: {mbs: 1, seq_len: 4096}
    measured: {mfu: 0.5}
  - config: {mbs: 1}
    measured: {mfu: 0.5}
  - config: {mbs: 1, seq_len: 4096}
    measured: {mfu: 0.5}
    unknown: [tp, pp]
  - measured: {mfu: 0.5}
    unknown: [seq_len]
""")
    (sweep,) = load_sweep_files([path]).sweeps
    assert [r.missing_keys for r in sweep.runs] == [(), ("seq_len",), ("tp", "pp"), ("seq_len", "mbs")]
    assert [r.complete for r in sweep.runs] == [True, False, False, False]
    header = SweepHeader.model_validate({"name": "n", "model": "llama3-8b", "cluster": {"gpu": "b200", "num_gpus": 8}})
    assert Run.model_validate({"measured": {"mfu": 0.5}}).missing_keys(header) == ["mbs", "gbs", "seq_len"]


def test_effective_config_run_wins_and_fills_no_defaults() -> None:
    header = SweepHeader.model_validate({
        "name": "n", "model": "llama3-8b", "cluster": {"gpu": "h200", "num_gpus": 16},
        "fixed": {"tp": 2, "precision": "bf16", "gbs": 32},
    })
    run = Run.model_validate({"config": {"tp": 4, "recompute": "full"}, "measured": {"mfu": 0.3}})
    assert header.effective_config(run) == {"tp": 4, "precision": "bf16", "gbs": 32, "recompute": "full"}


@pytest.mark.parametrize(
    ("measured", "metric"),
    [
        ({"mfu": 0.4, "model_tflops_per_gpu": 400.0, "iteration_time_s": 2.0,
          "tokens_per_sec_per_gpu": 9.0}, "iteration_time_s"),
        ({"mfu": 0.4, "model_tflops_per_gpu": 400.0, "tokens_per_sec_per_gpu": 9.0},
         "tokens_per_sec_per_gpu"),
        ({"mfu": 0.4, "model_tflops_per_gpu": 400.0}, "model_tflops_per_gpu"),
        ({"mfu": 0.4, "peak_memory_gib": 40.0}, "mfu"),
        ({"peak_memory_gib": 40.0, "oom": False, "layer_fwd_bwd_time_ms": 3.0}, None),
    ],
)
def test_primary_metric_order(measured: dict[str, float], metric: str | None) -> None:
    assert primary_metric(Measured.model_validate(measured)) == metric


@pytest.mark.parametrize(
    ("runs", "rankable"),
    [
        ("  - measured: {mfu: 0.5}\n  - measured: {mfu: 0.4}\n", True),
        ("  - measured: {mfu: 0.5}\n  - measured: {iteration_time_s: 3.0}\n", False),
        ("  - measured: {mfu: 0.5}\n", False),
        ("  - measured: {peak_memory_gib: 5.0}\n  - measured: {peak_memory_gib: 6.0}\n", False),
        ("  - measured: {mfu: 0.5}\n  - measured: {mfu: 0.4, iteration_time_s: 1.0}\n"
         "  - measured: {iteration_time_s: 1.1}\n", True),
        ("  - measured: {mfu: 0.5}\n  - {config: {vp: 1}, measured: {mfu: 0.4}}\n", False),
    ],
)
def test_rankable(tmp_path: Path, runs: str, rankable: bool) -> None:
    (sweep,) = load_sweep_files([write_sweep(tmp_path, runs)]).sweeps
    assert sweep.rankable is rankable
