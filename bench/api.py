"""Entry point the `run_benchmark` tool calls: measure a layout on the local GPU and restore it to the target."""

from __future__ import annotations

from typing import Any

import torch

from bench.restore import project_measured
from bench.runner import BenchOptions, run_measurement
from projection.hardware import HardwareSpec
from projection.model_spec import ModelSpec
from projection.summary import projection_dict
from projection.training_config import Cluster, TrainingConfig


def run_layer_benchmark(*, model: ModelSpec, hardware: HardwareSpec, cluster: Cluster,
                        config: TrainingConfig) -> dict[str, Any]:
    """Benchmark the reduced layout on the local GPUs; return the measurement and the restored projection."""
    local_gpus = max(1, min(torch.cuda.device_count(), cluster.gpus_per_node))
    measurement = run_measurement(model, cluster, config, local_gpus=local_gpus, options=BenchOptions())
    restored = project_measured(measurement, model, cluster, config, hardware=hardware)
    return {"measurement": measurement.model_dump(mode="json"),
            "projection": projection_dict(restored.projection),
            "warnings": list(restored.warnings)}
