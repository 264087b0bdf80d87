"""Hostile inputs of `projtune diagnose` (issue 29): every one ends in exit 0 or one line and exit 2, bounded.

The table holds the forms that used to raise (a number that passes ``str.isdigit`` and then fails
``int``, a flag given twice, a wrong-shaped Primus YAML, wrong-typed torchtitan values, log captures
that are not numbers, a mesh with fewer sizes than names, literal_eval output of the wrong shape, a
string where torchtitan prints ``ffn_dim_multiplier``, which once repeated a string 10^9 times).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from projtune.cli import app

runner = CliRunner()
JOB = ["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "64", "--no-search"]
MEGATRON = ("--tensor-model-parallel-size {tp} --pipeline-model-parallel-size 2 --micro-batch-size 1 "
            "--global-batch-size 256 --seq-length 8192 --num-layers 32 --hidden-size 4096 --num-attention-heads 32")
TITAN = "[parallelism]\ntensor_parallel_degree = {tp}\n[training]\nglobal_batch_size = 256\nseq_len = 8192\n{extra}"
TITAN_LOG = ("step: 1 loss: 2 memory: 3GiB tps: 1,000 tflops: 1 mfu: 1%\n"
             "step: 2 loss: 2 memory: 3GiB tps: 1,000 tflops: 1 mfu: 1%\n{extra}\n")
MEGATRON_LOG = ("iteration 1/ 10 | elapsed time per iteration (ms): {ms} | global batch size: 256\n"
                "iteration 2/ 10 | elapsed time per iteration (ms): {ms} | global batch size: 256\n")

CASES: dict[str, tuple[str, str]] = {
    "circled digit": ("args.sh", MEGATRON.format(tp="①")),
    "superscript": ("args.sh", MEGATRON.format(tp="²")),
    "arabic-indic": ("args.sh", MEGATRON.format(tp="٣")),
    "5000 digits": ("args.sh", MEGATRON.format(tp="1" * 5000)),
    "inf": ("args.sh", MEGATRON.format(tp="inf")),
    "shell variable": ("args.sh", MEGATRON.format(tp="$TP")),
    "two values": ("args.sh", MEGATRON.format(tp="2 4")),
    "flag twice": ("args.sh", MEGATRON.format(tp="2") + " --tensor-model-parallel-size 4"),
    "space after backslash": ("args.sh", MEGATRON.format(tp="2").replace(" --pipeline", " \\ \n--pipeline")),
    "hidden size junk": ("args.sh", MEGATRON.format(tp="2").replace("--hidden-size 4096", "--hidden-size 4k2")),
    "num-experts bare": ("args.sh", MEGATRON.format(tp="2") + " --num-experts"),
    "primus list": ("exp.yaml", "modules: [1, 2]\n"),
    "primus overrides list": ("exp.yaml", "modules:\n  pre_trainer:\n    overrides: [tp]\n"),
    "primus octal": ("exp.yaml", "modules:\n  pre_trainer:\n    overrides:\n      global_batch_size: 0512\n"),
    "primus duplicate": ("exp.yaml", "modules:\n  pre_trainer:\n    overrides:\n      seq_length: 1\n"
                                     "      seq_length: 2\n"),
    "primus deep": ("exp.yaml", "modules: " + "[" * 5000 + "]" * 5000 + "\n"),
    "titan inf": ("job.toml", TITAN.format(tp="inf", extra="")),
    "titan date": ("job.toml", TITAN.format(tp="1979-05-27", extra="")),
    "titan string": ("job.toml", TITAN.format(tp='"2"', extra="")),
    "titan bool": ("job.toml", TITAN.format(tp="true", extra="")),
    "titan ac zero": ("job.toml", TITAN.format(tp="2", extra='[activation_checkpoint]\nmode = "selective"\n'
                                                         'selective_ac_option = "0"\n')),
    "titan table is value": ("job.toml", 'parallelism = 3\n'),
    "titan shard zero": ("job.toml", TITAN.format(tp="2", extra="").replace(
        "[parallelism]\n", "[parallelism]\ndata_parallel_shard_degree = 0\n")),
    "log 1.2.3": ("train.log", MEGATRON_LOG.format(ms="1.2.3")),
    "log mesh short": ("train.log", TITAN_LOG.format(
        extra='Building 3-D device mesh with ["pp", "dp_shard", "tp"], [2, 4]')),
    "log args list": ("train.log", TITAN_LOG.format(extra="Running with args: {'training': [1, 2]}")),
    "log args str": ("train.log", TITAN_LOG.format(extra="Running with args: {'training': {'local_batch_size': "
                                                         "'8', 'seq_len': 'x'}}")),
    "log ffn string": ("train.log", TITAN_LOG.format(
        extra="with TransformerModelArgs(dim=1000000, n_layers=2, n_heads=2, vocab_size=10, "
              "ffn_dim_multiplier='xxxxxxxx')")),
    "log world size huge": ("train.log", MEGATRON_LOG.format(ms="100") + "  world_size ...... " + "9" * 400 + "\n"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_inputs_end_in_one_line(tmp_path: Path, name: str) -> None:
    file_name, text = CASES[name]
    path = tmp_path / file_name
    path.write_text(text, encoding="utf-8")
    result = runner.invoke(app, ["diagnose", str(path), *JOB])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 2), result.output[-500:]
    if result.exit_code == 2:
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) < 400, result.output[-500:]


def test_a_file_name_longer_than_the_file_system_allows_is_one_line() -> None:
    result = runner.invoke(app, ["diagnose", "x" * 300 + ".toml", *JOB])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and len(result.output) < 300
