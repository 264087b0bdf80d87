"""The one registry of LLM-callable tools, and ``call_tool``: validate, call, and always return a JSON-able dict.

Success: ``{"ok": true, "tool": NAME, "result": {...}}``.  Failure (never an exception):
``{"ok": false, "tool": NAME, "error": {"field": ..., "message": ..., "allowed": [...]}}``,
where ``field`` is the dotted input path at fault, ``allowed`` its valid values when they are
a closed set, and ``nearest`` the closest valid names for an unknown model or GPU.  Illegal
layouts add ``violations`` (one line per broken rule).
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from projection.errors import IllegalLayoutError, ModelSpecError, ProjtuneError, UnknownNameError
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
    _tool(f.check_memory, s.LayoutInput, s.MemoryOutput),
    _tool(f.project, s.ProjectInput, s.ProjectOutput),
    _tool(f.search, SearchRequest, SearchResult),
    _tool(f.compare, s.CompareInput, s.CompareOutput),
    _tool(f.explain, s.ExplainInput, s.ExplainOutput),
    _tool(f.export_launch_config, s.ExportInput, LaunchConfig),
    _tool(f.run_benchmark, s.BenchmarkInput, s.BenchmarkOutput),
)
TOOLS_BY_NAME: dict[str, Tool] = {t.name: t for t in TOOLS}


def tool_names() -> list[str]:
    """Names of every registered tool."""
    return [t.name for t in TOOLS]


def error(field: str | None, message: str, allowed: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    """The structured error body."""
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
        messages.append(f"{where}: {msg}")
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, ConstraintError):
        field, allowed = f"constraints.{cause.field}", cause.allowed
    return error(field, "; ".join(messages), allowed)


def _domain_error(err: ProjtuneError) -> dict[str, Any]:
    if isinstance(err, UnknownNameError):
        field = {"hardware": "gpu", "model": "model"}.get(err.kind, err.kind)
        nearest = difflib.get_close_matches(err.name.lower(), err.choices, n=3, cutoff=0.4)
        return error(field, str(err), err.choices, nearest=nearest)
    if isinstance(err, IllegalLayoutError):
        return error(getattr(err, "field", "layout"), str(err), [], violations=err.reasons)
    if isinstance(err, ConstraintError):
        return error(f"constraints.{err.field}", str(err), err.allowed)
    if isinstance(err, ModelSpecError):
        return error("model", str(err))
    return error(getattr(err, "field", None), str(err))


def call_tool(name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    """Validate ``arguments`` against the tool's input model, call it, and return a JSON-able dict (never raises)."""
    tool = TOOLS_BY_NAME.get(name)
    if tool is None:
        near = difflib.get_close_matches(name, tool_names(), n=1)
        hint = f"; did you mean {near[0]}?" if near else ""
        return {"ok": False, "tool": name, "error": error("name", f"unknown tool '{name}'{hint}", tool_names())}
    if arguments is not None and not isinstance(arguments, dict):
        return {"ok": False, "tool": name, "error": error(None, "arguments must be a JSON object")}
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
                                                                f"{type(err).__name__}: {err}")}
    return {"ok": True, "tool": name, "result": out.model_dump(mode="json")}
