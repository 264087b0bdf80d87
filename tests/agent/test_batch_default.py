"""The default global batch is a token count scaled to the model and divided by the sequence length."""

from __future__ import annotations

import pytest

from agent.batch_default import default_gbs, largest_divisor_at_most
from agent.text.request import TuneRequest, parse_request
from projection.model_spec import load_model


@pytest.mark.parametrize(("model", "gpus", "seq", "gbs"), [
    ("deepseek-v3", 256, 4096, 4096),          # 16M tokens: Primus MI355X recipe's 4096 x 4096, 16 sequences per GPU
    ("deepseek-v3", 256, 131072, 128),         # the same tokens at 128k: 128 sequences, not 256 x 128k = 33.5M
    ("llama3.1-405b", 16384, 8192, 2048),      # 16M tokens, also the floor of one sequence per 8 GPUs
    ("llama3-70b", 64, 8192, 512),             # 4M tokens (Llama 2 70B)
    ("llama3-8b", 8, 8192, 256),               # 2M tokens
    ("llama3-8b", 4096, 8192, 512),            # floor: 4096 / 8 GPUs per sequence
])
def test_tokens_per_step_scale_with_the_model(model: str, gpus: int, seq: int, gbs: int) -> None:
    got, note = default_gbs(load_model(model), gpus, seq)
    assert got == gbs, note
    assert "tokens per step" in note and f"gbs={gbs}" in note


def test_the_batch_divides_by_data_parallel_degrees() -> None:
    gbs, _ = default_gbs(load_model("llama3-70b"), 24, 8192)
    assert gbs % 24 == 0
    assert largest_divisor_at_most(1024, 300) == 256 and largest_divisor_at_most(97, 50) == 1


def test_the_request_states_the_assumption() -> None:
    request = parse_request("tune DeepSeek-V3 on 256 MI355X")
    assert isinstance(request, TuneRequest)
    assert request.gbs == 4096 and "gbs" in request.assumed
    assert any("16M tokens per step" in n and "DeepSeek-V3" in n for n in request.notes)
    long = parse_request("tune DeepSeek-V3 on 256 MI355X seq 128k")
    assert isinstance(long, TuneRequest) and long.gbs * long.seq_len == 16 * 1024 ** 2
