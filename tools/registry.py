"""The one registry of LLM-callable tools, and ``call_tool``: validate, call, and always return a JSON-able dict.

Success: ``{"ok": true, "tool": NAME, "result": {...}}``.  Failure (never an exception):
``{"ok": false, "tool": NAME, "error": {"field": ..., "message": ..., "allowed": [...]}}``,
where ``field`` is the dotted input path at fault, ``allowed`` its valid values when they are
a closed set, and ``nearest`` the closest valid names for an unknown model or GPU.  Illegal
layouts add ``violations`` (one line per broken rule).

Calls from outside the process (MCP clients; an LLM's tool arguments are stripped of file
arguments before they get here, see :mod:`agent.toolbox`) run with ``untrusted=True``: they may
not make the server read files.  A ``profile_path`` must then name a profile in the profile
folder (the shipped ``projection/catalog/profiles`` or ``$PROJTUNE_PROFILE_DIR``), by file
name or stem; a model must be a catalog id or config fields, never a file path; and no error
quotes a file's content.  Explicit paths given on the command line are trusted (``projtune
project --profile FILE``).  ``deadline_s`` runs an open-ended call (``search``, ``tune``,
``run_benchmark``; the others are bounded by the input limits) in a forked child process that is
killed, with any workers it started, when the deadline passes (the work is cancelled, not just
abandoned); the caller gets a structured error saying so.
"""

from __future__ import annotations

import difflib
import json
import os
import signal
import types
import typing
from collections.abc import Callable
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from projection.errors import (
    IllegalLayoutError,
    ModelSpecError,
    ProjtuneError,
    UnknownNameError,
    clip,
    literal_suggestion,
    nearest,
)
from projection.safe_yaml import UNTRUSTED
from tools import functions as f
from tools import schemas as s
from tools.constraints import ConstraintError
from tools.launch_config import LaunchConfig
from tools.search import SearchRequest, SearchResult


@dataclass(frozen=True, slots=True)
class Tool:
    """One tool: name, LLM-facing description, input and output models, and the pure function."""

    name: str
    description: str
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    function: Callable[[Any], BaseModel]


def _tool(function: Callable[[Any], BaseModel], input_model: type[BaseModel], output_model: type[BaseModel]) -> Tool:
    doc = " ".join(line.strip() for line in (function.__doc__ or "").strip().splitlines())
    return Tool(name=function.__name__, description=" ".join(doc.split()), input_model=input_model,
                output_model=output_model, function=function)


TOOLS: tuple[Tool, ...] = (
    _tool(f.list_models, s.ListModelsInput, s.ListModelsOutput),
    _tool(f.list_hardware, s.ListHardwareInput, s.ListHardwareOutput),
    _tool(f.legal_axes, s.LegalAxesInput, s.LegalAxesOutput),
    _tool(f.check_memory, s.MemoryInput, s.MemoryOutput),
    _tool(f.project, s.ProjectInput, s.ProjectOutput),
    _tool(f.search, SearchRequest, SearchResult),
    _tool(f.compare, s.CompareInput, s.CompareOutput),
    _tool(f.explain, s.ExplainInput, s.ExplainOutput),
    _tool(f.export_launch_config, s.ExportInput, LaunchConfig),
    _tool(f.run_benchmark, s.BenchmarkInput, s.BenchmarkOutput),
)
TOOLS_BY_NAME: dict[str, Tool] = {t.name: t for t in TOOLS}
_REGISTERED: list[Tool] = []


def register(function: Callable[[Any], BaseModel], input_model: type[BaseModel],
             output_model: type[BaseModel]) -> Tool:
    """Add a tool defined in a higher layer (the agent's ``tune``, registered by importing :mod:`agent.tool`),
    so the tools layer never imports the agent; a second registration of a name returns the first."""
    tool = _tool(function, input_model, output_model)
    if tool.name not in TOOLS_BY_NAME:
        _REGISTERED.append(tool)
        TOOLS_BY_NAME[tool.name] = tool
    return TOOLS_BY_NAME[tool.name]


def registered() -> tuple[Tool, ...]:
    """Every tool: the tools layer's own, then those registered from above."""
    return (*TOOLS, *_REGISTERED)


def tool_names() -> list[str]:
    """Names of every registered tool."""
    return [t.name for t in registered()]


MAX_MESSAGE_CHARS = 2000


def error(field: str | None, message: str, allowed: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    """The structured error body (the message cut to MAX_MESSAGE_CHARS: an echoed input stays short)."""
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + " ...(cut)"
    return {"field": field, "message": message, "allowed": list(allowed or []), **extra}


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel inside an annotation (X, X | None, list[X]), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (typing.Union, types.UnionType, list, tuple):
        for arg in get_args(annotation):
            found = _submodel(arg)
            if found is not None:
                return found
    return None


def _allowed_at(model: type[BaseModel], loc: tuple[Any, ...], kind: str) -> list[Any]:
    """Allowed keys (unknown key) or literal values (bad choice) at an error location."""
    current: type[BaseModel] | None = model
    annotation: Any = None
    path = list(loc)
    last = path.pop() if kind == "extra_forbidden" else None
    for part in path:
        if isinstance(part, int) or current is None:
            continue
        field = current.model_fields.get(str(part))
        if field is None:
            break
        annotation = field.annotation
        current = _submodel(annotation)
    if kind == "extra_forbidden":
        return list(current.model_fields) if current is not None and last is not None else []
    return [a for a in _literal_values(annotation)]


def _literal_values(annotation: Any) -> list[Any]:
    if get_origin(annotation) is typing.Literal:
        return list(get_args(annotation))
    values: list[Any] = []
    for arg in get_args(annotation):
        values += _literal_values(arg)
    return values


def _validation_error(model: type[BaseModel], err: ValidationError) -> dict[str, Any]:
    items = err.errors()
    first = items[0]
    loc = tuple(p for p in first["loc"] if not (isinstance(p, str) and p.startswith(("function-", "literal["))))
    field = ".".join(str(p) for p in loc) or None
    allowed = _allowed_at(model, loc, first["type"])
    messages = []
    for item in items[:5]:
        where = ".".join(str(p) for p in item["loc"]) or "input"
        msg = "unknown key" if item["type"] == "extra_forbidden" else item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            keys = [str(k) for k in _allowed_at(model, tuple(item["loc"]), "extra_forbidden")]
            near = nearest(str(item["loc"][-1]).lower(), keys) if item["loc"] else None
            msg += f"; did you mean {near}?" if near else ""
        if item["type"] == "literal_error" and isinstance(item.get("input"), str):
            msg += f" (got '{clip(item['input'])}'){literal_suggestion(item)}"
        messages.append(f"{where}: {msg}")
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, ConstraintError):
        field, allowed = f"constraints.{cause.field}", cause.allowed
    return error(field, "; ".join(messages), allowed)


def _domain_error(err: ProjtuneError) -> dict[str, Any]:
    if isinstance(err, UnknownNameError):
        field = {"hardware": "gpu", "model": "model"}.get(err.kind, err.kind)
        return error(field, str(err), err.choices, nearest=err.nearest)
    if isinstance(err, IllegalLayoutError):
        return error(getattr(err, "field", "layout"), str(err), [], violations=err.reasons)
    if isinstance(err, ConstraintError):
        return error(f"constraints.{err.field}", str(err), err.allowed)
    if isinstance(err, ModelSpecError):
        return error("model", str(err))
    return error(getattr(err, "field", None), str(err), **getattr(err, "details", {}))


def error_of(input_model: type[BaseModel], err: ProjtuneError | ValidationError) -> dict[str, Any]:
    """The structured error body ``call_tool`` answers for a typed tool error (for in-process callers that call
    the tool functions directly, e.g. :mod:`agent.toolbox`)."""
    return _validation_error(input_model, err) if isinstance(err, ValidationError) else _domain_error(err)


# Tools whose work the input limits do not bound to about a second (a search over every legal
# layout, the whole tuning agent, GPU benchmarks): with a deadline they run in a killable child.
# The others (one or a few projections, <= 8 layouts) run in-process.
OPEN_ENDED_TOOLS = frozenset({"search", "tune", "run_benchmark"})
PROFILE_SUFFIXES = (".yaml", ".yml")


def tool_deadline_s() -> float:
    """Seconds one remote tool call may run: ``$PROJTUNE_TOOL_DEADLINE`` or 120 (projection/settings.py)."""
    from projection.settings import load_settings

    return load_settings().tool_deadline


def profile_dirs() -> list[Path]:
    """Folders remote callers may name profiles in: the shipped profiles, then ``$PROJTUNE_PROFILE_DIR``."""
    from importlib import resources

    dirs = [Path(str(resources.files("projection") / "catalog" / "profiles")).resolve()]
    from projection.settings import load_settings

    extra = load_settings().profile_dir
    if extra:
        dirs.append(extra.expanduser().resolve())
    return dirs


def resolve_profile_name(value: str) -> str | None:
    """The file a remote ``profile_path`` names inside a profile folder (name or stem), else None (never read)."""
    if not value or len(value) > 255 or "\x00" in value:
        return None
    for folder in profile_dirs():
        for candidate in (value, *(value + suffix for suffix in PROFILE_SUFFIXES)):
            path = (folder / candidate).resolve()
            if path.is_relative_to(folder) and path.suffix in PROFILE_SUFFIXES and path.is_file():
                return str(path)
    return None


def _looks_like_path(value: Any) -> bool:
    return isinstance(value, str) and ("/" in value or "\\" in value
                                       or value.lower().endswith((".json", ".yaml", ".yml"))
                                       or value.startswith(("~", ".")))


def _untrusted_problem(arguments: dict[str, Any]) -> dict[str, Any] | None:
    """The structured error for file arguments a remote caller may not give (profile_path rewritten in place)."""
    profile = arguments.get("profile_path")
    if profile is not None:
        resolved = resolve_profile_name(profile) if isinstance(profile, str) else None
        if resolved is None:
            names = sorted({p.stem for d in profile_dirs() if d.is_dir() for p in d.iterdir()
                            if p.suffix in PROFILE_SUFFIXES})
            return error("profile_path", "profile_path must name a profile in the profile folder (by name, e.g. "
                         "'mi300x'); files elsewhere are read only when given on the command line (--profile)",
                         names)
        arguments["profile_path"] = resolved
    if _looks_like_path(arguments.get("model")):
        return error("model", "remote calls name a catalog model id or pass config.json fields as an object; "
                     "model files are not read", [])
    return None


@contextmanager
def _untrusted_context(untrusted: bool):  # noqa: ANN202 - a context manager
    token = UNTRUSTED.set(True) if untrusted else None
    try:
        yield
    finally:
        if token is not None:
            UNTRUSTED.reset(token)


def call_tool(name: str, arguments: dict[str, Any] | str | None = None, *, untrusted: bool = False,
              deadline_s: float | None = None) -> dict[str, Any]:
    """Validate ``arguments`` against the tool's input model, call it, and return a JSON-able dict (never raises).

    ``untrusted``: a remote caller (no file reads, see the module docstring); ``deadline_s``: cancel
    the work after this many seconds (run in a killed-on-deadline child process).  ``arguments`` may be JSON
    text, as an OpenAI tool call's ``function.arguments`` is.
    """
    if isinstance(arguments, str | bytes):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError) as err:   # RecursionError: nested deeper than the parser goes
            return {"ok": False, "tool": name, "error": error(None, f"arguments are not valid JSON: {clip(str(err))}")}
    if deadline_s is not None and name in OPEN_ENDED_TOOLS and isinstance(arguments, dict | None):
        return _call_with_deadline(name, arguments, untrusted, deadline_s)
    with _untrusted_context(untrusted):
        return _call(name, arguments, untrusted)


def _call_with_deadline(name: str, arguments: dict[str, Any] | None, untrusted: bool,
                        deadline_s: float) -> dict[str, Any]:
    """Run the call in a forked child; kill it (and its process group) when the deadline passes."""
    import multiprocessing

    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:   # no fork on this platform: run in-process (work is bounded by the input limits)
        with _untrusted_context(untrusted):
            return _call(name, arguments, untrusted)
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child_call, args=(sender, name, arguments, untrusted), daemon=False)
    child.start()
    sender.close()
    payload: dict[str, Any] | None = None
    try:
        if receiver.poll(deadline_s):
            try:
                payload = receiver.recv()
            except (EOFError, OSError):
                payload = None
    finally:
        receiver.close()
        reap_child(child, answered=payload is not None)
    if payload is None:
        reason = (f"exceeded its deadline of {deadline_s:g} s and was cancelled; ask for less (fewer GPUs, "
                  "a tighter constraint, a smaller top_k)" if child.exitcode in (None, -signal.SIGKILL)
                  else f"stopped without an answer (exit code {child.exitcode})")
        return {"ok": False, "tool": name, "error": error(None, f"tool {name} {reason}", [])}
    return payload


def reap_child(child: Any, *, answered: bool) -> None:
    """End a forked tool call: let an answered child exit (1 s), else kill its process group at once."""
    child.join(timeout=1.0 if answered else 0.0)
    if child.is_alive() and child.pid is not None:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            child.kill()
        child.join(timeout=5.0)


def _child_call(sender: Any, name: str, arguments: dict[str, Any] | None, untrusted: bool) -> None:
    with suppress(OSError):
        os.setpgid(0, 0)   # own process group: the deadline kills any workers too
    with _untrusted_context(untrusted):
        payload = _call(name, arguments, untrusted)
    sender.send(payload)
    sender.close()


def _call(name: str, arguments: dict[str, Any] | None, untrusted: bool) -> dict[str, Any]:
    tool = TOOLS_BY_NAME.get(name)
    if tool is None:
        near = difflib.get_close_matches(name, tool_names(), n=1)
        hint = f"; did you mean {near[0]}?" if near else ""
        return {"ok": False, "tool": name, "error": error("name", f"unknown tool '{name}'{hint}", tool_names())}
    if arguments is not None and not isinstance(arguments, dict):
        return {"ok": False, "tool": name, "error": error(
            None, f"arguments must be a JSON object of the tool's fields (got {type(arguments).__name__})")}
    if untrusted and arguments:
        arguments = dict(arguments)
        problem = _untrusted_problem(arguments)
        if problem is not None:
            return {"ok": False, "tool": name, "error": problem}
    try:
        inp = tool.input_model.model_validate(arguments or {})
    except ValidationError as err:
        return {"ok": False, "tool": name, "error": _validation_error(tool.input_model, err)}
    try:
        out = tool.function(inp)
    except ValidationError as err:
        return {"ok": False, "tool": name, "error": _validation_error(tool.input_model, err)}
    except ProjtuneError as err:
        return {"ok": False, "tool": name, "error": _domain_error(err)}
    except Exception as err:  # a tool never raises into its caller
        return {"ok": False, "tool": name, "error": error(None, f"internal error in {name}: "
                                                                f"{type(err).__name__}: {str(err)[:300]}")}
    return {"ok": True, "tool": name, "result": out.model_dump(mode="json")}
