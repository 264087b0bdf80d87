"""Chat sessions are safe to share (issue 13): one writer per session, a corrupt store set aside, turns never crash."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from agent.policies.offline import OfflinePolicy
from agent.text.session import ChatSession, SessionBusy, sessions_path
from projtune.cli import app

runner = CliRunner()


def test_a_second_writer_is_refused_clearly(tmp_path) -> None:
    """Regression: two `projtune chat --session X` at once lost turns."""
    store = tmp_path / "sessions.sqlite"
    with ChatSession("shared", OfflinePolicy(), path=store):
        with pytest.raises(SessionBusy) as err:
            ChatSession("shared", OfflinePolicy(), path=store, lock_wait_s=0.2)
        assert "is open in another projtune chat" in str(err.value) and "--session" in str(err.value)
        with ChatSession("other", OfflinePolicy(), path=store) as other:   # other sessions are free
            assert other.values() == {}
    with ChatSession("shared", OfflinePolicy(), path=store):             # released on close
        pass


def test_a_second_writer_waits_for_the_first(tmp_path) -> None:
    store = tmp_path / "sessions.sqlite"
    code = ("import time, sys; from pathlib import Path; from agent.text.session import ChatSession; "
            "from agent.policies.offline import OfflinePolicy; "
            f"s = ChatSession('w', OfflinePolicy(), path=Path({str(store)!r})); print('locked', flush=True); "
            "time.sleep(1.0); s.close()")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        start = time.monotonic()
        with ChatSession("w", OfflinePolicy(), path=store, lock_wait_s=20):
            waited = time.monotonic() - start
        assert waited > 0.2       # it waited for the holder (lock_wait_s bounds the wait: it raises past 20 s)
    finally:
        holder.wait(timeout=30)


def test_the_cli_refuses_a_busy_session_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROJTUNE_SESSION_LOCK_WAIT", "0.2")
    with ChatSession("busy", OfflinePolicy(), path=sessions_path()):
        result = runner.invoke(app, ["chat", "--offline", "--session", "busy"], input="exit\n")
    assert result.exit_code == 2
    assert "is open in another projtune chat" in result.output and "Traceback" not in result.output


def test_a_corrupt_store_is_reported_and_set_aside(tmp_path) -> None:
    """Regression: a corrupt sessions file gave raw sqlite errors."""
    store = tmp_path / "sessions.sqlite"
    store.write_bytes(b"this is not a database" * 100)
    with ChatSession("fresh", OfflinePolicy(), path=store) as chat:
        assert "unreadable" in chat.notice and "moved it to" in chat.notice
        assert chat.values() == {}
    assert list(tmp_path.glob("sessions.sqlite.corrupt-*"))


def test_the_cli_warns_about_a_corrupt_store() -> None:
    store = sessions_path()
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_bytes(b"\x00garbage" * 50)
    result = runner.invoke(app, ["chat", "--offline", "--session", "c"], input="exit\n")
    assert result.exit_code == 0, result.output
    assert "warning: the session store" in result.output and "Traceback" not in result.output


def test_zero_gpus_asks_back_and_the_chat_goes_on(tmp_path) -> None:
    """Regression: "on 0 h100" raised ZeroDivisionError and ended `projtune chat`."""
    with ChatSession("zero", OfflinePolicy(), path=tmp_path / "s.sqlite") as chat:
        reply = chat.ask("tune llama3 8b on 0 h100")
        assert "out of range" in reply
        assert "x" * 10 not in chat.ask("x" * 20_000)   # an over-long line is refused, not parsed


def test_an_export_path_that_cannot_be_written_is_one_line_and_the_chat_goes_on(tmp_path) -> None:
    """Regression: the reply quoted the exception's repr ("FileNotFoundError: [Errno 2] ...")."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with ChatSession("export", OfflinePolicy(), path=tmp_path / "s.sqlite") as chat:
        chat.ask("tune llama3 8b on 8 h100")
        reply = chat.ask(f"export it to {blocker}/run.sh")
        assert reply.startswith("error: ") and str(blocker) in reply and reply.endswith("; the session goes on"), reply
        assert "Errno" not in reply and "Error:" not in reply     # the OS's reason, not an exception repr
        assert "export" in chat.ask(f"export it to {tmp_path}/run.sh").lower() or (tmp_path / "run.sh").exists()


@pytest.mark.parametrize("args", [["chat", "--list"], ["chat", "--session", "x"]])
def test_a_home_that_is_a_file_is_one_line(tmp_path, args: list[str]) -> None:
    """`chat --list` said "no saved sessions" and `chat` "File exists: ..." for PROJTUNE_HOME naming a file."""
    home = tmp_path / "home-file"
    home.write_text("")
    result = CliRunner().invoke(app, args, env={"PROJTUNE_HOME": str(home)}, input="exit\n")
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: the chat sessions' folder {home} ($PROJTUNE_HOME, default ~/.projtune) "
                                     "is a file; set PROJTUNE_HOME to a folder")


def test_an_empty_session_name_is_refused_and_a_new_name_is_never_a_saved_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """`chat -s ""` started a default-named session (an empty name read as "none"); a chat started in the same
    second as a saved one got that one's timestamped name and "resumed" it as new."""
    result = runner.invoke(app, ["chat", "--offline", "--session", ""], input="exit\n")
    assert result.exit_code == 2 and result.stderr.strip() == "error: session name must be 1-200 characters"
    monkeypatch.setattr("agent.text.session.time.strftime", lambda fmt: "chat-20261202-120000")
    assert ChatSession.new_name() == "chat-20261202-120000"
    assert ChatSession.new_name(["chat-20261202-120000", "chat-20261202-120000-2"]) == "chat-20261202-120000-3"
