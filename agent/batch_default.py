"""The default global batch of a request that names none: a token count scaled to the model, then sequences.

Tokens per step grow with the model (larger models train stably on larger batches, and published
recipes use them); the count is divided by the sequence length, so long context gets fewer, longer
sequences instead of 33.5M tokens per step (256 sequences of 128k).  Published tokens per step:

- GPT-3 (Brown et al. 2020, Table 2.1): 0.5M tokens (125M-350M), 1M (760M-2.7B), 2M (6.7B-13B),
  3.2M (175B).
- Llama 2 (Touvron et al. 2023, section 2.2): 4M tokens for 7B-70B.
- DeepSeek-V3 (671B total, 37B active): AMD-AGI/Primus ``examples/megatron/configs/MI355X/
  deepseek_v3-FP8-pretrain.yaml`` 4096 x 4096 = 16.8M tokens on 256 MI355X; Megatron-Bridge 26.02
  performance presets 2048-4096 x 4096 (8.4M-16.8M) on 256 B200/GB200 and 8192 x 4096 (33.5M) on
  1,024 H100; the DeepSeek-V3 report (section 4.2) ramps 3,072 -> 15,360 sequences of 4K
  (12.6M -> 62.9M tokens).

Floor: one sequence per 8 GPUs (a node-sized model-parallel group per data-parallel replica), so a large
cluster is not starved: 16,384 GPUs at 8K get at least 2,048 sequences (16.8M tokens).

The sequence count is rounded to a multiple of the largest divisor of the GPU count not above it, so every
data-parallel degree up to that divisor divides the batch.
"""

from __future__ import annotations

from projection.model_spec import ModelSpec
from projection.params import total_params
from projection.training_config import MAX_GBS

MIB_TOKENS = 1024 ** 2
# (models up to this many total parameters, tokens per step, the recipe the step is read from)
TOKENS_BY_MODEL_SIZE: tuple[tuple[float, int, str], ...] = (
    (1e9, MIB_TOKENS // 2, "GPT-3 125M-760M: 0.5M-1M tokens"),
    (20e9, 2 * MIB_TOKENS, "GPT-3 6.7B-13B: 2M tokens"),
    (200e9, 4 * MIB_TOKENS, "Llama 2 7B-70B: 4M tokens; GPT-3 175B: 3.2M"),
    (float("inf"), 16 * MIB_TOKENS, "DeepSeek-V3 671B: 16.8M tokens (Primus MI355X, Megatron-Bridge B200 presets)"),
)
GPUS_PER_SEQUENCE_FLOOR = 8


def default_batch_tokens(model: ModelSpec) -> tuple[int, str]:
    """Tokens per step for ``model`` and the published recipe the size class follows."""
    params = total_params(model)
    for limit, tokens, source in TOKENS_BY_MODEL_SIZE:
        if params <= limit:
            return tokens, source
    return TOKENS_BY_MODEL_SIZE[-1][1], TOKENS_BY_MODEL_SIZE[-1][2]   # unreachable: the last limit is inf


def largest_divisor_at_most(n: int, bound: int) -> int:
    """The largest divisor of ``n`` that is at most ``bound`` (1 at least)."""
    best = 1
    d = 1
    while d * d <= n:
        if n % d == 0:
            for c in (d, n // d):
                if best < c <= bound:
                    best = c
        d += 1
    return best


def default_gbs(model: ModelSpec, num_gpus: int, seq_len: int) -> tuple[int, str]:
    """The default global batch in sequences and the one-line assumption that explains it."""
    tokens, source = default_batch_tokens(model)
    floor = -(-num_gpus // GPUS_PER_SEQUENCE_FLOOR)
    target = max(1, round(tokens / seq_len), floor)
    unit = largest_divisor_at_most(num_gpus, target)
    gbs = min(MAX_GBS, unit * max(1, round(target / unit)))
    why = f"{tokens / MIB_TOKENS:g}M tokens per step for a {total_params(model) / 1e9:,.0f}B-parameter model ({source})"
    if floor > round(tokens / seq_len):
        why = f"one sequence per {GPUS_PER_SEQUENCE_FLOOR} GPUs (more than {why})"
    note = (f"assumed gbs={gbs} x seq_len {seq_len} = {gbs * seq_len / MIB_TOKENS:,.1f}M tokens per step: {why}, "
            f"rounded to a multiple of {unit}; say 'gbs N' or '4M tokens per step' to change it")
    return gbs, note
