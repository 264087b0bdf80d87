"""Hardware catalog: one cited YAML file per accelerator, loaded into a frozen ``HardwareSpec``.

The files (``projection/catalog/hardware/<id>.yaml``, package data) use human units with
the unit in the key (``hbm_capacity_gib``, ``nic_gbit_per_s``, ``dense_peak_tflops``);
this module converts them once to base units (bytes, bytes/s, FLOP/s). The catalog's
README lists the ids and the sources of every number.
"""

from __future__ import annotations

import datetime
from functools import lru_cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from projection.errors import ProjtuneError, UnknownNameError
from projection.safe_yaml import load_catalog
from projection.vocabulary import Precision

Vendor = Literal["nvidia", "amd"]
Family = Literal["ampere", "hopper", "blackwell", "blackwell-ultra", "cdna3", "cdna4"]
Fabric = Literal["nvswitch", "xgmi-mesh"]
GemmDtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4"]

# Unit conversions: decimal prefixes for rates (datasheets quote TFLOP/s, TB/s, GB/s, Gbit/s
# in powers of ten) and a binary one for capacity (GiB, as torch.cuda.mem_get_info reports).
_FLOPS_PER_TFLOPS = 1e12
_BYTES_PER_TBYTE = 1e12
_BYTES_PER_GBYTE = 1e9
_BITS_PER_GBIT = 1e9
_BITS_PER_BYTE = 8
_BYTES_PER_GIB = 2**30
_FOLDER = resources.files("projection") / "catalog" / "hardware"

# Training precision -> the tensor-core dtype its GEMMs run in. Block-scaled FP8 recipes
# (DeepSeek-V3 style 1x128/128x128 scales, MXFP8's 1x32 E8M0 scales) use the FP8 rate.
_GEMM_DTYPE: dict[str, GemmDtype] = {
    "bf16": "bf16",
    "fp16": "fp16",
    "fp8": "fp8",
    "fp8-blockwise": "fp8",
    "mxfp8": "fp8",
    "nvfp4": "fp4",
}


class PrecisionNotSupported(ProjtuneError):
    """A training precision the chip cannot run natively (e.g. fp8 on an A100)."""


class _ScaleUp(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    fabric: Fabric
    gbyte_per_s_per_direction: float = Field(gt=0, description="Per-GPU aggregate over all links, one direction, GB/s.")
    num_links: int = Field(gt=0)
    domain_gpus: int = Field(gt=0, description="GPUs reachable over the scale-up fabric.")


class _ScaleOut(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    nics_per_node: int = Field(gt=0)
    nic_gbit_per_s: float = Field(gt=0, description="Line rate of one NIC, Gbit/s.")


class _HardwareFile(BaseModel):
    """One catalog file, in the file's human units."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    display_name: str
    vendor: Vendor
    family: Family
    aliases: list[str] = Field(default_factory=list)
    date: datetime.date = Field(description="When the entry was last checked against its sources.")
    tdp_w: float = Field(gt=0)
    num_compute_units: int = Field(gt=0)
    boost_clock_ghz: float = Field(gt=0)
    dense_peak_tflops: dict[GemmDtype, float]
    supported_precisions: list[Precision]
    hbm_capacity_gib: float = Field(gt=0)
    hbm_bandwidth_tbyte_per_s: float = Field(gt=0)
    scale_up: _ScaleUp
    scale_out: _ScaleOut
    gpus_per_node: int = Field(gt=0)
    sources: list[str] = Field(min_length=1)
    notes: str = ""

    def to_spec(self) -> HardwareSpec:
        """Convert to base units."""
        return HardwareSpec(
            id=self.id,
            display_name=self.display_name,
            vendor=self.vendor,
            family=self.family,
            aliases=tuple(self.aliases),
            tdp_w=self.tdp_w,
            num_compute_units=self.num_compute_units,
            boost_clock_ghz=self.boost_clock_ghz,
            peak_flops_per_s={dtype: tflops * _FLOPS_PER_TFLOPS for dtype, tflops in self.dense_peak_tflops.items()},
            supported_precisions=tuple(self.supported_precisions),
            hbm_capacity_bytes=self.hbm_capacity_gib * _BYTES_PER_GIB,
            hbm_bandwidth_bytes_per_s=self.hbm_bandwidth_tbyte_per_s * _BYTES_PER_TBYTE,
            scale_up_fabric=self.scale_up.fabric,
            scale_up_bytes_per_s=self.scale_up.gbyte_per_s_per_direction * _BYTES_PER_GBYTE,
            scale_up_num_links=self.scale_up.num_links,
            scale_up_domain_gpus=self.scale_up.domain_gpus,
            nics_per_node=self.scale_out.nics_per_node,
            nic_bytes_per_s=self.scale_out.nic_gbit_per_s * _BITS_PER_GBIT / _BITS_PER_BYTE,
            gpus_per_node=self.gpus_per_node,
            sources=tuple(self.sources),
            notes=self.notes,
        )


class HardwareSpec(BaseModel):
    """One accelerator type, in base units: what the datasheet promises, not what kernels reach."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="Catalog id, e.g. 'h100-sxm'.")
    display_name: str
    vendor: Vendor
    family: Family = Field(description="Architecture generation.")
    aliases: tuple[str, ...] = ()
    tdp_w: float = Field(description="Board power limit, W.")
    num_compute_units: int = Field(description="SMs (NVIDIA) or CUs (AMD).")
    boost_clock_ghz: float = Field(description="Max engine clock, GHz; the catalog file's notes say how it was found.")
    peak_flops_per_s: dict[str, float] = Field(
        description="Dense (no sparsity) peak per GEMM dtype (fp32, tf32, bf16, fp16, fp8, fp4), FLOP/s."
    )
    supported_precisions: tuple[str, ...] = Field(description="Training precisions the chip runs natively.")
    hbm_capacity_bytes: float = Field(description="Device memory the framework can use, bytes.")
    hbm_bandwidth_bytes_per_s: float = Field(description="Peak HBM bandwidth, bytes/s.")
    scale_up_fabric: Fabric = Field(description="nvswitch (switched, uniform) or xgmi-mesh (full mesh of links).")
    scale_up_bytes_per_s: float = Field(description="Per-GPU scale-up bandwidth, all links, one direction, bytes/s.")
    scale_up_num_links: int = Field(description="Scale-up links per GPU.")
    scale_up_domain_gpus: int = Field(description="GPUs in one scale-up domain (8 per node; 72 for NVL72).")
    nics_per_node: int = Field(description="Scale-out NICs per node in the reference design.")
    nic_bytes_per_s: float = Field(description="Line rate of one NIC, one direction, bytes/s.")
    gpus_per_node: int = Field(description="GPUs per node (a GB200/GB300 compute tray holds 4).")
    sources: tuple[str, ...] = Field(description="Datasheets and papers the numbers come from.")
    notes: str = ""

    def __hash__(self) -> int:
        """Hash by id, so a spec can key a cache although ``peak_flops_per_s`` is a dict."""
        return hash(self.id)

    def peak_flops_for(self, precision: str) -> float:
        """Return the dense peak FLOP/s of the GEMM dtype a training precision runs in.

        Args:
            precision: A training precision: bf16, fp16, fp8, fp8-blockwise, mxfp8, nvfp4.

        Raises:
            UnknownNameError: ``precision`` is not a training precision.
            PrecisionNotSupported: the chip does not run ``precision`` natively.
        """
        if precision not in _GEMM_DTYPE:
            raise UnknownNameError(kind="precision", name=precision, choices=list(_GEMM_DTYPE))
        dtype = _GEMM_DTYPE[precision]
        if precision not in self.supported_precisions or dtype not in self.peak_flops_per_s:
            supported = ", ".join(self.supported_precisions)
            raise PrecisionNotSupported(
                f"{self.id} does not support precision '{precision}' (supported: {supported})"
            )
        return self.peak_flops_per_s[dtype]


def _normalize(name: str) -> str:
    """Fold case and separators so 'H100 SXM', 'h100_sxm' and 'h100-sxm' match."""
    return "-".join(name.strip().lower().replace("_", " ").split())


@lru_cache(maxsize=1)
def _file_ids() -> frozenset[str]:
    """The ids the catalog's files are named by (``<id>.yaml``; tests/projection/test_hardware_catalog.py checks
    that each file holds the id it is named by)."""
    return frozenset(item.name.removesuffix(".yaml") for item in _FOLDER.iterdir() if item.name.endswith(".yaml"))


@lru_cache(maxsize=None)
def _spec_in_file(hardware_id: str) -> HardwareSpec:
    """The spec of one catalog file, read once (the full catalog reuses it, so one id is one object)."""
    text = (_FOLDER / f"{hardware_id}.yaml").read_text(encoding="utf-8")
    return _HardwareFile.model_validate(load_catalog(text)).to_spec()


@lru_cache(maxsize=1)
def _catalog() -> dict[str, HardwareSpec]:
    """Read every catalog file once; keyed by id."""
    specs = (_spec_in_file(hardware_id) for hardware_id in sorted(_file_ids()))
    return {spec.id: spec for spec in specs}


@lru_cache(maxsize=1)
def _name_index() -> dict[str, str]:
    """Map each normalized id and alias to its id."""
    index: dict[str, str] = {}
    for spec in _catalog().values():
        for name in (spec.id, *spec.aliases):
            index[_normalize(name)] = spec.id
    return index


def load_hardware(name: str) -> HardwareSpec:
    """Return the catalog entry for a hardware id or alias (case-insensitive).

    Raises:
        UnknownNameError: no id or alias matches; the message suggests the nearest ids.
    """
    key = _normalize(name)
    if key in _file_ids():      # an id: its file alone (a command naming one GPU reads 1 of the 14 files)
        return _spec_in_file(key)
    hardware_id = _name_index().get(key)
    if hardware_id is None:
        raise UnknownNameError(kind="hardware", name=name, choices=list(_catalog()))
    return _catalog()[hardware_id]


def list_hardware() -> list[HardwareSpec]:
    """Return every catalog entry, sorted by id."""
    return [spec for _, spec in sorted(_catalog().items())]
