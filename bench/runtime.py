"""The local device: which accelerator it is (catalog id), and the software stack that drives it."""

from __future__ import annotations

import platform
import shutil
import subprocess
from dataclasses import dataclass

import torch

from projection.errors import UnknownNameError
from projection.hardware import list_hardware, load_hardware

# Marketing names as torch.cuda.get_device_name reports them -> catalog id, most specific first.
# (e.g. "NVIDIA H100 80GB HBM3", "NVIDIA H200", "AMD Instinct MI300X", "NVIDIA A100-SXM4-40GB")
_NAME_TOKENS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("GB300",), "gb300"), (("GB200",), "gb200"), (("B300",), "b300"), (("B200",), "b200"),
    (("H200",), "h200"), (("H800",), "h800"), (("H100", "96GB"), "h100-96gb-500w"), (("H100",), "h100-sxm"),
    (("A100", "40GB"), "a100-40gb"), (("A100",), "a100-80gb"),
    (("MI355",), "mi355x"), (("MI325",), "mi325x"), (("MI300X",), "mi300x"),
)


def detect_hardware_id(device_name: str) -> str | None:
    """Catalog id of a device name (``torch.cuda.get_device_name``), or None when not in the catalog."""
    try:
        return load_hardware(device_name).id
    except UnknownNameError:
        pass
    upper = device_name.upper().replace("-", " ")
    for tokens, hardware_id in _NAME_TOKENS:
        if all(token in upper for token in tokens):
            return hardware_id
    return next((h.id for h in list_hardware() if h.id.upper() in upper), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeInfo:
    """What ran the benchmark."""

    device_type: str               # "cuda" (also ROCm) or "cpu"
    device_name: str
    hardware_id: str | None
    num_devices: int
    torch_version: str
    runtime_version: str | None    # CUDA or HIP version torch was built with
    driver_version: str | None


def _driver_version() -> str | None:
    """Driver version from nvidia-smi or rocm-smi when present (never raises)."""
    for tool, args in (("nvidia-smi", ["--query-gpu=driver_version", "--format=csv,noheader"]),
                       ("rocm-smi", ["--showdriverversion"])):
        if shutil.which(tool):
            try:
                out = subprocess.run([tool, *args], capture_output=True, text=True, timeout=10, check=False)
            except (OSError, subprocess.SubprocessError):
                continue
            lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
            if out.returncode == 0 and lines:
                return lines[0].split(":")[-1].strip()
    return None


def runtime_info(device_type: str) -> RuntimeInfo:
    """Describe the local device of ``device_type`` ("cuda" or "cpu")."""
    runtime = torch.version.hip or torch.version.cuda
    if device_type == "cuda":
        name = torch.cuda.get_device_name(0)
        return RuntimeInfo(device_type="cuda", device_name=name, hardware_id=detect_hardware_id(name),
                           num_devices=torch.cuda.device_count(), torch_version=torch.__version__,
                           runtime_version=runtime, driver_version=_driver_version())
    return RuntimeInfo(device_type="cpu", device_name=f"cpu:{platform.processor() or platform.machine()}",
                       hardware_id=None, num_devices=1, torch_version=torch.__version__, runtime_version=None,
                       driver_version=None)


def gpu_available() -> bool:
    """Whether torch sees a CUDA or ROCm device."""
    return torch.cuda.is_available() and torch.cuda.device_count() > 0
