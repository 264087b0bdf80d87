"""The agent's door to the tools: typed in-process calls for one job, typed failures, and a call counter.

The agent calls the tool functions of :mod:`tools.functions` directly, with their pydantic input
and output models (not through the JSON wrapper :func:`tools.registry.call_tool`).  The project's
typed errors (:class:`projection.errors.ProjtuneError` and its kinds, and input validation) become
a :class:`ToolFailure`: recorded on the toolbox (a node returns them into the graph state's
``tool_errors``; the report lists them) and raised as :class:`ToolFailed` for the caller to handle.
Any other exception is an engine bug and propagates: a run never turns it into a quiet trial.

:meth:`Toolbox.call_from_model` is the LLM's path: the model chooses the tool and its arguments,
so a typed error comes back as the structured error body the model reads (and is recorded too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from projection.errors import IllegalLayoutError, ModelSpecError, ProjtuneError, UnknownNameError
from tools import functions as f
from tools import schemas as s
from tools.constraints import ConstraintError
from tools.launch_config import LaunchConfig
from tools.registry import TOOLS_BY_NAME, error_of
from tools.search import SearchRequest, SearchResult, run_search

Out = TypeVar("Out", bound=BaseModel)
FailureKind = Literal["invalid_input", "unknown_name", "illegal_layout", "constraint", "model_spec", "rejected"]
TYPED_ERRORS: tuple[type[Exception], ...] = (ProjtuneError, ValidationError)
"""What a tool raises on bad input (a ToolFailure); anything else is an engine failure and propagates."""

_NOT_FROM_MODEL = frozenset({"profile_path", "nics_per_node", "nic_gbps", "nvlink_domain", "anchors", "host_op_s"})
"""Arguments an LLM's tool call may not set: files, and the cluster network the user did (or did not) give."""


class ToolFailure(BaseModel):
    """One tool call that failed on a typed error: which tool, what kind of error, and its message."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str = Field(description="The tool that failed, e.g. 'check_memory'.")
    kind: FailureKind = Field(description="invalid_input (input validation), unknown_name, illegal_layout, "
                                          "constraint, model_spec, or rejected (another ProjtuneError).")
    message: str = Field(description="The error line the tool gave (what was wrong, what is allowed).")
    field: str | None = Field(default=None, description="The input field at fault, dotted, when known.")


class ToolFailed(Exception):
    """A tool call failed on a typed error; ``failure`` says how."""

    def __init__(self, failure: ToolFailure) -> None:
        super().__init__(f"{failure.tool}: {failure.message}")
        self.failure = failure


def failure_kind(err: Exception) -> FailureKind:
    """The :data:`FailureKind` of a typed tool error."""
    if isinstance(err, ValidationError):
        return "invalid_input"
    if isinstance(err, UnknownNameError):
        return "unknown_name"
    if isinstance(err, IllegalLayoutError):
        return "illegal_layout"
    if isinstance(err, ConstraintError):
        return "constraint"
    if isinstance(err, ModelSpecError):
        return "model_spec"
    return "rejected"


def failure_of(tool: str, input_model: type[BaseModel], err: ProjtuneError | ValidationError
               ) -> tuple[ToolFailure, dict[str, Any]]:
    """The ToolFailure of a typed error, and the structured error body (what the registry would answer)."""
    body = error_of(input_model, err)
    return ToolFailure(tool=tool, kind=failure_kind(err), message=body["message"], field=body.get("field")), body


@dataclass(slots=True)
class Toolbox:
    """Calls tools for one job (model, GPU, cluster, profile); counts the calls and keeps the typed failures."""

    model: str | dict[str, Any]
    gpu: str
    num_gpus: int
    gpus_per_node: int
    profile_path: str | None = None
    calls: int = 0
    failures: list[ToolFailure] = field(default_factory=list)
    network: dict[str, Any] = field(default_factory=dict)
    """Cluster network overrides the request gave (nics_per_node, nic_gbps, nvlink_domain); empty: the catalog's."""
    anchors: list[dict[str, Any]] = field(default_factory=list)
    """Measured runs of the job (projection.anchor.AnchorRun dicts) the request gave; passed to every tool that
    takes ``anchors`` (project, check_memory, search)."""

    @classmethod
    def for_request(cls, request: Any) -> Toolbox:
        """A toolbox for a TuneRequest-like object (or its dict)."""
        get = request.get if isinstance(request, dict) else lambda k: getattr(request, k)
        from agent.text.request import network_fields

        return cls(model=get("model"), gpu=get("gpu"), num_gpus=get("num_gpus"), gpus_per_node=get("gpus_per_node"),
                   profile_path=get("profile_path"), network=network_fields(request),
                   anchors=list(get("anchors") or []))

    def job(self, input_model: type[BaseModel]) -> dict[str, Any]:
        """The job arguments every layout tool takes (the profile and the network overrides where the tool's
        input has those fields)."""
        args: dict[str, Any] = {"model": self.model, "gpu": self.gpu, "num_gpus": self.num_gpus,
                                "gpus_per_node": self.gpus_per_node}
        if self.profile_path and "profile_path" in input_model.model_fields:
            args["profile_path"] = self.profile_path
        args.update({k: v for k, v in self.network.items() if k in input_model.model_fields})
        if self.anchors and "anchors" in input_model.model_fields:
            args["anchors"] = self.anchors
        return args

    def failures_dump(self) -> list[dict[str, Any]]:
        """The failures as plain data, for the graph state's ``tool_errors``."""
        return [x.model_dump() for x in self.failures]

    def _run(self, tool: str, function: Callable[[Any], Out], input_model: type[BaseModel], arguments: dict[str, Any]
             ) -> Out:
        """Validate, call; a typed error is recorded and raised as ToolFailed, anything else propagates."""
        self.calls += 1
        try:
            return function(input_model.model_validate(arguments))
        except TYPED_ERRORS as err:
            failure, _ = failure_of(tool, input_model, err)   # type: ignore[arg-type]
            self.failures.append(failure)
            raise ToolFailed(failure) from err

    def _on_job(self, tool: str, function: Callable[[Any], Out], input_model: type[BaseModel], **arguments: Any
                ) -> Out:
        return self._run(tool, function, input_model, {**self.job(input_model), **arguments})

    def legal_axes(self, seq_len: int) -> s.LegalAxesOutput:
        """The legal values of each axis for the job (:func:`tools.functions.legal_axes`)."""
        return self._on_job("legal_axes", f.legal_axes, s.LegalAxesInput, seq_len=seq_len)

    def check_memory(self, layout: dict[str, Any]) -> s.MemoryOutput:
        """One layout's memory and verdict (:func:`tools.functions.check_memory`)."""
        return self._on_job("check_memory", f.check_memory, s.MemoryInput, layout=layout)

    def project(self, layout: dict[str, Any]) -> s.ProjectOutput:
        """One layout's projection (:func:`tools.functions.project`); ``.score()`` is its LayoutScore."""
        return self._on_job("project", f.project, s.ProjectInput, layout=layout)

    def explain(self, a: dict[str, Any], b: dict[str, Any]) -> s.ExplainOutput:
        """Why layout ``a`` beats ``b`` (or the reverse), term by term (:func:`tools.functions.explain`)."""
        return self._on_job("explain", f.explain, s.ExplainInput, a=a, b=b)

    def export_launch_config(self, layout: dict[str, Any], framework: str) -> LaunchConfig:
        """One layout as a launch config of ``framework`` (:func:`tools.functions.export_launch_config`)."""
        return self._on_job("export_launch_config", f.export_launch_config, s.ExportInput, layout=layout,
                            framework=framework)

    def search(self, progress: Callable[[int, int], None] | None = None, **arguments: Any) -> SearchResult:
        """The layout search for the job (:func:`tools.functions.search`); ``progress(done, total)`` as it goes."""
        call = f.search if progress is None else (lambda inp: run_search(inp, progress=progress))
        return self._on_job("search", call, SearchRequest, **arguments)

    def run_benchmark(self, layout: dict[str, Any]) -> s.BenchmarkOutput:
        """Measure one layout on the local GPU, or say why not (:func:`tools.functions.run_benchmark`)."""
        return self._on_job("run_benchmark", f.run_benchmark, s.BenchmarkInput, layout=layout)

    def benchmark_plan(self, contenders: list[tuple[str, dict[str, Any]]], *, reason: str, framework: str
                       ) -> dict[str, Any] | None:
        """One-node runs that would settle the ranking (:func:`tools.bench_plan.benchmark_plan`), as plain data;
        None when no contender has a launchable one-node run."""
        from projection.job import resolve_job
        from tools.bench_plan import benchmark_plan

        job = resolve_job(self.model, self.gpu, self.num_gpus, gpus_per_node=self.gpus_per_node,
                          profile_path=self.profile_path, **self.network)
        plan = benchmark_plan(job, contenders, reason=reason, framework=framework, anchored=bool(self.anchors))
        return None if plan is None else plan.model_dump(mode="json")

    def call_from_model(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Call a tool with arguments an LLM chose; the answer is the JSON the model reads.

        The job's model, GPU and cluster win, and no file is named (``profile_path`` dropped; the
        request's own profile is used), nor can it change the network (NIC and NVLink-domain arguments
        dropped: the request's own, else the catalog's).  A typed error (bad arguments included) comes back
        as ``{"ok": false, "tool", "error"}`` and is recorded in :attr:`failures`; an engine failure raises.
        """
        self.calls += 1
        spec = TOOLS_BY_NAME.get(tool)
        if spec is None:
            message = f"unknown tool '{tool}'"
            self.failures.append(ToolFailure(tool=str(tool), kind="unknown_name", message=message, field="name"))
            return {"ok": False, "tool": tool, "error": {"field": "name", "message": message,
                                                         "allowed": sorted(TOOLS_BY_NAME)}}
        if not isinstance(arguments, dict):
            message = f"arguments must be a JSON object, got {type(arguments).__name__}"
            self.failures.append(ToolFailure(tool=tool, kind="invalid_input", message=message, field="arguments"))
            return {"ok": False, "tool": tool, "error": {"field": "arguments", "message": message, "allowed": []}}
        chosen = {k: v for k, v in arguments.items() if k not in _NOT_FROM_MODEL}
        try:
            out = spec.function(spec.input_model.model_validate({**chosen, **self.job(spec.input_model)}))
        except TYPED_ERRORS as err:
            failure, body = failure_of(tool, spec.input_model, err)   # type: ignore[arg-type]
            self.failures.append(failure)
            return {"ok": False, "tool": tool, "error": body}
        return {"ok": True, "tool": tool, "result": out.model_dump(mode="json")}
