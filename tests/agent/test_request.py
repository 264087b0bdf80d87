"""Offline request parsing: catalog names, counts, sequence, batch, constraints, defaults and questions back."""

from __future__ import annotations

import pytest

from agent.constraints_text import extract_constraints, merge_constraints
from agent.request import Clarification, TuneRequest, answer_clarification, default_gbs, parse_request


@pytest.mark.parametrize(("text", "expected"), [
    ("tune Mixtral 8x7B for 64 MI300X", {"model": "mixtral-8x7b", "gpu": "mi300x", "num_gpus": 64, "gbs": 256,
                                         "seq_len": 4096}),
    ("Llama 3.1 405B on 2k H100s, seq 8k, no FP8", {"model": "llama3.1-405b", "gpu": "h100-sxm", "num_gpus": 2048,
                                                   "seq_len": 8192, "constraints": ["precision=bf16"]}),
    ("llama3 70b on 128 h100 with gbs 512", {"model": "llama3-70b", "gpu": "h100-sxm", "num_gpus": 128, "gbs": 512}),
    ("qwen3 235b a22b, 256 b200, tp<=4", {"model": "qwen3-235b-a22b", "gpu": "b200", "num_gpus": 256,
                                          "constraints": ["tp<=4"]}),
    ("mixtral on 16xMI300X, pp in 1,2, use fp8",
     {"model": "mixtral-8x7b", "num_gpus": 16, "constraints": ["pp in 1,2", "precision in fp8,fp8-blockwise,mxfp8"]}),
    ("llama3.1 8b on 4 nodes of h200, 4 gpus per node", {"model": "llama3.1-8b", "gpu": "h200", "num_gpus": 16,
                                                         "gpus_per_node": 4}),
    ("gpt3 on 64 a100-80gb", {"model": "gpt3-175b", "gpu": "a100-80gb", "seq_len": 2048}),
])
def test_parses_requests(text: str, expected: dict[str, object]) -> None:
    request = parse_request(text)
    assert isinstance(request, TuneRequest), request
    assert {k: getattr(request, k) for k in expected} == expected


def test_defaults_are_said() -> None:
    request = parse_request("tune Mixtral 8x7B for 64 MI300X")
    assert isinstance(request, TuneRequest)
    assert set(request.assumed) == {"gbs", "seq_len", "gpus_per_node"}
    assert any("gbs=256" in n for n in request.notes) and any("seq_len=4096" in n for n in request.notes)
    assert default_gbs(96) == 288 and default_gbs(2048) == 2048


@pytest.mark.parametrize(("text", "missing", "says"), [
    ("", ["model", "gpu", "num_gpus"], "Empty request"),
    ("llama 70b on 64 h100", ["model"], "llama2-70b, llama3-70b, llama3.1-70b"),
    ("tune gpt5 on 64 h100", ["model"], "Unknown model 'gpt5'"),
    ("tune foobar-13b on 8 h100", ["model"], "Unknown model 'foobar-13b'"),
    ("tune llama3 8b on 8 tpu-v5", ["gpu"], "Unknown GPU type 'tpu-v5'"),
    ("tune llama3 8b on 8 a100", ["gpu"], "a100-40gb, a100-80gb"),
    ("tune llama3 8b on h100", ["num_gpus"], "How many GPUs"),
    ("tune llama3 8b", ["gpu"], "Which GPU type"),
])
def test_asks_back(text: str, missing: list[str], says: str) -> None:
    answer = parse_request(text)
    assert isinstance(answer, Clarification)
    assert answer.missing == missing and says in answer.question


def test_answering_a_question_completes_the_request() -> None:
    question = parse_request("llama 70b on 64 h100, seq 8k")
    assert isinstance(question, Clarification)
    for answer in ("llama3.1", "3", "llama3.1-70b"):
        request = answer_clarification(question, answer)
        assert isinstance(request, TuneRequest)
        assert (request.model, request.num_gpus, request.seq_len) == ("llama3.1-70b", 64, 8192)


def test_follow_ups_change_only_what_they_say() -> None:
    base = parse_request("tune llama3 8b on 8 h100, no fp8")
    assert isinstance(base, TuneRequest)
    more = parse_request("seq 16k, 32 gpus", base)
    assert isinstance(more, TuneRequest)
    assert (more.model, more.num_gpus, more.seq_len, more.gbs) == ("llama3-8b", 32, 16384, 256)
    fp8 = parse_request("use fp8", base)
    assert isinstance(fp8, TuneRequest) and fp8.constraints == ["precision in fp8,fp8-blockwise,mxfp8"]


def test_constraint_phrases_and_merge() -> None:
    found = extract_constraints("tp<=4, pp in 1,2, no recompute, headroom 10%, TP 8, zero != 3")
    assert found.rules == ["pp in 1,2", "zero!=3", "recompute=none", "headroom>=0.1", "tp=8"]
    assert merge_constraints(["tp<=4", "precision=bf16"], ["tp=8"]) == ["precision=bf16", "tp=8"]
    assert extract_constraints("precision=fp9").notes[0].startswith("ignored constraint 'precision=fp9'")
