"""Project one measured run: sweep-format run -> specs -> projection -> the run's metrics.

Each measured metric is compared with the projection's value of the same quantity:
iteration time and tokens/s/GPU directly; model TFLOP/s/GPU and MFU with the source's
own FLOP formula (Narayanan et al. SC'21 Eq. 3 where the sweep notes cite it, which counts
the recompute forward pass; Megatron-LM's formula otherwise); peak memory in GiB; OOM as
the "out of memory" verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evals.sweep_file import LoadedRun, LoadedSweep
from projection.device_profile import DeviceProfile, default_profile
from projection.engine import Projection, project
from projection.errors import ProjtuneError
from projection.flops import model_flops_per_step
from projection.hardware import HardwareSpec
from projection.job import resolve_job
from projection.memory import GIB
from projection.model_spec import ModelSpec
from projection.training_config import Cluster, TrainingConfig

THROUGHPUT_METRICS = ("iteration_time_s", "tokens_per_sec_per_gpu", "model_tflops_per_gpu", "mfu")


def sc21_flops_per_step(model: ModelSpec, seq_len: int, global_batch: int) -> float:
    """Narayanan et al. SC'21 Eq. 3: ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))`` (counts recompute)."""
    h, layers = model.hidden_size, model.num_layers
    return 96.0 * global_batch * seq_len * layers * h * h * (
        1 + seq_len / (6 * h) + model.vocab_size / (16 * layers * h))


def source_flops_per_step(sweep: LoadedSweep, model: ModelSpec, config: TrainingConfig) -> float:
    """FLOPs per step by the formula the sweep's source used for its TFLOP/s and MFU."""
    notes = (sweep.sweep.notes or "") + (sweep.source or "")
    if "96*B*s*l*h^2" in notes or "SC21 FLOP" in notes or "narayanan" in sweep.name:
        return sc21_flops_per_step(model, config.seq_len, config.gbs)
    return model_flops_per_step(model, config.seq_len, config.gbs, "megatron")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSpecs:
    """Specs of one run, ready to project."""

    model: ModelSpec
    hardware: HardwareSpec
    cluster: Cluster
    config: TrainingConfig


def run_specs(sweep: LoadedSweep, run: LoadedRun, *, fill: dict[str, Any] | None = None) -> RunSpecs:
    """Build the specs of a run (fill supplies values for missing keys).

    Raises:
        ProjtuneError: unknown model/GPU, a bad model field, or a config the engine cannot take.
    """
    spec = sweep.sweep.cluster
    job = resolve_job(sweep.sweep.model, spec.gpu, spec.num_gpus, gpus_per_node=spec.gpus_per_node,
                      nic_gbps=spec.nic_gbps, nics_per_node=spec.nics_per_node)
    values = {**(fill or {}), **run.config}
    try:
        config = TrainingConfig(**values)
    except ValueError as err:
        raise ProjtuneError(f"config not projectable: {err}") from err
    return RunSpecs(model=job.model, hardware=job.hardware, cluster=job.cluster, config=config)


def projected_metrics(sweep: LoadedSweep, specs: RunSpecs, projection: Projection) -> dict[str, float]:
    """The projection expressed in every throughput metric of the sweep format, plus memory."""
    flops = source_flops_per_step(sweep, specs.model, specs.config)
    tflops = flops / projection.iteration_time_s / specs.cluster.num_gpus / 1e12
    peak16 = specs.hardware.peak_flops_for("bf16")
    return {
        "iteration_time_s": projection.iteration_time_s,
        "tokens_per_sec_per_gpu": projection.tokens_per_s_per_gpu,
        "model_tflops_per_gpu": tflops,
        "mfu": tflops * 1e12 / peak16,
        "peak_memory_gib": projection.memory.peak_bytes / GIB,
    }


def project_run(sweep: LoadedSweep, run: LoadedRun, *, profile: DeviceProfile | None = None,
                fill: dict[str, Any] | None = None, measurements: Any = None
                ) -> tuple[RunSpecs, Projection, dict[str, float]]:
    """Project a run and return its specs, the projection and the projected metrics.

    ``measurements`` (a :class:`bench.measured_set.MeasurementSet`): measured mode from the run's
    model-and-slice measurement; a run without one raises (``projtune eval --measured`` skips it).
    """
    specs = run_specs(sweep, run, fill=fill)
    profile = profile or default_profile(specs.hardware)
    if measurements is not None:
        from bench.restore import project_measured

        found = measurements.find(specs.model, specs.config)
        if found is None:
            raise ProjtuneError(measurements.missing_reason(specs.model, specs.config))
        result = project_measured(found[1], specs.model, specs.cluster, specs.config, hardware=specs.hardware,
                                  profile=profile).projection
    else:
        result = project(specs.model, specs.cluster, specs.config, hardware=specs.hardware, profile=profile)
    return specs, result, projected_metrics(sweep, specs, result)
