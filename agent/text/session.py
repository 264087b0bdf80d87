"""Chat sessions: a one-node LangGraph graph over :class:`agent.text.followups.ChatTurns`, persisted in SQLite.

A session is a LangGraph thread (``thread_id`` = session name) checkpointed by
``langgraph.checkpoint.sqlite.SqliteSaver`` in ``$PROJTUNE_HOME/sessions.sqlite`` (default
``~/.projtune/sessions.sqlite``).  The state keeps every turn, the last request and report, and
an open question, so ``projtune chat --session NAME`` resumes where the user left off.  Each
tuning run inside a turn is its own (uncheckpointed) run of the tuning graph.

One writer per session: a ``ChatSession`` holds an exclusive lock (``fcntl.flock`` on
``$PROJTUNE_HOME/locks/<session>.lock``) while open; a second process waits up to
``lock_wait_s`` (default ``$PROJTUNE_SESSION_LOCK_WAIT`` or 5 s) and is then refused with
:class:`SessionBusy` (which says what to do).  A store that SQLite cannot read is moved aside
to ``sessions.sqlite.corrupt-<time>`` and a fresh one started; ``notice`` says so (the CLI
prints it).  A turn that fails answers with the error and the session goes on (not saved).
"""

from __future__ import annotations

import hashlib
import operator
import os
import re
import sqlite3
import time
from collections.abc import Collection
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from agent.text.followups import ChatTurns
from agent.policies import Policy
from agent.state import RunOptions
from projection.errors import ProjtuneError

SESSIONS_FILE = "sessions.sqlite"
LOCK_WAIT_S = 5.0
"""SQLite's own busy timeout on the store, seconds (the session lock's wait is a setting)."""
MAX_LINE_CHARS = 8000


class SessionBusy(ProjtuneError):
    """Another process has the session open (one writer per session)."""


def _wait_from_env() -> float:
    """Seconds a second writer waits: ``$PROJTUNE_SESSION_LOCK_WAIT`` or 5 (projection/settings.py)."""
    from projection.settings import load_settings

    return load_settings().session_lock_wait


def _lock_file(store: Path, name: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60]
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    return store.parent / "locks" / f"{safe}-{digest}.lock"


def acquire_lock(path: Path, name: str, wait_s: float) -> int:
    """An exclusive lock on ``path`` (an open fd), waiting up to ``wait_s``.

    Raises:
        SessionBusy: still held by another process after ``wait_s``.
    """
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    ends = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() >= ends:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
                os.close(fd)
                raise SessionBusy(f"session '{name}' is open in another projtune chat (pid {holder}); close that "
                                  f"one first, or pick another name with --session") from None
            time.sleep(0.05)
            continue
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        return fd


def open_store(path: Path) -> tuple[sqlite3.Connection, str]:
    """A connection to the session store and a notice ('' when it was fine).

    A file SQLite cannot read (not a database, malformed) is renamed to
    ``<name>.corrupt-<time>`` and a fresh store is started.
    """
    notice = ""
    for attempt in (0, 1):
        conn = sqlite3.connect(str(path), check_same_thread=False, timeout=LOCK_WAIT_S)
        try:
            conn.execute("PRAGMA schema_version").fetchone()
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            for table in tables:   # touch each table: a damaged page raises here, not mid-session
                conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()
            return conn, notice
        except sqlite3.DatabaseError as err:
            conn.close()
            if attempt:
                raise ProjtuneError(f"session store {path} cannot be opened: {err}") from err
            aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
            path.rename(aside)
            notice = (f"the session store {path} was unreadable ({err}); moved it to {aside} and started a "
                      "fresh one")
    raise AssertionError("unreachable")


class ChatState(TypedDict, total=False):
    """One chat session."""

    line: str
    """The user's latest line (input of a turn)."""
    reply: str
    """The answer to the latest line."""
    turns: Annotated[list[dict[str, str]], operator.add]
    """Every turn so far: {"user": ..., "reply": ...}."""
    request: dict[str, Any] | None
    """The last request that was tuned (a TuneRequest dict); follow-ups change it."""
    report: dict[str, Any] | None
    """The last TuneReport (dict); questions about "#2" or "it" refer to it."""
    pending: dict[str, Any] | None
    """An open clarification (its partial request), answered by the next line."""
    history: Annotated[list[dict[str, Any]], operator.add]
    """Every tuned run of the session, in order: {"request": ..., "report": ...} ("go back", "best on 64")."""


def sessions_path() -> Path:
    """The SQLite file of the chat sessions ($PROJTUNE_HOME or ~/.projtune).

    Raises:
        ProjtuneError: the folder is a file (`chat --list` said "no saved sessions", `chat` "File exists").
    """
    from projection.settings import load_settings

    home = load_settings().home
    folder = home.expanduser() if home else Path.home() / ".projtune"
    if folder.exists() and not folder.is_dir():
        raise ProjtuneError(f"the chat sessions' folder {folder} ($PROJTUNE_HOME, default ~/.projtune) is a file; "
                            "set PROJTUNE_HOME to a folder")
    return folder / SESSIONS_FILE


def build_chat_graph(turns: ChatTurns, checkpointer: Any = None) -> Any:
    """START -> respond -> END over ChatState; ``respond`` answers one line."""

    def respond(state: ChatState) -> dict[str, Any]:
        turn = turns.respond(state.get("line", ""), state.get("request"), state.get("report"), state.get("pending"),
                             history=state.get("history") or [])
        update: dict[str, Any] = {"reply": turn.reply, "pending": turn.pending,
                                  "turns": [{"user": state.get("line", ""), "reply": turn.reply}]}
        if turn.request is not None:
            update["request"], update["report"] = turn.request, turn.report
            if turn.record and turn.report is not None:
                update["history"] = [{"request": turn.request, "report": turn.report}]
        return update

    builder = StateGraph(ChatState)
    builder.add_node("respond", respond)
    builder.add_edge(START, "respond")
    builder.add_edge("respond", END)
    return builder.compile(checkpointer=checkpointer, name="projtune-chat")


def list_sessions(path: Path | None = None) -> list[str]:
    """Names of the saved chat sessions (the checkpointer's thread ids), oldest first; [] without a store."""
    path = path or sessions_path()
    if not path.exists():
        return []
    conn, _ = open_store(path)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "checkpoints" not in tables:
            return []
        rows = conn.execute("SELECT thread_id, MIN(rowid) FROM checkpoints GROUP BY thread_id ORDER BY 2").fetchall()
        return [r[0] for r in rows]
    finally:
        conn.close()


class ChatSession:
    """A named, persisted chat session."""

    def __init__(self, name: str, policy: Policy, *, path: Path | None = None, options: RunOptions | None = None,
                 budget: dict[str, float] | None = None, lock_wait_s: float | None = None) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        if not name or len(name) > 200:
            raise ProjtuneError("session name must be 1-200 characters")
        self.name = name
        self.path = path or sessions_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.policy = policy
        wait = lock_wait_s if lock_wait_s is not None else _wait_from_env()
        self._lock_fd: int | None = acquire_lock(_lock_file(self.path, name), name, wait)
        try:
            self._conn, self.notice = open_store(self.path)
        except BaseException:
            self._release()
            raise
        self.graph = build_chat_graph(ChatTurns(policy, options or RunOptions(), budget), SqliteSaver(self._conn))
        self._config = {"configurable": {"thread_id": name}, "recursion_limit": 5}

    def _release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)   # closing the fd drops the flock
            self._lock_fd = None

    @staticmethod
    def new_name(taken: Collection[str] = ()) -> str:
        """A fresh session name, e.g. chat-20261130-061500; ``-2``, ``-3``, ... added while it is one of ``taken``
        (a chat started in the same second as a saved one would have resumed it as "new")."""
        base = name = time.strftime("chat-%Y%m%d-%H%M%S")
        suffix = 2
        while name in taken:
            name, suffix = f"{base}-{suffix}", suffix + 1
        return name

    def values(self) -> dict[str, Any]:
        """The session's saved state (empty for a new session)."""
        return dict(self.graph.get_state(self._config).values or {})

    def ask(self, line: str) -> str:
        """Answer one line (and save the turn); a turn that fails answers with the error and is not saved."""
        client = getattr(self.policy, "client", None)
        if callable(getattr(client, "begin", None)):
            client.begin()   # each turn gets the LLM's whole per-tune deadline
        if len(line) > MAX_LINE_CHARS:
            return f"That line is {len(line)} characters; at most {MAX_LINE_CHARS} are read."
        try:
            out = self.graph.invoke({"line": line}, self._config)
        except sqlite3.DatabaseError as err:
            return f"error: the session store failed ({err}); this turn was not saved"
        except ProjtuneError as err:
            return f"error: {err}; the session goes on"
        except OSError as err:    # e.g. "export it to /no/such/dir/run.sh": the OS's reason, not a repr
            where = f": {err.filename}" if err.filename else ""
            return f"error: {err.strerror or type(err).__name__}{where}; the session goes on"
        except Exception as err:  # noqa: BLE001 - one bad turn must not end the chat
            return f"error: could not answer that ({type(err).__name__}: {str(err)[:300]}); the session goes on"
        return str(out.get("reply", ""))

    def close(self) -> None:
        """Close the SQLite connection and release the session lock."""
        try:
            self._conn.close()
        finally:
            self._release()

    def __enter__(self) -> ChatSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
