"""Chat sessions: a one-node LangGraph graph over :class:`agent.followups.ChatTurns`, persisted in SQLite.

A session is a LangGraph thread (``thread_id`` = session name) checkpointed by
``langgraph.checkpoint.sqlite.SqliteSaver`` in ``$PROJTUNE_HOME/sessions.sqlite`` (default
``~/.projtune/sessions.sqlite``).  The state keeps every turn, the last request and report, and
an open question, so ``projtune chat --session NAME`` resumes where the user left off.  Each
tuning run inside a turn is its own (uncheckpointed) run of the tuning graph.
"""

from __future__ import annotations

import operator
import os
import sqlite3
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from agent.followups import ChatTurns
from agent.policies import Policy
from agent.state import RunOptions

SESSIONS_FILE = "sessions.sqlite"


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


def sessions_path() -> Path:
    """The SQLite file of the chat sessions ($PROJTUNE_HOME or ~/.projtune)."""
    home = os.environ.get("PROJTUNE_HOME")
    return (Path(home) if home else Path.home() / ".projtune") / SESSIONS_FILE


def build_chat_graph(turns: ChatTurns, checkpointer: Any = None) -> Any:
    """START -> respond -> END over ChatState; ``respond`` answers one line."""

    def respond(state: ChatState) -> dict[str, Any]:
        turn = turns.respond(state.get("line", ""), state.get("request"), state.get("report"), state.get("pending"))
        update: dict[str, Any] = {"reply": turn.reply, "pending": turn.pending,
                                  "turns": [{"user": state.get("line", ""), "reply": turn.reply}]}
        if turn.request is not None:
            update["request"], update["report"] = turn.request, turn.report
        return update

    builder = StateGraph(ChatState)
    builder.add_node("respond", respond)
    builder.add_edge(START, "respond")
    builder.add_edge("respond", END)
    return builder.compile(checkpointer=checkpointer, name="projtune-chat")


class ChatSession:
    """A named, persisted chat session."""

    def __init__(self, name: str, policy: Policy, *, path: Path | None = None, options: RunOptions | None = None,
                 budget: dict[str, float] | None = None) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.name = name
        self.path = path or sessions_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False)
        self.graph = build_chat_graph(ChatTurns(policy, options or RunOptions(), budget), SqliteSaver(self._conn))
        self._config = {"configurable": {"thread_id": name}, "recursion_limit": 5}

    @staticmethod
    def new_name() -> str:
        """A fresh session name, e.g. chat-20261130-061500."""
        return time.strftime("chat-%Y%m%d-%H%M%S")

    def values(self) -> dict[str, Any]:
        """The session's saved state (empty for a new session)."""
        return dict(self.graph.get_state(self._config).values or {})

    def ask(self, line: str) -> str:
        """Answer one line (and save the turn)."""
        out = self.graph.invoke({"line": line}, self._config)
        return str(out.get("reply", ""))

    def close(self) -> None:
        """Close the SQLite connection."""
        self._conn.close()

    def __enter__(self) -> ChatSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
