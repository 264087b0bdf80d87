"""An 80% interval on every projected throughput, from leave-one-source-out residuals.

The shipped table ``projection/catalog/uncertainty/bands.yaml`` holds, per cell
(GPU family, framework, dense or MoE), low and high percentiles of ``measured / projected``
throughput over the development runs when each run's source (sweep file) was held out of
the calibration (``projtune calibrate --cross-validate evals/data --bands-out PATH``).  The
percentile spread is the narrowest of 10-90, 7.5-92.5, 5-95 and 2.5-97.5 whose nested
leave-one-source-out coverage (each source against bands built without it) reaches 78%
(``evals.calibrate``): 5th-95th in the shipped table, 79% coverage.  A projection of
throughput ``T`` then carries the interval ``[T * low, T * high]``; iteration time, being
inverse, ``[t / high, t / low]``.

Lookup falls back from the most specific cell to broader ones: (family, framework, moe),
(family, any, moe), (family, any, any), (any, framework, moe), (any, any, moe), then the
pooled band.  Cells fitted on fewer than the table's ``min_runs`` runs are not written.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from projection.framework import framework_record

ANY = "*"


class Band(BaseModel):
    """One cell's 80% interval as multipliers on projected throughput (dimensionless)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str = ANY
    framework: str = ANY
    moe: bool | None = None
    low: float = Field(gt=0, le=1, description="10th percentile of measured / projected throughput.")
    high: float = Field(ge=1, description="90th percentile of measured / projected throughput.")
    runs: int = Field(ge=0, description="Held-out runs the percentiles were taken over.")


class _DefaultBand(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    low: float = Field(gt=0, le=1)
    high: float = Field(ge=1)
    runs: int = Field(ge=0)


class BandTable(BaseModel):
    """The shipped table of intervals."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str
    min_runs: int = Field(ge=1)
    default: _DefaultBand
    cells: tuple[Band, ...] = ()
    written: str = ""

    @model_validator(mode="after")
    def _unique(self) -> BandTable:
        keys = [(c.family, c.framework, c.moe) for c in self.cells]
        if len(keys) != len(set(keys)):
            raise ValueError("uncertainty table has duplicate cells")
        return self


def _table_path() -> Path:
    return Path(str(resources.files("projection") / "catalog" / "uncertainty" / "bands.yaml"))


@lru_cache(maxsize=1)
def band_table() -> BandTable:
    """The shipped interval table."""
    return BandTable.model_validate(yaml.safe_load(_table_path().read_text()))


def framework_key(framework: str | None) -> str:
    """The framework name a band is keyed by (Megatron-core stacks share ``megatron``)."""
    return framework_record(framework).band_name


@lru_cache(maxsize=256)
def relative_band(family: str, framework: str | None, is_moe: bool) -> tuple[float, float]:
    """(low_factor, high_factor) of the 80% interval on throughput, low <= 1 <= high."""
    return band_for(band_table(), family, framework, is_moe)


def dump_table(table: BandTable, header: str = "") -> str:
    """YAML text of a table (what ``band_table`` reads)."""
    data: dict[str, Any] = table.model_dump(mode="json")
    data["cells"] = [dict(c) for c in data["cells"]]
    return header + yaml.safe_dump(data, sort_keys=False, width=120)


def _percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..1) of a non-empty list."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def build_table(residuals: list[tuple[str, str, bool, float]], *, min_runs: int = 8, method: str = "",
                written: str = "", coverage: float = 0.8) -> BandTable:
    """A band table from held-out residuals ``(family, framework, is_moe, measured / projected)``.

    Every cell (specific and fallback) with at least ``min_runs`` residuals gets the
    ``(1 - coverage) / 2`` and ``(1 + coverage) / 2`` percentiles, widened to include 1.
    """
    q_lo, q_hi = (1 - coverage) / 2, (1 + coverage) / 2
    cells: dict[tuple[str, str, bool | None], list[float]] = {}
    for family, framework, moe, ratio in residuals:
        fw = framework_key(framework)
        for key in ((family, fw, moe), (family, ANY, moe), (family, ANY, None), (ANY, fw, moe), (ANY, fw, None),
                    (ANY, ANY, moe), (ANY, ANY, None)):
            cells.setdefault(key, []).append(ratio)
    every = [r for *_, r in residuals]
    if not every:
        raise ValueError("no residuals to build an uncertainty table from")
    bands = [Band(family=f, framework=w, moe=m, low=min(1.0, _percentile(v, q_lo)),
                  high=max(1.0, _percentile(v, q_hi)), runs=len(v))
             for (f, w, m), v in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1], str(kv[0][2])))
             if len(v) >= min_runs]
    default = _DefaultBand(low=min(1.0, _percentile(every, q_lo)), high=max(1.0, _percentile(every, q_hi)),
                           runs=len(every))
    return BandTable(method=method or "leave-one-source-out residuals (measured / projected throughput), "
                     f"{q_lo:.0%}-{q_hi:.0%} percentiles per cell", min_runs=min_runs, default=default,
                     cells=tuple(bands), written=written)


def band_for(table: BandTable, family: str, framework: str | None, is_moe: bool) -> tuple[float, float]:
    """(low, high) of ``table`` for one run (the lookup :func:`relative_band` does on the shipped table)."""
    fw = framework_key(framework)
    index = {(c.family, c.framework, c.moe): c for c in table.cells}
    for key in ((family, fw, is_moe), (family, ANY, is_moe), (family, ANY, None),
                (ANY, fw, is_moe), (ANY, fw, None), (ANY, ANY, is_moe), (ANY, ANY, None)):
        cell = index.get(key)
        if cell is not None:
            return cell.low, cell.high
    return table.default.low, table.default.high


def write_table(table: BandTable, path: Path) -> Path:
    """Write a band table as YAML (the shipped one is ``projection/catalog/uncertainty/bands.yaml``)."""
    header = ("# 80% intervals of projected throughput, as multipliers on the point projection.\n"
              "# Written by `projtune calibrate --cross-validate evals/data --bands-out <this file>`\n"
              "# (projection/uncertainty.py explains the lookup; do not edit by hand).\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_table(table, header), encoding="utf-8")
    return path


# ---- anchored bands (projection/anchor.py) -------------------------------------------------------------------

ANCHOR_CLASSES = ("same-scale", "scale-out-8x", "scale-out-far")
"""How far a target lies from its anchors in GPU count: at most the largest anchor's, up to 8 times it, beyond."""


def anchor_class(target_gpus: int, anchor_gpus: tuple[int, ...] | list[int]) -> str:
    """The anchored band's cell of a target: its GPU count against the largest anchor's."""
    ratio = target_gpus / max(anchor_gpus) if anchor_gpus else float("inf")
    return ANCHOR_CLASSES[0] if ratio <= 1 else ANCHOR_CLASSES[1] if ratio <= 8 else ANCHOR_CLASSES[2]


class AnchoredBand(BaseModel):
    """One anchor class's 80% interval as multipliers on the anchored throughput (dimensionless)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    anchor_class: str
    low: float = Field(gt=0, le=1, description="Low percentile of measured / anchored throughput.")
    high: float = Field(ge=1, description="High percentile of measured / anchored throughput.")
    runs: int = Field(ge=0, description="Held-out (target, anchor) pairs the percentiles were taken over.")


class AnchoredBandTable(BaseModel):
    """Intervals of anchored projections by anchor class; a class without a cell keeps the unanchored band."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str
    min_runs: int = Field(ge=1)
    cells: tuple[AnchoredBand, ...] = ()
    written: str = ""


def _anchored_table_path() -> Path:
    return Path(str(resources.files("projection") / "catalog" / "uncertainty" / "anchored_bands.yaml"))


@lru_cache(maxsize=1)
def anchored_band_table() -> AnchoredBandTable:
    """The shipped anchored-band table (an empty one when none is shipped)."""
    path = _anchored_table_path()
    if not path.is_file():
        return AnchoredBandTable(method="none shipped: anchored projections keep the unanchored band", min_runs=1)
    return AnchoredBandTable.model_validate(yaml.safe_load(path.read_text()))


def anchored_band(cls: str, unanchored: tuple[float, float], table: AnchoredBandTable | None = None
                  ) -> tuple[float, float]:
    """(low, high) of an anchored projection of anchor class ``cls``: the table's cell, else ``unanchored``.

    A cell is what held-out anchored residuals of that class spread over, so it is narrow where anchoring
    really helps (same scale) and as wide as the evidence says where it does not (far scale-out).
    """
    table = table if table is not None else anchored_band_table()
    cell = next((c for c in table.cells if c.anchor_class == cls), None)
    return (cell.low, cell.high) if cell is not None else unanchored


def build_anchored_table(residuals: list[tuple[str, float]], *, min_runs: int = 8, coverage: float = 0.8,
                         method: str = "", written: str = "") -> AnchoredBandTable:
    """An anchored-band table from held-out residuals ``(anchor class, measured / anchored throughput)``:
    per class with at least ``min_runs`` residuals, the ``(1 - coverage) / 2`` and ``(1 + coverage) / 2``
    percentiles widened to include 1."""
    q_lo, q_hi = (1 - coverage) / 2, (1 + coverage) / 2
    by_class: dict[str, list[float]] = {}
    for cls, ratio in residuals:
        by_class.setdefault(cls, []).append(ratio)
    cells = tuple(AnchoredBand(anchor_class=cls, low=min(1.0, _percentile(v, q_lo)),
                               high=max(1.0, _percentile(v, q_hi)), runs=len(v))
                  for cls, v in sorted(by_class.items()) if len(v) >= min_runs)
    return AnchoredBandTable(method=method or f"anchored residuals (measured / anchored throughput) of "
                             f"`projtune eval --anchor-one`, {q_lo:.1%}-{q_hi:.1%} percentiles per anchor class",
                             min_runs=min_runs, cells=cells, written=written)


def write_anchored_table(table: AnchoredBandTable, path: Path) -> Path:
    """Write an anchored-band table as YAML (the shipped one is ``catalog/uncertainty/anchored_bands.yaml``)."""
    header = ("# 80% intervals of anchored projections (projection/anchor.py), as multipliers on the anchored value.\n"
              "# Written by `projtune eval evals/data --anchor-one --bands-out <this file>` (do not edit by hand).\n")
    data: dict[str, Any] = table.model_dump(mode="json")
    data["cells"] = [dict(c) for c in data["cells"]]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump(data, sort_keys=False, width=120), encoding="utf-8")
    return path
