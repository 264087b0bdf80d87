"""Parameter counts match published totals (within 0.5%)."""

from __future__ import annotations

import pytest

from projection.model_spec import load_model
from projection.params import active_params, total_params

# Published totals: Meta Llama 3 model card (70.6B), Mistral Mixtral-8x22B announcement (140.6B),
# Qwen3 technical report arXiv 2505.09388 Table 2 (235B), DeepSeek-V3 report arXiv 2412.19437 (671B main model).
PUBLISHED = {
    "llama3-70b": 70.6e9,
    "mixtral-8x22b": 140.6e9,
    "qwen3-235b-a22b": 235e9,
    "deepseek-v3": 671e9,
}


@pytest.mark.parametrize(("model_id", "published"), PUBLISHED.items())
def test_total_params_within_half_percent(model_id: str, published: float) -> None:
    assert total_params(load_model(model_id)) == pytest.approx(published, rel=0.005)


@pytest.mark.parametrize(("model_id", "active"), [("qwen3-235b-a22b", 22e9), ("deepseek-v3", 37e9),
                                                  ("mixtral-8x22b", 39e9)])
def test_active_params_match_model_names(model_id: str, active: float) -> None:
    # Active parameters per token as published: Qwen3 "A22B", DeepSeek-V3 37B, Mixtral 8x22B 39B.
    assert active_params(load_model(model_id)) == pytest.approx(active, rel=0.03)


def test_every_catalog_model_is_within_published_count() -> None:
    from projection.model_spec import list_model_ids

    for model_id in list_model_ids():
        model = load_model(model_id)
        if model.published_params:
            assert total_params(model) == pytest.approx(model.published_params, rel=0.01), model_id
