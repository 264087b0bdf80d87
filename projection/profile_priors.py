"""Priors, physical bounds and shared silicon of device-profile parameters.

``projection/catalog/priors/priors.yaml`` holds, per GPU family, the prior value of each
fittable parameter (datasheets and public kernel measurements; the DeviceProfile defaults
where none is listed) and the bounds calibration keeps it within, each with its source.
``SILICON`` names the GPUs that share one die and so one fitted profile.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any


from projection.device_profile import DeviceProfile
from projection.errors import ProjtuneError
from projection.safe_yaml import load_catalog
from projection.hardware import load_hardware

# Same die, same kernels: one fitted profile (the first id names the group).
# B300/GB300 (Blackwell Ultra B300 die), B200/GB200 (B200 die), H100 SXM / H100 96 GB 500 W / H800 / H200
# (GH100: H200 adds HBM3e, H800 cuts NVLink), MI300X/MI325X (CDNA3 XCDs; MI325X adds HBM3E and power),
# MI355X/MI350X (CDNA4, MI350X air-cooled at lower power).
SILICON: dict[str, tuple[str, ...]] = {
    "b300": ("b300", "gb300"),
    "b200": ("b200", "gb200"),
    "h100-sxm": ("h100-sxm", "h100-96gb-500w", "h800", "h200"),
    "mi300x": ("mi300x", "mi325x"),
    "mi355x": ("mi355x", "mi350x"),
    "a100-80gb": ("a100-80gb", "a100-40gb"),
}
_SILICON_OF = {member: group for group, members in SILICON.items() for member in members}
# A member that sustains a higher fraction of the shared die's peak (power, clocks under load) than the group's
# first id, as measured by the same public benchmark: kernel efficiencies scale by the ratio.
# MI325X vs MI300X: hipBLASLt max-achievable BF16 843 vs 708 TF, FP8 1519 vs 1273 TF on the same 1307/2615 TF
# datasheet peaks (ROCm blog "measuring-max-achievable-flops-part2"): 1.19 both.
# H100 96 GB 500 W (Meta Grand Teton) vs H100 SXM (700 W): the catalog keeps the SXM5 datasheet peaks, but the
# TorchTitan paper (Liang et al. 2024, arXiv 2410.06511, Sec. 4) says of these GPUs: "limited to a lower TDP. The
# actual peak TFLOPs should be between SXM and NVL" (torchtitan docs/performance.md: "the default 500W power
# limit"); the H100 NVL datasheet's dense BF16/FP8 peaks are 835/1671 TF against the SXM's 989/1979 (0.845 both),
# so the midpoint of that range: 0.92 of the SXM's sustained fraction.
MEMBER_EFFICIENCY: dict[str, float] = {"mi325x": 1.19, "h100-96gb-500w": 0.92}
_SCALED = ("gemm_efficiency", "low_precision_gemm_efficiency", "fp4_gemm_efficiency", "attention_efficiency")


def silicon_group(hardware_id: str) -> str:
    """The shared-silicon group of a hardware id (itself when it shares with nobody)."""
    return _SILICON_OF.get(hardware_id, hardware_id)


def silicon_members(group: str) -> tuple[str, ...]:
    """Hardware ids of a silicon group (the id itself when it is not a group)."""
    return SILICON.get(group, (group,))


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    path = Path(str(resources.files("projection") / "catalog" / "priors" / "priors.yaml"))
    return load_catalog(path.read_text())


def family_of(group: str) -> str:
    """The family of a device group (a hardware id, a silicon group or a family name)."""
    if group in _table()["families"]:
        return group
    try:
        return load_hardware(group).family
    except ProjtuneError:
        return group


def parameter_bounds(group: str, name: str) -> tuple[float, float]:
    """(low, high) physical bounds of a fittable parameter for a device group."""
    family = _table()["families"].get(family_of(group), {})
    low, high = (family.get("bounds") or {}).get(name) or _table()["defaults"]["bounds"][name]
    return float(low), float(high)


def cited_prior(group: str, name: str) -> bool:
    """Whether ``priors.yaml`` lists a cited prior value of ``name`` for the group's family (else the prior is the
    DeviceProfile default, which has no source for that family)."""
    return name in (_table()["families"].get(family_of(group), {}).get("prior") or {})


def prior_profile(group: str) -> DeviceProfile:
    """The profile every fit of ``group`` starts from and is pulled towards: DeviceProfile defaults
    overridden by the family's listed priors, each clipped into its bounds."""
    family = _table()["families"].get(family_of(group), {})
    values = dict(family.get("prior") or {})
    base = DeviceProfile(hardware_id=group, **values)
    update: dict[str, float] = {}
    for name in _table()["defaults"]["bounds"]:
        low, high = parameter_bounds(group, name)
        value = getattr(base, name)
        if not low <= value <= high:
            update[name] = min(max(value, low), high)
    base = base.model_copy(update=update) if update else base
    return physical(base)


def physical(profile: DeviceProfile) -> DeviceProfile:
    """The profile with FP4 <= FP8 <= 16-bit GEMM fraction of peak (a narrower format never reaches a
    higher share of its own peak: quantisation, scaling and casts only add work)."""
    fp8 = min(profile.low_precision_gemm_efficiency, profile.gemm_efficiency)
    fp4 = min(profile.fp4_gemm_efficiency, fp8)
    if (fp8, fp4) == (profile.low_precision_gemm_efficiency, profile.fp4_gemm_efficiency):
        return profile
    return profile.model_copy(update={"low_precision_gemm_efficiency": fp8, "fp4_gemm_efficiency": fp4})


def member_profile(profile: DeviceProfile, hardware_id: str) -> DeviceProfile:
    """A silicon group's profile as one member runs it: kernel efficiencies times the member's
    ``MEMBER_EFFICIENCY`` factor (kept inside the member's bounds), named for the member."""
    factor = MEMBER_EFFICIENCY.get(hardware_id, 1.0)
    update: dict[str, object] = {"hardware_id": hardware_id}
    if factor != 1.0 and profile.hardware_id != hardware_id:
        for name in _SCALED:
            low, high = parameter_bounds(hardware_id, name)
            update[name] = min(max(getattr(profile, name) * factor, low), high, 1.0)
    return physical(profile.model_copy(update=update))
