"""What the memory tests price on: one H100, a device profile with a fixed 3 GiB overhead and 8 % fragmentation
(test values, so a refit of the shipped profiles never moves these tests), and Mixtral-8x7B."""

from __future__ import annotations

from projection.device_profile import DeviceProfile
from projection.hardware import load_hardware
from projection.model_spec import load_model

H100 = load_hardware("h100-sxm")
PROFILE = DeviceProfile(hardware_id="h100-sxm", memory_overhead_gib=3.0, memory_fragmentation=0.08)
MIXTRAL = load_model("mixtral-8x7b")
