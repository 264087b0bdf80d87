"""The memory verdict, its calibrated margins, and the one screen the search and the agent share."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from projection.memory_verdict import (
    AT_RISK,
    FITS,
    OOM,
    SHIPPED_MARGINS,
    MemoryMargins,
    MemorySample,
    could_pass,
    fit_margins,
    fits_headroom,
    fits_limit,
    passes_screen,
    screen_passes,
    verdict,
)

M = MemoryMargins(under=0.10, over=0.25)


def test_verdict_bands() -> None:
    usable = 100.0
    assert verdict(90.0, usable, M) == FITS            # 90 * 1.10 = 99 <= 100
    assert verdict(91.0, usable, M) == AT_RISK         # 91 * 1.10 > 100
    assert verdict(133.0, usable, M) == AT_RISK        # 133 * 0.75 = 99.75 <= 100
    assert verdict(134.0, usable, M) == OOM            # 134 * 0.75 > 100
    assert fits_limit(usable, M) == pytest.approx(100 / 1.1)


def test_verdict_rejects_a_non_positive_capacity() -> None:
    with pytest.raises(ValueError, match="usable memory must be positive"):
        verdict(1.0, 0.0)
    with pytest.raises(ValueError, match="usable memory must be positive"):
        screen_passes([1.0, 2.0], [3.0, 0.0], 0.1)


def test_the_screen_over_arrays_is_the_verdict_and_the_headroom_of_each_layout() -> None:
    import numpy as np

    usable = 100.0
    peaks = np.array([50.0, 89.0, 91.0, 133.0, 134.0, float("nan")])
    verdicts = [verdict(p, usable, M) for p in peaks[:-1].tolist()]
    assert verdicts == [FITS, FITS, AT_RISK, AT_RISK, OOM]
    assert screen_passes(peaks, usable, 0.0, M).tolist() == [True, True, True, False, False, False]
    assert screen_passes(peaks, usable, 0.10, M).tolist() == [True, True, False, False, False, False]
    assert [passes_screen(p, usable, 0.10, M) for p in peaks.tolist()] == [True, True, False, False, False, False]


@given(peak=st.floats(0, 1e3), usable=st.floats(1, 1e3), headroom=st.floats(0, 0.99))
def test_a_layout_that_fits_passes_the_default_screen(peak: float, usable: float, headroom: float) -> None:
    from tools.constraints import Constraints

    default = Constraints().min_headroom
    assert default <= fits_headroom()
    if verdict(peak, usable) == FITS:
        assert passes_screen(peak, usable, default)
    if verdict(peak, usable) == OOM:
        assert not passes_screen(peak, usable, headroom)


@given(low=st.floats(0, 1e3), extra=st.floats(0, 1e3), usable=st.floats(1, 1e3), headroom=st.floats(0, 0.99))
def test_pruning_on_a_lower_bound_never_drops_a_layout_that_passes(low: float, extra: float, usable: float,
                                                                   headroom: float) -> None:
    # the screen is monotone in the peak: if the peak passes, any lower bound of it could pass
    if passes_screen(low + extra, usable, headroom):
        assert could_pass(low, usable, headroom)


def test_fit_takes_the_worst_underestimate_and_the_false_alarm_quantile() -> None:
    samples = [MemorySample(projected_bytes=90, usable_bytes=100, measured_bytes=99, ran=True),   # +10% under
               MemorySample(projected_bytes=79, usable_bytes=100, oom=True),                       # OOM at 79%
               *[MemorySample(projected_bytes=100 + i, usable_bytes=100, ran=True) for i in range(40)],
               MemorySample(projected_bytes=400, usable_bytes=100, ran=True)]                      # one outlier
    margins = fit_margins(samples, target_false_alarm=0.025)
    assert margins.under == pytest.approx(0.27)           # 100/79 - 1 = 0.266 -> 0.27
    assert margins.over == pytest.approx(0.29)            # 1 - 100/139 = 0.281 -> 0.29 (outlier allowed)
    assert (margins.peaks, margins.ran, margins.ooms) == (1, 42, 1)
    ran = [s for s in samples if s.ran]
    assert sum(verdict(s.projected_bytes, s.usable_bytes, margins) == OOM for s in ran) <= 0.025 * len(ran)
    assert all(verdict(s.projected_bytes, s.usable_bytes, margins) != FITS for s in samples if s.oom)


def test_shipped_margins_say_what_they_were_fitted_on() -> None:
    assert 0 <= SHIPPED_MARGINS.under < 0.5 and 0 <= SHIPPED_MARGINS.over < 1
    assert SHIPPED_MARGINS.peaks >= 5 and SHIPPED_MARGINS.ooms >= 9 and "evals/data" in SHIPPED_MARGINS.note
