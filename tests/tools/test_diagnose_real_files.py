"""`diagnose` reads real public launch files as they are (tests/fixtures/launch, sources in its README)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from projtune.cli import app
from tools.diagnose import diagnose
from tools.launch_defaults import LayoutError, pipeline_layout_stages
from tools.launch_import import LaunchConfigError, import_launch_config, megatron_args
from tools.launch_shell import ShellScriptError, command_words, expand_primus

LAUNCH = Path(__file__).parents[1] / "fixtures" / "launch"
# file -> (gpu, gpus, what the reading must give back, a note it must make)
REAL: dict[str, tuple[str, int, dict[str, Any], str]] = {
    "megatron_llama3_8b_h100_fp8.sh": ("h100-sxm", 8, dict(
        model="llama3-8b", tp=1, pp=1, cp=1, mbs=1, gbs=128, seq_len=8192, precision="fp8", zero=1), ""),
    "megatron_gpt3_175b_distributed.sh": ("h100-sxm", 128, dict(
        model="gpt3-175b", tp=8, pp=16, mbs=1, gbs=1536, seq_len=2048, precision="fp16", zero=0), ""),
    "torchtitan_llama3_8b.toml": ("h100-sxm", 8, dict(
        model="llama3.1-8b", tp=1, pp=1, mbs=1, gbs=8, seq_len=8192, zero=3, recompute="selective"),
        "training.global_batch_size not set"),
    "torchtitan_llama3_70b.toml": ("a100-80gb", 64, dict(
        model="llama3.1-70b", tp=8, pp=1, mbs=8, gbs=64, seq_len=8192, zero=3, recompute="full"),
        "local_batch_size x data-parallel degree = 8 x 8 = 64"),
    "primus_mi355x_llama3.1_8b_bf16.yaml": ("mi355x", 8, dict(
        model="llama3.1-8b", tp=1, pp=1, mbs=4, gbs=256, seq_len=8192, precision="bf16", zero=1),
        "Primus default taken"),
    "primus_mi355x_deepseek_v3_fp8.yaml": ("mi355x", 256, dict(
        model="deepseek-v3", tp=1, pp=16, vpp=2, ep=8, mbs=2, gbs=4096, seq_len=4096, precision="fp8", zero=1,
        recompute="full", recompute_num_layers=2, moe_dispatcher="deepep"), "recompute_layer_ids: 21 of 61"),
    "bridge_llama3_8b_pretrain_override_example.yaml": ("h100-sxm", 8, dict(
        model="llama3-8b", tp=1, pp=1, cp=2, mbs=1, gbs=8, seq_len=4096, precision="bf16", zero=1),
        "recipe llama3_8b_pretrain_config default taken"),
    # MaxText's A3 (8 x H100 nodes) example: 128 nodes, FSDP 8 inside x 128 across, XLA pipelining flags
    "maxtext_a3_llama3.1_405b_128vm.sh": ("h100-sxm", 1024, dict(
        model="llama3.1-405b", tp=1, pp=1, cp=1, mbs=1, gbs=1024, seq_len=8192, precision="bf16", zero=3,
        recompute="full", comm_overlap=["dp", "pp"]), "not key=value, ignored: enable_checkpointing:, False"),
    "maxtext_gpu_llama3_8b.yml": ("h100-sxm", 8, dict(
        model="llama3-8b", tp=1, pp=1, mbs=12, gbs=96, seq_len=8192, precision="bf16", zero=3, recompute="none",
        attention_backend="fused"), "base.yml default taken: gradient_accumulation_steps 1"),
}


@pytest.mark.parametrize("name", list(REAL))
def test_real_launch_files_diagnose_without_edits(name: str) -> None:
    gpu, gpus, want, note = REAL[name]
    result = diagnose(str(LAUNCH / name), gpu=gpu, num_gpus=gpus, search=False)
    got = {"model": result.model} | {k: result.yours.config.get(k) for k in want if k != "model"}
    assert got == want
    assert result.yours.tokens_per_sec_per_gpu > 0
    assert not note or any(note in n for n in result.notes), result.notes


def test_the_cli_prints_what_it_read() -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["diagnose", str(LAUNCH / "torchtitan_llama3_70b.toml"), "--gpu", "a100-80gb",
                              "--gpus", "64", "--no-search"])
    assert out.exit_code == 0, out.output
    assert "read: training.global_batch_size not set" in out.output


def test_deepseek_v3_advice_keeps_what_an_expert_keeps() -> None:
    """The Primus DeepSeek-V3 recipe recomputes 21 of 61 layers: read as full recompute it was 11% slower and
    the comparison told the user to drop PP and EP for FSDP; read as it is, no such advice."""
    result = diagnose(str(LAUNCH / "primus_mi355x_deepseek_v3_fp8.yaml"), gpu="mi355x", num_gpus=256)
    assert result.yours.config["recompute_num_layers"] == 2
    if result.best is not None:
        assert result.best.config["pp"] > 1 or result.best.config["ep"] > 1, result.summary


def test_a_script_is_read_as_bash_would_run_it() -> None:
    script = """#!/bin/bash
TP=${TP:-4}
PP=${1:-"2"}
LAYERS=32
WORLD=$(( 8 * 2 ))
ARGS=(
    --tensor-model-parallel-size $TP   # a comment
    --pipeline-model-parallel-size "$PP"
)
if [[ "$TP" == "4" ]] && [ -z "$UNSET" ]; then
    ARGS+=("--sequence-parallel" "--num-layers ${LAYERS}")
else
    ARGS+=(--bf16)
fi
EXTRA='--micro-batch-size 1'
torchrun --nproc-per-node 8 pretrain_gpt.py "${ARGS[@]}" $EXTRA --global-batch-size ${GBS:-$WORLD}
"""
    words, unresolved = command_words(script)
    assert words == ["--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "2",
                     "--sequence-parallel", "--num-layers 32", "--micro-batch-size", "1", "--global-batch-size", "16"]
    assert unresolved == ["$UNSET is not set in the file"]
    args = megatron_args(script.replace('"${ARGS[@]}"', "${ARGS[@]}"))  # unquoted: "--num-layers 32" splits
    assert args["num_layers"] == 32 and args["sequence_parallel"] is True and "bf16" not in args


@pytest.mark.parametrize(("text", "message"), [
    ("ARGS=(\n --tp 1\n", "array ( ... ) is not closed"),
    ("torchrun pretrain_gpt.py --seq-length '4096\n", "unterminated ' quote"),
    ("X=${Y\n", "unclosed ${"),
])
def test_broken_scripts_get_one_line(text: str, message: str) -> None:
    with pytest.raises(ShellScriptError, match=message.replace("(", r"\(").replace(")", r"\)").replace("$", r"\$")):
        command_words(text)


def test_primus_defaults_and_layouts() -> None:
    assert expand_primus("tp: ${PRIMUS_TP:1}\npath: ${DATA:null}\nx: ${NO_DEFAULT}\n") == (
        "tp: 1\npath: null\nx: ${NO_DEFAULT}\n", ["NO_DEFAULT"])
    assert pipeline_layout_stages("Et*3|(tt|)*2,m|L") == [3, 2, 2, 0, 0]
    assert sum(pipeline_layout_stages("Et*1|t*1|" + "t*2|" * 29 + "t*1,L")) == 61
    with pytest.raises(LayoutError, match="cannot read"):
        pipeline_layout_stages("Et*3|x")
    keys = import_launch_config("modules:\n  pre_trainer:\n    overrides:\n      use_distributed_optimizer: false\n"
                                "      seq_length: 4096\n      global_batch_size: 8\n", "primus", num_layers=32)
    assert keys["zero"] == 0 and keys["precision"] == "bf16" and keys["mbs"] == 2  # Primus defaults


def test_maxtext_mesh_batch_and_pipeline_are_read_as_maxtext_resolves_them() -> None:
    """types.py / create_device_mesh: one -1 axis takes the devices left, per_device_batch_size x devices x
    gradient_accumulation_steps sequences, PP micro-batches split the forward pass, repeats = virtual stages."""
    keys = import_launch_config("ici_tensor_parallelism: 2\nici_fsdp_parallelism: -1\ndcn_pipeline_parallelism: 2\n"
                                "dcn_data_parallelism: -1\nper_device_batch_size: 2\nnum_pipeline_microbatches: 8\n"
                                "num_layers_per_pipeline_stage: 4\nmax_target_length: 4096\nremat_policy: full\n"
                                "quantization: nanoo_fp8\n", "maxtext", num_layers=32, num_gpus=32)
    # 4 nodes: ici tensor 2 x fsdp 4, dcn pipeline 2 x data 2; 64 sequences in 8 micro-batches over dp 8
    assert keys.items() >= {"tp": 2, "pp": 2, "vpp": 4, "zero": 3, "fsdp_size": 4, "gbs": 64, "mbs": 1,
                            "seq_len": 4096, "precision": "fp8", "recompute": "full",
                            "pp_schedule": "interleaved"}.items()
    command = ("python3 -m MaxText.train src/MaxText/configs/base.yml ici_expert_parallelism=8 ici_fsdp_parallelism=1 "
               "dcn_fsdp_parallelism=-1 dcn_data_parallelism=1 per_device_batch_size=1 gradient_accumulation_steps=4 "
               "capacity_factor=1.25 "
               "attention=dot_product max_target_length=4096")
    keys = import_launch_config(command, "maxtext", num_layers=32, num_gpus=64)
    assert keys.items() >= {"ep": 8, "zero": 3, "gbs": 256, "mbs": 1, "moe_routing": "token-drop",
                            "moe_capacity_factor": 1.25, "attention_backend": "unfused"}.items()


@pytest.mark.parametrize(("text", "message"), [
    ("ici_fsdp_parallelism: -1\nici_data_parallelism: -1\n", "at most one axis can be unspecified"),
    ("ici_fsdp_parallelism: 4\n", "multiply to 4, not the 8 devices of a node"),
    ("ici_tensor_transpose_parallelism: 2\nici_fsdp_parallelism: -1\n", "mesh axis tensor_transpose"),
    ("remat_policy: save_qkv_proj\n", "projtune reads full, minimal_with_context"),
    ("quantization: int8\n", "quantization 'int8'"),
    ("per_device_batch_size: 0.01\n", "less than one sequence"),
])
def test_maxtext_launches_it_cannot_project_get_one_line(text: str, message: str) -> None:
    with pytest.raises(LaunchConfigError, match=message):
        import_launch_config(text, "maxtext", num_layers=32, num_gpus=8)
