"""One shape for a scored layout, from the engine to the report.

:class:`LayoutScore` is what a scored layout carries everywhere: the search's ranked rows
(:class:`tools.search.Candidate`), the ``compare``/``explain`` rows (:class:`tools.schemas.CompareRow`),
the ``project`` tool's answer (:meth:`tools.schemas.ProjectOutput.score`), the agent's scored trials
(their score keys are :data:`SCORE_FIELDS`, flat, see :mod:`agent.nodes`) and the report's rows
(:class:`agent.report.RankedLayout`, a subclass that adds only report fields).  Every view is a
subclass or a field-for-field copy, so a scored layout never changes shape on the way.

:class:`ProjectedLayout` adds what a projection has besides the score (the layout's config, the
iteration-time interval and the step-time breakdown); :func:`projected_layout` builds it from a
:class:`projection.engine.Projection`, the one place that conversion is written.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from projection.engine import Projection
from projection.memory import GIB
from projection.memory_verdict import Verdict
from projection.summary import config_dict, switches_dict
from tools.formatting import layout_text


BAND_REASONS_DOC = ("Why the 80% interval is wider than for a job inside the development evidence: each way this "
                    "job lies outside it (projection/evidence.py); empty when inside.")


class LayoutScore(BaseModel):
    """The engine's numbers for one layout: throughput with its 80% interval, MFU, step time and memory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    layout: str = Field(description="One-line layout, e.g. 'TP2 PP4 DP8 mbs1 gbs256 s8192 bf16 rc=none'.")
    tokens_per_sec_per_gpu: float = Field(description="Projected training throughput, tokens/s per GPU.")
    tokens_per_sec_per_gpu_low: float = Field(description="80% interval, low end, tokens/s per GPU "
                                                          "(projection/uncertainty.py).")
    tokens_per_sec_per_gpu_high: float = Field(description="80% interval, high end, tokens/s per GPU.")
    band_reasons: tuple[str, ...] = Field(default=(), description=BAND_REASONS_DOC)
    mfu: float = Field(description="Model FLOP utilisation against the BF16 peak, 0..1.")
    iteration_time_s: float = Field(description="Projected time of one optimizer step, seconds.")
    peak_memory_gib: float = Field(description="Peak per-GPU memory (the fullest pipeline stage), GiB.")
    headroom_fraction: float = Field(description="1 - peak / usable HBM capacity; negative when out of memory.")
    verdict: Verdict = Field(description="fits / at risk / out of memory (projection/memory_verdict.py).")
    bottleneck: str = Field(description="Largest non-compute step-time term when above 15% of the step, "
                                        "else compute.")


SCORE_FIELDS: tuple[str, ...] = tuple(LayoutScore.model_fields)
"""The keys of a :class:`LayoutScore` (a scored trial carries exactly these, flat)."""


def score_of(row: Any) -> LayoutScore:
    """The :class:`LayoutScore` of a mapping (a trial, a dumped row) or of any model with its fields."""
    get = row.get if isinstance(row, dict) else lambda k: getattr(row, k, None)
    return LayoutScore.model_validate({k: v for k in SCORE_FIELDS if (v := get(k)) is not None})


class ProjectedLayout(LayoutScore):
    """A score with what the projection knows besides: config, iteration-time interval, step-time terms."""

    config: dict[str, Any] = Field(description="Sweep-format config keys, with derived dp and pp_schedule.")
    iteration_time_s_low: float = Field(description="80% interval on iteration time, low end, seconds.")
    iteration_time_s_high: float = Field(description="80% interval on iteration time, high end, seconds.")
    breakdown_s: dict[str, float] = Field(default_factory=dict, description="Step-time terms of the critical "
                                                                            "rank, seconds.")
    switches: dict[str, Any] | None = Field(default=None, description="Run-time switches in effect (comm_overlap, "
                                            "cuda_graphs, compile, attention_backend, grad_reduce_in_fp32): the "
                                            "layout's, else its framework's defaults; a search picks comm_overlap and "
                                            "cuda_graphs per layout (tools/switch_rules.py).")


def projected_layout(p: Projection) -> dict[str, Any]:
    """The :class:`ProjectedLayout` fields of one projection (a subclass adds its own and validates)."""
    config = config_dict(p)
    return {"layout": layout_text(config), "config": config, "tokens_per_sec_per_gpu": p.tokens_per_s_per_gpu,
            "tokens_per_sec_per_gpu_low": p.tokens_per_sec_per_gpu_low,
            "tokens_per_sec_per_gpu_high": p.tokens_per_sec_per_gpu_high, "band_reasons": p.band_reasons,
            "mfu": p.mfu,
            "iteration_time_s": p.iteration_time_s, "iteration_time_s_low": p.iteration_time_s_low,
            "iteration_time_s_high": p.iteration_time_s_high, "peak_memory_gib": p.memory.peak_bytes / GIB,
            "headroom_fraction": p.memory.headroom_fraction, "verdict": p.memory.verdict,
            "bottleneck": p.breakdown.bottleneck, "breakdown_s": p.breakdown.as_dict(),
            "switches": None if p.switches is None else switches_dict(p.switches)}
