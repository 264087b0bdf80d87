"""The tune decision says why the winner's 80% interval is wide, and uses the widened interval for near-ties."""

from __future__ import annotations

from agent.decide import decision_text, near_ties


def _trial(i: int, tps: float, low: float, high: float, reasons: tuple[str, ...] = ()) -> dict:
    return {"id": i, "layout": f"L{i}", "config": {"tp": i}, "tokens_per_sec_per_gpu": tps,
            "tokens_per_sec_per_gpu_low": low, "tokens_per_sec_per_gpu_high": high, "band_reasons": reasons}


def test_a_wide_band_is_named_in_the_decision() -> None:
    best = _trial(1, 100.0, 80.0, 125.0, ("no development run on MI350X", "sequence 64k is 16x the longest fitted"))
    second = _trial(2, 85.0, 70.0, 95.0)
    ties = near_ties([best, second])
    assert [t["rank"] for t in ties] == [2]            # the widened low end (80) reaches #2's high end (95)
    text = decision_text([best, second], ties, None)
    assert "near-tie" in text and "wide: no development run on MI350X; sequence 64k" in text
    narrow = dict(best, tokens_per_sec_per_gpu_low=97.0, band_reasons=())
    assert near_ties([narrow, second]) == []
    assert "wide" not in decision_text([narrow, second], [], None)
