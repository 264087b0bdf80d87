"""Scale-up (NVLink/xGMI) and scale-out (NIC) efficiencies are separate profile parameters."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from projection.device_profile import DeviceProfile, dump_profile, load_profile
from projection.engine import network_for
from projection.hardware import load_hardware
from projection.training_config import Cluster


def test_a_legacy_comm_efficiency_sets_both_fabrics(tmp_path: Path) -> None:
    data = yaml.safe_load(dump_profile(DeviceProfile(hardware_id="h100-sxm")))
    del data["scale_up_efficiency"], data["scale_out_efficiency"]
    data["comm_efficiency"] = 0.66
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(data))
    profile = load_profile(path)
    assert (profile.scale_up_efficiency, profile.scale_out_efficiency) == (0.66, 0.66)
    # a file naming one fabric keeps it; the legacy key fills the other
    mixed = DeviceProfile(hardware_id="x", comm_efficiency=0.5, scale_out_efficiency=0.7)
    assert (mixed.scale_up_efficiency, mixed.scale_out_efficiency) == (0.5, 0.7)


def test_each_efficiency_drives_its_own_fabric() -> None:
    hardware = load_hardware("h100-sxm")
    cluster = Cluster(gpu="h100-sxm", num_gpus=16)
    net = network_for(hardware, cluster, DeviceProfile(hardware_id="h100-sxm", scale_up_efficiency=0.4,
                                                       scale_out_efficiency=0.8))
    assert net.scale_up_efficiency == pytest.approx(0.4)
    assert net.scale_out_efficiency == pytest.approx(0.8)


def test_scale_out_is_fitted_only_on_runs_that_leave_the_domain() -> None:
    from evals.fit import crosses_scale_up_domain

    class _Specs:
        def __init__(self, gpus: int) -> None:
            self.hardware = load_hardware("h100-sxm")
            self.cluster = Cluster(gpu="h100-sxm", num_gpus=gpus)

    class _Item:
        def __init__(self, gpus: int) -> None:
            self.specs = _Specs(gpus)

    assert not crosses_scale_up_domain(_Item(8))      # one 8-GPU NVLink node
    assert crosses_scale_up_domain(_Item(16))
