"""`projtune chat` through stdin: follow-ups, and a session resumed with --session remembers earlier turns."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from projtune.cli import app

runner = CliRunner()
FIRST = "tune llama3 8b on 8 h100, gbs 64, precision=bf16, zero=1, mbs<=2"


def replies(output: str) -> list[str]:
    return [block for block in output.split("\n\n") if block.strip()]


def test_follow_ups() -> None:
    lines = [FIRST, "what if I only have 4?", "why not TP 8?", "why not tp 2?", "show memory of #2",
             "export it for primus", "use fp8", "seq 16k", "compare #1 and #2", "exit"]
    result = runner.invoke(app, ["chat", "--offline", "--session", "follow"], input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "llama3-8b on 8 x h100-sxm" in out and "Best: " in out
    assert "llama3-8b on 4 x h100-sxm" in out and "for the job" in out
    assert "'tp=8' excludes every legal layout" in out                     # 4 GPUs: TP 8 cannot exist
    assert re.search(r"The best layout with tp=2 is TP2 .* slower than|already satisfies tp=2", out)
    assert "Memory of #2" in out and "stage 0:" in out
    assert "for primus" in out and "tensor_model_parallel_size" in out   # torchtitan refuses zero=1 layouts
    assert "precision in fp8,fp8-blockwise,mxfp8" in out and " fp8 rc=" in out
    assert "seq 16384" in out
    assert "faster" in out.split("compare")[-1] or "a tie" in out


def test_resumed_session_remembers_earlier_turns() -> None:
    first = runner.invoke(app, ["chat", "--offline", "--session", "s1"], input=f"{FIRST}\nexit\n")
    assert first.exit_code == 0 and "llama3-8b on 8 x h100-sxm" in first.stdout
    again = runner.invoke(app, ["chat", "--offline", "--session", "s1"], input="what if I only have 4?\n")
    assert again.exit_code == 0, again.output
    assert "resumed session s1 (1 turns; last request: llama3-8b on 8 x h100-sxm)" in again.output
    assert "llama3-8b on 4 x h100-sxm" in again.stdout and "Compared with before (8 x h100-sxm" in again.stdout


def test_questions_back_and_answers() -> None:
    result = runner.invoke(app, ["chat", "--offline", "--session", "ask"],
                           input="tune llama 8b on 4 h100, gbs 64, zero=1, mbs<=2, precision=bf16\nllama3.1\n"
                                 "something unclear\n")
    assert result.exit_code == 0, result.output
    blocks = replies(result.stdout)
    assert "Which model do you mean by 'llama 8b': llama2-7b" not in blocks[0]
    assert "llama3-8b, llama3.1-8b" in blocks[0]
    assert blocks[1].startswith("llama3.1-8b on 4 x h100-sxm")
    assert "did not catch a change" in blocks[2]
