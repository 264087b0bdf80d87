"""An 80% interval on every projected throughput: a band from held-out residuals, widened by distance from the evidence.

The shipped table ``projection/catalog/uncertainty/bands.yaml`` (written, with the evidence summary
``evidence.yaml`` beside it, by ``projtune calibrate --cross-validate evals/data --bands-out PATH``) holds:

- **cells** (GPU family, framework, dense or MoE): the low and high percentiles of ``measured / projected``
  throughput over development runs held out of the calibration (leave-one-source-out) while *inside the
  evidence* of their fold (:func:`projection.evidence.novelty` found nothing).  Evidence is counted in
  distinct sources, not runs: each source weighs one in a cell's percentiles whatever its run count, a cell
  needs ``min_sources`` sources, and each side of a cell (in log units) shrinks toward the pooled band with
  the weight of ``shrink_sources`` sources, so a thin cell is never narrower than its evidence supports nor
  one-sided from one source.
- **novelty widenings**, one per :data:`projection.evidence.REASON_KEYS`: a spread ``extra`` (natural-log
  units) set by grouped cross-validation so that the runs flagged with that reason when held out (by source,
  source family, framework and GPU family) fall inside their widened band at the table's coverage.

A job's band: its cell's ``(low, high)``; for each distinct novelty reason, each side widens in quadrature,
``ln(high') = sqrt(ln(high)^2 + sum extra^2)`` (likewise ``ln(1 / low)``).  A job inside the evidence keeps
its cell's band.  A projected throughput ``T`` then carries ``[T * low, T * high]``; an iteration time ``t``,
``[t / high, t / low]``.  Lookup falls back from the most specific cell: (family, framework, moe),
(family, any, moe), (family, any, any), (any, framework, moe), (any, framework, any), (any, any, moe), pooled.

Another residual source (an anchored projection's own residuals) plugs in through :func:`build_table` and
:func:`widen`, which take plain residuals and reason keys.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from projection.evidence import Novelty, framework_key, job_features, novelty, shipped_evidence
from projection.hardware import HardwareSpec
from projection.safe_yaml import load_catalog
from projection.model_spec import ModelSpec
from projection.training_config import Cluster, TrainingConfig

ANY = "*"
SHRINK_SOURCES = 2.0
"""Weight, in sources, of the pooled band in each cell's sides (a 2-source cell is half pooled)."""

__all__ = ["ANY", "Band", "BandTable", "JobBand", "Residual", "Widening", "band_for", "band_table", "build_table",
           "dump_table", "framework_key", "job_band", "relative_band", "widen", "widen_by", "write_table"]


class Band(BaseModel):
    """One cell's 80% interval as multipliers on projected throughput (dimensionless)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str = ANY
    framework: str = ANY
    moe: bool | None = None
    low: float = Field(gt=0, le=1, description="Low percentile of measured / projected throughput.")
    high: float = Field(ge=1, description="High percentile of measured / projected throughput.")
    runs: int = Field(ge=0, description="Held-out runs the percentiles were taken over.")
    sources: int = Field(default=0, ge=0, description="Distinct sources of those runs (each weighs one).")


class _DefaultBand(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    low: float = Field(gt=0, le=1)
    high: float = Field(ge=1)
    runs: int = Field(ge=0)
    sources: int = Field(default=0, ge=0)


class Widening(BaseModel):
    """How much one novelty reason widens a band: ``extra`` (ln units) added in quadrature to each side."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    extra: float = Field(ge=0, description="Spread added in quadrature to ln(high) and ln(1/low).")
    runs: int = Field(ge=0, description="Held-out runs flagged with this reason in grouped cross-validation.")
    sources: int = Field(ge=0, description="Distinct sources of those runs.")


class BandTable(BaseModel):
    """The shipped table of intervals and novelty widenings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str
    min_runs: int = Field(ge=1)
    min_sources: int = Field(default=1, ge=1)
    default: _DefaultBand
    cells: tuple[Band, ...] = ()
    novelty: tuple[Widening, ...] = ()
    written: str = ""

    @model_validator(mode="after")
    def _unique(self) -> BandTable:
        keys = [(c.family, c.framework, c.moe) for c in self.cells]
        if len(keys) != len(set(keys)):
            raise ValueError("uncertainty table has duplicate cells")
        if len({w.key for w in self.novelty}) != len(self.novelty):
            raise ValueError("uncertainty table has duplicate novelty widenings")
        return self


class Residual(NamedTuple):
    """One held-out run: its cell and ``measured / projected`` throughput; ``source`` "" counts as its own source."""

    family: str
    framework: str
    moe: bool
    ratio: float
    source: str = ""


def _table_path() -> Path:
    return Path(str(resources.files("projection") / "catalog" / "uncertainty" / "bands.yaml"))


@lru_cache(maxsize=1)
def band_table() -> BandTable:
    """The shipped interval table."""
    return BandTable.model_validate(load_catalog(_table_path().read_text()))


@lru_cache(maxsize=256)
def relative_band(family: str, framework: str | None, is_moe: bool) -> tuple[float, float]:
    """(low_factor, high_factor) of a job inside the evidence: its cell's 80% interval, low <= 1 <= high."""
    return band_for(band_table(), family, framework, is_moe)


def dump_table(table: BandTable, header: str = "") -> str:
    """YAML text of a table (what ``band_table`` reads)."""
    data: dict[str, Any] = table.model_dump(mode="json")
    data["cells"] = [dict(c) for c in data["cells"]]
    data["novelty"] = [dict(w) for w in data["novelty"]]
    return header + yaml.safe_dump(data, sort_keys=False, width=120)


def weighted_percentile(values: Sequence[float], weights: Sequence[float], q: float) -> float:
    """Percentile ``q`` (0..1) of weighted values: each value sits at the middle of its weight's share of the
    cumulative weight; linear between, clamped at the ends."""
    pairs = sorted(zip(values, weights, strict=True))
    total = sum(w for _, w in pairs)
    positions, acc = [], 0.0
    for _, w in pairs:
        positions.append((acc + w / 2) / total)
        acc += w
    if q <= positions[0]:
        return pairs[0][0]
    for i in range(1, len(pairs)):
        if q <= positions[i]:
            span = positions[i] - positions[i - 1]
            t = (q - positions[i - 1]) / span if span else 1.0
            return pairs[i - 1][0] + (pairs[i][0] - pairs[i - 1][0]) * t
    return pairs[-1][0]


def _source_weights(items: Sequence[Residual]) -> tuple[list[float], int]:
    """Each residual's weight (1 / runs of its source here) and the count of distinct sources."""
    keys = [r.source or f"#{i}" for i, r in enumerate(items)]
    counts: dict[str, int] = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    return [1.0 / counts[k] for k in keys], len(counts)


def _sides(items: Sequence[Residual], coverage: float) -> tuple[float, float, int]:
    """(ln(1/low), ln(high), sources) of source-weighted percentiles, each side >= 0."""
    weights, sources = _source_weights(items)
    logs = [math.log(r.ratio) for r in items]
    low = weighted_percentile(logs, weights, (1 - coverage) / 2)
    high = weighted_percentile(logs, weights, (1 + coverage) / 2)
    return max(0.0, -low), max(0.0, high), sources


def _cell_keys(family: str, fw: str, moe: bool) -> tuple[tuple[str, str, bool | None], ...]:
    return ((family, fw, moe), (family, ANY, moe), (family, ANY, None), (ANY, fw, moe), (ANY, fw, None),
            (ANY, ANY, moe), (ANY, ANY, None))


def build_table(residuals: Iterable[Residual | tuple[Any, ...]], *, min_runs: int = 8, min_sources: int = 2,
                method: str = "", written: str = "", coverage: float = 0.8,
                novelty: Sequence[Widening] = ()) -> BandTable:
    """A band table from held-out residuals ``(family, framework, is_moe, measured / projected[, source])``.

    Every cell (specific and fallback) with at least ``min_runs`` residuals from ``min_sources`` sources gets
    the source-weighted ``(1 - coverage) / 2`` and ``(1 + coverage) / 2`` percentiles (widened to include 1),
    each side shrunk toward the pooled band's with weight ``SHRINK_SOURCES``.
    """
    items = [Residual(*r) for r in residuals]
    if not items:
        raise ValueError("no residuals to build an uncertainty table from")
    cells: dict[tuple[str, str, bool | None], list[Residual]] = {}
    for r in items:
        for key in _cell_keys(r.family, framework_key(r.framework), r.moe):
            cells.setdefault(key, []).append(r)
    pool_lo, pool_hi, pool_sources = _sides(items, coverage)
    bands = []
    for (f, w, m), members in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1], str(kv[0][2]))):
        lo, hi, n = _sides(members, coverage)
        if len(members) < min_runs or n < min_sources:
            continue
        lo = (n * lo + SHRINK_SOURCES * pool_lo) / (n + SHRINK_SOURCES)
        hi = (n * hi + SHRINK_SOURCES * pool_hi) / (n + SHRINK_SOURCES)
        bands.append(Band(family=f, framework=w, moe=m, low=math.exp(-lo), high=math.exp(hi), runs=len(members),
                          sources=n))
    default = _DefaultBand(low=math.exp(-pool_lo), high=math.exp(pool_hi), runs=len(items), sources=pool_sources)
    return BandTable(method=method or "held-out residuals (measured / projected throughput) inside the evidence, "
                     f"source-weighted {(1 - coverage) / 2:.1%}-{(1 + coverage) / 2:.1%} percentiles per cell, "
                     f"shrunk toward the pooled band ({SHRINK_SOURCES:g} sources); novelty widenings from grouped "
                     "cross-validation", min_runs=min_runs, min_sources=min_sources, default=default,
                     cells=tuple(bands), novelty=tuple(novelty), written=written)


def band_for(table: BandTable, family: str, framework: str | None, is_moe: bool) -> tuple[float, float]:
    """(low, high) of ``table`` for one run inside the evidence (the lookup :func:`relative_band` does)."""
    index = {(c.family, c.framework, c.moe): c for c in table.cells}
    for key in _cell_keys(family, framework_key(framework), is_moe):
        cell = index.get(key)
        if cell is not None:
            return cell.low, cell.high
    return table.default.low, table.default.high


def widen_by(band: tuple[float, float], added: float) -> tuple[float, float]:
    """``band`` with ``added`` (a sum of squared widenings, ln units) in quadrature on each side."""
    if added <= 0:
        return band
    low, high = band
    return (math.exp(-math.sqrt(math.log(1 / low) ** 2 + added)), math.exp(math.sqrt(math.log(high) ** 2 + added)))


def widen(band: tuple[float, float], keys: Iterable[str], table: BandTable) -> tuple[float, float]:
    """``band`` widened for novelty reason ``keys`` (each distinct key once; quadrature in ln units)."""
    extras = {w.key: w.extra for w in table.novelty}
    fallback = max(extras.values(), default=0.0)   # a reason the table has no widening for: the widest one
    return widen_by(band, sum((extras.get(k, fallback)) ** 2 for k in set(keys)))


@dataclass(frozen=True, slots=True)
class JobBand:
    """A job's 80% interval on throughput (multipliers) and why it is wider than its cell's."""

    low: float
    high: float
    base_low: float
    base_high: float
    reasons: tuple[Novelty, ...] = ()

    @property
    def widened(self) -> bool:
        """True when a novelty reason widened the band."""
        return bool(self.reasons)

    def note(self) -> str:
        """One line: the band in percent, and "wide: <reasons>" when widened."""
        text = f"80% band {self.low - 1:+.0%} to {self.high - 1:+.0%}"
        if self.reasons:
            text += " (wide: " + "; ".join(r.text for r in self.reasons) + ")"
        return text


def band_for_job(table: BandTable, reasons: Sequence[Novelty], family: str, framework: str | None,
                 is_moe: bool) -> JobBand:
    """The :class:`JobBand` of a job with novelty ``reasons`` under ``table``."""
    base = band_for(table, family, framework, is_moe)
    low, high = widen(base, (r.key for r in reasons), table)
    return JobBand(low=low, high=high, base_low=base[0], base_high=base[1], reasons=tuple(reasons))


@lru_cache(maxsize=4096)
def _shipped_job_band(features: Any) -> JobBand:
    evidence = shipped_evidence()
    reasons = novelty(features, evidence) if evidence is not None else ()
    return band_for_job(band_table(), reasons, features.family, features.framework, features.moe)


def job_band(model: ModelSpec, cluster: Cluster, config: TrainingConfig, hardware: HardwareSpec) -> JobBand:
    """The shipped band of one job: its cell, widened by its novelty against the shipped evidence."""
    return _shipped_job_band(job_features(model, cluster, config, hardware))


def write_table(table: BandTable, path: Path) -> Path:
    """Write a band table as YAML (the shipped one is ``projection/catalog/uncertainty/bands.yaml``)."""
    header = ("# 80% intervals of projected throughput, as multipliers on the point projection, and the widening\n"
              "# per novelty reason. Written by `projtune calibrate --cross-validate evals/data --bands-out <this file>`\n"
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
    return AnchoredBandTable.model_validate(load_catalog(path.read_text()))


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
    def percentile(values: list[float], q: float) -> float:   # every residual weighs the same
        return weighted_percentile(values, [1.0] * len(values), q)

    cells = tuple(AnchoredBand(anchor_class=cls, low=min(1.0, percentile(v, q_lo)),
                               high=max(1.0, percentile(v, q_hi)), runs=len(v))
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
