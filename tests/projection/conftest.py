"""Shared builders of the projection tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from projection import framework
from projection.collectives import network_params_from_hardware, place_group
from projection.compute import DeviceRates
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.model_spec import ModelSpec
from projection.training_config import Cluster, TrainingConfig
from projection.workload import CommGroups, layer_cost


@pytest.fixture
def b200_moe_layer() -> Callable[..., Any]:
    """``make(model, framework, ep, rates, mbs=, gbs=)``: layer 0's cost on 64 B200 (8 per node) with EP ``ep``
    inside the NVLink domain, TP = CP = 1, the distributed optimizer, bf16, seq 4096."""
    b200 = load_hardware("b200")
    net = network_params_from_hardware(b200)

    def make(model: ModelSpec, framework: str, ep: int, rates: DeviceRates, *, mbs: int, gbs: int) -> Any:
        config = TrainingConfig(framework=framework, mbs=mbs, gbs=gbs, seq_len=4096, ep=ep, zero=1)
        dims = parallel_dims(config, Cluster(gpu="b200", num_gpus=64))
        groups = CommGroups(tp=place_group(1, 1, net), cp=place_group(1, 1, net), ep=place_group(ep, 1, net))
        return layer_cost(model, 0, config, dims, rates, net, groups)

    return make


@pytest.fixture
def without_te_grouped_mlp(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """``apply()``: from then on Megatron-core runs its experts as one grouped kernel (its record's
    ``te_grouped_mlp`` off), so a test can price the same layer with and without TEGroupedMLP's per-expert GEMMs."""

    def apply() -> None:
        record = framework.RECORDS["megatron"]
        monkeypatch.setitem(framework.RECORDS, "megatron",
                            replace(record, workload=replace(record.workload, te_grouped_mlp=False)))

    return apply
