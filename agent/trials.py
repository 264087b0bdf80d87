"""What a scored trial of the agent state carries: its :class:`tools.layout_score.LayoutScore`, flat, and a detail.

A trial is a plain dict (checkpointable); its score keys are exactly
:data:`tools.layout_score.SCORE_FIELDS`, so :func:`tools.layout_score.score_of` reads the score back
(the report's :class:`agent.report.RankedLayout` is built that way).
"""

from __future__ import annotations

from typing import Any

from tools.layout_score import score_of

TRIAL_DETAIL = ("breakdown_s",)
"""What a scored trial keeps besides its LayoutScore: the step-time terms (seconds) the LLM's history shows."""


def trial_score(row: Any) -> dict[str, Any]:
    """The trial fields of a scored row (a search candidate as plain data, or a ``project`` output): its
    LayoutScore, flat, and the :data:`TRIAL_DETAIL` keys it has."""
    get = row.get if isinstance(row, dict) else lambda k: getattr(row, k, None)
    detail = {k: get(k) for k in TRIAL_DETAIL if get(k) is not None}
    score = row.score() if hasattr(row, "score") else score_of(row)
    return {**score.model_dump(), **detail}
