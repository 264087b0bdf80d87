"""What the request parser reads reaches the search: a LoRA job is searched and scored as LoRA, a packed one
with per-document attention."""

from __future__ import annotations

from agent.run import tune
from tools.search import SearchRequest, run_search


def test_lora_request_is_tuned_as_lora() -> None:
    report = tune("LoRA fine-tune Llama 3 8B on 8 H100, seq 4k, gbs 64, bf16 only").report
    assert report.request["finetune"] == "lora"
    assert report.best is not None and report.best.config["finetune"] == "lora"
    assert all(row.config["finetune"] == "lora" for row in report.top5)


def test_search_carries_the_jobs_finetune_mode() -> None:
    job = {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8, "gbs": 64, "seq_len": 4096}
    lora = run_search(SearchRequest(**job, finetune="lora", top_k=3))
    pre = run_search(SearchRequest(**job, top_k=3))
    assert all(c.config["finetune"] == "lora" for c in lora.ranked)
    assert all(c.config.get("finetune") is None for c in pre.ranked)
    # frozen base weights: no weight gradients or optimizer state, so LoRA projects faster per token
    assert lora.ranked[0].tokens_per_sec_per_gpu > pre.ranked[0].tokens_per_sec_per_gpu


PACKED = "SFT llama3 8b on 8 h100, seq 16k, gbs 16, packed 256-token documents"


def test_a_packed_request_is_tuned_packed_and_equals_the_search_best() -> None:
    report = tune(PACKED).report
    assert report.request["packed_document_tokens"] == 256
    assert report.best is not None and all(row.config["packed_document_tokens"] == 256 for row in report.top5)
    search = run_search(SearchRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=8, gbs=16, seq_len=16384,
                                      finetune="sft", packed_document_tokens=256, framework="megatron", top_k=1))
    assert report.best.config == search.ranked[0].config   # the agent's space is the search's (LayoutSpace.in_space)


def test_the_tune_tool_and_cli_take_the_packing_as_a_field_and_refuse_an_illegal_one() -> None:
    from typer.testing import CliRunner

    from agent.tool import call_tool
    from projtune.cli import app

    text = "SFT llama3 8b on 8 h100, seq 16k, gbs 16"
    out = call_tool("tune", {"request": text, "packed_document_tokens": 256, "max_rounds": 1})
    assert out["ok"] and out["result"]["report"]["best"]["config"]["packed_document_tokens"] == 256
    bad = call_tool("tune", {"request": text, "packed_document_tokens": 32768})
    assert not bad["ok"] and "32768 tokens per packed document is more than seq_len 16384" in bad["error"]["message"]
    runner = CliRunner()
    for value, says in (("32768", "32768 tokens per packed document is more than seq_len 16384"),
                        ("0", "out of range")):   # the count reader of every flag (projtune/count_option.py)
        result = runner.invoke(app, ["tune", text, "--offline", "--packed-document-tokens", value])
        assert result.exit_code == 2 and says in result.output, result.output
        assert "Traceback" not in result.output
