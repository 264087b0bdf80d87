"""What every export shares: the LaunchConfig result, the job header, the overlap settings the projection assumed."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from projection.job import job_on
from projection.layout import parallel_dims
from projection.model_spec import ModelSpec
from projection.switches import resolve_switches
from projection.training_config import Cluster, TrainingConfig
from projection.vocabulary import LaunchFramework
from tools.formatting import layout_text

# A profile's fitted overlap fraction above this counts as "the projection assumes the overlap is on".
OVERLAP_ON = 0.05


class LaunchConfig(BaseModel):
    """A layout written for one framework: the text to launch with, what was assumed, what the user adds."""

    model_config = ConfigDict(extra="forbid")

    framework: LaunchFramework
    text: str = Field(description="The launch config: arguments, YAML or TOML, with a header comment.")
    options: dict[str, Any] = Field(description="Each exported option name (flag, YAML key or section.key) -> value.")
    warnings: list[str] = Field(default_factory=list, description="What the framework cannot express exactly.")
    assumptions: list[str] = Field(default_factory=list,
                                   description="What the export assumed (e.g. the overlap the projection counts on).")
    user_must_add: list[str] = Field(default_factory=list, description="What the user must add (data, tokenizer).")
    command: str | None = Field(default=None, description="A launch command line, where the framework takes one.")
    filename: str = Field(description="Suggested file name.")


class Job:
    """One layout to export: model, cluster, config, and the profile's overlap assumptions."""

    def __init__(self, model: ModelSpec, cluster: Cluster, config: TrainingConfig) -> None:
        self.model, self.cluster, self.config = model, cluster, config
        resolved = job_on(model, cluster, config)
        self.hardware, self.profile = resolved.hardware, resolved.profile
        self.switches = resolve_switches(config, resolved.framework)   # the layout's, else its framework's defaults
        self.dp = parallel_dims(config, cluster).dp
        self.warnings: list[str] = []
        self.assumptions: list[str] = []

    @property
    def microbatches(self) -> int:
        """Micro-batches per step per data-parallel rank (gbs / (mbs*dp))."""
        return self.config.gbs // (self.config.mbs * self.dp)

    def header(self) -> str:
        layout = layout_line(self.config.model_dump(exclude_none=True) | {"dp": self.dp})
        return f"{self.model.name} on {self.cluster.num_gpus} x {self.cluster.gpu}: {layout}"

    def stem(self) -> str:
        return f"{self.model.name}_{self.cluster.num_gpus}x{self.cluster.gpu}_{self.config.precision}".replace("/", "_")

    def tp_overlap(self) -> bool:
        """Whether the projection hides TP comm: the layout overlaps it (comm_overlap) and the profile's fitted
        tp_overlap_fraction is material."""
        return (self.config.tp > 1 and self.config.sequence_parallel and self.switches.overlapped("tp")
                and self.profile.tp_overlap_fraction > OVERLAP_ON)

    def ep_overlap(self) -> bool:
        return self.config.ep > 1 and self.switches.overlapped("ep") and self.profile.ep_overlap_fraction > OVERLAP_ON


def comment_block(job: Job, source: str, *, prefix: str = "# ") -> list[str]:
    """Header, source, assumptions, what to add and warnings, as comment lines."""
    lines = [f"{prefix}{job.header()}", f"{prefix}{source}"]
    lines += [f"{prefix}assumed: {a}" for a in job.assumptions]
    lines += [f"{prefix}warning: {w}" for w in job.warnings]
    return lines


def layout_line(config: dict[str, Any]) -> str:
    """Compact one-line layout (:func:`tools.formatting.layout_text`)."""
    return layout_text(config)
