"""Chat follow-ups of issue 15: counts, settings, why #1 beats #3, going back, answers from history, export files,
progress on stderr and listing sessions."""

from __future__ import annotations

from pathlib import Path

from agent_jobs import SMALL_8
from typer.testing import CliRunner

from projtune.cli import app

runner = CliRunner()


def _chat(session: str, lines: list[str]):
    return runner.invoke(app, ["chat", "--offline", "--session", session, "--rounds", "1"],
                         input="\n".join([*lines, "exit"]) + "\n")


def test_follow_ups_change_compare_go_back_and_answer_from_history(tmp_path: Path) -> None:
    target = tmp_path / "launch" / "run.yaml"
    result = _chat("history", [SMALL_8, "what if I had 16?", "set gbs to 128", "why is #1 better than #3?",
                               "what was the best on 8 GPUs?", "what was the best on 32 GPUs?",
                               "go back to the previous one", f"export it for primus to {target}"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "llama3-8b on 16 x h100-sxm, gbs 64" in out                  # 'had 16' changed the count
    assert "llama3-8b on 16 x h100-sxm, gbs 128" in out                 # 'set gbs to 128'
    assert "faster: A TP" in out or "a tie:" in out                     # #1 vs #3 from the explain tool
    assert "On 8 x h100-sxm (from this session's history)" in out
    assert "No earlier run on 32 GPUs" in out                           # never tuned: said, not invented
    back = out.split("Back to the earlier run:\n", 1)[1]
    assert back.startswith("llama3-8b on 16 x h100-sxm, gbs 64")        # the run before gbs 128
    assert f"Wrote #1 for primus to {target}" in out
    assert "tensor_model_parallel_size" in target.read_text()
    assert "round 1:" in result.stderr                                   # progress while it works


def test_sessions_are_listed() -> None:
    assert _chat("listed-a", [SMALL_8]).exit_code == 0
    listed = runner.invoke(app, ["chat", "--list"])
    assert listed.exit_code == 0 and "listed-a" in listed.stdout.splitlines()


def test_export_to_run_sh_writes_an_executable_launcher(tmp_path: Path) -> None:
    """Issue 28: 'export to run.sh' writes a launcher bash can run (mode 755), not a flag list."""
    import os
    import subprocess

    target = tmp_path / "run.sh"
    result = _chat("runsh", [SMALL_8, f"export #1 to {target}"])
    assert result.exit_code == 0, result.output
    assert f"Wrote #1 for megatron to {target}" in result.stdout and "executable: bash" in result.stdout
    assert os.access(target, os.X_OK) and target.read_text().startswith("#!/bin/bash")
    subprocess.run(["bash", "-n", str(target)], check=True)
    assert "pretrain_gpt.py" in target.read_text()


def test_export_follow_ups_never_write_something_else_than_asked(tmp_path: Path) -> None:
    """'export it for torchtitn to x.toml' wrote a megatron script under another name (the misspelt framework
    dropped, the .toml path ignored); 'export it for primus to FOLDER' printed the YAML instead of writing it."""
    folder = tmp_path / "out"
    folder.mkdir()
    result = _chat("exports", [SMALL_8, f"export it for torchtitn to {tmp_path / 'x.toml'}",
                               f"export it to {tmp_path / 'x.toml'}", f"export it for primus to {folder}"])
    assert result.exit_code == 0, result.output
    assert "Unknown framework 'torchtitn'; did you mean torchtitan" in result.stdout
    assert ("the megatron export is one launcher script (its arguments are in it): give a .sh file or a folder, "
            "not 'x.toml'") in result.stdout
    assert not list(tmp_path.glob("*.sh")) and not (tmp_path / "x.toml").exists()
    assert f"Wrote #1 for primus to {folder}/" in result.stdout and list(folder.glob("*.primus.yaml"))


def test_a_question_asked_back_does_not_stick_to_the_next_follow_ups(tmp_path: Path) -> None:
    """Regression: after 'what if I only have 0?' was asked back, every later line ('what if I have 16?', 'export it
    for megatron') repeated 'num_gpus 0 is out of range' until a whole new request was typed."""
    from agent.policies.offline import OfflinePolicy
    from agent.text.session import ChatSession

    with ChatSession("unstick", OfflinePolicy(), path=tmp_path / "s.sqlite") as chat:
        assert "llama3-8b on 8 x h100-sxm" in chat.ask(SMALL_8)
        assert "num_gpus 0 is out of range" in chat.ask("what if I only have 0?")
        reply = chat.ask("what if I have 16?")
        assert "llama3-8b on 16 x h100-sxm, gbs 64" in reply and "out of range" not in reply, reply
        assert "left the open question" in reply                    # the dropped question is said, not silent
        assert "num_gpus 0 is out of range" in chat.ask("what if I only have 0?")
        reply = chat.ask("export it for megatron")
        assert reply.startswith("#1 for megatron") and "pretrain_gpt.py" in reply, reply
        assert "num_gpus 0 is out of range" in chat.ask("what if I only have 0?")
        assert "num_gpus 0 is out of range" in chat.ask("hmm")      # a line that answers nothing: the question again
        assert chat.values()["pending"] is not None
        assert "llama3-8b on 32 x h100-sxm" in chat.ask("what if I have 32 GPUs?")
        assert chat.values()["pending"] is None


def test_a_misspelt_precision_follow_up_is_asked_back_not_dropped(tmp_path: Path) -> None:
    """Regression: 'use fp9.' got "I did not catch a change" (the word was dropped); now the nearest precision is asked,
    as for 'with fp9' in a first request; 'recompute modules core_attn' is read as a change of the request."""
    from agent.policies.offline import OfflinePolicy
    from agent.text.session import ChatSession

    with ChatSession("fp9", OfflinePolicy(), path=tmp_path / "s.sqlite") as chat:
        chat.ask(SMALL_8)
        for line in ("use fp9", "use fp9."):
            reply = chat.ask(line)
            assert reply.startswith("Unknown precision 'fp9'; did you mean fp8?"), reply
        reply = chat.ask("recompute modules core_attn and mlp")
        assert "recompute_modules=core_attn,mlp, recompute=selective" in reply, reply
        assert "rc=selective[core_attn+mlp]" in reply
