"""Plausibility checks of sweep data: hand-made inconsistencies, and the findings on evals/data."""

from __future__ import annotations

from pathlib import Path

import pytest

from evals.data_checks import check_consistency, estimate_active_params, flop_per_token_bounds
from evals.sweep_file import load_sweep_files

DATA = Path(__file__).resolve().parents[2] / "evals" / "data"
LLAMA3_8B = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256}


def sweep_file(tmp_path: Path, *, fixed: str, measured: str, notes: str = "x") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"""\
source: test
sweeps:
- name: s
  notes: {notes}
  model: {{model_type: llama, hidden_size: 4096, num_hidden_layers: 32, num_attention_heads: 32,
          num_key_value_heads: 8, intermediate_size: 14336, vocab_size: 128256}}
  cluster: {{gpu: h100-sxm, num_gpus: 8}}
  fixed: {fixed}
  runs:
  - measured: {measured}
""")
    return path


def findings(path: Path) -> list[tuple[str, object]]:
    result = load_sweep_files([path])
    assert result.errors == []
    return [(f.key, f.value) for f in check_consistency(result.sweeps)]


def test_llama3_8b_params() -> None:
    # Meta model card: 8.03B parameters, of which 2 x 128256 x 4096 embedding + output layer.
    params, output_layer = estimate_active_params(LLAMA3_8B)
    assert params + 2 * output_layer == pytest.approx(8.03e9, rel=0.002)
    low, high = flop_per_token_bounds(LLAMA3_8B, 8192, finetune=None, recompute=None)
    assert (low, high) == (6 * (params + output_layer), 6 * (params + output_layer) + 12 * 32 * 4096 * 8192)


def test_consistent_run_has_no_findings(tmp_path: Path) -> None:
    # Megatron-Bridge 25.09 Llama3-8B H100 row: 14079 tokens/s/GPU, 725 TFLOP/s (51.5 GFLOP/token).
    path = sweep_file(tmp_path, fixed="{tp: 1, pp: 1, mbs: 1, gbs: 128, seq_len: 8192, precision: fp8, zero: 1}",
                      measured="{tokens_per_sec_per_gpu: 14079, model_tflops_per_gpu: 725}", notes="GA=16")
    assert findings(path) == []


@pytest.mark.parametrize(
    ("fixed", "measured", "notes", "key"),
    [
        ("{mbs: 1, gbs: 128, seq_len: 8192, zero: 1}", "{tokens_per_sec_per_gpu: 14079, model_tflops_per_gpu: 400}",
         "x", "model_tflops_per_gpu"),
        ("{mbs: 1, gbs: 128, seq_len: 8192, zero: 1}", "{model_tflops_per_gpu: 400, mfu: 0.3}", "x", "mfu"),
        ("{mbs: 1, gbs: 128, seq_len: 8192, zero: 1}", "{iteration_time_s: 10.0, tokens_per_sec_per_gpu: 14079}", "x",
         "tokens_per_sec_per_gpu"),
        ("{mbs: 1, gbs: 128, seq_len: 8192, zero: 1}", "{model_tflops_per_gpu: 2500}", "x", "model_tflops_per_gpu"),
        ("{mbs: 1, gbs: 128, seq_len: 8192, zero: 1}", "{peak_memory_gib: 90}", "x", "peak_memory_gib"),
        ("{tp: 3, mbs: 1, gbs: 128}", "{mfu: 0.4}", "x", "tp*pp*cp"),
        ("{tp: 2, mbs: 3, gbs: 128}", "{mfu: 0.4}", "x", "gbs"),
        ("{tp: 2, mbs: 1, gbs: 128}", "{mfu: 0.4}", "GA=16", "GA"),
        ("{moe_routing: token-drop}", "{mfu: 0.4}", "dropless MoE", "moe_routing"),
    ],
)
def test_inconsistency_is_found(tmp_path: Path, fixed: str, measured: str, notes: str, key: str) -> None:
    assert [k for k, _ in findings(sweep_file(tmp_path, fixed=fixed, measured=measured, notes=notes))] == [key]


def test_development_data_findings() -> None:
    # The findings listed in evals/data/CHECKS.md; the data is not edited.
    result = load_sweep_files([DATA])
    every = check_consistency(result.sweeps)
    found = {(Path(f.file).name, f.sweep, f.run_index, f.key) for f in every if f.key != "memory"}
    gpt_oss = {(Path(f), s, 0, "model_tflops_per_gpu") for f, s in [
        ("megatron-bridge-25.11.yaml", "megatron-bridge-25.11-gpt-oss-120b-b200-64g-gbs512-s4k"),
        ("megatron-bridge-25.11.yaml", "megatron-bridge-25.11-gpt-oss-120b-h100-sxm-64g-gbs512-s4k"),
        *[(f"megatron-bridge-{r}.yaml", f"megatron-bridge-{r}-gpt-oss-120b-{g}-64g-gbs1280-s4k")
          for r in ("26.02", "26.02.01") for g in ("gb300", "gb200", "b300", "b200", "h100-sxm")],
    ]}
    assert found == {
        # (entry 1's GA=16 row now records the pinned recipe's fp8_mx mbs 1: CHECKS.md 44)
        ("megatron-bridge-25.09.yaml", "megatron-bridge-25.09-deepseek-v3-gb200-256g-gbs2048-s4k", 1, "ep"),
        ("megatron-bridge-25.09.yaml", "megatron-bridge-25.09-deepseek-v3-h100-sxm-1024g-gbs8192-s4k", 0,
         "moe_routing"),
        ("megatron-bridge-25.11.yaml", "megatron-bridge-25.11-qwen3-235b-a22b-gb300-256g-gbs8192-s4k", 0, "GA"),
        ("megatron-bridge-25.11.yaml", "megatron-bridge-25.11-gpt-oss-120b-h100-sxm-64g-gbs512-s4k", 0, "GA"),
        ("nemo-long-sequence.yaml", "nemo-long-sequence-llama3-8b-b200-512g-gbs8-s512k", 0, "gbs"),
        ("nemo-long-sequence.yaml", "nemo-long-sequence-llama3-8b-b200-1024g-gbs4-s1024k", 0, "gbs"),
        *{("primus.yaml", "primus-llama2-7b-mi300x-8g", i, "model_tflops_per_gpu") for i in range(4)},
        *{(str(f), s, i, k) for f, s, i, k in gpt_oss},
    }


def test_development_data_memory_findings() -> None:
    # CHECKS.md 15: the DeepSpeed ZeRO-3 rows of Narayanan et al. now record the full recompute SC'21 states
    # (without it the layouts need 4-22x an A100's memory), so none of them is a memory finding any more.  The
    # NeMo/Megatron-Bridge files record `zero: 1`, and so do the Megatron-LM README rows since CHECKS.md 39 (the NeMo
    # performance scripts they follow use the distributed optimizer and sequence parallelism); left is the
    # Megatron-Bridge 26.02.01 GB300 NVFP4 row printed with PP 1 (its recipe uses PP 4 x VPP 5).
    result = load_sweep_files([DATA])
    memory = [f for f in check_consistency(result.sweeps) if f.key == "memory"]
    assert not [f for f in memory if Path(f.file).name == "narayanan-sc21.yaml"]
    others = {f.sweep: f.message for f in memory if Path(f.file).name != "narayanan-sc21.yaml"}
    assert set(others) == {"megatron-bridge-26.02.01-llama3-70b-gb300-64g-gbs256-s8k"}
    assert "zero 1" in others["megatron-bridge-26.02.01-llama3-70b-gb300-64g-gbs256-s8k"]


def test_memory_check_names_the_missing_setting(tmp_path: Path) -> None:
    fixed = "{tp: 1, pp: 1, mbs: 1, gbs: 128, seq_len: 8192, precision: fp8, zero: 0}"
    found = check_consistency(load_sweep_files([sweep_file(
        tmp_path, fixed=fixed, measured="{tokens_per_sec_per_gpu: 14079}")]).sweeps)
    assert [f.key for f in found] == ["memory"]
    assert "zero 1" in found[0].message
    # the same run recorded as out of memory is consistent, and so is one without a throughput
    for measured in ("{oom: true}", "{peak_memory_gib: 70}"):
        (tmp_path / "s.yaml").unlink()
        path = sweep_file(tmp_path, fixed=fixed, measured=measured)
        assert [f.key for f in check_consistency(load_sweep_files([path]).sweeps)] == []


def test_sweeps_validate_check_lists_findings_without_failing(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from projtune.cli import app

    path = sweep_file(tmp_path, fixed="{tp: 1, pp: 1, mbs: 1, gbs: 128, seq_len: 8192, precision: fp8, zero: 0}",
                      measured="{tokens_per_sec_per_gpu: 14079}")
    runner = CliRunner()
    plain = runner.invoke(app, ["sweeps", "validate", str(path)])
    assert plain.exit_code == 0 and "suspicious" not in plain.output
    checked = runner.invoke(app, ["sweeps", "validate", str(path), "--check"])
    assert checked.exit_code == 0, checked.output
    assert "suspicious: " in checked.stdout and "memory=" in checked.stdout and "zero 1" in checked.stdout
    assert "1 suspicious values" in checked.stderr
    path.write_text(path.read_text().replace("num_gpus: 8", "num_gpus: eight"))
    broken = runner.invoke(app, ["sweeps", "validate", str(path), "--check"])
    assert broken.exit_code == 2 and "num_gpus" in broken.output
