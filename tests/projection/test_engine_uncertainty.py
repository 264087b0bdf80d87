"""Every projection carries an 80% interval from the shipped band table (cells, widened by novelty)."""

from __future__ import annotations

import pytest

from projection.engine import project
from projection.model_spec import load_model
from projection.summary import projection_dict
from projection.training_config import Cluster, TrainingConfig
from projection.hardware import load_hardware
from projection.uncertainty import ANY, BandTable, band_for, band_table, build_table, job_band, relative_band


def test_shipped_table_loads_and_brackets_one() -> None:
    table = band_table()
    assert isinstance(table, BandTable) and table.default.runs > 0
    for cell in table.cells:
        assert 0 < cell.low <= 1 <= cell.high < 3
        assert cell.runs >= table.min_runs and cell.sources >= table.min_sources


@pytest.mark.parametrize("family", ["hopper", "cdna3", "cdna4", "blackwell", "unknown-family"])
@pytest.mark.parametrize("moe", [False, True])
def test_relative_band_always_answers(family: str, moe: bool) -> None:
    low, high = relative_band(family, "nemo", moe)
    assert 0 < low <= 1 <= high


def test_projection_interval_brackets_the_point() -> None:
    model = load_model("mixtral-8x7b")
    p = project(model, Cluster(gpu="mi300x", num_gpus=64),
                TrainingConfig(tp=1, pp=1, ep=8, mbs=1, gbs=256, seq_len=4096))
    assert p.tokens_per_sec_per_gpu_low <= p.tokens_per_s_per_gpu <= p.tokens_per_sec_per_gpu_high
    assert p.iteration_time_s_low <= p.iteration_time_s <= p.iteration_time_s_high
    band = job_band(model, Cluster(gpu="mi300x", num_gpus=64),
                    TrainingConfig(tp=1, pp=1, ep=8, mbs=1, gbs=256, seq_len=4096), load_hardware("mi300x"))
    low = band.low
    assert (band.low, band.high) != relative_band("cdna3", None, True) or not band.reasons
    assert p.band_reasons == tuple(r.text for r in band.reasons)
    assert p.tokens_per_sec_per_gpu_low == pytest.approx(p.tokens_per_s_per_gpu * low)
    assert p.iteration_time_s_high == pytest.approx(p.iteration_time_s / low)
    data = projection_dict(p)
    for key in ("tokens_per_sec_per_gpu_low", "tokens_per_sec_per_gpu_high", "iteration_time_s_low",
                "iteration_time_s_high"):
        assert data[key] == getattr(p, key)


def test_build_table_takes_percentiles_and_falls_back() -> None:
    residuals = [("hopper", "megatron", False, 0.8 + 0.01 * i) for i in range(21)]  # 0.80 .. 1.00
    residuals += [("cdna3", "megatron", True, 1.1)] * 3                            # too few for own cell
    table = build_table(residuals, min_runs=8)            # no source named: each run is its own source
    low, high = band_for(table, "hopper", "nemo", False)  # nemo is Megatron-core: same cell
    assert 0.81 < low < 0.83                              # ~10th percentile, shrunk a little toward the pool
    assert 1.0 <= high < 1.02                             # the cell's 90th (0.99) is widened to include 1
    cells = {(c.family, c.framework, c.moe): c for c in table.cells}
    assert cells[("hopper", "megatron", False)].runs == 21
    assert ("cdna3", "megatron", True) not in cells            # 3 runs < min_runs: no cell of its own
    assert band_for(table, "cdna3", "megatron", True) == (table.default.low, table.default.high)
    assert (ANY, ANY, None) in cells and cells[(ANY, ANY, None)].runs == 24
    with pytest.raises(ValueError):
        build_table([])
