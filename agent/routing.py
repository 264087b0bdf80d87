"""Routers of the tuning graph: each returns the next node's name and raises on a state it does not expect."""

from __future__ import annotations

from typing import Literal

from agent.state import State


def after_parse(state: State) -> Literal["search", "report"]:
    """A clarification goes straight to the report; a parsed request starts with the layout search."""
    if state.get("clarification"):
        return "report"
    if state.get("request"):
        return "search"
    raise ValueError("parse left neither a request nor a clarification in the state")


def after_reflect(state: State) -> Literal["propose", "report"]:
    """Another round unless reflect gave a stop reason."""
    if "stop_reason" not in state:
        raise ValueError("reflect did not run: no stop_reason in the state")
    return "report" if state["stop_reason"] else "propose"
