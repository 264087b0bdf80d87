"""Cluster sizing: a request with a token budget and a deadline but no GPU count gets a count, a table of
count -> days -> GPU-hours with the band, and is tuned on the count chosen."""

from __future__ import annotations

from agent.text.request import Clarification, TuneRequest, parse_request
from agent.sizing import size_request, sizing_lines
from agent.sizing_guess import count_ladder, first_guess
from projection.hardware import load_hardware
from projection.model_spec import load_model

TEXT = "how many MI300X to train Llama 3 8B on 200B tokens in 10 days, tp=1, pp=1, bf16 only, no recompute, zero=1"


def test_the_guess_is_model_flops_at_the_guess_mfu() -> None:
    model, gpu = load_model("llama3.1-405b"), load_hardware("h100-sxm")
    guess = first_guess(model, gpu, 15e12, 60, 8)
    # 6 * 405B * 15T FLOPs / (60 days * 989 TFLOP/s * 0.35) ~ 20k GPUs, whole nodes
    assert 15_000 < guess < 25_000 and guess % 8 == 0
    assert first_guess(model, gpu, 15e12, 30, 8) > 1.9 * guess          # half the time, twice the GPUs
    assert count_ladder(guess, 8) == [8192, 16384, 32768, 65536]


def test_a_budget_and_a_deadline_size_the_count() -> None:
    request = parse_request(TEXT)
    assert isinstance(request, TuneRequest) and request.size_cluster and "num_gpus" in request.assumed
    asked = parse_request("how many MI300X to train Llama 3 8B on 200B tokens")
    assert isinstance(asked, Clarification) and "token budget and a deadline" in asked.question
    sized = size_request(request, "megatron")
    sizing = sized.sizing
    assert sizing is not None and sized.num_gpus == sizing["chosen"]
    rows = {r["num_gpus"]: r for r in sizing["rows"]}
    chosen = rows[sized.num_gpus]
    assert chosen["meets"] and chosen["days_band"][1] <= 10                    # the slow end meets the deadline
    smaller = [r for n, r in rows.items() if n < sized.num_gpus]
    assert smaller and not any(r["meets"] for r in smaller)                   # and no smaller count does
    assert any(n > sized.num_gpus for n in rows)                              # the table shows what more buys
    # days scale inversely with the count at equal per-GPU throughput; GPU-hours = tokens / (tokens/s/GPU)
    assert chosen["gpu_hours"] == 200e9 / chosen["tokens_per_sec_per_gpu"] / 3600
    lines = sizing_lines(sizing)
    assert any("meets" in line and line.lstrip().startswith("*") for line in lines)


def test_tune_answers_the_sizing_question() -> None:
    from agent.planning import plan_lines
    from agent.run import tune

    report = tune(TEXT).report
    assert report.status == "ok" and report.plan.get("sizing")
    assert report.request["num_gpus"] == report.plan["sizing"]["chosen"] == report.plan["num_gpus"]
    lines = plan_lines(report.plan)
    assert lines[0].startswith("cluster sizing for 2e+11 tokens in 10 days")
    assert any("GPU-hours" in line for line in lines)


def test_a_follow_up_with_a_count_is_not_sized() -> None:
    request = parse_request(TEXT)
    assert isinstance(request, TuneRequest)
    sized = size_request(request, "megatron")
    follow = parse_request("what about 256 gpus", sized)
    assert isinstance(follow, TuneRequest)
    assert follow.num_gpus == 256 and not follow.size_cluster and follow.sizing is None
    again = parse_request("seq 8k", sized)
    assert isinstance(again, TuneRequest) and again.size_cluster and again.sizing is None   # sized again when run


def test_tokens_and_deadline_flags_size_a_request_without_a_count() -> None:
    from agent.text.request import size_when_planned

    text = "Llama 3 8B on MI300X"
    asked = parse_request(text)
    assert isinstance(asked, Clarification) and asked.missing == ["num_gpus"]
    assert size_when_planned(asked, text, None, 864000.0) is asked                 # a deadline alone still asks
    sized = size_when_planned(asked, text, 2e11, 10 * 86400.0)
    assert isinstance(sized, TuneRequest) and sized.size_cluster
    assert (sized.train_tokens, sized.deadline_days) == (2e11, 10.0)
