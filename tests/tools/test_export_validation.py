"""Exports of the top layouts of real searches pass the target framework's own validation.

torchtitan 0.3.0 and megatron-core 0.16.1 (test extra) check torchtitan, Megatron-LM, Primus
and Megatron-Bridge exports with their own config code (tools/exports/checks.py); MaxText
exports are checked against the cited rules of its types.py.  For each search: the top 5
layouts, exported for every framework that can launch them; for Megatron, torchtitan or
MaxText when none of those 5 suits it, also the top 5 of the search restricted to it
(``--framework``).  Searches are cached per module.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

pytest.importorskip("torchtitan")
pytest.importorskip("megatron.core")

from projection.model_spec import load_model  # noqa: E402
from projection.training_config import Cluster, TrainingConfig  # noqa: E402
from tools.constraints import Constraints  # noqa: E402
from tools.exports import FrameworkRuleError, export_launch_config  # noqa: E402
from tools.exports.checks import validate  # noqa: E402
from tools.exports.common import Job  # noqa: E402
from tools.framework_rules import FRAMEWORKS, legal_frameworks  # noqa: E402
from tools.search import SearchRequest, run_search  # noqa: E402

# name -> (model, gpu, gpus, gbs, seq_len, constraints)
SEARCHES: dict[str, tuple[str, str, int, int, int, list[str]]] = {
    "dense-8b": ("llama3-8b", "h100-sxm", 64, 256, 8192, []),
    "dense-70b": ("llama3-70b", "h100-sxm", 256, 512, 8192, []),
    "dense-405b": ("llama3.1-405b", "h100-sxm", 1024, 1024, 8192, []),
    "mixtral": ("mixtral-8x7b", "mi300x", 64, 256, 4096, []),
    "deepseek-v3": ("deepseek-v3", "h100-sxm", 1024, 1024, 4096, []),
    "long-context": ("llama3-8b", "h100-sxm", 64, 32, 65536, []),
    "fsdp": ("llama3-8b", "h100-sxm", 16, 64, 8192, ["zero=3"]),
}
FILTERED = ("megatron", "torchtitan", "maxtext")


@functools.cache
def _search(name: str, framework: str | None) -> tuple[Any, ...]:
    model, gpu, n, gbs, seq, constraints = SEARCHES[name]
    request = SearchRequest(model=model, gpu=gpu, num_gpus=n, gbs=gbs, seq_len=seq,
                            constraints=Constraints.parse(constraints), top_k=5, framework=framework)
    result = run_search(request, workers=1)
    return tuple(TrainingConfig(**{k: v for k, v in c.config.items() if v is not None}) for c in result.ranked)


def _cases(name: str) -> list[tuple[str, TrainingConfig]]:
    model, gpu, n = SEARCHES[name][:3]
    spec, cluster = load_model(model), Cluster(gpu=gpu, num_gpus=n)
    configs = list(_search(name, None))
    covered = {f for c in configs for f in legal_frameworks(spec, cluster, c)}
    for framework in FILTERED:  # a framework none of the top 5 suits: the top 5 of the search restricted to it
        if framework not in covered:
            configs += _search(name, framework)
    return [(f, c) for c in configs for f in legal_frameworks(spec, cluster, c)]


def results(name: str) -> dict[str, list[int]]:
    """framework -> [exports checked, accepted] for one search (the closing note's table)."""
    model, gpu, n = SEARCHES[name][:3]
    spec, cluster = load_model(model), Cluster(gpu=gpu, num_gpus=n)
    table = {f: [0, 0] for f in FRAMEWORKS}
    seen: set[tuple[str, TrainingConfig]] = set()
    for framework, config in _cases(name):
        if (framework, config) in seen:
            continue
        seen.add((framework, config))
        problems = validate(export_launch_config(spec, cluster, config, framework), spec, cluster)
        table[framework][0] += 1
        table[framework][1] += not problems
        assert not problems, (name, framework, config, problems)
    return table


@pytest.mark.parametrize("name", list(SEARCHES))
def test_top_layouts_pass_the_frameworks_own_validation(name: str) -> None:
    table = results(name)
    assert table["megatron"][0] >= 1 and all(accepted == checked for checked, accepted in table.values())
    assert sum(checked for checked, _ in table.values()) >= 4


def test_filtered_search_returns_only_what_the_framework_runs() -> None:
    model, gpu, n = SEARCHES["mixtral"][:3]
    spec, cluster = load_model(model), Cluster(gpu=gpu, num_gpus=n)
    for config in _search("mixtral", "maxtext"):
        assert "maxtext" in legal_frameworks(spec, cluster, config)
    assert _search("mixtral", "torchtitan") == ()  # torchtitan 0.3.0 ships no Mixtral model
    for config in _search("dense-8b", "torchtitan"):
        assert config.zero != 1 and config.recompute_num_layers is None


def _forced(framework: str, model_id: str, gpu: str, n: int, **values: Any) -> list[str]:
    """Export a layout the rules refuse, bypassing them, and return what the framework's validation says."""
    from tools.exports import maxtext, megatron, torchtitan

    spec, cluster = load_model(model_id), Cluster(gpu=gpu, num_gpus=n)
    config = TrainingConfig(**values)
    with pytest.raises(FrameworkRuleError):
        export_launch_config(spec, cluster, config, framework)
    module = {"megatron": megatron, "torchtitan": torchtitan, "maxtext": maxtext}[framework]
    return validate(module.export(Job(spec, cluster, config)), spec, cluster)


def test_the_validators_reject_what_the_frameworks_reject() -> None:
    # torchtitan MoE: EP 8 over dp_shard 1 * tp 1 breaks the efsdp mesh rule (the example)
    assert any("build_mesh" in p for p in _forced("torchtitan", "deepseek-v3", "h100-sxm", 256, tp=1, pp=1, ep=8,
                                                 gbs=256, seq_len=4096, zero=0))
    # Megatron: torch FSDP2 with PP
    assert any("pipeline parallelism" in p for p in _forced("megatron", "llama3-8b", "h100-sxm", 16, tp=2, pp=2,
                                                           gbs=64, seq_len=8192, zero=3, sequence_parallel=True))
    # torchtitan: layer-count recompute is not an AC mode: the export writes full AC, the rules refuse it
    problems = _forced("torchtitan", "llama3-8b", "h100-sxm", 16, tp=2, gbs=64, seq_len=8192, zero=3,
                       recompute="full", recompute_num_layers=8, sequence_parallel=True)
    assert problems == []  # torchtitan itself would run full AC: the refusal is the projection's honesty
    # MaxText: FP8 with gradient accumulation
    assert any("gradient accumulation" in p for p in _forced("maxtext", "llama3-8b", "h100-sxm", 16, tp=1, mbs=1,
                                                            gbs=64, seq_len=8192, zero=3, precision="fp8"))


def test_primus_zero_bubble_presets_pass_the_megatron_checks() -> None:
    from tools.launch_import import import_launch_config

    spec, cluster = load_model("llama3-70b"), Cluster(gpu="mi300x", num_gpus=64)
    for schedule, vpp in (("zero-bubble", 1), ("zbv", 2)):
        config = TrainingConfig(tp=8, pp=4, vpp=vpp, mbs=1, gbs=128, seq_len=8192, zero=1, sequence_parallel=True,
                                pp_schedule=schedule)
        exported = export_launch_config(spec, cluster, config, "primus")
        assert exported.options["patch_zero_bubble"] is True and exported.options["overlap_grad_reduce"] is False
        assert any("DP comm is exposed" in w for w in exported.warnings)
        assert validate(exported, spec, cluster) == []
        assert import_launch_config(exported.text, "primus", num_layers=80)["pp_schedule"] == schedule
        with pytest.raises(FrameworkRuleError):
            export_launch_config(spec, cluster, config, "megatron")


@pytest.mark.parametrize("name", list(SEARCHES))
def test_megatron_lm_validate_args_accepts_the_full_command(name: str, megatron_validate_args: Any) -> None:
    """Megatron-LM's own argument parser and validate_args (core_v0.16.1) on every Megatron-LM export's full
    training command."""
    model, gpu, n = SEARCHES[name][:3]
    spec, cluster = load_model(model), Cluster(gpu=gpu, num_gpus=n)
    checked = 0
    for framework, config in dict.fromkeys(_cases(name)):
        if framework == "megatron":
            args = megatron_validate_args(export_launch_config(spec, cluster, config, framework), gpu, n)
            assert args.global_batch_size == config.gbs and args.tensor_model_parallel_size == config.tp
            checked += 1
    assert checked >= 1
