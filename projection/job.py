"""One job resolution: names and paths in, the specs a projection needs out.

A *job* is one model trained on one cluster: the model spec, the GPU's catalog entry, the
cluster (GPU count, node size, network overrides), optionally the layout (a TrainingConfig),
the device profile (achievable-peak factors of that GPU) and the framework profile (the
software stack's multipliers).  Every front end (CLI, tools, search, agent, evals, bench)
turns what the user named into these through the functions here, so a catalog id, an alias,
a config.json path and a profile file are read the same way everywhere and fail with the
same one-line error:

- :func:`resolve_job`: from names (model id/alias, config.json path or fields; GPU id/alias;
  GPU count; optional profile file and framework name).
- :func:`job_on`: from an already built :class:`~projection.training_config.Cluster` (the
  engine-style entry: any spec not given takes the engine's default).
- :func:`resolve_device`, :func:`profile_for`, :func:`hardware_of`: the smaller pieces (one GPU
  and its profile; the profile of a GPU; the catalog entry of a cluster's GPU).

Units: ``num_gpus``, ``gpus_per_node`` and ``nvlink_domain`` are GPU counts, ``nic_gbps`` is the
line rate of one NIC in Gbit/s, ``nics_per_node`` a NIC count (the units of ``Cluster``); the specs carry their
own units (``HardwareSpec``: bytes, FLOP/s, bytes/s; ``DeviceProfile``: fractions and seconds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from projection.device_profile import DeviceProfile, default_profile, load_profile
from projection.framework import FrameworkRecord, framework_record
from projection.framework_profile import FrameworkProfile
from projection.hardware import HardwareSpec, load_hardware
from projection.model_spec import ModelSpec, load_model
from projection.training_config import Cluster, TrainingConfig
from projection.vocabulary import FRAMEWORKS

ModelRef = str | Path | Mapping[str, Any] | ModelSpec
"""What names a model: a catalog id or alias, a config.json path, its fields, or a ModelSpec."""

DEFAULT_GPUS_PER_NODE: int = Cluster.model_fields["gpus_per_node"].default
"""GPUs per node when none is given (the Cluster default: an 8-GPU HGX/OAM server)."""

FRAMEWORK_NAMES: tuple[str, ...] = FRAMEWORKS
"""Framework names a framework profile is resolved from (the sweep format's ``framework`` key,
:mod:`projection.vocabulary`); launch frameworks (exporters) are a tools-layer filter, not profiles."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """One resolved job: what the engine projects a layout of.

    ``cluster.gpu`` is the hardware id as the cluster was given (:func:`resolve_job` writes the
    catalog id).  ``config`` is None for a job whose layouts are still to be chosen (a search).
    ``framework`` is the framework profile of the job (the megatron profile when no framework is
    named, as the engine takes for a config that names none).
    """

    model: ModelSpec
    hardware: HardwareSpec
    cluster: Cluster
    profile: DeviceProfile
    framework: FrameworkProfile
    config: TrainingConfig | None = None

    @property
    def record(self) -> FrameworkRecord:
        """The record of the job's framework (traits, launch name), the one its profile is named after."""
        return framework_record(self.framework.name)

    @property
    def num_gpus(self) -> int:
        """GPUs in the job."""
        return self.cluster.num_gpus

    def resized(self, num_gpus: int) -> Job:
        """The same job on another number of GPUs (same node size, specs and profiles)."""
        return replace(self, cluster=self.cluster.model_copy(update={"num_gpus": num_gpus}))


def hardware_of(cluster: Cluster, hardware: HardwareSpec | None = None) -> HardwareSpec:
    """The catalog entry of the cluster's GPU, unless ``hardware`` is given (the engine's default).

    Raises:
        UnknownNameError: ``cluster.gpu`` is no catalog id or alias; the message names the nearest.
    """
    return hardware if hardware is not None else load_hardware(cluster.gpu)


def profile_for(hardware: HardwareSpec, profile_path: str | Path | None = None) -> DeviceProfile:
    """The device profile file when a path is given, else the GPU's shipped profile.

    Raises:
        ProjtuneError: the file does not exist or is not a valid device profile.
    """
    return load_profile(profile_path) if profile_path else default_profile(hardware)


def resolve_device(gpu: str, profile_path: str | Path | None = None) -> tuple[HardwareSpec, DeviceProfile]:
    """One GPU type and its device profile (the file when given, else the shipped one).

    Raises:
        UnknownNameError: ``gpu`` is no catalog id or alias.
        ProjtuneError: the profile file does not exist or is not valid.
    """
    hardware = load_hardware(gpu)
    return hardware, profile_for(hardware, profile_path)


def _framework(name: str | None, config: TrainingConfig | None) -> FrameworkProfile:
    """The framework profile of a name (checked: :func:`projection.framework.framework_record`) or, with none, of
    the config's framework (megatron when it names none)."""
    return framework_record(name if name is not None else config.framework if config is not None else None).profile


def resolve_job(model: ModelRef, gpu: str, num_gpus: int, *, gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
                nic_gbps: float | None = None, nics_per_node: int | None = None, nvlink_domain: int | None = None,
                config: TrainingConfig | None = None, profile_path: str | Path | None = None,
                framework: str | None = None, host_op_s: float | None = None) -> Job:
    """Resolve a job from names: the model, the GPU, the cluster, the profiles.

    Args:
        model: Catalog model id or alias, a Hugging Face config.json path, its fields, or a ModelSpec.
        gpu: Hardware catalog id or alias (case and separators folded: 'H100 SXM' = 'h100-sxm').
        num_gpus: GPUs in the job.
        gpus_per_node: GPUs per node (server).
        nic_gbps: Line rate of one NIC, Gbit/s (None: the catalog's).
        nics_per_node: NICs per node (None: the catalog's).
        nvlink_domain: GPUs in one scale-up (NVLink/xGMI) domain, e.g. 72 for GB200 NVL72 (None: the catalog's).
        config: The layout, when the job has one.
        profile_path: A device profile file (``projtune calibrate`` / ``bench device``); None: the shipped one.
        framework: A sweep-format framework name for the framework profile; None: the config's, else megatron.
        host_op_s: Measured host time per dispatched op, seconds (``projtune bench host``); None: the framework's.

    The cluster names the GPU by its catalog id.  Resolution order (the first bad input is the
    error): model, GPU, cluster, framework, device profile.

    Raises:
        UnknownNameError: an unknown model, GPU or framework name; the message names the nearest valid ones.
        ModelSpecError: a model config that cannot be normalised (missing or bad field).
        pydantic.ValidationError: a cluster value out of range (e.g. num_gpus above 131,072).
        ProjtuneError: the profile file does not exist or is not a valid device profile.
    """
    spec = load_model(model)
    hardware = load_hardware(gpu)
    cluster = Cluster(gpu=hardware.id, num_gpus=num_gpus, gpus_per_node=gpus_per_node, nic_gbps=nic_gbps,
                      nics_per_node=nics_per_node, nvlink_domain=nvlink_domain, host_op_s=host_op_s)
    profiles = _framework(framework, config)
    return Job(model=spec, hardware=hardware, cluster=cluster, profile=profile_for(hardware, profile_path),
               framework=profiles, config=config)


def job_on(model: ModelRef, cluster: Cluster, config: TrainingConfig | None = None, *,
           hardware: HardwareSpec | None = None, profile: DeviceProfile | None = None,
           profile_path: str | Path | None = None, framework: FrameworkProfile | str | None = None) -> Job:
    """A job on a cluster already built: every spec not given takes the engine's default.

    ``hardware``: the cluster GPU's catalog entry; ``profile``: the given profile, else the file at
    ``profile_path``, else the shipped one; ``framework``: a profile or a framework name, else the
    config's framework profile (megatron when it names none).  The cluster is kept as given.

    Raises:
        UnknownNameError: ``cluster.gpu``, the model or the framework name is unknown.
        ProjtuneError: the profile file does not exist or is not valid.
    """
    spec = load_model(model)
    hardware = hardware_of(cluster, hardware)
    frameworks = framework if isinstance(framework, FrameworkProfile) else _framework(framework, config)
    return Job(model=spec, hardware=hardware, cluster=cluster,
               profile=profile if profile is not None else profile_for(hardware, profile_path),
               framework=frameworks, config=config)
