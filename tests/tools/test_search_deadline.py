"""`run_search(deadline_s=...)` and `projtune search --deadline-s`: a search past its deadline stops and says
its result is partial (never a silent partial result)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from projtune.cli import app
from tools.constraints import Constraints
from tools.search import SearchRequest, run_search

REQUEST = SearchRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=8, gbs=32, seq_len=4096, top_k=3,
                        constraints=Constraints(precision="bf16", pp="<=2"))
SMALL = ["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--gbs", "32", "--seq-len", "4096",
         "-C", "precision=bf16", "-C", "pp<=2"]


def test_a_past_deadline_gives_a_partial_result_that_says_so() -> None:
    full = run_search(REQUEST, workers=1)
    partial = run_search(REQUEST, workers=1, deadline_s=0.0)
    assert full.complete and not partial.complete
    assert partial.enumerated == full.enumerated
    assert partial.projected + partial.pruned + partial.screened_out < full.enumerated
    assert partial.message is not None and "partial result" in partial.message
    assert f"of {full.enumerated:,} layouts" in partial.message


def test_a_generous_deadline_changes_nothing() -> None:
    full, bounded = run_search(REQUEST, workers=1), run_search(REQUEST, workers=1, deadline_s=600.0)
    assert bounded.complete and bounded.message == full.message
    assert (bounded.projected, bounded.pruned, bounded.screened_out) == (full.projected, full.pruned,
                                                                          full.screened_out)
    assert [c.layout for c in bounded.ranked] == [c.layout for c in full.ranked]


def test_cli_deadline_exit_code_json_and_notice() -> None:
    result = CliRunner().invoke(app, ["search", *SMALL, "--deadline-s", "0", "--json"])
    assert result.exit_code == 3, result.output
    data = json.loads(result.stdout)
    assert data["complete"] is False and "partial result" in data["message"]
    assert "partial result" in result.stderr
    complete = CliRunner().invoke(app, ["search", *SMALL, "--json"])
    assert complete.exit_code == 0 and json.loads(complete.stdout)["complete"] is True
