"""Restoring an analytic "measurement" of the bench layout reproduces the direct analytic projection.

The measurement is built from the engine's own LayerCosts of the reduced layout, so any
difference between ``project_measured`` and ``project`` on the target is an error of the
restoration math (PP, EP, TP and DP each get one case).
"""

from __future__ import annotations

import pytest

from bench.measurement import Measurement
from bench.reduction import reduce_layout
from bench.restore import analytic_measurement, project_measured
from projection.engine import project
from projection.errors import ProjtuneError
from projection.framework_profile import FrameworkProfile
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig

REL = 1e-6

CASES = {
    # axis removed -> (model, target GPUs, local GPUs, config)
    "pp": ("llama3-8b", 16, 1, dict(pp=4, vpp=2, gbs=64, pp_schedule="interleaved")),
    "ep": ("mixtral-8x7b", 16, 2, dict(ep=8, gbs=64)),
    "tp": ("llama3-70b", 8, 2, dict(tp=8, gbs=32, sequence_parallel=True)),
    "dp": ("llama3-8b", 64, 1, dict(gbs=256, zero=1)),
}


def _layout(model: str, gpus: int, config: dict):
    return load_model(model), Cluster(gpu="h100-sxm", num_gpus=gpus), TrainingConfig(**config)


def _assert_same(restored, direct) -> None:
    assert restored.iteration_time_s == pytest.approx(direct.iteration_time_s, rel=REL)
    assert restored.tokens_per_s_per_gpu == pytest.approx(direct.tokens_per_s_per_gpu, rel=REL)
    for name, value in direct.breakdown.as_dict().items():
        assert getattr(restored.breakdown, name) == pytest.approx(value, rel=REL, abs=1e-12), name


@pytest.mark.parametrize("axis", list(CASES))
def test_analytic_measurement_restores_to_the_direct_projection(axis: str) -> None:
    name, gpus, local, config = CASES[axis]
    model, cluster, target = _layout(name, gpus, config)
    reduction = reduce_layout(model, cluster, target, local)
    assert axis in reduction.removed_axes()
    measurement = Measurement.model_validate_json(analytic_measurement(reduction).model_dump_json())
    restored = project_measured(measurement, model, cluster, target)
    _assert_same(restored.projection, project(model, cluster, target))
    assert restored.optimizer_ratio == pytest.approx(1.0, rel=REL)


def test_moe_with_tp_ep_pp_and_dp_removed_together() -> None:
    model, cluster, target = _layout("qwen3-30b-a3b", 64, dict(tp=2, pp=2, ep=8, gbs=256, recompute="full"))
    reduction = reduce_layout(model, cluster, target, 1)
    assert set(reduction.removed_axes()) == {"pp", "ep", "tp", "dp"}
    restored = project_measured(analytic_measurement(reduction), model, cluster, target)
    _assert_same(restored.projection, project(model, cluster, target))


def test_framework_multipliers_restore_exactly_too() -> None:
    model, cluster, target = _layout("mixtral-8x7b", 32, dict(tp=2, ep=8, pp=2, gbs=64))
    framework = FrameworkProfile(name="slow", compute_efficiency=0.8, dp_comm_efficiency=0.9)
    measurement = analytic_measurement(reduce_layout(model, cluster, target, 2), framework=framework)
    restored = project_measured(measurement, model, cluster, target, framework=framework)
    _assert_same(restored.projection, project(model, cluster, target, framework=framework))


def test_one_measurement_restores_to_other_targets_of_the_same_model() -> None:
    model, cluster, target = _layout("mixtral-8x7b", 8, dict(ep=8, gbs=64))
    measurement = analytic_measurement(reduce_layout(model, cluster, target, 1))
    other_cluster, other = Cluster(gpu="h100-sxm", num_gpus=32), TrainingConfig(tp=2, ep=4, pp=2, gbs=128)
    restored = project_measured(measurement, model, other_cluster, other)
    _assert_same(restored.projection, project(model, other_cluster, other))


def test_slower_measured_compute_slows_the_projection() -> None:
    model, cluster, target = _layout("llama3-8b", 16, dict(tp=2, pp=2, gbs=64))
    measurement = analytic_measurement(reduce_layout(model, cluster, target, 1))
    slower = measurement.model_copy(update={"layers": tuple(
        t.model_copy(update={"forward_ms": 2 * t.forward_ms}) for t in measurement.layers)})
    assert (project_measured(slower, model, cluster, target).projection.iteration_time_s
            > project(model, cluster, target).iteration_time_s)


def test_measured_all_to_all_shifts_ep_comm_by_the_difference() -> None:
    model, cluster, target = _layout("mixtral-8x7b", 16, dict(ep=8, gbs=64))
    measurement = analytic_measurement(reduce_layout(model, cluster, target, 2))
    a2a = measurement.ep_all_to_all
    slower = measurement.model_copy(update={"ep_all_to_all": a2a.model_copy(update={"time_ms": a2a.time_ms + 1.0})})
    base = project_measured(measurement, model, cluster, target).layer_costs[0]
    shifted = project_measured(slower, model, cluster, target).layer_costs[0]
    assert shifted.ep_comm_s - base.ep_comm_s == pytest.approx(2e-3)   # dispatch + combine


def test_measurement_of_another_model_is_rejected() -> None:
    model, cluster, target = _layout("llama3-8b", 8, dict(gbs=64))
    measurement = analytic_measurement(reduce_layout(model, cluster, target, 1))
    with pytest.raises(ProjtuneError, match="llama3-8b"):
        project_measured(measurement, load_model("llama3-70b"), cluster, target)


def test_measurement_from_another_gpu_type_is_carried_across_with_a_warning() -> None:
    model, cluster, target = _layout("llama3-8b", 16, dict(tp=2, gbs=64))
    reduction = reduce_layout(model, cluster, target, 1, local_gpu="h200")
    restored = project_measured(analytic_measurement(reduction), model, cluster, target)
    assert any("measured on h200" in w for w in restored.warnings)
    assert restored.projection.tokens_per_s_per_gpu > 0
