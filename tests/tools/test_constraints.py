"""Constraint parsing: strings and JSON values to axis rules, with clear errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tools.constraints import ConstraintError, Constraints


@pytest.mark.parametrize(("text", "axis", "inside", "outside"), [
    ("tp<=8", "tp", [1, 8], [16]),
    ("tp<8", "tp", [4], [8]),
    ("pp>=2", "pp", [2, 4], [1]),
    ("pp in 1,2,4", "pp", [1, 4], [8]),
    ("mbs=2..8", "mbs", [2, 8], [1, 16]),
    ("zero!=3", "zero", [0, 1], [3]),
    ("precision=bf16", "precision", ["bf16"], ["fp8"]),
    ("recompute in none,full", "recompute", ["none", "full"], ["selective"]),
    ("schedule=interleaved", "pp_schedule", ["interleaved"], ["1f1b"]),
])
def test_parse_rules(text: str, axis: str, inside: list, outside: list) -> None:
    c = Constraints.parse([text])
    assert all(c.allows(axis, v) for v in inside)
    assert not any(c.allows(axis, v) for v in outside)


def test_json_values_and_specials() -> None:
    c = Constraints(tp="<=8", precision="bf16", pp=[1, 2, 4], min_headroom=0.1)
    assert c.allows("tp", 8) and not c.allows("tp", 16)
    assert c.allows("pp", 2) and not c.allows("pp", 8)
    assert Constraints.parse(["headroom>=10%"]).min_headroom == pytest.approx(0.1)
    assert Constraints.parse(["fp8=false"]).allow_fp8 is False
    assert Constraints.parse(["tp>=2", "tp<=4"]).rule("tp")(4)
    assert not Constraints.parse(["tp>=2", "tp<=4"]).rule("tp")(8)
    assert "tp<=8" in c.describe() and "pp in 1,2,4" in c.describe()


@pytest.mark.parametrize(("text", "needle"), [
    ("tpp<=8", "did you mean tp"),
    ("tp<=eight", "'eight' is not an integer"),
    ("precision=bf32", "did you mean bf16"),
    ("precision<=bf16", "needs a numeric axis"),
    ("tp 8", "has no operator"),
    ("headroom>=lots", "not a fraction"),
    ("", "expected AXIS OP VALUE"),
])
def test_parse_errors_are_clear(text: str, needle: str) -> None:
    with pytest.raises(ConstraintError, match=needle):
        Constraints.parse([text])


def test_model_validation_errors() -> None:
    with pytest.raises(ValidationError, match="did you mean bf16"):
        Constraints(precision="bf17")
    with pytest.raises(ValidationError):
        Constraints(tpp=4)  # type: ignore[call-arg]


def test_values_outside_an_axis_domain_are_refused_not_searched_to_nothing() -> None:
    """'tp<=0' and 'zero=5' ran the search and answered "no layout" (exit 1) instead of naming the bad value."""
    import pytest

    from tools.constraints import ConstraintError, Constraints

    with pytest.raises(ConstraintError, match="constraint tp: 0 is not a value of this axis"):
        Constraints.parse(["tp<=0"])
    with pytest.raises(ConstraintError, match=r"constraint zero: 5 is not a ZeRO level \(allowed: 0, 1, 2, 3\)"):
        Constraints.parse(["zero=5"])
    Constraints.parse(["zero=0", "tp>=1", "recompute_num_layers>=0"])


def test_a_recompute_module_set_pins_selective_layouts_with_exactly_that_set() -> None:
    """'recompute_modules=core_attn,mlp' (read from 'recompute modules core_attn, mlp'): only selective layouts with
    that set are enumerated; an unknown module is refused with the nearest name."""
    from tools.candidate_columns import enumerate_candidates
    from projection.job import resolve_job

    pinned = Constraints.parse(["recompute_modules=mlp+core_attn", "pp<=2"])
    assert pinned.recompute_modules == ["mlp", "core_attn"] and "recompute_modules=mlp,core_attn" in pinned.describe()
    job = resolve_job("llama3-8b", "h100-sxm", 8)
    configs = list(enumerate_candidates(job.model, job.hardware, job.cluster, pinned, 32, 4096))
    assert configs and {(c.recompute, c.recompute_modules) for c in configs} == {("selective", ("core_attn", "mlp"))}
    assert pinned.allows("recompute_modules", ["core_attn", "mlp"]) and not pinned.allows("recompute_modules",
                                                                                          ["core_attn"])
    with pytest.raises(ConstraintError, match="unknown recompute module 'core_atn'.*did you mean core_attn"):
        Constraints.parse(["recompute_modules=core_atn"])
