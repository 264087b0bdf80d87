"""What a trial of the agent state is: :class:`Trial`, a typed record of one evaluated proposal.

The graph state keeps a trial as its ``Trial.model_dump(exclude_unset=True)`` (plain data, checkpointable;
only the fields the evaluation set), and :func:`agent.nodes.evaluate` builds every trial through the model, so
a misspelt or mistyped field fails there.  A scored trial's score keys are exactly
:data:`tools.layout_score.SCORE_FIELDS`, so :func:`tools.layout_score.score_of` reads the score back (the
report's :class:`agent.report.RankedLayout` is built that way).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from projection.memory_verdict import Verdict
from tools.layout_score import score_of

TrialStatus = Literal["ok", "invalid", "illegal", "excluded", "skipped", "screened_out", "error", "scored"]
"""ok: legal, not evaluated yet; invalid / illegal / excluded: the check's reasons (``violations``); skipped: the
tool-call budget was spent; screened_out: the memory screen dropped it; error: a tool failed on it; scored."""


class Trial(BaseModel):
    """One evaluated proposal: where it came from, what the check said, and its score when scored."""

    model_config = ConfigDict(extra="forbid")

    id: int = Field(ge=0, description="Position in the run's trials.")
    round: int = Field(0, ge=0, description="Proposal round (0: the seed round).")
    source: str = Field("?", description="Who proposed it: seed, search, offline, llm, candidates.")
    reason: str = ""
    search_rank: int | None = Field(None, description="Its rank in the search, when the search proposed it.")
    baseline: bool = False
    status: TrialStatus
    config: dict[str, Any] | None = Field(None, description="Sweep-format keys (dp derived, schedule resolved).")
    key: str | None = Field(None, description="Canonical layout key (duplicates are skipped).")
    violations: list[str] = Field(default_factory=list)
    in_space: bool | None = Field(None, description="A layout the search enumerates for the request.")
    scored_by: Literal["search", "project"] | None = None
    memory_warning: str | None = None
    # the LayoutScore, flat (SCORE_FIELDS); a screened-out trial has the memory ones
    layout: str | None = None
    tokens_per_sec_per_gpu: float | None = None
    tokens_per_sec_per_gpu_low: float | None = None
    tokens_per_sec_per_gpu_high: float | None = None
    band_reasons: tuple[str, ...] | None = Field(None, description="Why the 80% interval is wide (empty: inside "
                                                                    "the development evidence).")
    mfu: float | None = None
    iteration_time_s: float | None = None
    peak_memory_gib: float | None = None
    headroom_fraction: float | None = None
    verdict: Verdict | None = None
    bottleneck: str | None = None
    breakdown_s: dict[str, float] | None = Field(None, description="Step-time terms, seconds (TRIAL_DETAIL).")

    def state(self) -> dict[str, Any]:
        """The trial as the graph state keeps it: plain data, the fields that were set."""
        return self.model_dump(mode="json", exclude_unset=True)

TRIAL_DETAIL = ("breakdown_s",)
"""What a scored trial keeps besides its LayoutScore: the step-time terms (seconds) the LLM's history shows."""


def trial_score(row: Any) -> dict[str, Any]:
    """The trial fields of a scored row (a search candidate as plain data, or a ``project`` output): its
    LayoutScore, flat, and the :data:`TRIAL_DETAIL` keys it has."""
    get = row.get if isinstance(row, dict) else lambda k: getattr(row, k, None)
    detail = {k: get(k) for k in TRIAL_DETAIL if get(k) is not None}
    score = row.score() if hasattr(row, "score") else score_of(row)
    return {**score.model_dump(), **detail}
