"""Search shares one evaluation among FP8 recipes; that is only sound while the engine models them alike."""

from __future__ import annotations

import pytest

from projection.engine import project
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from tools.search_core import ENGINE_ALIKE_PRECISIONS


@pytest.mark.parametrize("model_id", ["llama3-70b", "mixtral-8x7b"])
def test_fp8_recipes_project_identically(model_id: str) -> None:
    model = load_model(model_id)
    cluster = Cluster(gpu="b200", num_gpus=64)
    base = {"tp": 2, "pp": 2, "ep": 8 if model.is_moe else 1, "mbs": 1, "gbs": 256, "seq_len": 4096}
    results = {p: project(model, cluster, TrainingConfig(**base, precision=p)) for p in ENGINE_ALIKE_PRECISIONS}
    times = {p: r.iteration_time_s for p, r in results.items()}
    peaks = {p: r.memory.peak_bytes for p, r in results.items()}
    assert len(set(times.values())) <= 1, times  # empty since FP8 recipes cast different bytes (issue 11)
    assert len(set(peaks.values())) <= 1, peaks
