"""The memory verdict: fits / at risk / out of memory, from a projected peak and a calibrated margin.

The projected peak has an error spread, measured on the development runs
(``evals/memory_calibration.py`` fits it; ``projtune calibrate``-style provenance below):

- ``under``: how far a projection has fallen *below* what was measured (worst case): ``M/P - 1``
  for a measured peak M, ``usable/P - 1`` for a run measured out of memory although projected
  below the usable memory.  A layout is **fits** when even that underestimate leaves it within
  the usable memory: ``peak * (1 + under) <= usable``.
- ``over``: how far above the usable memory a layout may be projected and still have run
  (``1 - usable/P`` over the runs that ran, at the target false-alarm rate).  A layout is **out
  of memory** only when ``peak * (1 - over) > usable``; in between it is **at risk**.

The search screen and the agent call :func:`passes_screen` (one definition of "does it fit"):
not "out of memory" and the headroom the caller demands; with the default headroom every
layout the model calls "fits" passes.  :func:`could_pass` is the same rule applied to a lower
bound of the peak (static memory), so pruning by that bound never drops a layout that would pass.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

Verdict = Literal["fits", "at risk", "out of memory"]
FITS: Verdict = "fits"
AT_RISK: Verdict = "at risk"
OOM: Verdict = "out of memory"

TARGET_FALSE_ALARM = 0.025
"""Share of development runs that ran which the fitted ``over`` margin may still call out of memory."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryMargins:
    """Calibrated margins of the verdict (fractions of the projected peak) and what they were fitted on."""

    under: float
    over: float
    peaks: int = 0          # development runs with a measured peak
    ran: int = 0            # runs that ran (throughput measured, no OOM)
    ooms: int = 0           # runs measured out of memory
    note: str = ""


SHIPPED_MARGINS = MemoryMargins(
    under=0.13, over=0.41, peaks=5, ran=269, ooms=9,
    note=("fitted by `python -m evals.memory_calibration evals/data` on 2026-12-02 (session h25nv). under: set by the "
          "MaxText DeepSeek-V3 dense-path run with EP 32 over DCN at per-device batch 6 that went OOM ('OOM-hang') at "
          "89% of the usable memory; the worst measured-peak underestimate is 1% (torchtitan Llama-3.1-8B, 256k tokens "
          "over CP 8). over: the (1 - 2.5%) quantile of 1 - usable/peak over the 269 runs that ran; the runs above it "
          "are the Megatron-Bridge 26.02.01 GB300 row printed with lost PP/VP cells, the Megatron-Bridge GB200 FSDP "
          "rows of Llama3-70B that rely on CPU activation offloading and the MaxText dense-path per-device batch 16 "
          "row (evals/data/CHECKS.md 17, 18, 20). It was 0.45 while the Megatron-LM README rows were recorded as plain "
          "DDP without sequence parallelism (CHECKS.md 16, resolved by 39), and 0.64 while Narayanan et al.'s "
          "DeepSpeed ZeRO-3 rows were recorded without the recompute SC'21 states (CHECKS.md 15)"),
)


def verdict(peak_bytes: float, usable_bytes: float, margins: MemoryMargins = SHIPPED_MARGINS) -> Verdict:
    """fits / at risk / out of memory of a projected per-GPU peak against the framework's usable memory."""
    if usable_bytes <= 0:
        raise ValueError(f"usable memory must be positive, got {usable_bytes}")
    if _out_of_memory(peak_bytes, usable_bytes, margins):
        return OOM
    if peak_bytes * (1.0 + margins.under) > usable_bytes:
        return AT_RISK
    return FITS


def fits_limit(usable_bytes: float, margins: MemoryMargins = SHIPPED_MARGINS) -> float:
    """Largest projected peak still called "fits", bytes."""
    return usable_bytes / (1.0 + margins.under)


def _out_of_memory(peak_bytes: Any, usable_bytes: Any, margins: MemoryMargins) -> Any:
    """The "out of memory" rule of :func:`verdict`: even the ``over`` margin below the peak exceeds the usable memory
    (floats, or numpy arrays elementwise)."""
    return peak_bytes * (1.0 - margins.over) > usable_bytes


def screen_passes(peak_bytes: Any, usable_bytes: Any, min_headroom: float,
                  margins: MemoryMargins = SHIPPED_MARGINS) -> Any:
    """Whether each layout passes the memory screen of the search and the agent: a bool array over arrays of peaks
    and usable bytes (broadcast together), the one implementation of the screen (:func:`passes_screen` is its
    one-layout call).

    Not "out of memory", and at least ``min_headroom`` of the usable memory free.  The default
    ``min_headroom`` (0.10, ``tools/constraints.py``) is below the headroom every "fits" layout
    has (``1 - 1/(1 + under)``), so with default constraints a layout the model says fits is never
    rejected; a stricter headroom is the user's own constraint.  A NaN peak does not pass.

    Raises:
        ValueError: a usable memory that is not positive (as :func:`verdict`).
    """
    import numpy as np     # here: the verdict's callers that never screen (a CLI `project`) do not load numpy

    peak, usable = np.asarray(peak_bytes, dtype=np.float64), np.asarray(usable_bytes, dtype=np.float64)
    if (usable <= 0).any():
        raise ValueError(f"usable memory must be positive, got {usable[usable <= 0].ravel()[0]}")
    return ~_out_of_memory(peak, usable, margins) & (1.0 - peak / usable >= min_headroom)


def passes_screen(peak_bytes: float, usable_bytes: float, min_headroom: float,
                  margins: MemoryMargins = SHIPPED_MARGINS) -> bool:
    """Whether one layout passes the memory screen of the search and the agent (:func:`screen_passes`)."""
    return bool(screen_passes(peak_bytes, usable_bytes, min_headroom, margins))


def fits_headroom(margins: MemoryMargins = SHIPPED_MARGINS) -> float:
    """The least headroom a "fits" layout has: ``1 - 1/(1 + under)``."""
    return 1.0 - 1.0 / (1.0 + margins.under)


def could_pass(peak_lower_bound_bytes: Any, usable_bytes: Any, min_headroom: float,
               margins: MemoryMargins = SHIPPED_MARGINS) -> Any:
    """Whether any layout whose peak is at least ``peak_lower_bound_bytes`` can pass the screen (a bool array, as
    :func:`screen_passes`)."""
    return screen_passes(peak_lower_bound_bytes, usable_bytes, min_headroom, margins)


@dataclass(frozen=True, slots=True, kw_only=True)
class MemorySample:
    """One development run for the fit: projected peak, usable memory, and what was measured."""

    projected_bytes: float
    usable_bytes: float
    measured_bytes: float | None = None   # measured peak, when the source gives one
    oom: bool | None = None               # True: measured out of memory; False/None with a throughput: ran
    ran: bool = False                     # a throughput was measured (the run completed)


def _round_up(value: float) -> float:
    return math.ceil(max(0.0, value) * 100 - 1e-9) / 100


def fit_margins(samples: Iterable[MemorySample], *, target_false_alarm: float = TARGET_FALSE_ALARM,
                note: str = "") -> MemoryMargins:
    """Fit ``under`` and ``over`` on development runs (see the module docstring).

    ``under`` is the worst underestimate (measured peaks and OOM labels); ``over`` is the smallest margin
    that leaves at most ``target_false_alarm`` of the runs that ran called out of memory.
    """
    items = list(samples)
    peaks = [s for s in items if s.measured_bytes]
    ran = [s for s in items if s.ran and not s.oom]
    ooms = [s for s in items if s.oom]
    # Underestimates: a measured peak above the projection, or a run that went OOM below the usable memory.
    misses = [s.measured_bytes / s.projected_bytes - 1.0 for s in peaks]  # type: ignore[operator]
    misses += [s.usable_bytes / s.projected_bytes - 1.0 for s in ooms]
    under = _round_up(max(misses, default=0.0))
    needed = sorted(1.0 - s.usable_bytes / s.projected_bytes for s in ran)
    allowed = math.floor(target_false_alarm * len(needed))
    over = _round_up(needed[len(needed) - 1 - allowed]) if needed else 0.0
    return MemoryMargins(under=under, over=min(over, 0.99), peaks=len(peaks), ran=len(ran), ooms=len(ooms),
                         note=note)
