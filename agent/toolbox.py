"""The agent's door to the tool registry: job arguments, the layout field name, and a call counter.

Every tool the agent uses goes through :func:`tools.registry.call_tool` (validated, never raises).
The layout argument is named by the tool's input model (``layout`` today, ``config`` in older
registries), so this module asks the model instead of hard-coding the name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tools.registry import TOOLS_BY_NAME, call_tool

_NOT_FROM_MODEL = frozenset({"profile_path", "nics_per_node", "nic_gbps", "nvlink_domain"})
"""Arguments an LLM's tool call may not set: files, and the cluster network the user did (or did not) give."""


def layout_field(tool: str) -> str:
    """The name of a tool's single-layout argument ('layout' or 'config')."""
    fields = TOOLS_BY_NAME[tool].input_model.model_fields
    return "layout" if "layout" in fields else "config"


def accepts(tool: str, argument: str) -> bool:
    """Whether a tool's input model has an argument."""
    return tool in TOOLS_BY_NAME and argument in TOOLS_BY_NAME[tool].input_model.model_fields


@dataclass(slots=True)
class Toolbox:
    """Calls tools for one job (model, GPU, cluster, profile) and counts the calls."""

    model: str
    gpu: str
    num_gpus: int
    gpus_per_node: int
    profile_path: str | None = None
    calls: int = 0
    network: dict[str, Any] = field(default_factory=dict)
    """Cluster network overrides the request gave (nics_per_node, nic_gbps, nvlink_domain); empty: the catalog's."""

    @classmethod
    def for_request(cls, request: Any) -> Toolbox:
        """A toolbox for a TuneRequest-like object (or its dict)."""
        get = request.get if isinstance(request, dict) else lambda k: getattr(request, k)
        from agent.request import network_fields

        return cls(model=get("model"), gpu=get("gpu"), num_gpus=get("num_gpus"), gpus_per_node=get("gpus_per_node"),
                   profile_path=get("profile_path"), network=network_fields(request))

    def job(self, tool: str) -> dict[str, Any]:
        """The job arguments every layout tool takes."""
        args: dict[str, Any] = {"model": self.model, "gpu": self.gpu, "num_gpus": self.num_gpus,
                                "gpus_per_node": self.gpus_per_node}
        if self.profile_path and accepts(tool, "profile_path"):
            args["profile_path"] = self.profile_path
        args.update({k: v for k, v in self.network.items() if accepts(tool, k)})
        return args

    def call(self, tool: str, /, **arguments: Any) -> dict[str, Any]:
        """Call a tool with the job arguments filled in (the caller's win); count the call.

        ``tool`` is positional-only, so an argument named ``tool`` (or ``self``) is just an argument.
        """
        self.calls += 1
        return call_tool(tool, {**self.job(tool), **arguments})

    def call_from_model(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Call a tool with arguments an LLM chose: the job's model, GPU and cluster win, and no file is named.

        The LLM cannot change the job, nor make the tool read a file (``profile_path`` dropped; the
        request's own profile is used), nor change the network (NIC and NVLink-domain arguments dropped:
        the request's own, else the catalog's), and it gets a structured error rather than an exception.
        """
        self.calls += 1
        chosen = ({k: v for k, v in arguments.items() if k not in _NOT_FROM_MODEL} if isinstance(arguments, dict)
                  else {})
        return call_tool(tool, {**chosen, **self.job(tool)})

    def on_layout(self, tool: str, config: dict[str, Any], **arguments: Any) -> dict[str, Any]:
        """Call a single-layout tool (check_memory, project, export_launch_config, run_benchmark)."""
        return self.call(tool, **{layout_field(tool): config}, **arguments)

    def explain(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        """Why layout ``a`` beats ``b`` (or the reverse), term by term."""
        return self.call("explain", a=a, b=b)
