"""One source for the closed sets, the field classification and the sweep-file config model (issue 16 item 3)."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import annotated_types

import pytest
from pydantic import ValidationError

from evals.sweep_models import PROJECTION_ONLY_FIELDS, SWEEP_FIELD_OVERRIDES, ConfigKeys
from projection import vocabulary as v
from projection.framework import RECORDS, framework_words, record_of_launch
from projection.memory_verdict import Verdict
from projection.training_config import (
    FIELD_EFFECTS,
    JOB,
    MICROBATCH_WORK,
    RECOMPUTE_KNOB,
    STATIC_MEMORY,
    TrainingConfig,
)
from source_tree import ROOT, source_files
from tools.search_core import SEARCHED_SWITCHES, Evaluator, group_key


# Spellings of (part of) a closed set outside its owner, each with its reason.  Key: (file, set name).
ALLOWED: dict[tuple[str, str], str] = {
    ("projection/hardware.py", "precision"): "GemmDtype: tensor-core dtypes, another set that shares names",
    ("projection/pipeline.py", "pp_schedule"): "the schedules one simulator branch handles",
    ("tools/framework_rules.py", "pp_schedule"): "schedules a framework lacks or has: framework rules, cited there",
    ("evals/eval_run.py", "recompute"): "--fill-unknown tries the recipe default (selective) first: its own order",
}


OWNER = "projection/vocabulary.py"
SETS: dict[str, tuple[str, ...]] = {**v.CLOSED_SETS, "verdict": typing.get_args(Verdict)}
OWNERS = {"verdict": "projection/memory_verdict.py"}   # the memory verdicts live with the rule that decides them


def _spellings(path: Path) -> list[tuple[int, str]]:
    """(line, set name) of each tuple/list/set/Literal in ``path`` that spells >= 3 values of a closed set
    (or all of a smaller one).  Dict keys are tables keyed by the set, not spellings of it."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            continue
        strings = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        for name, values in SETS.items():
            if len(strings & set(values)) >= min(3, len(values)):
                found.append((node.lineno, name))
    return found


def test_sets_are_their_literal_types() -> None:
    pairs = [(v.CommOverlap, v.COMM_OVERLAPS), (v.AttentionBackend, v.ATTENTION_BACKENDS), (v.Precision, v.PRECISIONS), (v.Recompute, v.RECOMPUTES), (v.PipelineSchedule, v.PIPELINE_SCHEDULES),
             (v.Framework, v.FRAMEWORKS), (v.LaunchFramework, v.LAUNCH_FRAMEWORKS),
             (v.MoeDispatcher, v.MOE_DISPATCHERS), (v.MoeRouting, v.MOE_ROUTINGS), (v.Finetune, v.FINETUNES),
             (v.RecomputeModule, v.RECOMPUTE_MODULES), (v.ImportFramework, v.IMPORT_FRAMEWORKS)]
    for literal, values in pairs:
        assert typing.get_args(literal) == values
    assert set(v.PRECISIONS) > v.LOW_PRECISIONS and set(v.SEARCHED_FP8_RECIPES) < v.LOW_PRECISIONS
    assert set(v.DEFAULT_RECOMPUTE_MODULES) <= set(v.RECOMPUTE_MODULES)
    assert set(v.IMPORT_FRAMEWORKS) <= set(v.LAUNCH_FRAMEWORKS)
    assert {r for r, _ in v.RECOMPUTE_LEVEL} == set(v.RECOMPUTES)


def test_training_config_fields_use_the_sets() -> None:
    fields = TrainingConfig.model_fields
    assert fields["precision"].annotation == v.Precision
    assert fields["recompute"].annotation == v.Recompute
    assert fields["pp_schedule"].annotation == v.PipelineSchedule | None
    assert fields["framework"].annotation == v.Framework | None
    assert fields["moe_dispatcher"].annotation == v.MoeDispatcher
    assert fields["moe_routing"].annotation == v.MoeRouting
    assert fields["finetune"].annotation == v.Finetune | None
    assert TrainingConfig().recompute_modules == v.DEFAULT_RECOMPUTE_MODULES
    with pytest.raises(ValidationError, match="allowed: core_attn"):
        TrainingConfig(recompute_modules=("attn",))


def test_closed_sets_are_spelled_only_in_their_owner() -> None:
    offenders = []
    for path in source_files():
        rel = path.relative_to(ROOT).as_posix()
        for line, name in _spellings(path):
            if rel != OWNERS.get(name, OWNER) and (rel, name) not in ALLOWED:
                offenders.append(f"{rel}:{line}: spells the {name} set; import it from projection/vocabulary.py")
    assert not offenders, "\n".join(offenders)


def test_the_spelling_check_can_fail(tmp_path: Path) -> None:
    path = tmp_path / "x.py"
    path.write_text('from typing import Literal\nX = Literal["none", "selective", "full"]\nY = ("a", "b")\n')
    assert _spellings(path) == [(2, "recompute")]


def test_every_allowed_exception_still_exists() -> None:
    present = {(path.relative_to(ROOT).as_posix(), name)
               for path in source_files() for _, name in _spellings(path)}
    assert set(ALLOWED) <= present, sorted(set(ALLOWED) - present)


# ---- framework names: one record per framework (projection/framework.py, issue 24) ----------------------------

FRAMEWORK_OWNERS = ("projection/framework.py", "projection/vocabulary.py")
# Tables keyed by framework names outside the record, each with its reason.
FRAMEWORK_TABLES: dict[str, str] = {
    "tools/launch_config.py": "_LISTS: the exporters' option-list files (tools data, one per launch name)",
}


def _framework_name_sets(path: Path) -> list[int]:
    """Lines of ``path`` that spell a set of framework names (any word naming a framework: recipe, launch or
    alias): a set literal (``frozenset({"jax"})``) with one, a tuple or list with two, a dict with two as keys
    or as values (a registry keyed or valued by framework)."""
    words = set(framework_words())
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            groups = [node.elts]
        elif isinstance(node, ast.Dict):
            groups = [[k for k in node.keys if k is not None], node.values]
        else:
            continue
        for elts in groups:
            named = {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)} & words
            if len(named) >= (1 if isinstance(node, ast.Set) else 2):
                found.append(node.lineno)
    return found


def test_framework_names_are_spelled_only_in_the_record() -> None:
    offenders = []
    for path in source_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel in FRAMEWORK_OWNERS or rel in FRAMEWORK_TABLES:
            continue
        offenders += [f"{rel}:{line}: a framework name set; use the record (projection/framework.py)"
                      for line in _framework_name_sets(path)]
    assert not offenders, "\n".join(offenders)
    for rel in FRAMEWORK_TABLES:
        assert _framework_name_sets(ROOT / rel), f"{rel} no longer needs its exception"


def _framework_name_tests(path: Path) -> list[int]:
    """Lines of ``path`` that compare a framework with a name (``config.framework == "jax"``)."""
    words = set(framework_words())
    return [node.lineno for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Compare)
            and any(isinstance(c, ast.Constant) and c.value in words for c in [node.left, *node.comparators])
            and "framework" in ast.unparse(node)]


def test_the_physics_reads_framework_traits_not_names() -> None:
    """projection/ prices a framework through its record's traits, never by testing its name (the launch rule sets
    and exporters of tools/ dispatch on launch names)."""
    offenders = [f"{path.relative_to(ROOT).as_posix()}:{line}: tests a framework name; add a trait to its record"
                 for path in sorted((ROOT / "projection").rglob("*.py"))
                 if path.relative_to(ROOT).as_posix() not in FRAMEWORK_OWNERS for line in _framework_name_tests(path)]
    assert not offenders, "\n".join(offenders)


def test_the_framework_name_check_can_fail(tmp_path: Path) -> None:
    path = tmp_path / "x.py"
    path.write_text('A = frozenset({"jax"})\nB = {"nemo": "megatron-bridge", "jax": "maxtext"}\n'
                    'C = x in ("titan", "primus")\nD = ("megatron-args", "megatron", text)\n')
    assert sorted(_framework_name_sets(path)) == [1, 2, 2, 3]
    path.write_text('if config.framework == "jax" and x:\n    pass\nif name == "jax":\n    pass\n')
    assert _framework_name_tests(path) == [1]


def test_one_record_per_framework_and_per_launch_name() -> None:
    assert set(RECORDS) == set(v.FRAMEWORKS) and len(RECORDS) == len(v.FRAMEWORKS)
    launches = [r.launch for r in RECORDS.values() if r.launch is not None]
    assert sorted(launches) == sorted(v.LAUNCH_FRAMEWORKS)
    for launch in v.LAUNCH_FRAMEWORKS:
        assert record_of_launch(launch).launch == launch
    # the launch name maps to the recipe framework the sweep format and the exporters agree on
    assert {launch: record_of_launch(launch).name for launch in v.LAUNCH_FRAMEWORKS} == {
        "megatron": "megatron", "megatron-bridge": "nemo", "primus": "primus", "torchtitan": "torchtitan",
        "maxtext": "jax"}
    assert set(framework_words().values()) == set(v.FRAMEWORKS)


# ---- field classification (projection/training_config.py FIELD_EFFECTS) ------------------------------------


def test_every_config_field_is_classified() -> None:
    """A new TrainingConfig field must say what it affects, or the search's keys would silently ignore it."""
    assert set(FIELD_EFFECTS) == set(TrainingConfig.model_fields)
    known = {STATIC_MEMORY, MICROBATCH_WORK, RECOMPUTE_KNOB, JOB}
    for name, effects in FIELD_EFFECTS.items():
        assert effects and effects <= known, name


def test_grouping_keys_follow_the_classification() -> None:
    base = TrainingConfig(tp=2, pp=2, gbs=64, seq_len=4096, dp=4)
    changes = {"tp": 4, "pp": 4, "cp": 2, "ep": 2, "etp": 2, "vpp": 2, "dp": 2, "mbs": 2, "gbs": 128, "seq_len": 8192,
               "precision": "fp8", "recompute": "full", "recompute_num_layers": 1, "recompute_modules": ("mlp",),
               "sequence_parallel": True, "zero": 1, "fsdp_size": 2, "pp_schedule": "zero-bubble",
               "framework": "torchtitan", "moe_dispatcher": "deepep", "moe_routing": "token-drop",
               "moe_capacity_factor": 1.25, "finetune": "lora", "packed_document_tokens": 256,
               "pp_first_stage_layers": 3, "pp_last_stage_layers": 2, "pp_layout": "Et|(tt|)*30L",
               "comm_overlap": (), "cuda_graphs": True, "compile": True, "attention_backend": "unfused",
               "grad_reduce_in_fp32": False}
    assert set(changes) == set(TrainingConfig.model_fields)
    for name, value in changes.items():
        other = base.model_copy(update={name: value})
        effects = FIELD_EFFECTS[name]
        # a recompute group shares every field but the recompute knobs and the switches the search chooses per
        # layout (tools/search_core.py SEARCHED_SWITCHES: a sibling with less recompute has at least their switches)
        grouped = RECOMPUTE_KNOB not in effects and name not in SEARCHED_SWITCHES
        assert (group_key(other) != group_key(base)) == grouped, name
        assert (Evaluator.sharding_key(other) != Evaluator.sharding_key(base)) == (STATIC_MEMORY in effects), name
        # the work key reads the recompute modules where they act: under selective recompute
        work_base = base.model_copy(update={"recompute": "selective"}) if name == "recompute_modules" else base
        work_other = work_base.model_copy(update={name: value})
        assert (Evaluator.work_key(work_other) != Evaluator.work_key(work_base)) == (MICROBATCH_WORK in effects), name


def test_group_key_reads_the_schedule_in_effect() -> None:
    implicit = TrainingConfig(pp=2, vpp=2)
    assert group_key(implicit) == group_key(implicit.model_copy(update={"pp_schedule": "interleaved"}))


# ---- the sweep-file config model is TrainingConfig's fields ------------------------------------------------


def _bounds(info: typing.Any) -> dict[str, object]:
    return {(name := type(m).__name__.lower()): getattr(m, name) for m in info.metadata
            if isinstance(m, (annotated_types.Ge, annotated_types.Gt, annotated_types.Le, annotated_types.Lt))}


def test_sweep_config_keys_are_training_config_fields() -> None:
    keys = tuple(k for k in TrainingConfig.model_fields if k not in PROJECTION_ONLY_FIELDS)
    assert tuple(ConfigKeys.model_fields) == keys
    for name, info in TrainingConfig.model_fields.items():
        if name in PROJECTION_ONLY_FIELDS:
            assert PROJECTION_ONLY_FIELDS[name], name  # each says why it is not a sweep key
            continue
        key = ConfigKeys.model_fields[name]
        assert key.default is None, name
        if name in SWEEP_FIELD_OVERRIDES:
            annotation, bounds, reason = SWEEP_FIELD_OVERRIDES[name]
            assert reason and key.annotation == annotation | None and _bounds(key) == bounds, name
            continue
        expected = info.annotation if type(None) in typing.get_args(info.annotation) else info.annotation | None
        assert key.annotation == expected, name
        assert _bounds(key) == _bounds(info), name


@pytest.mark.parametrize(("key", "good", "bad"), [
    ("tp", 8, 0), ("gbs", 1024, 2_000_000), ("precision", "fp8-blockwise", "fp9"), ("recompute", "full", "some"),
    ("pp_schedule", "zbv", "zb"), ("framework", "primus", "titan"), ("moe_dispatcher", "deepep", "a2a"),
    ("moe_routing", "token-drop", "drop"), ("finetune", "lora", "qlora"), ("moe_capacity_factor", 1.25, 0),
    ("zero", 3, 4), ("recompute_num_layers", 1, 0), ("recompute_modules", ["core_attn"], "core_attn"),
    ("sequence_parallel", True, 1), ("comm_overlap", ["dp", "tp"], ["dp", "xp"]), ("comm_overlap", [], "dp"),
    ("cuda_graphs", True, "yes"), ("compile", False, 0), ("attention_backend", "unfused", "flash"),
    ("grad_reduce_in_fp32", True, 1), ("framework", "megatron-deepspeed", "megatron_deepspeed"),
    ("framework", "automodel", "auto"), ("moe_dispatcher", "hybridep", "hybrid"), ("packed_document_tokens", 512, 0),
])
def test_sweep_keys_accept_what_training_config_accepts(key: str, good: object, bad: object) -> None:
    assert getattr(ConfigKeys(**{key: good}), key) == good
    with pytest.raises(ValidationError):
        ConfigKeys(**{key: bad})
    if key not in ("recompute_modules",):
        TrainingConfig(**{key: good})


# The config keys of shared/specs/sweep-format.md ("Config keys"), each with a value the spec allows.
SPEC_KEYS: dict[str, object] = {
    "tp": 8, "pp": 4, "cp": 2, "ep": 8, "vpp": 2, "dp": 4, "etp": 1, "mbs": 1, "gbs": 512, "seq_len": 4096,
    "precision": "fp8-blockwise", "recompute": "selective", "recompute_num_layers": 2,
    "recompute_modules": ["moe_act", "layernorm"], "sequence_parallel": True, "zero": 3, "fsdp_size": 8,
    "pp_schedule": "zero-bubble", "framework": "llm-foundry", "moe_dispatcher": "deepep",
    "moe_routing": "token-drop", "moe_capacity_factor": 1.25, "finetune": "lora", "packed_document_tokens": 1024,
    "comm_overlap": ["dp", "pp"], "cuda_graphs": True, "compile": True, "attention_backend": "triton",
    "grad_reduce_in_fp32": False,
}


def test_every_spec_key_is_a_sweep_key_and_others_are_errors() -> None:
    """The spec's table now lists packed documents and the run-time switches; keys outside it stay errors."""
    assert ConfigKeys(packed_document_tokens=200).packed_document_tokens == 200
    assert ConfigKeys(comm_overlap=[]).comm_overlap == []
    # only the uneven pipeline split (issue 28) is a projection input the spec has no key for
    assert set(PROJECTION_ONLY_FIELDS) == {"pp_first_stage_layers", "pp_last_stage_layers", "pp_layout"}
    with pytest.raises(ValidationError, match="overlap"):
        ConfigKeys(overlap=["dp"])


def test_every_spec_key_parses_with_the_same_meaning() -> None:
    assert set(SPEC_KEYS) == set(ConfigKeys.model_fields)
    keys = ConfigKeys(**SPEC_KEYS)
    assert keys.model_dump(exclude_none=True) == SPEC_KEYS
    config = TrainingConfig(**keys.model_dump(exclude_none=True))
    for name, value in SPEC_KEYS.items():
        assert getattr(config, name) == (tuple(value) if isinstance(value, list) else value), name
