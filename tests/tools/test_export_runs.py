"""Exports run as projected: launchers are valid bash that start the command diagnose reads; Megatron-LM's own
argument parser and validate_args accept the full command; export -> diagnose gives back the layout and the same
projection for every framework (MaxText: its YAML and its launcher both), over a generated set of legal layouts."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from projection.framework import record_of_launch
from projection.engine import project
from projection.legality import even_split, layout_violations
from projection.pipeline_split import stage_counts, uneven_split
from projection.model_spec import load_model
from projection.hardware import load_hardware
from projection.training_config import Cluster, TrainingConfig
from tools.diagnose import diagnose
from tools.exports import export_launch_config
from tools.exports.common import Job
from tools.exports.files import write_export
from tools.framework_rules import framework_violations
from tools.launch_shell import command_words

KEYS = ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "gbs", "seq_len", "precision", "recompute",
        "recompute_num_layers", "sequence_parallel", "zero", "fsdp_size", "schedule", "moe_dispatcher")
# (model, gpu, gpus): the jobs the generated layouts are drawn for
JOBS = [("llama3-8b", "h100-sxm", 64), ("llama3.1-405b", "h100-sxm", 1024), ("mixtral-8x7b", "mi300x", 64),
        ("deepseek-v3", "h100-sxm", 1024), ("gpt-oss-120b", "b200", 64), ("qwen3-30b-a3b", "mi355x", 32)]
ROUND_TRIP_FRAMEWORKS = ("megatron", "megatron-bridge", "primus", "torchtitan", "maxtext")
ZERO_CHOICES = {"torchtitan": [0, 1, 3], "maxtext": [0, 3]}   # the others: the distributed optimizer mostly
HSDP_FRAMEWORKS = ("torchtitan", "maxtext")   # a ZeRO-3 shard group smaller than the data-parallel ranks


def legal_layouts(framework: str, count: int, seed: int = 28, *, uneven: bool = False, hsdp: bool = False
                  ) -> list[tuple[str, str, int, TrainingConfig]]:
    """``count`` layouts (fixed seed) that the projection and ``framework`` both accept, spread over JOBS
    (``uneven``: only pipelines whose stages cannot be equal, with the split the search offers; ``hsdp``: only
    ZeRO-3 over a shard group smaller than the data-parallel ranks)."""
    rng = random.Random(f"{seed}-{framework}")
    found: list[tuple[str, str, int, TrainingConfig]] = []
    for _ in range(4000):
        model_id, gpu, n = rng.choice(JOBS)
        model = load_model(model_id)
        tp, pp = rng.choice([1, 2, 4, 8]), rng.choice([1, 1, 2, 4, 8])
        vpp = rng.choice([1, 2]) if pp > 1 else 1
        ep = rng.choice([1, 2, 4, 8]) if model.is_moe else 1
        recompute = rng.choice(["none", "selective", "full", "full"])
        values: dict[str, Any] = dict(
            tp=tp, pp=pp, vpp=vpp, cp=rng.choice([1, 1, 2]), ep=ep, mbs=rng.choice([1, 2]),
            seq_len=rng.choice([4096, 8192]), precision=rng.choice(["bf16", "fp8"]), recompute=recompute,
            sequence_parallel=tp > 1, zero=rng.choice(ZERO_CHOICES.get(framework, [1, 1, 0])),
            pp_schedule="interleaved" if vpp > 1 else None)
        if recompute == "full" and rng.random() < 0.5:
            values["recompute_num_layers"] = rng.choice([1, 2, 4]) * vpp
        if uneven and even_split(model.num_layers, pp * vpp):
            continue
        if not even_split(model.num_layers, pp * vpp):   # uneven: the split the search offers (issue 28 item 1)
            split = uneven_split(model.num_layers, pp, vpp)
            if split is None:
                continue
            values.update(pp_first_stage_layers=split.first, pp_last_stage_layers=split.last, pp_layout=split.layout)
        dp = n // (tp * pp * values["cp"]) if n % (tp * pp * values["cp"]) == 0 else 0
        if not dp:
            continue
        values["gbs"] = values["mbs"] * dp * rng.choice([1, 2, 4, 8])
        if hsdp:   # replicas of a shard group of cp x ep x 2..8 ranks
            size = values["cp"] * ep * rng.choice([2, 4, 8])
            if size >= dp * values["cp"]:
                continue
            values.update(zero=3, fsdp_size=size)
        try:
            config = TrainingConfig(**{k: v for k, v in values.items() if v is not None})
        except ValueError:
            continue
        cluster = Cluster(gpu=gpu, num_gpus=n)
        if layout_violations(model, load_hardware(gpu), cluster, config) or \
                framework_violations(framework, model, cluster, config):
            continue
        found.append((model_id, gpu, n, config))
        if len(found) == count:
            break
    return found


def _layout_id(case: tuple[str, str, int, TrainingConfig]) -> str:
    model, gpu, n, c = case
    return f"{model}-{n}x{gpu}-tp{c.tp}pp{c.pp}v{c.vpp}cp{c.cp}ep{c.ep}-{c.precision}-{c.recompute}" \
           f"{c.recompute_num_layers or ''}-z{c.zero}{f'f{c.fsdp_size}' if c.fsdp_size else ''}"


COUNTS = {"maxtext": 12}   # MaxText's rules leave fewer PP layouts: 12 draws reach PP with repeats (vpp 2)
HSDP = 2   # per framework with a ZeRO-3 shard group option
UNEVEN = 3   # per framework that can state a split (MaxText's stages must be equal): first/last layers or a layout
CASES = [(f, case) for f in ROUND_TRIP_FRAMEWORKS for case in legal_layouts(f, COUNTS.get(f, 8))] + \
    [(f, case) for f in ROUND_TRIP_FRAMEWORKS if f != "maxtext"
     for case in legal_layouts(f, UNEVEN, 30, uneven=True)] + \
    [(f, case) for f in HSDP_FRAMEWORKS for case in legal_layouts(f, HSDP, 31, hsdp=True)]


@pytest.mark.parametrize(("framework", "case"), CASES, ids=[f"{f}-{_layout_id(c)}" for f, c in CASES])
def test_export_then_diagnose_round_trips(tmp_path: Path, framework: str, case: Any) -> None:
    model_id, gpu, n, config = case
    spec, cluster = load_model(model_id), Cluster(gpu=gpu, num_gpus=n)
    exported = export_launch_config(spec, cluster, config, framework)
    written = write_export(exported, tmp_path / exported.filename)
    # MaxText: the YAML and the launcher's `python3 -m MaxText.train base.yml key=value ...` line are both read back
    sources = written[:2] if framework == "maxtext" else written[:1]
    assert framework != "maxtext" or [p.suffix for p in sources] == [".yml", ".sh"]
    # diagnose prices the file with its framework's record (issue 24): the expectation is priced the same way
    expected = project(spec, cluster, config.model_copy(update={"framework": record_of_launch(framework).name}))
    for path in sources:
        result = diagnose(str(path), search=False)
        back = TrainingConfig(**{k: v for k, v in result.yours.config.items() if k != "dp" and v is not None})
        assert {k: getattr(back, k) for k in KEYS} == {k: getattr(config, k) for k in KEYS}
        assert stage_counts(spec.num_layers, back.pp, back.vpp, back.pipeline_split) == \
            stage_counts(spec.num_layers, config.pp, config.vpp, config.pipeline_split)   # the same split
        assert result.yours.tokens_per_sec_per_gpu == pytest.approx(expected.tokens_per_s_per_gpu, rel=1e-9)
        assert result.yours.peak_memory_gib * 2**30 == pytest.approx(expected.memory.peak_bytes, rel=1e-9)


def test_the_generated_set_covers_the_switches() -> None:
    """The round trips must reach what the issue named: VPP with a per-chunk recompute count, FP8, EP, CP."""
    configs = [c for _, (_, _, _, c) in CASES]
    assert len(CASES) == sum(COUNTS.get(f, 8) + UNEVEN * (f != "maxtext") + HSDP * (f in HSDP_FRAMEWORKS)
                             for f in ROUND_TRIP_FRAMEWORKS)
    assert any(c.vpp > 1 and c.recompute_num_layers for c in configs)
    assert any(c.precision == "fp8" for c in configs) and any(c.ep > 1 for c in configs)
    assert any(c.cp > 1 for c in configs) and any(c.zero == 3 for c in configs)
    uneven = {f for f, (_, _, _, c) in CASES if not c.pipeline_split.is_default}   # stated first/last or layout
    assert uneven >= {"megatron", "megatron-bridge", "primus", "torchtitan"}
    assert any(c.pp_layout for c in configs) and any(c.pp_first_stage_layers for c in configs)
    maxtext = [c for f, (_, _, _, c) in CASES if f == "maxtext"]   # MaxText's mesh: PP with repeats, EP, TP, CP
    assert any(c.pp > 1 and c.vpp > 1 for c in maxtext) and any(c.ep > 1 for c in maxtext)
    assert any(c.tp > 1 for c in maxtext) and any(c.cp > 1 for c in maxtext) and any(c.zero == 0 for c in maxtext)
    assert {f for f, (_, _, _, c) in CASES if c.fsdp_size} == set(HSDP_FRAMEWORKS)


# ------------------------------------------------------------------------------------------------- launchers
def _megatron_cases() -> list[tuple[str, str, int, TrainingConfig]]:
    return legal_layouts("megatron", 10, seed=29)


@pytest.mark.parametrize("case", _megatron_cases(), ids=_layout_id)
def test_megatron_validate_args_accepts_the_full_command(megatron_validate_args: Any, case: Any) -> None:
    model_id, gpu, n, config = case
    exported = export_launch_config(load_model(model_id), Cluster(gpu=gpu, num_gpus=n), config, "megatron")
    args = megatron_validate_args(exported, gpu, n)
    assert args.tensor_model_parallel_size == config.tp and args.pipeline_model_parallel_size == config.pp
    assert args.global_batch_size == config.gbs and args.data_parallel_size == n // (config.tp * config.pp * config.cp)
    if config.recompute_num_layers:  # per model chunk: the stage recomputes vpp x that many
        assert args.recompute_num_layers * config.vpp == config.recompute_num_layers
    if config.precision == "fp8" and config.zero == 1:
        assert args.fp8_param_gather  # the memory model holds FP8 primary weights


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_launchers_are_bash_that_runs_the_command_diagnose_reads(tmp_path: Path) -> None:
    """bash -n on every framework's launcher; then the Megatron launcher runs with a stand-in torchrun that records
    its arguments: they are the words the shell reader gives diagnose."""
    spec, cluster = load_model("mixtral-8x7b"), Cluster(gpu="mi300x", num_gpus=64)
    config = TrainingConfig(tp=2, pp=2, vpp=2, ep=4, mbs=1, gbs=256, seq_len=4096, zero=1, sequence_parallel=True,
                            precision="fp8", recompute="full", recompute_num_layers=4, pp_schedule="interleaved")
    for framework in ("megatron", "primus", "megatron-bridge", "maxtext"):
        exported = export_launch_config(spec, cluster, config if framework != "maxtext" else
                                        TrainingConfig(tp=1, mbs=1, gbs=64, seq_len=4096, zero=3), framework)
        launcher = write_export(exported, tmp_path / framework / "run.sh")[0]
        assert os.access(launcher, os.X_OK)
        subprocess.run(["bash", "-n", str(launcher)], check=True)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "torchrun").write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$RECORD"\n')
    (fake / "torchrun").chmod(0o755)
    launcher = tmp_path / "megatron" / "run.sh"
    env = {"PATH": f"{fake}:{os.environ['PATH']}", "RECORD": str(tmp_path / "args.txt"), "DATA_PATH": "/data/x",
           "TOKENIZER": "tok", "CHECKPOINT_DIR": "/ckpt", "SLURM_NNODES": "8", "SLURM_NODEID": "3"}
    refused = subprocess.run(["bash", str(launcher)], env={"PATH": env["PATH"]}, capture_output=True, text=True)
    assert refused.returncode == 2 and "still <placeholders>" in refused.stderr
    subprocess.run(["bash", str(launcher)], env=env, check=True)
    received = (tmp_path / "args.txt").read_text().splitlines()
    script = received.index("pretrain_gpt.py")
    assert received[:script] == ["--nproc-per-node", "8", "--nnodes", "8", "--node-rank", "3", "--master-addr",
                                 "localhost", "--master-port", "29500"]
    read = command_words(launcher.read_text())[0]
    placeholders = {"<path/to/dataset>": "/data/x", "<tokenizer name or path>": "tok", "<checkpoint dir>": "/ckpt"}
    assert received[script + 1:] == [placeholders.get(w, w) for w in read]


def test_export_writes_the_config_module_torchtitan_loads(tmp_path: Path) -> None:
    pytest.importorskip("torchtitan")
    from tools.exports.checks import validate

    spec, cluster = load_model("llama3-8b"), Cluster(gpu="h100-sxm", num_gpus=16)
    for finetune in (None, "lora"):
        config = TrainingConfig(tp=2, pp=2, mbs=1, gbs=64, seq_len=8192, zero=3, sequence_parallel=True,
                                recompute="full", finetune=finetune)
        exported = export_launch_config(spec, cluster, config, "torchtitan")
        written = write_export(exported, tmp_path / str(finetune) / "run.sh")
        assert {p.suffix for p in written} == {".sh", ".toml", ".py"}
        assert validate(exported, spec, cluster) == []  # ConfigManager loads the TOML from file via --module
        if finetune == "lora":
            assert "'rank': 16" in next(iter(exported.files.values()))


@pytest.mark.parametrize(("framework", "expected"), [
    ("megatron-bridge", {"peft.dim": 16, "peft.target_modules": ["linear_qkv", "linear_proj"]}),
])
def test_lora_is_exported_as_projected(framework: str, expected: dict[str, Any]) -> None:
    spec, cluster = load_model("llama3-8b"), Cluster(gpu="h100-sxm", num_gpus=16)
    config = TrainingConfig(tp=2, mbs=1, gbs=64, seq_len=8192, zero=1, sequence_parallel=True, finetune="lora")
    options = export_launch_config(spec, cluster, config, framework).options
    assert options.items() >= expected.items()
    for refused in ("megatron", "primus", "maxtext"):
        assert framework_violations(refused, spec, cluster, config)


def test_megatron_export_carries_what_the_projection_assumed() -> None:
    """FP8 param gather, MoE all-to-all overlap, rotary base, gpt-oss windows and biases (issue 28)."""
    # H100: the hopper profile's ep_overlap_fraction is fitted on runs that overlap the exchange (no Blackwell run does)
    spec, cluster = load_model("gpt-oss-120b"), Cluster(gpu="h100-sxm", num_gpus=64)
    config = TrainingConfig(tp=1, ep=8, mbs=1, gbs=256, seq_len=4096, zero=1, precision="fp8",
                            comm_overlap=("dp", "tp", "pp", "ep", "cp"))
    options = export_launch_config(spec, cluster, config, "megatron").options
    assert options["--fp8-param-gather"] is True and options["--rotary-base"] == 150000
    assert options["--window-size"] == "127,0" and options["--window-attn-skip-freq"].startswith("[1,0,1,0")
    assert "--disable-bias-linear" not in options and options["--activation-func-clamp-value"] == 7.0
    assert Job(spec, cluster, config).ep_overlap()  # the projection hides part of the all-to-all ...
    assert options["--overlap-moe-expert-parallel-comm"] is True  # ... so the export turns the overlap on
    full = config.model_copy(update={"recompute": "full"})
    blocked = export_launch_config(spec, cluster, full, "megatron")
    assert "--overlap-moe-expert-parallel-comm" not in blocked.options   # megatron-core forbids it: said, not written
    assert any("--overlap-moe-expert-parallel-comm" in w for w in blocked.warnings)
    default = config.model_copy(update={"comm_overlap": None})
    assert not Job(spec, cluster, default).ep_overlap()   # megatron-core's default: the exchange is not overlapped
    assert "--overlap-moe-expert-parallel-comm" not in export_launch_config(spec, cluster, default, "megatron").options
    dense = export_launch_config(load_model("llama3.1-405b"), Cluster(gpu="h100-sxm", num_gpus=1024), TrainingConfig(
        tp=8, pp=8, vpp=2, mbs=1, gbs=512, seq_len=8192, zero=1, sequence_parallel=True, recompute="full",
        recompute_num_layers=4, pp_schedule="interleaved"), "megatron")
    assert dense.options["--recompute-num-layers"] == 2  # per chunk: 2 x 2 chunks = the 4 per stage projected
    assert dense.options["--rotary-base"] == 500000
