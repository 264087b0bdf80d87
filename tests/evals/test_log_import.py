"""Training-log importer on log excerpts written in the real Megatron / Primus / torchtitan formats.

Fixture values (tests/evals/fixtures/*.log) were written for these tests; the expected
medians below are computed by hand from the lines left after the warm-up skip.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evals.log_import import LogImportError, import_logs, render_yaml
from evals.sweep_file import load_sweep_files

FIXTURES = Path(__file__).parent / "fixtures"
MEGATRON = FIXTURES / "megatron_llama3_8b_tp4_pp2.log"
MEGATRON_FULL = FIXTURES / "megatron_llama3_8b_tp2_pp4_full.log"
PRIMUS = FIXTURES / "primus_mixtral_8x7b_ep8.log"
TITAN = FIXTURES / "torchtitan_llama3_8b_fsdp8_tp8.log"
TITAN_OLD = FIXTURES / "torchtitan_old_llama3_70b.log"


def test_megatron_config_keys() -> None:
    sweep = import_logs([MEGATRON], gpu="h100-sxm").sweeps[0]
    (run,) = sweep.runs
    assert sweep.effective_config(run) == {
        "framework": "megatron", "tp": 4, "pp": 2, "cp": 1, "vpp": 4, "mbs": 1, "gbs": 128,
        "seq_len": 8192, "sequence_parallel": True, "precision": "fp8", "recompute": "selective",
        "recompute_modules": ["core_attn"], "zero": 1,
    }
    assert run.unknown == []
    assert (sweep.cluster.gpu, sweep.cluster.num_gpus) == ("h100-sxm", 16)


def test_megatron_metrics() -> None:
    (run,) = import_logs([MEGATRON], gpu="h100-sxm").sweeps[0].runs
    # 10 logged iterations, first 2 skipped; median of the 8 others.
    assert run.measured.iteration_time_s == pytest.approx((4322.8 + 4325.7) / 2 / 1000)
    assert run.measured.model_tflops_per_gpu == pytest.approx((462.0 + 462.3) / 2)
    # max 'max allocated' over ranks: 63488.0 MB (2^20 bytes) = 62 GiB.
    assert run.measured.peak_memory_gib == pytest.approx(63488.0 / 1024)
    assert run.measured.tokens_per_sec_per_gpu is None


def test_megatron_model_from_arguments() -> None:
    model = import_logs([MEGATRON], gpu="h100-sxm").sweeps[0].model
    assert model == {
        "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
        "tie_word_embeddings": False,
    }


def test_two_logs_form_one_sweep_with_shared_keys_fixed() -> None:
    sweep = import_logs([MEGATRON, MEGATRON_FULL], gpu="h100-sxm", sweep_name="llama3-8b-16g").sweeps[0]
    assert sweep.name == "llama3-8b-16g"
    assert sweep.fixed.model_dump(exclude_none=True) == {
        "cp": 1, "mbs": 1, "gbs": 128, "seq_len": 8192, "precision": "fp8", "zero": 1, "framework": "megatron",
    }
    second = sweep.effective_config(sweep.runs[1])
    assert (second["tp"], second["pp"], second["vpp"], second["recompute"], second["recompute_num_layers"]) == (
        2, 4, 1, "full", 1)
    # 5 logged iterations: ceil(10%) < 2, so 2 are skipped.
    assert sweep.runs[1].measured.iteration_time_s == pytest.approx(5.05)


def test_primus_moe_log() -> None:
    sweep = import_logs([PRIMUS], gpu="mi300x").sweeps[0]
    (run,) = sweep.runs
    config = sweep.effective_config(run)
    assert config["framework"] == "primus"
    assert (config["ep"], config["etp"], config["precision"], config["recompute"]) == (8, 1, "fp8-blockwise", "none")
    assert (config["moe_dispatcher"], config["moe_routing"]) == ("alltoall", "dropless")
    assert run.measured.tokens_per_sec_per_gpu == pytest.approx((8010.7 + 8003.9) / 2)
    assert run.measured.peak_memory_gib == pytest.approx(150.0)
    assert isinstance(sweep.model, dict)
    assert (sweep.model["model_type"], sweep.model["num_local_experts"], sweep.model["num_experts_per_tok"]) == (
        "mixtral", 8, 2)


def test_torchtitan_log() -> None:
    sweep = import_logs([TITAN]).sweeps[0]
    (run,) = sweep.runs
    assert (sweep.cluster.gpu, sweep.cluster.num_gpus) == ("h100-sxm", 64)
    assert sweep.effective_config(run) == {
        "framework": "torchtitan", "tp": 8, "pp": 1, "cp": 1, "zero": 3, "mbs": 2, "gbs": 16,
        "seq_len": 8192, "precision": "fp8", "recompute": "selective",
    }
    # 5 step lines, first 2 skipped: tps 7123, 7101, 7140.
    assert run.measured.tokens_per_sec_per_gpu == 7123
    assert run.measured.model_tflops_per_gpu == pytest.approx(412.49)
    assert run.measured.mfu == pytest.approx(0.4171)
    assert run.measured.peak_memory_gib == pytest.approx(48.31)
    assert sweep.model == {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
                           "num_attention_heads": 32, "num_key_value_heads": 8,
                           "intermediate_size": 14336, "vocab_size": 128256}


def test_torchtitan_log_without_config_lists_unknown_keys() -> None:
    sweep = import_logs([TITAN_OLD], gpu="a100-80gb", model="llama3-70b").sweeps[0]
    (run,) = sweep.runs
    assert sweep.model == "llama3-70b"
    assert sweep.effective_config(run) == {"framework": "torchtitan", "tp": 1, "pp": 1, "cp": 1, "zero": 3}
    assert run.unknown == ["mbs", "gbs", "seq_len", "precision", "recompute"]
    assert run.measured.tokens_per_sec_per_gpu == 331.5  # 'wps' of the older format
    assert run.measured.mfu == pytest.approx(0.517)


def test_log_without_iteration_lines_names_the_file() -> None:
    path = FIXTURES / "no_iterations.log"
    with pytest.raises(LogImportError, match=rf"{path}: no iteration lines found"):
        import_logs([path], gpu="h100-sxm")


@pytest.mark.parametrize(
    ("paths", "kwargs", "message"),
    [
        ([MEGATRON], {}, r"GPU type not found in the logs; pass --gpu \(one of a100-40gb"),
        ([MEGATRON], {"gpu": "h100"}, r"unknown gpu 'h100' .*did you mean h100-sxm\?"),
        ([TITAN_OLD], {"gpu": "a100-80gb"}, r"model architecture not found .*pass --model"),
        ([MEGATRON], {"gpu": "h100-sxm", "num_gpus": 8}, r"num_gpus=8 given, but the logs show 16"),
        ([MEGATRON, PRIMUS], {"gpu": "h100-sxm"}, r"logs differ in num_gpus"),
        ([MEGATRON.parent], {"gpu": "h100-sxm"}, r"fixtures: is a folder; give its log files \(e\.g\. fixtures/\*\.log\)"),
    ],
)
def test_import_errors(paths: list[Path], kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(LogImportError, match=message):
        import_logs(paths, **kwargs)


@pytest.mark.parametrize(
    ("paths", "kwargs"),
    [
        ([MEGATRON, MEGATRON_FULL], {"gpu": "h100-sxm"}),
        ([PRIMUS], {"gpu": "mi300x"}),
        ([TITAN], {}),
        ([TITAN_OLD], {"gpu": "a100-80gb", "model": "llama3-70b"}),
    ],
)
def test_render_yaml_round_trip(tmp_path: Path, paths: list[Path], kwargs: dict[str, object]) -> None:
    sweepfile = import_logs(paths, **kwargs)
    out = tmp_path / "imported.yaml"
    out.write_text(render_yaml(sweepfile))
    result = load_sweep_files([out])
    assert [str(e) for e in result.errors] == []
    (loaded,) = result.sweeps
    assert loaded.sweep == sweepfile.sweeps[0]


def test_a_log_cut_off_inside_its_last_line_does_not_read_that_line(tmp_path: Path) -> None:
    """A log ending in '... tps: 7' (cut while '7,123' was written) was imported as 7 tokens/s/GPU."""
    lines = TITAN.read_text().splitlines(keepends=True)
    last = next(i for i in range(len(lines) - 1, -1, -1) if "tps:" in lines[i])
    cut = tmp_path / "cut.log"
    cut.write_text("".join(lines[:last]) + lines[last].split("tps:")[0] + "tps: 7")
    whole = tmp_path / "whole.log"
    whole.write_text("".join(lines[:last]))
    run = import_logs([cut], gpu="h100-sxm").sweeps[0].runs[0]
    assert run.measured == import_logs([whole], gpu="h100-sxm").sweeps[0].runs[0].measured
    assert "its last line, cut off without a newline, was not read" in run.notes


def test_a_log_of_warm_up_iterations_only_says_so(tmp_path: Path) -> None:
    """Its one (warm-up) step was read as "median of 1 of 1 logged iterations", as if it were a steady median."""
    lines = TITAN.read_text().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if "tps:" in line)
    short = tmp_path / "short.log"
    short.write_text("".join(lines[:first + 1]))
    notes = import_logs([short], gpu="h100-sxm").sweeps[0].runs[0].notes
    assert "only 1 logged iteration(s), all within the 2 skipped as warm-up elsewhere: the last one is read" in notes
