"""Development-set memory guard: a change that breaks memory projection fails CI.

Limits of issue 10 (measured with ``projtune eval evals/data --json``): runs that ran projected
"out of memory" <= 5%, runs measured OOM projected "out of memory" or "at risk" >= 90%, peak-memory
MAPE <= 10% on the runs with a measured peak.  The shipped margins must be what the fit gives on
this data (refit with ``python -m evals.memory_calibration evals/data`` after a model change).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from evals.memory_calibration import labelled_runs
from projection.memory_verdict import AT_RISK, OOM, SHIPPED_MARGINS, fit_margins

DATA = Path(__file__).resolve().parents[2] / "evals" / "data"


@pytest.fixture(scope="module")
def runs():  # noqa: ANN201
    return labelled_runs([DATA])


def test_memory_guard_limits(runs) -> None:  # noqa: ANN001
    ran = [r for r in runs if r.sample.ran]
    ooms = [r for r in runs if r.sample.oom]
    peaks = [r for r in runs if r.sample.measured_bytes]
    assert len(ran) >= 250 and len(ooms) >= 9 and len(peaks) >= 5
    false_alarms = sum(r.memory.verdict == OOM for r in ran) / len(ran)
    recall = sum(r.memory.verdict in (OOM, AT_RISK) for r in ooms) / len(ooms)
    mape = statistics.fmean(abs(r.sample.projected_bytes / r.sample.measured_bytes - 1) for r in peaks)
    assert false_alarms <= 0.05
    assert recall >= 0.90
    assert mape <= 0.10


def test_shipped_margins_are_the_fit_on_the_development_data(runs) -> None:  # noqa: ANN001
    fitted = fit_margins([r.sample for r in runs])
    assert (fitted.under, fitted.over) == (SHIPPED_MARGINS.under, SHIPPED_MARGINS.over)
    assert (fitted.peaks, fitted.ran, fitted.ooms) == (SHIPPED_MARGINS.peaks, SHIPPED_MARGINS.ran,
                                                       SHIPPED_MARGINS.ooms)
