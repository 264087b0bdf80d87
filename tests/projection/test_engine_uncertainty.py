"""Every projection carries an 80% interval from the shipped leave-one-source-out band table."""

from __future__ import annotations

import pytest

from projection.engine import project
from projection.model_spec import load_model
from projection.summary import projection_dict
from projection.training_config import Cluster, TrainingConfig
from projection.uncertainty import ANY, BandTable, band_for, band_table, build_table, relative_band


def test_shipped_table_loads_and_brackets_one() -> None:
    table = band_table()
    assert isinstance(table, BandTable) and table.default.runs > 0
    for cell in table.cells:
        assert 0 < cell.low <= 1 <= cell.high < 3
        assert cell.runs >= table.min_runs


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
    low, high = relative_band("cdna3", None, True)
    assert p.tokens_per_sec_per_gpu_low == pytest.approx(p.tokens_per_s_per_gpu * low)
    assert p.iteration_time_s_high == pytest.approx(p.iteration_time_s / low)
    data = projection_dict(p)
    for key in ("tokens_per_sec_per_gpu_low", "tokens_per_sec_per_gpu_high", "iteration_time_s_low",
                "iteration_time_s_high"):
        assert data[key] == getattr(p, key)


def test_build_table_takes_percentiles_and_falls_back() -> None:
    residuals = [("hopper", "megatron", False, 0.8 + 0.01 * i) for i in range(21)]  # 0.80 .. 1.00
    residuals += [("cdna3", "megatron", True, 1.1)] * 3                            # too few for own cell
    table = build_table(residuals, min_runs=8)
    low, high = band_for(table, "hopper", "nemo", False)  # nemo is Megatron-core: same cell
    assert low == pytest.approx(0.82) and high == 1.0     # 10th percentile; widened to include 1
    cells = {(c.family, c.framework, c.moe): c for c in table.cells}
    assert cells[("hopper", "megatron", False)].runs == 21
    assert ("cdna3", "megatron", True) not in cells            # 3 runs < min_runs: no cell of its own
    assert band_for(table, "cdna3", "megatron", True) == (table.default.low, table.default.high)
    assert (ANY, ANY, None) in cells and cells[(ANY, ANY, None)].runs == 24
    with pytest.raises(ValueError):
        build_table([])
