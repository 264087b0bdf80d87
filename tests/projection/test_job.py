"""projection/job.py: one job resolution (names in, specs out) and every front end goes through it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from projection.device_profile import default_profile, dump_profile
from projection.engine import project
from projection.errors import ModelSpecError, ProjtuneError, UnknownNameError
from projection.framework import framework_profile
from projection.hardware import load_hardware
from projection.job import (
    FRAMEWORK_NAMES,
    Job,
    hardware_of,
    job_on,
    profile_for,
    resolve_device,
    resolve_job,
)
from projection.model_spec import _catalog as model_catalog
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from source_tree import ROOT, source_files


# --- resolution ------------------------------------------------------------------------------------------------


def test_resolve_job_from_catalog_names_and_aliases() -> None:
    job = resolve_job("llama3-70b", "H100 SXM", 64, gpus_per_node=8)
    assert isinstance(job, Job)
    assert job.model == load_model("llama3-70b")
    assert job.hardware == load_hardware("h100-sxm")
    assert job.cluster == Cluster(gpu="h100-sxm", num_gpus=64, gpus_per_node=8)   # the catalog id, not the alias
    assert job.profile == default_profile(job.hardware)
    assert job.framework == framework_profile(None) and job.framework.name == "megatron"
    assert job.config is None and job.num_gpus == 64


def test_resolve_job_keeps_cluster_overrides_and_config() -> None:
    config = TrainingConfig(tp=8, pp=2, gbs=64, seq_len=4096, framework="torchtitan")
    job = resolve_job("llama3-8b", "mi300x", 32, gpus_per_node=4, nic_gbps=200.0, nics_per_node=4, config=config)
    assert (job.cluster.gpus_per_node, job.cluster.nic_gbps, job.cluster.nics_per_node) == (4, 200.0, 4)
    assert job.config is config
    assert job.framework == framework_profile("torchtitan")        # the config names the framework
    named = resolve_job("llama3-8b", "mi300x", 32, config=config, framework="deepspeed")
    assert named.framework == framework_profile("deepspeed")       # an explicit name wins


def test_resolve_job_from_a_config_json_path(tmp_path: Path) -> None:
    entry = model_catalog()["llama3-8b"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(entry["config"]))
    job = resolve_job(str(path), "h100-sxm", 8)
    catalog = load_model("llama3-8b")
    assert job.model.model_dump(exclude={"name", "source", "published_params"}) == catalog.model_dump(
        exclude={"name", "source", "published_params"})


def test_resolve_job_reads_a_profile_file(tmp_path: Path) -> None:
    shipped = default_profile(load_hardware("h100-sxm"))
    fitted = shipped.model_copy(update={"gemm_efficiency": 0.5, "fit_note": "test"})
    path = tmp_path / "profile.yaml"
    path.write_text(dump_profile(fitted))
    job = resolve_job("llama3-8b", "h100-sxm", 8, profile_path=str(path))
    assert job.profile == fitted and job.profile != shipped
    hardware, profile = resolve_device("h100-sxm", path)
    assert hardware.id == "h100-sxm" and profile == fitted
    assert profile_for(hardware) == shipped and profile_for(hardware, "") == shipped


def test_job_on_fills_the_engine_defaults_and_keeps_the_cluster() -> None:
    cluster = Cluster(gpu="h100", num_gpus=16)                     # an alias, kept as given
    config = TrainingConfig(tp=4, gbs=32, seq_len=2048)
    job = job_on("llama3-8b", cluster, config)
    assert job.cluster is cluster and job.hardware == load_hardware("h100") == hardware_of(cluster)
    assert job.profile == default_profile(job.hardware)
    assert job.framework == framework_profile(config.framework)
    other = load_hardware("h200")
    given = job_on(job.model, cluster, config, hardware=other, profile=job.profile, framework="jax")
    assert given.hardware is other and given.profile is job.profile and given.framework == framework_profile("jax")
    assert hardware_of(cluster, other) is other


def test_resized_changes_only_the_gpu_count() -> None:
    job = resolve_job("llama3-8b", "h100-sxm", 8, gpus_per_node=4)
    bigger = job.resized(64)
    assert bigger.cluster == job.cluster.model_copy(update={"num_gpus": 64})
    assert (bigger.model, bigger.hardware, bigger.profile, bigger.framework) == (
        job.model, job.hardware, job.profile, job.framework)
    assert job.num_gpus == 8   # frozen: the original is unchanged
    with pytest.raises(AttributeError):
        job.cluster = bigger.cluster  # type: ignore[misc]


def test_a_resolved_job_projects_as_the_engine_defaults_do() -> None:
    config = TrainingConfig(tp=8, pp=2, gbs=128, seq_len=4096, recompute="selective")
    job = resolve_job("llama3-70b", "h100-sxm", 64, config=config)
    direct = project(load_model("llama3-70b"), Cluster(gpu="h100-sxm", num_gpus=64), config)
    via_job = project(job.model, job.cluster, config, hardware=job.hardware, profile=job.profile,
                      framework=job.framework)
    assert via_job.iteration_time_s == direct.iteration_time_s
    assert via_job.memory.peak_bytes == direct.memory.peak_bytes


# --- errors: one line, the nearest valid name -------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "kind", "near"), [
    ({"model": "llama3-7b", "gpu": "h100-sxm"}, "model", "llama3-8b"),
    ({"model": "llama3-8b", "gpu": "h100-sx"}, "hardware", "h100-sxm"),
    ({"model": "llama3-8b", "gpu": "h100-sxm", "framework": "torchtitn"}, "framework", "torchtitan"),
])
def test_unknown_names_name_the_nearest_valid_one(kwargs: dict, kind: str, near: str) -> None:
    with pytest.raises(UnknownNameError) as err:
        resolve_job(kwargs.pop("model"), kwargs.pop("gpu"), 8, **kwargs)
    message = str(err.value)
    assert err.value.kind == kind and "\n" not in message
    suggested = message.split("did you mean ", 1)[1].split("?", 1)[0].split(", ")
    assert near in suggested, message


def test_framework_names_are_the_sweep_format_set() -> None:
    assert "megatron" in FRAMEWORK_NAMES and "torchtitan" in FRAMEWORK_NAMES
    for name in FRAMEWORK_NAMES:
        assert resolve_job("llama3-8b", "h100-sxm", 8, framework=name).framework.name == name


def test_bad_files_and_values_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ProjtuneError, match="profile file .* does not exist"):
        resolve_job("llama3-8b", "h100-sxm", 8, profile_path=str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("hardware_id: h100-sxm\ngemm_efficiency: 7\n")
    with pytest.raises(ProjtuneError, match="not a valid device profile: gemm_efficiency"):
        resolve_job("llama3-8b", "h100-sxm", 8, profile_path=str(bad))
    with pytest.raises(ModelSpecError, match="does not exist"):
        resolve_job(str(tmp_path / "nope.json"), "h100-sxm", 8)
    with pytest.raises(ValidationError):
        resolve_job("llama3-8b", "h100-sxm", 10**7)
    with pytest.raises(UnknownNameError):
        hardware_of(Cluster(gpu="tpu-v9", num_gpus=8))


def test_the_model_is_resolved_before_the_gpu() -> None:
    """The first bad input is the error (model, GPU, cluster, framework, profile), as every caller reported."""
    with pytest.raises(UnknownNameError) as err:
        resolve_job("no-such-model", "no-such-gpu", 10**7, framework="nope", profile_path="/nope.yaml")
    assert err.value.kind == "model"
    with pytest.raises(UnknownNameError) as err:
        resolve_job("llama3-8b", "no-such-gpu", 10**7, framework="nope", profile_path="/nope.yaml")
    assert err.value.kind == "hardware"
    with pytest.raises(ValidationError):
        resolve_job("llama3-8b", "h100-sxm", 10**7, framework="nope", profile_path="/nope.yaml")
    with pytest.raises(UnknownNameError) as err:
        resolve_job("llama3-8b", "h100-sxm", 8, framework="nope", profile_path="/nope.yaml")
    assert err.value.kind == "framework"


# --- every front end resolves through projection/job.py ---------------------------------------------------------


def _calls_by_function(path: Path) -> dict[str, set[str]]:
    """Called names (``f(...)`` and ``x.f(...)``) per outermost function or class, '<module>' for the rest."""
    found: dict[str, set[str]] = {}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for top in tree.body:
        owner = top.name if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) else "<module>"
        for node in ast.walk(top):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                found.setdefault(owner, set()).add(name)
    return found


def _project_modules() -> dict[str, dict[str, set[str]]]:
    return {str(path.relative_to(ROOT)): _calls_by_function(path) for path in source_files()}


# Catalog look-ups of one GPU that resolve no job (no cluster, no profile): name -> spec, family or capability.
HARDWARE_LOOKUPS = {
    ("projection/hardware.py", "load_hardware"),               # the catalog itself
    ("projection/job.py", "hardware_of"),
    ("projection/job.py", "resolve_device"),
    ("projection/job.py", "resolve_job"),
    ("projection/profile_priors.py", "family_of"),              # a profile group's family
    ("bench/runtime.py", "detect_hardware_id"),                 # the local device's name -> catalog id
    ("bench/reduction.py", "reduce_layout"),                    # the local GPU of a reduction (target via hardware_of)
    ("tools/exports/checks.py", "_target_gpu"),                 # the vendor / compute capability of an export
    ("agent/decide.py", "mfu_labels"),                          # the peaks an MFU figure is quoted against
    ("agent/text/request.py", "_gpu_spec"),                          # the precisions a parsed GPU name supports
    ("evals/eval_run.py", "family_of"),                         # the family of a sweep's GPU
}
PROFILE_FILE_READS = {
    ("projection/device_profile.py", "load_profile"),
    ("projection/job.py", "profile_for"),
    ("evals/eval_run.py", "ProfileSource"),                     # fitted profiles by hardware id (calibrate --out)
}


def test_load_hardware_is_called_only_by_the_job_module_and_single_gpu_lookups() -> None:
    callers = {(module, owner) for module, calls in _project_modules().items()
               for owner, names in calls.items() if "load_hardware" in names}
    assert callers <= HARDWARE_LOOKUPS, f"resolve jobs with projection.job: {sorted(callers - HARDWARE_LOOKUPS)}"
    assert ("projection/job.py", "resolve_job") in callers   # the test sees calls at all


def test_profile_files_are_read_only_through_the_job_module() -> None:
    callers = {(module, owner) for module, calls in _project_modules().items()
               for owner, names in calls.items() if "load_profile" in names}
    assert callers <= PROFILE_FILE_READS, f"use projection.job.profile_for: {sorted(callers - PROFILE_FILE_READS)}"
    assert ("projection/job.py", "profile_for") in callers


def test_no_function_outside_the_job_module_builds_a_cluster_from_a_catalog_lookup() -> None:
    """The hand-written resolution (look a GPU up, then build a Cluster of it) lives in projection/job.py only."""
    offenders = sorted((module, owner) for module, calls in _project_modules().items()
                       for owner, names in calls.items()
                       if {"load_hardware", "Cluster"} <= names and module != "projection/job.py")
    assert offenders == []


# The front ends and what each resolves its job with.
SITES = {
    "tools/functions.py": {"resolve_job", "profile_for"},
    "tools/search.py": {"resolve_job"},
    "tools/diagnose.py": {"resolve_job"},
    "tools/exports/common.py": {"job_on"},
    "agent/space.py": {"resolve_job"},
    "evals/runner.py": {"resolve_job"},
    "evals/gpu_compare.py": {"resolve_device"},
    "projtune/layout_input.py": {"resolve_job"},
    "projtune/commands/bench_cmd.py": {"resolve_device", "profile_for"},
    "projtune/commands/project_cmd.py": {"profile_for"},
    "bench/analytic.py": {"job_on"},
    "bench/reduction.py": {"hardware_of"},
    "bench/restore.py": {"hardware_of"},
    "projection/engine.py": {"hardware_of"},
}


@pytest.mark.parametrize("module", sorted(SITES))
def test_each_front_end_resolves_through_the_job_module(module: str) -> None:
    called = set().union(*_calls_by_function(ROOT / module).values())
    assert SITES[module] <= called, f"{module} no longer calls {sorted(SITES[module] - called)}"
