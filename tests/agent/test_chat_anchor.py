"""Chat closes the loop: "I ran it, here is the log: PATH" re-tunes the last request anchored on that run."""

from __future__ import annotations

import sys
from pathlib import Path

from agent.text.followups import ChatTurns, _run_paths
from agent.policies.offline import OfflinePolicy
from agent.state import RunOptions
from projtune.commands.agent_cmd import _read_anchor_dicts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from test_anchor_log_to_answer import _megatron_log  # noqa: E402 - the shared Megatron-LM log writer


def test_a_line_pointing_at_a_log_is_read_as_runs(tmp_path) -> None:
    log = _megatron_log(tmp_path / "node.log", 6000.0)
    assert _run_paths(f"I ran it, here is the log: {log}") == [str(log)]
    assert _run_paths("what if I only have 32?") == []
    assert _run_paths(f"tune llama3 8b on 8 h100 {tmp_path / 'missing.log'}") == []


def test_i_ran_it_reanchors_the_last_request(tmp_path) -> None:
    log = _megatron_log(tmp_path / "node.log", 6000.0)
    turns = ChatTurns(OfflinePolicy(), RunOptions(read_anchors=_read_anchor_dicts), {"max_rounds": 1})
    first = turns.respond("tune llama3 8b on 64 h100, seq 8k, gbs 256", None, None, None)
    assert first.report and first.report["anchoring"] is None
    second = turns.respond(f"I ran it, here is the log: {log}", first.request, first.report, None)
    assert second.reply.startswith("Anchored: anchored on 1 measured run")
    assert second.request["anchors"][0]["label"].startswith("node.log")
    assert second.report["anchoring"]["corrections"]["compute_factor"] > 1
    best_before = first.report["best"]["tokens_per_sec_per_gpu"]
    assert second.report["best"]["tokens_per_sec_per_gpu"] < best_before   # the run was slower than projected


def test_without_a_reader_chat_says_so(tmp_path) -> None:
    log = _megatron_log(tmp_path / "node.log", 6000.0)
    turns = ChatTurns(OfflinePolicy(), RunOptions(), {"max_rounds": 1})
    request = {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8, "gbs": 32, "seq_len": 8192}
    assert "--anchor" in turns.respond(f"here is the log {log}", request, None, None).reply
