"""Peak memory of a layout: every pipeline rank's terms and the verdict against the usable memory.

The terms, their sources and the readable one-rank form (:func:`stage_memory`) are
:mod:`projection.memory_terms`; :func:`project_memory` takes every rank's terms from their array form
(:meth:`projection.memory_batch.MemoryBatcher.stages`, the same path the search's batch screen runs) and
gives the verdict on the heaviest rank.  The names of the terms module are re-exported here, where
callers have always read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from projection.device_profile import DeviceProfile
from projection.hardware import HardwareSpec
from projection.layout import ParallelDims
from projection.memory_batch import batcher_for
from projection.memory_terms import (  # noqa: F401  (re-exported: the memory model's public names)
    AMAX_HISTORY_BYTES,
    BF16_BYTES,
    DCN_STAGING_COPIES,
    DEEPEP_BUFFER_BYTES,
    FP8_COPY_BYTES,
    GIB,
    LORA_RANK,
    STATIC_TERMS,
    StageMemory,
    StageParams,
    activation_context,
    moe_dispatch_buffer_bytes,
    stage_memory,
    stage_params,
    usable_capacity_bytes,
)
from projection.memory_verdict import SHIPPED_MARGINS, MemoryMargins, Verdict, verdict
from projection.model_spec import ModelSpec
from projection.training_config import TrainingConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryResult:
    """Memory of every pipeline rank and the verdict against the framework's usable memory."""

    stages: tuple[StageMemory, ...]
    capacity_bytes: float                     # memory the framework's allocator can use (HBM x usable share)
    verdict: Verdict
    hbm_bytes: float = 0.0                    # the GPU's HBM
    margins: MemoryMargins = field(default=SHIPPED_MARGINS)

    @property
    def peak(self) -> StageMemory:
        """The heaviest pipeline rank (the first of equals)."""
        return max(self.stages, key=lambda s: s.total_bytes)

    @property
    def peak_bytes(self) -> float:
        """Largest per-GPU total over every pipeline rank."""
        return max(s.total_bytes for s in self.stages)

    @property
    def static_peak_bytes(self) -> float:
        """Largest recompute-invariant memory over ranks (a lower bound of the peak of any variant)."""
        return max(s.static_bytes for s in self.stages)

    @property
    def headroom_fraction(self) -> float:
        """1 - peak / usable capacity (negative when projected above it)."""
        return 1.0 - self.peak_bytes / self.capacity_bytes


def memory_verdict(peak_bytes: float, capacity_bytes: float, margins: MemoryMargins = SHIPPED_MARGINS) -> Verdict:
    """fits / at risk / out of memory (see :mod:`projection.memory_verdict`)."""
    return verdict(peak_bytes, capacity_bytes, margins)


def project_memory(model: ModelSpec, hardware: HardwareSpec, config: TrainingConfig, dims: ParallelDims,
                   profile: DeviceProfile, margins: MemoryMargins = SHIPPED_MARGINS) -> MemoryResult:
    """Memory of every pipeline rank (all ``pp`` of them); the verdict uses the heaviest.

    The ranks' terms come from :meth:`projection.memory_batch.MemoryBatcher.stages`, the array form the search's
    batch screen runs too; :func:`stage_memory` is the readable one-rank reference it equals field by field
    (tests/projection/test_memory_every_rank.py; the terms: :mod:`projection.memory_terms`).
    """
    stages = batcher_for(model, hardware, profile).stages(config, dims)
    usable = usable_capacity_bytes(hardware, config)
    peak = max(s.total_bytes for s in stages)
    return MemoryResult(stages=stages, capacity_bytes=usable, verdict=verdict(peak, usable, margins),
                        hbm_bytes=hardware.hbm_capacity_bytes, margins=margins)
