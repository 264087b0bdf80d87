"""Build (model, cluster, config) from CLI flags and/or a YAML/TOML layout file; flags win."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml

from projection.errors import ProjtuneError
from projection.hardware import HardwareSpec
from projection.job import resolve_job
from projection.model_spec import ModelSpec
from projection.training_config import Cluster, TrainingConfig

CLUSTER_KEYS = ("gpu", "num_gpus", "gpus_per_node", "nic_gbps", "nics_per_node", "nvlink_domain", "host_op_s")


def parse_overlap_list(text: str) -> tuple[str, ...]:
    """``--overlap dp,tp`` as a tuple; ``none`` (or an empty string) means nothing is overlapped."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    return () if names in ((), ("none",)) else names


def read_layout_file(path: Path) -> dict[str, Any]:
    """Read a layout file: ``model``, ``cluster`` (or top-level cluster keys) and ``config`` (or top-level keys)."""
    from projection.errors import clip, not_a_file

    if not path.is_file():
        raise ProjtuneError(not_a_file("layout file", path))
    from projection.safe_yaml import YamlLimitError, load_bounded, read_text_bounded, yaml_problem

    try:
        text = read_text_bounded(path, max_bytes=1024 * 1024)
        data = tomllib.loads(text) if path.suffix == ".toml" else load_bounded(text)
    except yaml.YAMLError as err:
        line, problem = yaml_problem(err)
        raise ProjtuneError(f"cannot parse layout file '{path}'" + (f", line {line}" if line else "")
                            + f": malformed YAML: {clip(problem, 200)}") from err
    except (tomllib.TOMLDecodeError, YamlLimitError, UnicodeDecodeError) as err:
        raise ProjtuneError(f"cannot parse layout file '{path}': {clip(str(err), 200)}") from err
    if not isinstance(data, dict):
        raise ProjtuneError(f"layout file '{path}' must be a mapping with model, cluster and config keys")
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("cluster", "config", "fixed") and isinstance(value, dict):
            flat.update(value)
        else:
            flat[key] = value
    if "gpus" in flat:
        flat["num_gpus"] = flat.pop("gpus")
    return flat


def build_layout(values: dict[str, Any]) -> tuple[ModelSpec, HardwareSpec, Cluster, TrainingConfig]:
    """Resolve the model and GPU names and validate the cluster and config keys."""
    values = {k: v for k, v in values.items() if v is not None}
    if "model" not in values:
        raise ProjtuneError("no model given: use --model ID (see `projtune models`) or a layout file")
    if "gpu" not in values:
        raise ProjtuneError("no GPU given: use --gpu ID (see `projtune hardware`) or a layout file")
    if "num_gpus" not in values:
        raise ProjtuneError("no GPU count given: use --gpus N or a layout file")
    given = {k: values.pop(k) for k in CLUSTER_KEYS if k in values}
    job = resolve_job(values.pop("model"), str(given.pop("gpu")), given.pop("num_gpus"), **given)
    model, hardware, cluster = job.model, job.hardware, job.cluster
    if isinstance(values.get("recompute_modules"), str):
        values["recompute_modules"] = tuple(m for m in values["recompute_modules"].split(",") if m)
    if isinstance(values.get("comm_overlap"), str):
        values["comm_overlap"] = parse_overlap_list(values["comm_overlap"])
    unknown = [k for k in values if k not in TrainingConfig.model_fields]
    if unknown:                   # a layout file's misspelt key: name the nearest (pydantic says only "unknown key")
        from projection.errors import unknown_name_message

        raise ProjtuneError(unknown_name_message("layout key", unknown[0],
                                                 [*TrainingConfig.model_fields, "model", *CLUSTER_KEYS]))
    config = TrainingConfig(**values)
    return model, hardware, cluster, config
