"""Numbers in requests (issue 29): a table of the forms people write and what they mean; the rest is asked back.

Every row is (text, expected fields) or (text, ASK): a Clarification whose question names the problem.
A digit inside a name (H100, GB200, MI300X, Llama 3, Qwen3-235B) is never a count.
"""

from __future__ import annotations

import pytest

from agent.text.request import Clarification, TuneRequest, parse_request

ASK = None
BASE = "tune llama3 8b on {n} h100"
FORMS: list[tuple[str, dict[str, int] | None]] = [
    ("tune llama3 8b on 8,192 h100", {"num_gpus": 8192}),
    ("tune llama3 8b on 8 192 h100", {"num_gpus": 8192}),
    ("tune llama3 8b on 8_192 h100", {"num_gpus": 8192}),
    ("tune llama3 8b on 1e3 h100", {"num_gpus": 1000}),
    ("tune llama3 8b on 2^6 h100", {"num_gpus": 64}),
    ("tune llama3 8b on 2**13 h100", {"num_gpus": 8192}),
    ("tune llama3 8b on 4 096 h100", {"num_gpus": 4096}),
    ("tune llama3 8b on 2k h100", {"num_gpus": 2048}),
    ("tune llama3 8b on sixty-four H100 GPUs", {"num_gpus": 64}),
    ("tune llama3 8b on eight h100", {"num_gpus": 8}),
    ("tune llama3 8b on one hundred twenty-eight h100", {"num_gpus": 128}),
    ("tune llama3 8b on 64 h100 gpus", {"num_gpus": 64}),
    ("tune llama3 8b on h100 x 16", {"num_gpus": 16}),
    ("tune llama3 8b on 16xh100", {"num_gpus": 16}),
    ("tune llama3 8b on 8x h100", {"num_gpus": 8}),
    ("tune llama3 8b on h100 x8", {"num_gpus": 8}),
    ("tune llama3 8b on MI300X*16", {"num_gpus": 16}),
    ("tune mixtral 8x7b on 8 h100", {"num_gpus": 8}),
    ("tune llama3 8b on 64 h100, seq 1,000", {"num_gpus": 64, "seq_len": 1000}),
    ("tune llama3 8b on 64 h100, gbs 4,096", {"num_gpus": 64, "gbs": 4096}),
    ("tune llama3 8b on 64 h100, seq 8k, gbs 512", {"seq_len": 8192, "gbs": 512}),
    ("tune llama3 8b on 64 h100, seq 2^13", {"seq_len": 8192}),
    ("tune llama3 8b on 64 h100, seq_len=8192", {"seq_len": 8192}),
    ("tune llama3 8b on 64 h100, 8k context", {"seq_len": 8192}),
    ("tune llama3 8b on 64 h100, global batch 1e3", {"gbs": 1000}),
    ("tune llama3 8b on 64 h100 with pp in 1,2,4", {"num_gpus": 64}),
    ("tune qwen3-235b-a22b on 256 h100", {"num_gpus": 256}),
    ("tune llama3 70b on 2 nodes of gb200", {"num_gpus": 8}),
    ("tune llama3 8b on 64 mi300x", {"num_gpus": 64}),
    # asked back, never guessed
    ("tune llama3 8b on 0x40 h100", ASK),
    ("tune llama3 8b on -64 h100", ASK),
    ("tune llama3 8b on 8.5 h100", ASK),
    ("tune llama3 8b on NaN GB200 GPUs", ASK),
    ("tune llama3 8b on inf h100", ASK),
    ("tune llama3 8b on 64 h100, actually 128 h100", ASK),
    ("tune llama3 8b on 64 h100, actually 128", ASK),
    ("tune llama3 8b on 64 h100, seq 8kk", ASK),
    ("tune llama3 8b on 64 h100, seq NaN", ASK),
    ("tune llama3 8b on 64 h100, gbs -64", ASK),
    ("tune llama3 8b on 64 h100, seq 4k, seq 8k", ASK),
    ("tune llama3 8b on 64 h100, gbs 1.5", ASK),
    ("tune llama3 8b on ٣ h100", ASK),
    ("tune llama3 8b on gb200 gpus", ASK),
    ("tune llama3 8b on mi300x", ASK),
]


@pytest.mark.parametrize(("text", "meaning"), FORMS, ids=[t for t, _ in FORMS])
def test_request_numbers_mean_what_people_write(text: str, meaning: dict[str, int] | None) -> None:
    parsed = parse_request(text)
    if meaning is ASK:
        assert isinstance(parsed, Clarification), parsed
        assert "Could not read" not in parsed.question
        return
    assert isinstance(parsed, TuneRequest), parsed
    assert {k: getattr(parsed, k) for k in meaning} == meaning


@pytest.mark.parametrize("name", ["h100", "gb200", "mi300x", "b200", "mi355x", "h200", "gb300", "a100"])
def test_a_digit_in_a_gpu_name_is_never_a_count(name: str) -> None:
    for text in (f"tune llama3 8b on {name} gpus", f"tune llama3 8b on {name}", f"tune llama 3 8b on {name} GPUs"):
        parsed = parse_request(text)
        assert isinstance(parsed, Clarification) and "num_gpus" not in parsed.partial, (text, parsed)
