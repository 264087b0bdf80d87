"""What the request parser reads reaches the search: a LoRA job is searched and scored as LoRA."""

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
