"""Pydantic models of a measured sweep file (contract: shared/specs/sweep-format.md).

The models hold a file exactly as written: no defaults are filled into a run's config,
so `Sweep.effective_config` returns only the keys the source gives. Loading, error
messages and per-run resilience live in `evals/sweep_file.py`.
"""

from __future__ import annotations

from typing import Annotated, Any, get_args

import annotated_types
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, field_validator, model_validator
from pydantic.fields import FieldInfo

from projection.errors import unknown_name_message
from projection.training_config import MAX_NIC_GBPS, MIN_NIC_GBPS, TrainingConfig, known_recompute_modules
from projection.vocabulary import CommOverlap

GPU_IDS: tuple[str, ...] = (
    "a100-40gb", "a100-80gb", "h100-sxm", "h100-96gb-500w", "h200", "h800",
    "b200", "b300", "gb200", "gb300", "mi300x", "mi325x", "mi350x", "mi355x",
)
"""Hardware ids of the spec (section *Hardware ids*); the hardware catalog resolves each."""

PRIMARY_METRICS: tuple[str, ...] = (
    "iteration_time_s", "tokens_per_sec_per_gpu", "model_tflops_per_gpu", "mfu",
)
"""Metrics that can be a run's primary metric, in the spec's order of preference."""

REQUIRED_RUN_KEYS: tuple[str, ...] = ("mbs", "gbs", "seq_len")
"""Config keys without which a run is incomplete (spec: *Incomplete runs*)."""

_STRICT = ConfigDict(extra="forbid", strict=True)


SWEEP_FIELD_OVERRIDES: dict[str, tuple[Any, dict[str, Any], str]] = {
    "recompute_modules": (
        Annotated[list[str], AfterValidator(known_recompute_modules)], {},
        "YAML gives a list, which the strict file model does not coerce to TrainingConfig's tuple; module names "
        "are checked by TrainingConfig's rule (the nearest named) when the file loads",
    ),
    "comm_overlap": (
        list[CommOverlap], {},
        "YAML gives a list (possibly empty: nothing overlapped), which the strict file model does not coerce to "
        "TrainingConfig's tuple",
    ),
    "recompute_num_layers": (
        int, {"ge": 1},
        "a file that recomputes 0 layers means recompute: none and must say so (TrainingConfig allows 0 as the "
        "engine's no-layer case)",
    ),
}
"""Sweep-file keys whose type or bound differs from TrainingConfig's, with the reason: (type, bounds, why)."""

_BOUND_KINDS = (annotated_types.Ge, annotated_types.Gt, annotated_types.Le, annotated_types.Lt)


def _optional(annotation: Any) -> Any:
    """``annotation | None`` (unchanged when it already admits None)."""
    return annotation if type(None) in get_args(annotation) else annotation | None


def _bounds(info: FieldInfo) -> dict[str, Any]:
    """The numeric bounds of a field as ``Field`` keyword arguments (ge, gt, le, lt)."""
    out: dict[str, Any] = {}
    for item in info.metadata:
        if isinstance(item, _BOUND_KINDS):
            name = type(item).__name__.lower()
            out[name] = getattr(item, name)
    return out


PROJECTION_ONLY_FIELDS: dict[str, str] = {
    **{name: ("not a key of shared/specs/sweep-format.md: a sweep file records pp and vpp only, so its runs take "
              "the default pipeline split (projection/pipeline_split.py); projections take the framework's uneven "
              "split through the tool API and layout files")
       for name in ("pp_first_stage_layers", "pp_last_stage_layers", "pp_layout")},
}
"""TrainingConfig fields that are projection inputs but not sweep-file keys (spec: 'Keys not in this table are an
error'), with the reason."""


def _config_key_fields() -> dict[str, Any]:
    """Every TrainingConfig field as an optional, default-free sweep key with the same type and bounds
    (``PROJECTION_ONLY_FIELDS`` excepted)."""
    fields: dict[str, Any] = {}
    for name, info in TrainingConfig.model_fields.items():
        if name in PROJECTION_ONLY_FIELDS:
            continue
        annotation, bounds = info.annotation, _bounds(info)
        if name in SWEEP_FIELD_OVERRIDES:
            annotation, bounds, _ = SWEEP_FIELD_OVERRIDES[name]
        fields[name] = (_optional(annotation), Field(None, description=info.description or name, **bounds))
    return fields


ConfigKeys = create_model(
    "ConfigKeys", __config__=_STRICT, __doc__=(
        "Layout keys of a run (spec: *Config keys*): TrainingConfig's fields, every one optional (no defaults "
        "filled in), unknown keys rejected, values not coerced; SWEEP_FIELD_OVERRIDES lists the differences."),
    __module__=__name__, **_config_key_fields(),
)


CONFIG_KEYS: tuple[str, ...] = tuple(ConfigKeys.model_fields)


class Measured(BaseModel):
    """Measured metrics of a run (spec: *Measured metrics*); at least one is required."""

    model_config = _STRICT

    iteration_time_s: float | None = Field(None, gt=0, description="Seconds per global step.")
    tokens_per_sec_per_gpu: float | None = Field(None, gt=0, description="Tokens / s / GPU.")
    model_tflops_per_gpu: float | None = Field(
        None, gt=0, description="Source's model TFLOP/s per GPU (its own FLOP formula)."
    )
    mfu: float | None = Field(None, gt=0, le=1, description="Fraction of the GPU's dense peak.")
    peak_memory_gib: float | None = Field(None, gt=0, description="Peak memory per GPU, GiB.")
    oom: bool | None = Field(None, description="True if the run went out of memory.")
    layer_fwd_bwd_time_ms: float | None = Field(
        None, gt=0, description="Forward + backward time of one transformer layer, ms."
    )

    @model_validator(mode="after")
    def _at_least_one(self) -> Measured:
        if not self.model_dump(exclude_none=True):
            raise ValueError(f"no metric given (need one of: {', '.join(type(self).model_fields)})")
        return self


def primary_metric(measured: Measured) -> str | None:
    """Return the run's primary metric name, or None if it has only memory/oom/layer time."""
    return next((m for m in PRIMARY_METRICS if getattr(measured, m) is not None), None)


class Run(BaseModel):
    """One measured layout of a sweep's job."""

    model_config = _STRICT

    config: ConfigKeys = Field(default_factory=ConfigKeys, description="Keys of this run.")
    measured: Measured = Field(description="Measured metrics.")
    baselines: dict[str, Measured] = Field(
        default_factory=dict, description="Other tools' predictions, by tool name."
    )
    unknown: list[str] = Field(default_factory=list, description="Keys the source does not give.")
    notes: str | None = Field(None, description="Free text (caveats, what is missing).")

    @field_validator("unknown")
    @classmethod
    def _known_keys(cls, keys: list[str]) -> list[str]:
        for key in keys:
            if key not in CONFIG_KEYS:
                raise ValueError(unknown_name_message("config key", key, CONFIG_KEYS))
        return keys

    def missing_keys(self, sweep: SweepHeader) -> list[str]:
        """Return keys that make this run incomplete: its `unknown` list, then absent mbs/gbs/seq_len."""
        config = sweep.effective_config(self)
        absent = [k for k in REQUIRED_RUN_KEYS if k not in config and k not in self.unknown]
        return [*self.unknown, *absent]


class ClusterSpec(BaseModel):
    """GPU type and count of a sweep."""

    model_config = _STRICT

    gpu: str = Field(description="Hardware id, one of GPU_IDS.")
    num_gpus: int = Field(ge=1, description="Number of GPUs of the job.")
    gpus_per_node: int = Field(8, ge=1, description="GPUs per node.")
    nic_gbps: float | None = Field(None, ge=MIN_NIC_GBPS, le=MAX_NIC_GBPS, allow_inf_nan=False,
                                   description="Line rate of one NIC, Gbit/s.")
    nics_per_node: int | None = Field(None, ge=1, description="NICs per node.")

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, gpu: str) -> str:
        if gpu not in GPU_IDS:
            raise ValueError(unknown_name_message("gpu", gpu, GPU_IDS))
        return gpu


class SweepHeader(BaseModel):
    """Everything of a sweep except its runs (validated first, so a bad run loses only itself)."""

    model_config = _STRICT

    name: str = Field(min_length=1, description="Unique across all loaded files.")
    source: str | None = Field(None, description="Citation; overrides the file's.")
    notes: str | None = Field(None, description="Free text (caveats, container version).")
    model: str | dict[str, Any] = Field(
        description="Catalog id, or Hugging Face config.json fields including model_type."
    )
    cluster: ClusterSpec = Field(description="GPU type and count.")
    fixed: ConfigKeys = Field(default_factory=ConfigKeys, description="Keys shared by all runs.")

    @field_validator("model", mode="before")
    @classmethod
    def _catalog_id_or_hf_fields(cls, model: object) -> object:
        if isinstance(model, str) and model:
            from projection.errors import UnknownNameError
            from projection.model_spec import catalog_model_id, list_model_ids

            if catalog_model_id(model) is None:   # caught here, not run by run at projection time
                raise ValueError(str(UnknownNameError("model", model, list_model_ids())))  # the nearest first
            return model
        if isinstance(model, dict) and isinstance(model.get("model_type"), str):
            return model
        raise ValueError(
            "must be a catalog id (non-empty string) or a mapping of Hugging Face config.json "
            f"fields with a string 'model_type' (got {model!r})"
        )

    def effective_config(self, run: Run) -> dict[str, Any]:
        """Return `fixed` merged with the run's config (run wins); only keys that are set."""
        return {**self.fixed.model_dump(exclude_none=True), **run.config.model_dump(exclude_none=True)}

    def layout_error(self, run: Run) -> str | None:
        """Return why the run's layout breaks a format rule (spec: `dp`), or None."""
        config = self.effective_config(run)
        if "dp" not in config:
            return None
        tp, pp, cp = (config.get(k, 1) for k in ("tp", "pp", "cp"))
        num_gpus = self.cluster.num_gpus
        if num_gpus % (tp * pp * cp) or config["dp"] != num_gpus // (tp * pp * cp):
            return (
                f"dp={config['dp']} must equal num_gpus/(tp*pp*cp) = "
                f"{num_gpus}/({tp}*{pp}*{cp}) = {num_gpus / (tp * pp * cp):g}"
            )
        return None


class Sweep(SweepHeader):
    """Runs of one job that differ only in layout; only runs inside one sweep are ranked."""

    runs: list[Run] = Field(description="Measured runs, in file order.")

    @model_validator(mode="after")
    def _layouts(self) -> Sweep:
        errors = [f"run {i}: {e}" for i, r in enumerate(self.runs) if (e := self.layout_error(r))]
        if errors:
            raise ValueError("; ".join(errors))
        return self


class SweepFile(BaseModel):
    """A whole sweep file; `evals.sweep_file.load_sweep_files` loads it run by run."""

    model_config = _STRICT

    source: str = Field(min_length=1, description="Default citation of every sweep.")
    sweeps: list[Sweep] = Field(min_length=1, description="Sweeps of the file.")

    @model_validator(mode="after")
    def _unique_names(self) -> SweepFile:
        names = [s.name for s in self.sweeps]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate sweep names: {', '.join(duplicates)}")
        return self
