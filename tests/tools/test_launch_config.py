"""Launch configs: only the frameworks' real option names, refusals with reasons, and export -> import round trips."""

from __future__ import annotations

import json
import shlex
import tomllib
from typing import Any

import pytest
import yaml

from projection.hardware import load_hardware
from projection.legality import layout_violations
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from tools.framework_rules import framework_violations
from tools.exports.megatron import RUN_ARGS
from tools.launch_config import FRAMEWORKS, OPTIONS_DIR, FrameworkRuleError, export_launch_config, known_options
from tools.launch_import import IMPORT_FRAMEWORKS, LaunchConfigError, import_launch_config

LAYOUTS: dict[str, tuple[str, str, int, dict[str, Any]]] = {
    "dense-tp-pp": ("llama3-8b", "h100-sxm", 16, dict(tp=2, pp=2, mbs=2, gbs=64, seq_len=8192, zero=1,
                                                       sequence_parallel=True)),
    "vpp-interleaved": ("llama3-8b", "h100-sxm", 32, dict(tp=2, pp=4, vpp=2, mbs=1, gbs=64, seq_len=8192, zero=1,
                                                           sequence_parallel=True)),
    "vpp-embedding-loss-split": ("llama3.1-405b", "h100-sxm", 1024, dict(tp=8, pp=16, vpp=2, mbs=1, gbs=128,
                                                                           seq_len=8192, zero=1,
                                                                           sequence_parallel=True)),
    "moe-ep": ("mixtral-8x7b", "mi300x", 64, dict(tp=2, pp=2, ep=8, etp=1, mbs=1, gbs=256, seq_len=4096, zero=1,
                                                  sequence_parallel=True, moe_dispatcher="alltoall")),
    "moe-deepep-etp": ("mixtral-8x7b", "h100-sxm", 64, dict(tp=2, pp=4, ep=4, etp=2, mbs=1, gbs=256, seq_len=4096,
                                                             zero=1, sequence_parallel=True,
                                                             moe_dispatcher="deepep")),
    "fp8-full-recompute": ("llama3-70b", "h100-sxm", 64, dict(tp=8, pp=4, mbs=1, gbs=128, seq_len=8192, zero=1,
                                                              precision="fp8", recompute="full",
                                                              sequence_parallel=True)),
    "fp8-blockwise-partial-recompute": ("llama3-70b", "h100-sxm", 64, dict(
        tp=8, pp=4, mbs=1, gbs=128, seq_len=8192, zero=1, precision="fp8-blockwise", recompute="full",
        recompute_num_layers=10, sequence_parallel=True)),
    "mxfp8-selective": ("llama3-8b", "b200", 16, dict(tp=2, pp=2, mbs=1, gbs=64, seq_len=8192, zero=1,
                                                      precision="mxfp8", recompute="selective",
                                                      sequence_parallel=True)),
    "fsdp": ("llama3-8b", "h100-sxm", 16, dict(tp=2, pp=1, mbs=1, gbs=64, seq_len=8192, zero=3,
                                               sequence_parallel=True)),
    "cp-ddp": ("llama3-8b", "h100-sxm", 16, dict(tp=2, cp=2, pp=1, mbs=1, gbs=32, seq_len=32768, zero=0,
                                                 sequence_parallel=True)),
}
KEYS = ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "gbs", "seq_len", "precision", "recompute",
        "recompute_num_layers", "recompute_modules", "sequence_parallel", "zero", "fsdp_size", "schedule")


def _setup(name: str) -> tuple[Any, Cluster, TrainingConfig]:
    model_id, gpu, n, values = LAYOUTS[name]
    model, hardware = load_model(model_id), load_hardware(gpu)
    cluster = Cluster(gpu=hardware.id, num_gpus=n)
    config = TrainingConfig(**values)
    assert layout_violations(model, hardware, cluster, config) == []
    return model, cluster, config


def test_option_lists_cite_a_source() -> None:
    for name in ("megatron_args.txt", "primus_overrides.txt", "bridge_overrides.txt", "maxtext_keys.txt"):
        assert (OPTIONS_DIR / name).read_text().startswith("# source: ")
    assert json.loads((OPTIONS_DIR / "torchtitan_options.json").read_text())["source"].startswith("pytorch/torchtitan")
    assert "--tensor-model-parallel-size" in known_options("megatron")
    assert "tensor_model_parallel_size" in known_options("primus")
    assert "parallelism.tensor_parallel_degree" in known_options("torchtitan")


def _text_keys(framework: str, text: str) -> set[str]:
    """Every option name that appears in an exported text."""
    if framework == "megatron":  # a bash launcher: the words of its training command after the entry point
        from tools.launch_shell import command_words

        return {token for token in command_words(text)[0] if token.startswith("--")}
    if framework == "primus":
        overrides = yaml.safe_load(text)["modules"]["pre_trainer"]["overrides"]
        return set(overrides)
    if framework == "maxtext":
        return set(yaml.safe_load(text))
    if framework == "megatron-bridge":
        body = " ".join(line for line in text.splitlines() if not line.startswith("#")).replace("\\", " ")
        return {token.split("=", 1)[0] for token in shlex.split(body)}   # each override is one shell word
    data = tomllib.loads(text)

    def walk(node: dict[str, Any], prefix: str) -> set[str]:
        keys: set[str] = set()
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else key
            keys |= walk(value, path) if isinstance(value, dict) else {path}
        return keys

    return walk(data, "")


def _export_or_refusal(framework: str, name: str) -> Any:
    """The export, or None when the framework's rules refuse the layout (checked to be for a stated reason)."""
    model, cluster, config = _setup(name)
    reasons = framework_violations(framework, model, cluster, config)
    if reasons:
        with pytest.raises(FrameworkRuleError, match=framework):
            export_launch_config(model, cluster, config, framework)  # type: ignore[arg-type]
        return None
    return export_launch_config(model, cluster, config, framework)  # type: ignore[arg-type]


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_exported_keys_are_real_option_names(framework: str, name: str) -> None:
    exported = _export_or_refusal(framework, name)
    if exported is None:
        return
    _, _, config = _setup(name)
    known = known_options(framework)
    assert set(exported.options) <= known, set(exported.options) - known
    run = {arg.split()[0] for arg in RUN_ARGS} if framework == "megatron" else set()  # data, tokenizer, schedule
    assert _text_keys(framework, exported.text) == set(exported.options) | run and run <= known
    assert exported.assumptions and exported.user_must_add
    if framework == "torchtitan" and "parallelism.pipeline_parallel_schedule" in exported.options:
        schedules = json.loads((OPTIONS_DIR / "torchtitan_options.json").read_text())["schedules"]
        assert exported.options["parallelism.pipeline_parallel_schedule"] in schedules
    if framework == "megatron" and config.precision != "bf16":
        assert exported.options["--fp8-format"] == "hybrid"
    if framework == "megatron" and config.zero == 1:
        assert exported.options["--overlap-grad-reduce"] and exported.options["--overlap-param-gather"]


def test_megatron_export_carries_the_model() -> None:
    model, cluster, config = _setup("moe-ep")
    opts = export_launch_config(model, cluster, config, "megatron").options
    assert opts["--num-experts"] == 8 and opts["--moe-router-topk"] == 2 and opts["--num-layers"] == 32
    assert opts["--num-query-groups"] == 8 and opts["--swiglu"] is True


def test_framework_refusals_name_the_rule_and_who_can() -> None:
    model, cluster, config = _setup("dense-tp-pp")  # zero=1: no torchtitan / MaxText equivalent
    with pytest.raises(FrameworkRuleError, match=r"zero=1.*frameworks that can: megatron"):
        export_launch_config(model, cluster, config, "torchtitan")
    fsdp_pp = config.model_copy(update={"zero": 3})
    with pytest.raises(FrameworkRuleError, match="not supported with pipeline parallelism"):
        export_launch_config(model, cluster, fsdp_pp, "megatron")
    zb = config.model_copy(update={"pp_schedule": "zero-bubble"})
    with pytest.raises(FrameworkRuleError, match="1F1B or interleaved"):
        export_launch_config(model, cluster, zb, "megatron")


def test_torchtitan_pipeline_sets_the_stage_split() -> None:
    model, cluster, config = _setup("vpp-embedding-loss-split")  # 126 layers in 32 stages: (126 + 2) / 32 = 4
    titan = export_launch_config(model, cluster, config.model_copy(update={"zero": 3, "precision": "fp8"}),
                                 "torchtitan")
    assert titan.options["parallelism.pipeline_parallel_layers_per_stage"] == 4
    assert titan.options["parallelism.pipeline_parallel_first_stage_less_layers"] == 1
    assert titan.options["parallelism.pipeline_parallel_last_stage_less_layers"] == 1
    assert "--module llama3 --config llama3_405b" in (titan.command or "")  # the float8 405B config function
    with pytest.raises(FrameworkRuleError, match="no config_registry function for llama3.1-405b in bf16"):
        export_launch_config(model, cluster, config.model_copy(update={"zero": 3}), "torchtitan")


def _compare(original: TrainingConfig, imported: dict[str, Any]) -> None:
    values = {"gbs": original.gbs, "seq_len": original.seq_len, **imported}
    values.pop("dp", None)
    back = TrainingConfig(**values)
    assert {k: getattr(back, k) for k in KEYS} == {k: getattr(original, k) for k in KEYS}
    assert back.moe_dispatcher == original.moe_dispatcher or "moe_dispatcher" not in imported


@pytest.mark.parametrize("framework", IMPORT_FRAMEWORKS)
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_round_trip(framework: str, name: str) -> None:
    exported = _export_or_refusal(framework, name)
    if exported is None:
        return
    model, cluster, config = _setup(name)
    imported = import_launch_config(exported.text, framework, num_layers=model.num_layers,
                                    num_gpus=cluster.num_gpus, gpus_per_node=cluster.gpus_per_node)
    if framework == "torchtitan" and config.recompute == "selective":
        assert imported["recompute"] == "selective"  # op-level SAC: modules are not written
        imported["recompute_modules"] = list(config.recompute_modules)
    _compare(config, imported)


def test_torchtitan_round_trip_of_what_it_expresses() -> None:
    model, cluster, _ = _setup("fsdp")
    for values in (dict(tp=2, pp=1, mbs=2, gbs=64, seq_len=8192, zero=3, sequence_parallel=True),
                   dict(tp=2, pp=1, mbs=1, gbs=64, seq_len=8192, zero=3, fsdp_size=4, sequence_parallel=True,
                        recompute="full"),
                   dict(tp=1, pp=2, vpp=2, mbs=1, gbs=64, seq_len=8192, zero=3, recompute="none"),
                   dict(tp=2, pp=2, mbs=1, gbs=64, seq_len=8192, zero=0, sequence_parallel=True,
                        pp_schedule="zbv", vpp=2)):
        config = TrainingConfig(**values)
        exported = export_launch_config(model, cluster, config, "torchtitan")
        assert not exported.warnings, exported.warnings
        _compare(config, import_launch_config(exported.text, "torchtitan", num_layers=model.num_layers))


def test_import_reads_hand_written_configs() -> None:
    args = """
    # a typical Megatron launch
    --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 \\
    --num-layers 32 --num-layers-per-virtual-pipeline-stage 4 --micro-batch-size 2 --global-batch-size 256 \\
    --seq-length 4096 --bf16 --fp8-format hybrid --fp8-recipe tensorwise --sequence-parallel \\
    --recompute-granularity full --recompute-method block --recompute-num-layers 2 --use-distributed-optimizer
    """
    config = import_launch_config(args, "megatron")
    # --recompute-num-layers counts per model chunk: 2 in each of the 4 chunks of a stage = 8 per stage
    expected = {"tp": 4, "pp": 2, "vpp": 4, "mbs": 2, "gbs": 256, "precision": "fp8", "recompute": "full",
                "recompute_num_layers": 8, "zero": 1, "sequence_parallel": True}
    assert config.items() >= expected.items()
    primus = import_launch_config("tensor_model_parallel_size: 2\nfp8: hybrid\nrecompute_granularity: selective\n",
                                  "primus")
    assert primus["tp"] == 2 and primus["precision"] == "fp8" and primus["recompute"] == "selective"
    with pytest.raises(LaunchConfigError, match="unknown framework"):
        import_launch_config("", "deepspeed")
    with pytest.raises(LaunchConfigError, match="num_layers"):
        import_launch_config("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 4", "megatron")
