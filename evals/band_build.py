"""Build the 80% band table from grouped cross-validation records, and measure its nested coverage.

Input: :class:`evals.grouped_cv.Record` s of every grouping (a run held out by source, by source family, by
framework, by GPU family; each with its novelty reasons against that fold's evidence).  Output: a
:class:`projection.uncertainty.BandTable` whose

- **cells** come from the leave-one-source-out records *inside* their fold's evidence (no novelty reason),
  source-weighted and shrunk toward the pooled band (:func:`projection.uncertainty.build_table`);
- **novelty widenings** are solved here, not typed in: for each reason key, the smallest ``extra`` (ln units,
  added in quadrature to each side of the record's cell band) that puts ``coverage`` of the held-out records
  flagged with that key inside their widened band under every grouping that flags at least
  ``MIN_GROUPING_RECORDS`` of them, given the other keys' widenings (a few rounds of coordinate descent, each
  a bisection).  A key flagged in few sources shrinks toward the widening all
  flagged records need together, with the weight of ``SHRINK_SOURCES`` sources.

The percentile spread (``BAND_SPREADS``) is the narrowest whose nested leave-one-source-out coverage reaches
``TARGET_COVERAGE``.  *Nested*: every held-out group's runs are scored against a table built without any
record of those runs (cells and widenings), so the figure is what a new source, framework or GPU family sees.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from evals.grouped_cv import GROUPINGS, Record, RunId
from projection.evidence import REASON_KEYS
from projection.uncertainty import SHRINK_SOURCES, BandTable, Residual, Widening, band_for, build_table, widen, widen_by

BAND_SPREADS = (0.80, 0.85, 0.90, 0.95)
"""Percentile spreads tried for the cells (0.9 = 5th to 95th percentile of held-out residuals)."""
TARGET_COVERAGE = 0.78
"""Nested leave-one-source-out coverage the chosen spread must reach (aim: 80%)."""
WIDENING_COVERAGE = 0.80
"""Coverage each novelty key's flagged records must reach inside their widened bands."""
MIN_BAND_RUNS = 8
"""Fewest held-out residuals an uncertainty cell needs (else its lookup falls back to a broader cell)."""
MIN_BAND_SOURCES = 2
"""Fewest distinct sources an uncertainty cell needs (one source is one sample, never a cell)."""
MAX_EXTRA = 3.0
"""Largest widening searched, ln units (a factor of 20 each side: beyond it a band says nothing)."""
ROUNDS = 3
"""Coordinate-descent rounds over the reason keys."""
MIN_GROUPING_RECORDS = 10
"""Flagged records a grouping needs for its coverage to bind a widening."""


def _residual(r: Record) -> Residual:
    return Residual(r.family, r.framework, r.moe, r.ratio, r.source)


def base_table(records: Sequence[Record], spread: float, exclude: frozenset[RunId] = frozenset(), *,
               written: str = "") -> BandTable:
    """Cells from the leave-one-source-out records inside their fold's evidence (less ``exclude``'s runs).

    When fewer than ``MIN_BAND_RUNS`` such records from ``MIN_BAND_SOURCES`` sources remain (holding out the
    framework nearly every run used), every leave-one-source-out record is used: the pooled band then carries
    the novel runs' error, and the widenings come on top.
    """
    loso = [r for r in records if r.grouping == "source" and r.run_key not in exclude]
    inside = [r for r in loso if not r.reasons]
    chosen = inside if len(inside) >= MIN_BAND_RUNS and len({r.source for r in inside}) >= MIN_BAND_SOURCES \
        else loso
    return build_table([_residual(r) for r in chosen], min_runs=MIN_BAND_RUNS, min_sources=MIN_BAND_SOURCES,
                       coverage=spread, written=written)


def _keys(record: Record) -> frozenset[str]:
    return frozenset(n.key for n in record.reasons)


Flagged = Sequence[tuple[Record, tuple[float, float]]]


def _inside_share(items: Flagged, extras: dict[str, float], uniform: float | None) -> float:
    inside = 0
    for record, band in items:
        added = uniform * uniform if uniform is not None else sum(extras[k] ** 2 for k in _keys(record))
        low, high = widen_by(band, added)
        inside += low <= record.ratio <= high
    return inside / len(items) if items else 1.0


def _coverage(items: Flagged, extras: dict[str, float], uniform: float | None = None) -> float:
    """The lowest coverage, over the groupings that hold at least ``MIN_GROUPING_RECORDS`` of ``items``, of
    their records inside their widened bands (``uniform``: one widening for every record instead of
    ``extras`` per key).  A widening must serve every way of holding data out, not their pooled average."""
    by_grouping: dict[str, list[tuple[Record, tuple[float, float]]]] = {}
    for record, band in items:
        by_grouping.setdefault(record.grouping, []).append((record, band))
    shares = [_inside_share(group, extras, uniform) for group in by_grouping.values()
              if len(group) >= MIN_GROUPING_RECORDS]
    return min(shares) if shares else _inside_share(items, extras, uniform)


def _smallest(covers: Callable[[float], float], target: float) -> float:
    """Smallest extra in [0, MAX_EXTRA] whose coverage ``covers(extra)`` (non-decreasing) reaches ``target``."""
    if covers(MAX_EXTRA) < target:
        return MAX_EXTRA
    lo, hi = 0.0, MAX_EXTRA
    for _ in range(14):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if covers(mid) >= target else (mid, hi)
    return hi


def derive_widenings(records: Sequence[Record], table: BandTable, *, coverage: float = WIDENING_COVERAGE,
                     exclude: frozenset[RunId] = frozenset()) -> tuple[Widening, ...]:
    """Each reason key's widening, solved on the flagged records (less ``exclude``'s runs) against ``table``."""
    flagged = [(r, band_for(table, r.family, r.framework, r.moe)) for r in records
               if r.reasons and r.run_key not in exclude]
    if not flagged:
        return tuple(Widening(key=k, extra=0.0, runs=0, sources=0) for k in REASON_KEYS)
    # the one widening all flagged records need together (once per record): the value a thin key shrinks to
    pooled = _smallest(lambda e: _coverage(flagged, {}, uniform=e), coverage)
    by_key = {k: [(r, b) for r, b in flagged if k in _keys(r)] for k in REASON_KEYS}
    extras = dict.fromkeys(REASON_KEYS, pooled)
    for _ in range(ROUNDS):
        for key in REASON_KEYS:
            if by_key[key]:
                extras[key] = _smallest(lambda e, key=key: _coverage(by_key[key], extras | {key: e}), coverage)
    out = []
    for key in REASON_KEYS:
        sources = len({r.source for r, _ in by_key[key]})
        value = (sources * extras[key] + SHRINK_SOURCES * pooled) / (sources + SHRINK_SOURCES)
        out.append(Widening(key=key, extra=round(value, 4), runs=len({r.run_key for r, _ in by_key[key]}),
                            sources=sources))
    return tuple(out)


def table_for(records: Sequence[Record], spread: float, exclude: frozenset[RunId] = frozenset(), *,
              written: str = "") -> BandTable:
    """The band table (cells and novelty widenings) of ``records`` less ``exclude``'s runs."""
    base = base_table(records, spread, exclude, written=written)
    return base.model_copy(update={"novelty": derive_widenings(records, base, exclude=exclude)})


def record_band(table: BandTable, record: Record) -> tuple[float, float]:
    """A held-out record's band under ``table``: its cell widened by its novelty keys."""
    return widen(band_for(table, record.family, record.framework, record.moe), _keys(record), table)


def nested_bands(records: Sequence[Record], grouping: str, spread: float) -> list[tuple[Record, tuple[float, float]]]:
    """Each record of ``grouping`` with its band from a table built without any record of its group's runs."""
    out = []
    for group in sorted({r.group for r in records if r.grouping == grouping}):
        test = [r for r in records if r.grouping == grouping and r.group == group]
        table = table_for(records, spread, frozenset(r.run_key for r in test))
        out += [(r, record_band(table, r)) for r in test]
    return out


def coverage_figures(pairs: Iterable[tuple[Record, tuple[float, float]]]) -> dict[str, Any]:
    """Runs, coverage and median width (high - low, fraction of the projection) of banded records."""
    pairs = list(pairs)
    if not pairs:
        return {"runs": 0, "coverage": None, "median_width": None}
    return {"runs": len(pairs), "coverage": statistics.fmean(lo <= r.ratio <= hi for r, (lo, hi) in pairs),
            "median_width": statistics.median(hi - lo for _, (lo, hi) in pairs)}


def split_figures(pairs: Sequence[tuple[Record, tuple[float, float]]]) -> dict[str, Any]:
    """:func:`coverage_figures` of all, of the runs flagged novel and of those inside the evidence, and per
    novelty key."""
    return {**coverage_figures(pairs),
            "flagged": coverage_figures(p for p in pairs if p[0].reasons),
            "inside": coverage_figures(p for p in pairs if not p[0].reasons),
            "by_reason": {k: coverage_figures(p for p in pairs if k in _keys(p[0])) for k in REASON_KEYS
                          if any(k in _keys(r) for r, _ in pairs)}}


def mape_figures(records: Sequence[Record]) -> dict[str, Any]:
    """Pooled and per-group MAPE of one grouping's records."""
    groups = sorted({r.group for r in records})
    return {"runs": len(records), "mape": statistics.fmean(r.ape for r in records) if records else None,
            "per_group": {g: {"runs": len(m), "mape": statistics.fmean(r.ape for r in m)}
                          for g in groups if (m := [r for r in records if r.group == g])}}


def choose_spread(records: Sequence[Record]) -> tuple[float, dict[str, float]]:
    """The narrowest ``BAND_SPREADS`` entry whose nested leave-one-source-out coverage reaches
    ``TARGET_COVERAGE`` (else the widest), with the coverage of each."""
    by_spread = {s: coverage_figures(nested_bands(records, "source", s))["coverage"] or 0.0 for s in BAND_SPREADS}
    return next((s for s in BAND_SPREADS if by_spread[s] >= TARGET_COVERAGE), BAND_SPREADS[-1]), by_spread


def grouped_summary(records: Sequence[Record], spread: float | None, shipped: BandTable) -> dict[str, Any]:
    """Per grouping: MAPE (pooled, per group), and the 80% band's coverage and median width, pooled, flagged
    novel vs inside the evidence, per novelty key, under the shipped table (``shipped``) and, when ``spread``
    is given (the leave-one-source-out records are there), nested (the table rebuilt without each group)."""
    out: dict[str, Any] = {}
    for grouping in GROUPINGS:
        mine = [r for r in records if r.grouping == grouping]
        if not mine:
            continue
        entry = {**mape_figures(mine), "flagged_runs": sum(bool(r.reasons) for r in mine),
                 "shipped_band": split_figures([(r, record_band(shipped, r)) for r in mine])}
        if spread is not None:
            entry["nested_band"] = split_figures(nested_bands(records, grouping, spread))
        out[grouping] = entry
    return out
