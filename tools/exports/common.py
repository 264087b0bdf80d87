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
    launcher: str = Field("", description="An executable bash script that launches the job (torchrun / the "
                          "framework's runner, with the entry point; data and tokenizer as <placeholders>); for "
                          "Megatron-LM it is ``text`` itself.")
    launcher_filename: str = Field("", description="Suggested file name of the launcher (run.sh style).")
    files: dict[str, str] = Field(default_factory=dict, description="Other files the launcher reads, name -> text "
                                  "(e.g. the torchtitan config module that loads the TOML).")


class Job:
    """One layout to export: model, cluster, config, and the profile's overlap assumptions."""

    def __init__(self, model: ModelSpec, cluster: Cluster, config: TrainingConfig) -> None:
        self.model, self.cluster, self.config = model, cluster, config
        resolved = job_on(model, cluster, config)
        self.hardware, self.profile = resolved.hardware, resolved.profile
        self.switches = resolve_switches(config, resolved.framework)   # the layout's, else its framework's defaults
        self.dp = parallel_dims(config, cluster).dp
        self.framework = resolved.framework
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

    def fp8_primary_weights(self) -> bool:
        """Whether the memory model holds FP8 primary weights and no bf16 copy (the framework profile's
        ``fp8_param_gather_precisions``): the export must turn FP8 parameter gathering on."""
        return self.framework.keeps_fp8_primary_weights(self.config.precision)

    @property
    def nodes(self) -> int:
        return max(1, -(-self.cluster.num_gpus // self.cluster.gpus_per_node))

    @property
    def procs_per_node(self) -> int:
        return min(self.cluster.gpus_per_node, self.cluster.num_gpus)


def comment_block(job: Job, source: str, *, prefix: str = "# ") -> list[str]:
    """Header, source, assumptions, what to add and warnings, as comment lines."""
    lines = [f"{prefix}{job.header()}", f"{prefix}{source}"]
    lines += [f"{prefix}assumed: {a}" for a in job.assumptions]
    lines += [f"{prefix}warning: {w}" for w in job.warnings]
    return lines


def layout_line(config: dict[str, Any]) -> str:
    """Compact one-line layout (:func:`tools.formatting.layout_text`)."""
    return layout_text(config)


# Placeholders of every launcher: name -> (value the user must replace, what it is).
PLACEHOLDERS = {"DATA_PATH": ("<path/to/dataset>", "training data (a Megatron prefix ..._text_document, or a "
                              "dataset path / name for torchtitan and MaxText)"),
                "TOKENIZER": ("<tokenizer name or path>", "the model's tokenizer (Hugging Face name or local path)"),
                "CHECKPOINT_DIR": ("<checkpoint dir>", "where checkpoints are written (and, for SFT, the pretrained "
                                   "checkpoint --finetune loads)"),
                "PRETRAINED": ("<pretrained checkpoint>", "the checkpoint fine-tuning starts from"),
                "BRIDGE_SCRIPT": ("<examples/recipes/FAMILY/pretrain_MODEL.py>", "the Megatron-Bridge recipe script of "
                                  "the model (it sets the architecture and tokenizer)")}


def launcher_script(job: Job, source: str, body: list[str], *, env: dict[str, str] | None = None,
                    placeholders: tuple[str, ...] = ("DATA_PATH", "TOKENIZER", "CHECKPOINT_DIR"),
                    known: dict[str, str] | None = None) -> str:
    """A bash launcher: header comments, the placeholders (refused while still <...>), the rendezvous of
    ``torchrun`` on every node (Slurm: ``srun --nodes=N --ntasks-per-node=1 bash FILE``), then ``body``."""
    lines = ["#!/bin/bash", *comment_block(job, source),
             f"# run: bash THIS_FILE on each of the {job.nodes} node(s), e.g. srun --nodes={job.nodes} "
             "--ntasks-per-node=1 bash THIS_FILE; set the <placeholders> below (or in the environment) first",
             "set -euo pipefail"]
    lines += [f"export {k}={v}" for k, v in (env or {}).items()]
    for name in placeholders:
        value, what = PLACEHOLDERS[name]
        lines.append(f'{name}=${{{name}:-"{(known or {}).get(name, value)}"}}  # {what}')
    if placeholders:
        joined = "".join(f"${name}" for name in placeholders)
        lines.append(f'case "{joined}" in *"<"*) echo "error: set {", ".join(placeholders)} (still <placeholders>) '
                     'in this file or the environment" >&2; exit 2;; esac')
    lines += [f"NNODES=${{SLURM_NNODES:-{job.nodes}}}", "NODE_RANK=${SLURM_NODEID:-${NODE_RANK:-0}}",
              "MASTER_ADDR=${MASTER_ADDR:-localhost}  # the first node's address when NNODES > 1",
              "MASTER_PORT=${MASTER_PORT:-29500}"]
    return "\n".join(lines + body) + "\n"


def torchrun_words(job: Job) -> str:
    """The torchrun launcher options of a job (one process per GPU of a node)."""
    return (f'torchrun --nproc-per-node {job.procs_per_node} --nnodes "$NNODES" --node-rank "$NODE_RANK" '
            '--master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT"')


def flatten_dotted(data: dict[str, Any]) -> dict[str, Any]:
    """A nested mapping (a TOML or YAML config) as 'section.key' -> value, leaves only."""
    flat: dict[str, Any] = {}

    def walk(node: dict[str, Any], prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict):
                walk(value, path)
            else:
                flat[path] = value

    walk(data, "")
    return flat
