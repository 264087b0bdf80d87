"""Packed fine-tuning documents as a job property of the search (SearchRequest.packed_document_tokens).

Like ``finetune``, the mean document length is the job's, not a knob: every enumerated layout carries it, the
search's membership test (``in_space``) requires it, and the per-document attention it implies
(projection/workload.py ``_document_keys``) makes long-sequence layouts faster.  A value outside 1..seq_len is
refused by TrainingConfig's own rule, with one line naming both values (API and CLI alike).
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from projection.hardware import load_hardware
from projection.model_spec import load_model
from projection.training_config import Cluster
from projtune.cli import app
from tools.candidates import SearchSpace, in_space
from tools.candidate_columns import enumerate_candidates
from tools.constraints import Constraints
from tools.registry import call_tool
from tools.search import SearchRequest, run_search

# A long-sequence fine-tuning job: at 16k tokens full causal attention is a large share of the step.
JOB = {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8, "gbs": 16, "seq_len": 16384, "finetune": "sft"}
runner = CliRunner()


def test_packed_search_projects_faster_and_every_layout_carries_the_field() -> None:
    full = run_search(SearchRequest(**JOB, top_k=5), workers=1)
    packed = run_search(SearchRequest(**JOB, top_k=5, packed_document_tokens=256), workers=1)
    assert packed.enumerated == full.enumerated       # the same layouts: packing is the job's, not an axis
    assert packed.ranked and packed.pareto
    assert all(c.config["packed_document_tokens"] == 256 for c in packed.ranked + packed.pareto)
    assert all(c.config.get("packed_document_tokens") is None for c in full.ranked)
    # 256-token documents attend ~128 keys per query instead of ~8k: attention is far cheaper
    assert packed.ranked[0].tokens_per_sec_per_gpu > 1.2 * full.ranked[0].tokens_per_sec_per_gpu


def test_the_enumeration_and_in_space_agree_on_the_jobs_packing() -> None:
    model, hardware = load_model("llama3-8b"), load_hardware("h100-sxm")
    cluster = Cluster(gpu="h100-sxm", num_gpus=8)
    space = SearchSpace(model=model, hardware=hardware, cluster=cluster, constraints=Constraints(), gbs=16,
                        seq_len=4096)
    configs = list(enumerate_candidates(model, hardware, cluster, Constraints(), 16, 4096, "sft",
                                        packed_document_tokens=512))
    assert configs and all(c.packed_document_tokens == 512 for c in configs)
    assert all(in_space(space, c, "sft", 512) for c in configs)
    unpacked = configs[0].model_copy(update={"packed_document_tokens": None})
    assert not in_space(space, unpacked, "sft", 512) and in_space(space, unpacked, "sft")
    assert not in_space(space, configs[0], "sft")


def test_explicit_candidates_take_the_jobs_packing_unless_they_give_their_own() -> None:
    layout = {"tp": 2, "pp": 1, "mbs": 1, "zero": 3, "sequence_parallel": True}
    result = run_search(SearchRequest(**JOB, packed_document_tokens=256,
                                      candidates=[layout, {**layout, "packed_document_tokens": 1024}]), workers=1)
    assert sorted(c.config["packed_document_tokens"] for c in result.ranked) == [256, 1024]


def test_explicit_candidates_take_the_jobs_fine_tuning_mode() -> None:
    # LoRA freezes the base weights (no Adam states or fp32 gradients for them): the layout that a full fine-tune
    # cannot fit on 8 H100 fits as LoRA, and is projected as the job says, not as pre-training
    job = {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8, "gbs": 32, "seq_len": 4096}
    layout = {"tp": 1, "pp": 1, "mbs": 1, "zero": 1}
    full = run_search(SearchRequest(**job, candidates=[layout]), workers=1)
    lora = run_search(SearchRequest(**job, finetune="lora", candidates=[layout]), workers=1)
    assert not full.ranked and "memory screen" in (full.message or "")
    assert [c.config.get("finetune") for c in lora.ranked] == ["lora"]


@pytest.mark.parametrize(("value", "says"), [
    (32768, "32768 tokens per packed document is more than seq_len 16384"),
    (0, "greater than or equal to 1"),
])
def test_an_illegal_packing_is_a_structured_error(value: int, says: str) -> None:
    out = call_tool("search", {**JOB, "packed_document_tokens": value})
    assert not out["ok"]
    assert out["error"]["field"] == "packed_document_tokens" and says in out["error"]["message"]


SEARCH = ["search", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--gbs", "16", "--seq-len", "4096"]
PROJECT = ["project", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--mbs", "1", "--gbs", "16",
           "--seq-len", "4096"]


@pytest.mark.parametrize("command", [SEARCH, PROJECT], ids=["search", "project"])
@pytest.mark.parametrize(("value", "says"), [
    ("8192", "8192 tokens per packed document is more than seq_len 4096"),
    ("0", "out of range"),   # the count reader of every flag (projtune/count_option.py)
])
def test_the_cli_refuses_an_illegal_packing_in_one_line(command: list[str], value: str, says: str) -> None:
    result = runner.invoke(app, [*command, "--packed-document-tokens", value])
    assert result.exit_code == 2, result.output
    assert says in result.output and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_the_cli_search_and_project_take_the_packing() -> None:
    import json

    searched = runner.invoke(app, [*SEARCH, "--packed-document-tokens", "256", "--top", "2", "--json"])
    assert searched.exit_code == 0, searched.output
    ranked = json.loads(searched.stdout)["ranked"]
    assert ranked and all(c["config"]["packed_document_tokens"] == 256 for c in ranked)
    full = json.loads(runner.invoke(app, [*PROJECT, "--json"]).stdout)
    packed = json.loads(runner.invoke(app, [*PROJECT, "--packed-document-tokens", "256", "--json"]).stdout)
    assert packed["config"]["packed_document_tokens"] == 256
    assert packed["tokens_per_sec_per_gpu"] > full["tokens_per_sec_per_gpu"]
