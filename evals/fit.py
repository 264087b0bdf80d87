"""Joint least-squares fit of device profiles (per GPU) and framework profiles on measured runs.

The residual of a run is ``log(projected / measured)`` on its primary metric.  Device
parameters (the ``FITTABLE`` names of :mod:`projection.device_profile`) are fitted per
device group: the hardware id when it has enough complete runs, else its family.
Framework multipliers are fitted per framework, with Megatron-core (megatron, nemo, primus)
as the reference at 1.0, and only for a framework that shares a device group with another one
(``fitted_frameworks``: alone on its GPUs, its multipliers and the GPUs' efficiencies are one factor).
Device groups are shared silicon (``projection.profile_priors.SILICON``: B300/GB300, B200/GB200,
the GH100 parts, MI300X/MI325X, MI355X/MI350X) with enough runs, else the family.  Every fit starts
from the family's prior (datasheets, public kernel measurements:
``projection/catalog/priors/priors.yaml``), keeps each parameter inside its physical bounds, and a
weak prior pulls towards the prior value.  A group fits a parameter only when at least
``MIN_RUNS_PER_PARAM`` of its runs exercise it (FP8 runs for the FP8 efficiency, MoE runs for the MoE
terms, TP > 1 for TP overlap, more GPUs than one NVLink/xGMI domain for the scale-out efficiency, ...),
and at most one parameter per ``MIN_RUNS_PER_PARAM`` runs, in ``PARAM_PRIORITY`` order; the rest stay at
the prior.  FP8 and FP4 efficiencies never exceed the
16-bit one.  The Jacobian is sparse (a run only sees its own device group and framework), which
``scipy.optimize.least_squares`` exploits through ``jac_sparsity``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares
from scipy.sparse import lil_matrix

from evals.runner import RunSpecs, projected_metrics, run_specs
from evals.sweep_file import LoadedRun, LoadedSweep
from projection.device_profile import FITTABLE, DeviceProfile
from projection.engine import network_for, project
from projection.errors import ProjtuneError
from projection.framework import framework_profile, framework_record
from projection.framework_profile import FrameworkProfile
from projection.profile_priors import member_profile, parameter_bounds, physical, prior_profile, silicon_group
from projection.switches import resolve_switches

MIN_RUNS_PER_ID = 4            # a silicon group with fewer complete runs shares its family's profile
MIN_RUNS_PER_PARAM = 3         # runs that must exercise a parameter (and runs per fitted parameter) to fit it
PRIOR_WEIGHT = 0.3            # residual weight of (param - prior) / (bound range) per parameter
FRAMEWORK_PARAMS = ("compute_efficiency", "dp_comm_efficiency")
REFERENCE_FRAMEWORK = "megatron"
FRAMEWORK_BOUNDS: dict[str, tuple[float, float]] = {
    # A framework's kernels and collectives reach 0.5-1.1 of Megatron-core's (torchtitan and MaxText
    # publish MFU within that range of Megatron's on the same GPUs); beyond it the fit explains a
    # recording error, not a framework.
    "compute_efficiency": (0.5, 1.1),
    "dp_comm_efficiency": (0.3, 1.1),
}
# The order in which a group with few runs gets its parameters (most evidence per run first).
PARAM_PRIORITY = (
    "gemm_efficiency", "low_precision_gemm_efficiency", "moe_efficiency", "attention_efficiency",
    "scale_up_efficiency", "scale_out_efficiency", "dp_overlap_fraction", "kernel_overhead_s",
    "moe_layer_overhead_s", "tp_overlap_fraction", "ep_overlap_fraction", "fp4_gemm_efficiency",
)
assert sorted(PARAM_PRIORITY) == sorted(FITTABLE)
BOUNDS: dict[str, tuple[float, float]] = {
    **{name: parameter_bounds("__default__", name) for name in FITTABLE}, **FRAMEWORK_BOUNDS}
"""Family-independent bounds (``projection.profile_priors.parameter_bounds`` narrows them per family)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FitRun:
    """A complete, projectable run with a throughput metric."""

    sweep: LoadedSweep
    run: LoadedRun
    specs: RunSpecs
    metric: str
    measured: float
    device_group: str
    framework: str
    source: str            # the sweep file, used for leave-one-source-out


def framework_key(name: str | None) -> str:
    """The framework profile a run uses (Megatron-core based stacks share one)."""
    return framework_record(name or REFERENCE_FRAMEWORK).band_name


def collect_fit_runs(sweeps: Sequence[LoadedSweep]) -> list[FitRun]:
    """Complete runs whose primary metric is a throughput and whose specs build."""
    staged: list[tuple[LoadedSweep, LoadedRun, RunSpecs, float]] = []
    for sweep in sweeps:
        for run in sweep.runs:
            if not run.complete or run.metric is None or run.run is None:
                continue
            try:
                specs = run_specs(sweep, run)
            except ProjtuneError:
                continue
            staged.append((sweep, run, specs, float(getattr(run.run.measured, run.metric))))
    per_group = Counter(silicon_group(specs.hardware.id) for _, _, specs, _ in staged)
    return [
        FitRun(sweep=sweep, run=run, specs=specs, metric=str(run.metric), measured=measured,
               device_group=silicon_group(specs.hardware.id)
               if per_group[silicon_group(specs.hardware.id)] >= MIN_RUNS_PER_ID else specs.hardware.family,
               framework=framework_key(specs.config.framework), source=sweep.file)
        for sweep, run, specs, measured in staged
    ]


def projected_value(item: FitRun, profile: DeviceProfile, framework: FrameworkProfile) -> float | None:
    """The run's projected primary metric under trial profiles (None if the layout is illegal).

    A silicon group's profile is applied as the run's own GPU runs it (``member_profile``).
    """
    if profile.hardware_id != item.specs.hardware.id and profile.hardware_id == item.device_group:
        profile = member_profile(profile, item.specs.hardware.id)
    try:
        result = project(item.specs.model, item.specs.cluster, item.specs.config, hardware=item.specs.hardware,
                         profile=profile, framework=framework)
    except ProjtuneError:
        return None
    return projected_metrics(item.sweep, item.specs, result)[item.metric]


@dataclass(frozen=True, slots=True, kw_only=True)
class FitResult:
    """Fitted profiles and the fit's in-sample error."""

    device_profiles: dict[str, DeviceProfile]
    framework_profiles: dict[str, FrameworkProfile]
    runs: int
    mape_before: float
    mape_after: float


def pristine_profile(group: str) -> DeviceProfile:
    """The starting point of every fit: the family's prior (``projection.profile_priors``), nothing fitted.

    Fits never start from the shipped (already fitted) files, so a fit - and each
    cross-validation fold - sees no trace of the runs it leaves out.
    """
    return prior_profile(group)


def crosses_scale_up_domain(item: FitRun) -> bool:
    """Whether some of a run's collectives (or pipeline sends) leave its NVLink/xGMI domain, so the run's
    time depends on the scale-out (NIC) efficiency: more GPUs than one scale-up domain holds."""
    cluster = item.specs.cluster
    net = network_for(item.specs.hardware, cluster, DeviceProfile(hardware_id=item.specs.hardware.id))
    return cluster.num_gpus > net.scale_up_domain_gpus


def exercises(item: FitRun, name: str) -> bool:
    """Whether a run's step time depends on a fittable parameter (so the run can inform its fit)."""
    config, model = item.specs.config, item.specs.model
    dp = item.specs.cluster.num_gpus // (config.tp * config.pp * config.cp)
    return {
        "low_precision_gemm_efficiency": config.is_low_precision and config.precision != "nvfp4",
        "fp4_gemm_efficiency": config.precision == "nvfp4",
        "moe_efficiency": model.is_moe, "moe_layer_overhead_s": model.is_moe,
        "scale_up_efficiency": item.specs.cluster.num_gpus > 1,
        "scale_out_efficiency": crosses_scale_up_domain(item),
        "dp_overlap_fraction": dp * config.cp > 1 and config.finetune != "lora",
        "tp_overlap_fraction": config.tp > 1,
        "ep_overlap_fraction": model.is_moe and config.ep > 1 and ep_overlapped(item),
    }.get(name, True)


def ep_overlapped(item: FitRun) -> bool:
    """Whether the run hides its MoE token exchange under compute (its ``comm_overlap``, else its framework's
    default): only then does ``ep_overlap_fraction`` change its step time."""
    config = item.specs.config
    return resolve_switches(config, framework_profile(config.framework)).overlapped("ep")


def fitted_parameters(items: Sequence[FitRun]) -> tuple[str, ...]:
    """The parameters a group's runs may fit: each exercised by MIN_RUNS_PER_PARAM runs, one per
    MIN_RUNS_PER_PARAM runs at most, in PARAM_PRIORITY order."""
    budget = len(items) // MIN_RUNS_PER_PARAM
    eligible = [p for p in PARAM_PRIORITY if sum(exercises(i, p) for i in items) >= MIN_RUNS_PER_PARAM]
    return tuple(eligible[:budget])


def fitted_frameworks(items: Sequence[FitRun]) -> tuple[str, ...]:
    """Non-reference frameworks whose multipliers ``items`` can fit: enough runs (``MIN_RUNS_PER_PARAM`` per
    multiplier), some of them on a device group that other frameworks also ran on.

    A framework's multipliers scale the same GEMM, attention and DP-collective times as its GPUs'
    efficiencies, so on a device group that only that framework ran on (MaxText on MI355X here) they are
    not separable from the device's own parameters: the fit would split one factor between the two at
    random (in practice pinning both at opposite bounds).  There the device profile carries it and the
    framework stays at Megatron-core's 1.0.
    """
    per_framework = Counter(i.framework for i in items)
    frameworks_on = {g: {i.framework for i in items if i.device_group == g} for g in {i.device_group for i in items}}
    return tuple(sorted(
        f for f, count in per_framework.items()
        if f != REFERENCE_FRAMEWORK and count >= MIN_RUNS_PER_PARAM * len(FRAMEWORK_PARAMS)
        and any(len(frameworks_on[i.device_group]) > 1 for i in items if i.framework == f)))


def device_fit_runs(items: Sequence[FitRun], group: str, multiplied: Sequence[str]) -> list[FitRun]:
    """The runs that decide how many of device group ``group``'s parameters are fitted.

    Those whose framework multipliers are not being fitted (``multiplied``, from :func:`fitted_frameworks`):
    Megatron-core's, or a framework seen on that device only.  The multipliers then measure a framework
    against Megatron-core on the same silicon, and a device whose runs all come from fitted frameworks keeps
    its prior: fitting both there would trade the device's GEMM efficiency against the frameworks'
    multipliers on the same runs (with Korthikanti et al. held out, A100's only runs were torchtitan's and
    DeepSpeed's, and the fit moved A100's GEMM efficiency to 0.61 against the 0.73-0.75 Megatron-core
    reaches).  Every run still counts in the residuals.
    """
    return [i for i in items if i.device_group == group and i.framework not in multiplied]


def pristine_framework(name: str) -> FrameworkProfile:
    """A framework's documented facts (buckets, loss bytes) with its fitted multipliers reset to 1."""
    return framework_profile(name).model_copy(update={"compute_efficiency": 1.0, "dp_comm_efficiency": 1.0,
                                                      "fitted_on": (), "fit_note": ""})


def _mape(items: Sequence[FitRun], profiles: dict[str, DeviceProfile],
          frameworks: dict[str, FrameworkProfile]) -> float:
    errors = []
    for item in items:
        value = projected_value(item, profiles[item.device_group], frameworks[item.framework])
        if value is not None:
            errors.append(abs(value / item.measured - 1))
    return float(np.mean(errors)) if errors else math.nan


def fit_profiles(items: Sequence[FitRun], *, max_evaluations: int = 40,
                 progress: Callable[[int], None] | None = None,
                 start: dict[str, DeviceProfile] | None = None) -> FitResult:
    """Fit every device group and non-reference framework on ``items`` jointly (``start`` overrides start profiles)."""
    groups = sorted({i.device_group for i in items})
    frameworks = sorted({i.framework for i in items} | {REFERENCE_FRAMEWORK})
    base = {g: physical((start or {}).get(g) or pristine_profile(g)) for g in groups}
    base_fw = {f: pristine_framework(f) for f in frameworks}
    multiplied = fitted_frameworks(items)
    slots: list[tuple[str, str, str]] = [("device", g, p) for g in groups
                                         for p in fitted_parameters(device_fit_runs(items, g, multiplied))]
    slots += [("framework", f, p) for f in multiplied for p in FRAMEWORK_PARAMS]
    if not slots:
        return FitResult(device_profiles=base, framework_profiles={f: base_fw[f] for f in frameworks
                                                                   if f != REFERENCE_FRAMEWORK},
                         runs=len(items), mape_before=_mape(items, base, base_fw),
                         mape_after=_mape(items, base, base_fw))
    x0 = np.array([getattr(base[n] if kind == "device" else base_fw[n], p) for kind, n, p in slots])
    bounds = [parameter_bounds(n, p) if kind == "device" else FRAMEWORK_BOUNDS[p] for kind, n, p in slots]
    lo = np.array([b[0] for b in bounds])
    hi = np.array([b[1] for b in bounds])
    x0 = np.clip(x0, lo, hi)
    calls = [0]

    def unpack(x: np.ndarray) -> tuple[dict[str, DeviceProfile], dict[str, FrameworkProfile]]:
        dev = {g: dict[str, float]() for g in groups}
        fw = {f: dict[str, float]() for f in frameworks}
        for (kind, name, param), value in zip(slots, x, strict=True):
            (dev if kind == "device" else fw)[name][param] = float(value)
        return ({g: physical(base[g].model_copy(update=dev[g])) for g in groups},
                {f: base_fw[f].model_copy(update=fw[f]) for f in frameworks})

    def residuals(x: np.ndarray) -> np.ndarray:
        profiles, fws = unpack(x)
        out = []
        for item in items:
            value = projected_value(item, profiles[item.device_group], fws[item.framework])
            out.append(math.log(value / item.measured) if value else 0.0)
        out += [PRIOR_WEIGHT * (v - v0) / (h - lo_) for v, v0, lo_, h in zip(x, x0, lo, hi, strict=True)]
        calls[0] += 1
        if progress:
            progress(calls[0])
        return np.array(out)

    sparsity = lil_matrix((len(items) + len(slots), len(slots)), dtype=int)
    for row, item in enumerate(items):
        for col, (kind, name, _) in enumerate(slots):
            if (kind == "device" and name == item.device_group) or (kind == "framework" and name == item.framework):
                sparsity[row, col] = 1
    for col in range(len(slots)):
        sparsity[len(items) + col, col] = 1
    before = _mape(items, base, base_fw)
    # scipy's trf 2-D subspace step fails on a single variable: dogbox (box-constrained dogleg) then.
    fit = least_squares(residuals, x0, bounds=(lo, hi), jac_sparsity=sparsity if len(slots) > 1 else None,
                        loss="soft_l1", f_scale=0.15, diff_step=0.03, max_nfev=max_evaluations, x_scale="jac",
                        method="trf" if len(slots) > 1 else "dogbox")
    profiles, fws = unpack(fit.x)
    return FitResult(device_profiles=profiles, framework_profiles={f: fws[f] for f in frameworks
                                                                   if f != REFERENCE_FRAMEWORK},
                     runs=len(items), mape_before=before, mape_after=_mape(items, profiles, fws))
