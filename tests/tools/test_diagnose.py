"""`projtune diagnose`: project a given config, compare with the best, one-line errors naming the line, round trip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from projection.engine import project
from projection.hardware import load_hardware
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from projtune.cli import app
from tools.diagnose import diagnose
from tools.exports import export_launch_config

FIXTURES = Path(__file__).parents[1] / "evals" / "fixtures"
KEYS = ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "gbs", "seq_len", "precision", "recompute",
        "recompute_num_layers", "sequence_parallel", "zero", "fsdp_size", "schedule")
# (framework, model, gpu, gpus, layout) that the framework can launch
ROUND_TRIPS: list[tuple[str, str, str, int, dict[str, Any]]] = [
    ("megatron", "llama3-8b", "h100-sxm", 64, dict(tp=4, pp=2, mbs=1, gbs=256, seq_len=8192, zero=1,
                                                   sequence_parallel=True, recompute="full")),
    ("megatron", "mixtral-8x7b", "mi300x", 64, dict(tp=2, pp=4, vpp=2, ep=8, mbs=1, gbs=256, seq_len=4096,
                                                    zero=1, sequence_parallel=True, precision="fp8")),
    ("primus", "llama3-70b", "mi300x", 64, dict(tp=8, pp=2, mbs=1, gbs=128, seq_len=8192, zero=1,
                                                 sequence_parallel=True, recompute="selective")),
    ("torchtitan", "llama3-8b", "h100-sxm", 64, dict(tp=2, pp=2, mbs=1, gbs=256, seq_len=8192, zero=0,
                                                     sequence_parallel=True)),
    ("torchtitan", "deepseek-v3", "h100-sxm", 256, dict(tp=1, pp=1, ep=64, mbs=1, gbs=256, seq_len=4096, zero=3,
                                                        recompute="full")),
    ("torchtitan", "llama3.1-405b", "h100-sxm", 1024, dict(tp=8, pp=16, vpp=2, mbs=1, gbs=512, seq_len=8192,
                                                           zero=3, precision="fp8", sequence_parallel=True)),
]
runner = CliRunner()


def _write(tmp_path: Path, framework: str, model: str, gpu: str, n: int, values: dict[str, Any]) -> tuple[Path, Any]:
    spec, cluster, config = load_model(model), Cluster(gpu=gpu, num_gpus=n), TrainingConfig(**values)
    exported = export_launch_config(spec, cluster, config, framework)
    path = tmp_path / exported.filename
    path.write_text(exported.text)
    return path, (spec, cluster, config)


@pytest.mark.parametrize("case", ROUND_TRIPS, ids=lambda c: f"{c[0]}-{c[1]}")
def test_export_then_diagnose_gives_back_the_layout_and_projection(tmp_path: Path, case: Any) -> None:
    path, (spec, cluster, config) = _write(tmp_path, *case)
    result = diagnose(str(path), search=False)  # model, GPU and count come from the export header
    back = TrainingConfig(**{k: v for k, v in result.yours.config.items() if k != "dp" and v is not None})
    assert {k: getattr(back, k) for k in KEYS} == {k: getattr(config, k) for k in KEYS}
    # priced as the file's framework runs it (issue 24): the launch file's framework is the recipe framework here
    ran_on = config.model_copy(update={"framework": case[0]})
    expected = project(spec, cluster, ran_on, hardware=load_hardware(cluster.gpu))
    assert result.yours.config["framework"] == case[0]
    assert result.yours.tokens_per_sec_per_gpu == pytest.approx(expected.tokens_per_s_per_gpu, rel=1e-9)
    assert result.yours.peak_memory_gib * 2**30 == pytest.approx(expected.memory.peak_bytes, rel=1e-9)
    assert result.framework == case[0] and not result.framework_problems


def test_diagnose_megatron_command_line_prints_the_comparison() -> None:
    args = ("--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
            "--group-query-attention --num-query-groups 8 --tensor-model-parallel-size 8 "
            "--pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 256 --seq-length 8192 --bf16 "
            "--use-distributed-optimizer --sequence-parallel --recompute-granularity full --recompute-method uniform "
            "--recompute-num-layers 1")
    out = runner.invoke(app, ["diagnose", "--gpu", "h100-sxm", "--gpus", "64", "--", *args.split()])
    assert out.exit_code == 0, out.output
    line = out.output.strip().splitlines()[-1]
    assert line.startswith("your layout: ") and "tokens/s/GPU, fits with" in line and "bottleneck" in line
    assert "best found: " in line and "change these flags: " in line and "--tensor-model-parallel-size 8 -> " in line
    gain = float(line.split("tokens/s/GPU, +")[1].split("%")[0])
    assert gain > 0
    data = json.loads(runner.invoke(app, ["diagnose", "--gpu", "h100-sxm", "--gpus", "64", "--json", "--",
                                          args]).stdout)
    assert data["model"] == "llama3-8b" and data["best"]["tokens_per_sec_per_gpu"] > data["yours"][
        "tokens_per_sec_per_gpu"]
    assert data["summary"] == line


def test_diagnose_torchtitan_toml_prints_the_comparison(tmp_path: Path) -> None:
    path, _ = _write(tmp_path, *ROUND_TRIPS[3])
    out = runner.invoke(app, ["diagnose", str(path)])
    assert out.exit_code == 0, out.output
    line = out.output.strip().splitlines()[-1]
    assert line.startswith("your layout: ") and "best found: " in line
    assert "parallelism.tensor_parallel_degree 2 -> 1" in line or "this layout is the fastest" in line


def test_diagnose_a_training_log() -> None:
    from evals.log_import import parse_log

    result = diagnose(str(FIXTURES / "megatron_llama3_8b_tp4_pp2.log"), gpu="h100-sxm", search=False,
                      log_reader=parse_log)
    assert result.kind == "training-log" and result.model == "llama3-8b" and result.num_gpus == 16
    assert result.measured["iteration_time_s"] > 0


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("bad.toml", "[parallelism]\ntensor_parallel_degree = \n", "line 2"),
    ("bad.yaml", "modules:\n  pre_trainer:\n    overrides: [1, 2\n", "line 4"),
    ("typo.args", "--num-layers 32\n--tensor-model-paralel-size 2\n",
     "line 2: unknown flag --tensor-model-paralel-size (did you mean --tensor-model-parallel-size?)"),
    ("value.args", "--num-layers 32\n--micro-batch-size 1\n--global-batch-size two\n", "line 3: --global-batch-size"),
])
def test_bad_files_get_one_line_naming_the_line(tmp_path: Path, name: str, text: str, expected: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    out = runner.invoke(app, ["diagnose", str(path), "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8"])
    assert out.exit_code == 2
    message = out.output.strip()
    assert len(message.splitlines()) == 1 and message.startswith("error: ") and expected in message, message
    assert "Traceback" not in out.output


def test_missing_job_facts_are_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "plain.args"
    path.write_text("--tensor-model-parallel-size 2 --global-batch-size 64 --seq-length 4096\n")
    out = runner.invoke(app, ["diagnose", str(path)])
    assert out.exit_code == 2 and "--model" in out.output and "--gpu" in out.output


RUN_SCRIPT = """torchrun --nproc-per-node 8 --nnodes 8 pretrain_gpt.py \\
  --num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 \\
  --group-query-attention --num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 \\
  --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --sequence-parallel \\
  --micro-batch-size 1 --global-batch-size 512 --bf16 --use-distributed-optimizer \\
  --data-path /data/corpus --tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-70B
"""


def test_a_launch_script_names_its_model_by_shape_and_tokenizer(tmp_path: Path) -> None:
    path = tmp_path / "run.sh"
    path.write_text(RUN_SCRIPT)
    result = diagnose(str(path), gpu="h100-sxm", num_gpus=64, search=False)
    assert result.model == "llama3-70b"  # llama2-70b has the same shape; the tokenizer names the model
    assert (result.yours.config["tp"], result.yours.config["pp"], result.yours.config["zero"]) == (8, 4, 1)
    path.write_text(RUN_SCRIPT.replace(" --tokenizer-model meta-llama/Meta-Llama-3-70B", ""))
    out = runner.invoke(app, ["diagnose", str(path), "--gpu", "h100-sxm", "--gpus", "64", "--no-search"])
    assert out.exit_code == 2 and "llama2-70b, llama3-70b" in out.output and "pass --model" in out.output
