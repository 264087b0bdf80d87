"""Device profiles: the few free numbers that turn a workload into seconds on one GPU type.

A profile holds achievable-peak factors, kernel and step overheads, communication
efficiencies, overlap fractions and the memory-overhead term.  Datasheet facts (peak
FLOP/s, HBM bandwidth, links) stay in the hardware catalog; a profile only says how much
of them real training kernels reach.  Profiles ship in ``projection/catalog/profiles``
(one per hardware id, or one per family as fallback), fitted by ``projtune calibrate``
on the development sweeps, and record what they were fitted on.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from projection.errors import ProjtuneError, not_a_file, validation_problems
from projection.hardware import HardwareSpec

# Parameters the calibrator may fit (a handful per family, never per workload).
FITTABLE = (
    "gemm_efficiency",
    "low_precision_gemm_efficiency",
    "fp4_gemm_efficiency",
    "attention_efficiency",
    "moe_efficiency",
    "moe_layer_overhead_s",
    "scale_up_efficiency",
    "scale_out_efficiency",
    "dp_overlap_fraction",
    "kernel_overhead_s",
    # TP and EP comm overlap: Megatron-core hides them with recipe switches (tp_comm_overlap,
    # overlap_moe_expert_parallel_comm / DeepEP) that measured sweep files do not record.
    "tp_overlap_fraction",
    "ep_overlap_fraction",
)

# The one communication efficiency of profiles written before the scale-up/scale-out split: read as both.
LEGACY_COMM_EFFICIENCY = ("scale_up_efficiency", "scale_out_efficiency")


class DeviceProfile(BaseModel):
    """Achievable-performance parameters of one GPU type (dimensionless unless a unit is named)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hardware_id: str = Field(description="Hardware id or family the profile applies to.")
    gemm_efficiency: float = Field(0.75, gt=0, le=1, description="Achieved/peak FLOP/s of large 16-bit GEMMs.")
    low_precision_gemm_efficiency: float = Field(
        0.60, gt=0, le=1, description="Achieved/peak FLOP/s of large FP8 GEMMs (incl. cast/scale overheads).")
    fp4_gemm_efficiency: float = Field(
        0.45, gt=0, le=1, description="Achieved/peak FLOP/s of large FP4 (NVFP4) GEMMs incl. quantisation overheads.")
    attention_efficiency: float = Field(0.55, gt=0, le=1, description="Flash-attention achieved/peak 16-bit FLOP/s.")
    moe_efficiency: float = Field(0.70, gt=0, le=1, description="Grouped-GEMM + permute efficiency vs dense GEMM.")
    moe_layer_overhead_s: float = Field(
        2e-4, ge=0, le=0.01, description="Fixed forward cost per MoE layer (router, top-k, token-count sync, "
        "permute setup), seconds; backward pays twice.")
    memory_efficiency: float = Field(0.80, gt=0, le=1, description="Achieved/peak HBM bandwidth, streaming kernels.")
    optimizer_memory_efficiency: float = Field(
        0.25, gt=0, le=1, description="Achieved/peak HBM bandwidth of the optimizer step (Primus: MI355X Adam at 21%).")
    kernel_overhead_s: float = Field(6e-6, ge=0, description="Launch + tail latency per kernel, seconds.")
    tile_m: int = Field(256, ge=1, description="GEMM output tile rows (wave quantisation).")
    tile_n: int = Field(128, ge=1, description="GEMM output tile columns.")
    scale_up_efficiency: float = Field(
        0.80, gt=0, le=1, description="Achieved bus bandwidth / line rate on the scale-up fabric (NVLink/xGMI).")
    scale_out_efficiency: float = Field(
        0.80, gt=0, le=1, description="Achieved bus bandwidth / line rate across scale-up domains (IB/RoCE NICs).")
    scale_up_latency_s: float = Field(5e-6, ge=0, description="Per-step latency on NVLink/xGMI, seconds.")
    scale_out_latency_s: float = Field(1.5e-5, ge=0, description="Per-step latency across nodes, seconds.")
    dp_overlap_fraction: float = Field(0.85, ge=0, le=1, description="Share of DP/FSDP comm hidden under compute.")
    tp_overlap_fraction: float = Field(0.0, ge=0, le=1, description="Share of TP comm hidden (TP comm overlap).")
    ep_overlap_fraction: float = Field(0.0, ge=0, le=1, description="Share of EP all-to-all hidden.")
    cp_overlap_fraction: float = Field(0.7, ge=0, le=1, description="Share of CP ring exchange hidden by attention.")
    step_overhead_s: float = Field(0.02, ge=0, description="Fixed per-iteration cost (loader, logging, sync), s.")
    memory_overhead_gib: float = Field(3.0, ge=0, description="Context, NCCL/RCCL buffers, workspaces, GiB.")
    memory_fragmentation: float = Field(0.08, ge=0, le=1, description="Allocator slack as a share of dynamic memory.")
    fitted_on: tuple[str, ...] = Field(default=(), description="Sweep names the parameters were fitted on.")
    fit_note: str = Field(default="", description="How and when the profile was fitted, and its fit error.")

    @model_validator(mode="before")
    @classmethod
    def _legacy_comm_efficiency(cls, data: Any) -> Any:
        """Profiles written before the fabric split carry one ``comm_efficiency``: it sets both fabrics
        (unless a file also names one of them, which then wins for that fabric)."""
        if isinstance(data, dict) and "comm_efficiency" in data:
            data = dict(data)
            legacy = data.pop("comm_efficiency")
            for name in LEGACY_COMM_EFFICIENCY:
                data.setdefault(name, legacy)
        return data


def _profile_dir() -> Path:
    return Path(str(resources.files("projection") / "catalog" / "profiles"))


@lru_cache(maxsize=64)
def _read_profile(path: str) -> DeviceProfile:
    from projection.safe_yaml import load_bounded, read_text_bounded

    return DeviceProfile.model_validate(load_bounded(read_text_bounded(path, max_bytes=4 * 1024 * 1024)))


@lru_cache(maxsize=64)
def default_profile(hardware: HardwareSpec) -> DeviceProfile:
    """The shipped profile of a GPU: its own file, else its family's file, else built-in defaults.

    Every ``Family`` ships a family file (``projtune calibrate --all`` writes one per fitted family; a test pins it),
    so the built-in defaults (uncited 0.55 attention / 0.70 MoE efficiencies) are reached only when the catalog folder
    lacks them.  A shipped profile's kernel efficiencies that its own runs could not fit and no cited prior sets are
    borrowed from the other fitted GPUs by the rule cross-validation uses (evals/calibrate.py ``borrowed_values``);
    its ``fit_note`` says which, with the value and the GPUs it came from."""
    folder = _profile_dir()
    for stem in (hardware.id, hardware.family):
        path = folder / f"{stem}.yaml"
        if path.is_file():
            return _read_profile(str(path)).model_copy(update={"hardware_id": hardware.id})
    return DeviceProfile(hardware_id=hardware.id)


def load_profile(path: str | Path) -> DeviceProfile:
    """Read a profile file written by ``projtune calibrate`` or ``projtune bench device``."""
    file = Path(path)
    if not file.is_file():
        raise ProjtuneError(not_a_file("profile file", file))
    try:
        return _read_profile(str(file.resolve()))
    except (yaml.YAMLError, ValueError) as err:   # say where it broke, never the file's content
        if isinstance(err, ValidationError):
            why = validation_problems(err)
        else:
            from projection.safe_yaml import YamlLimitError

            mark = getattr(err, "problem_mark", None)
            why = (str(err) if isinstance(err, YamlLimitError) else
                   f"not valid YAML at line {mark.line + 1}" if mark is not None else type(err).__name__)
        raise ProjtuneError(f"profile file '{file}' is not a valid device profile: {why}") from err


def dump_profile(profile: DeviceProfile) -> str:
    """Serialise a profile as YAML (the format ``load_profile`` reads)."""
    data = profile.model_dump(mode="json")
    data["fitted_on"] = list(profile.fitted_on)
    return yaml.safe_dump(data, sort_keys=False)
