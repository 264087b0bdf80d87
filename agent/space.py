"""Layouts as the agent handles them: normalised config dicts, canonical keys, legality and the search space.

``LayoutSpace`` is the space of layouts a request allows: it holds the request's resolved
:class:`projection.job.Job` (the one job class: model, GPU, cluster, profiles, framework) with the request's
constraints, batch and job fields.  ``LayoutSpace.check`` turns any
proposed config dict into a validated :class:`TrainingConfig` or the reasons it is not one
(pydantic errors, :func:`projection.legality.layout_violations`, the request's constraints).
``LayoutSpace.in_space`` says whether a layout is one :func:`tools.candidate_columns.enumerate_candidates`
yields for the request (or one of the request's explicit candidates): the offline policy keeps
its own trials inside that space, which is what makes its answer equal the search's best.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from agent.text.request import network_fields
from projection.hardware import HardwareSpec
from projection.job import Job, resolve_job
from projection.legality import layout_violations
from projection.model_spec import ModelSpec
from projection.training_config import Cluster, TrainingConfig
from tools.candidates import SearchSpace, in_space, with_job_fields
from tools.constraints import Constraints
from tools.framework_rules import framework_violations
from tools.switch_rules import ep_overlap_hides


@dataclass(slots=True)
class Checked:
    """A proposed config after checking: the validated config, or why it is not one."""

    config: TrainingConfig | None
    status: str = "ok"                    # ok | invalid | illegal | excluded
    reasons: list[str] = field(default_factory=list)


def plain(config: TrainingConfig, num_gpus: int) -> dict[str, Any]:
    """The config as sweep-format keys with derived dp and the schedule in effect (as the search reports it)."""
    data = config.model_dump(mode="json", exclude_none=True)
    data["dp"] = config.data_parallel(num_gpus)
    data["pp_schedule"] = config.schedule
    return data


def canonical(config: TrainingConfig, num_gpus: int) -> str:
    """A key equal for equal layouts (every field, dp derived, schedule resolved)."""
    data = config.model_dump(mode="json")
    data["dp"] = config.data_parallel(num_gpus)
    data["pp_schedule"] = config.schedule
    return json.dumps(data, sort_keys=True)


class LayoutSpace:
    """The layouts one request allows: its resolved job, constraints and the search space."""

    def __init__(self, request: Any) -> None:
        get = request.get if isinstance(request, dict) else lambda k: getattr(request, k)
        self.job: Job = resolve_job(get("model"), get("gpu"), get("num_gpus"), gpus_per_node=get("gpus_per_node"),
                                    **network_fields(request), framework=get("framework"))
        """The request's job (:func:`projection.job.resolve_job`), priced with the request's framework."""
        self.model: ModelSpec = self.job.model
        self.hardware: HardwareSpec = self.job.hardware
        self.cluster: Cluster = self.job.cluster
        self.gbs, self.seq_len = int(get("gbs")), int(get("seq_len"))
        self.constraints = Constraints.parse(get("constraints") or [])
        self.framework: str | None = get("framework")
        """The recipe framework the layouts run on (its record prices them; None = megatron): every layout of the job
        carries it, as the search's do."""
        self.space = SearchSpace(model=self.model, hardware=self.hardware, cluster=self.cluster,
                                 constraints=self.constraints, gbs=self.gbs, seq_len=self.seq_len,
                                 framework=self.framework, ep_overlap_hides=ep_overlap_hides(self.job.profile))
        self.explicit: set[str] | None = None
        self.finetune: str | None = get("finetune")
        """The job's fine-tuning mode ('sft', 'lora'; None = pre-training): every layout of the job carries it."""
        self.packed_document_tokens: int | None = get("packed_document_tokens")
        """Mean tokens per packed fine-tuning document (None = unpacked): every layout of the job carries it."""
        self.launch_framework = self.job.record.launch if self.framework is not None else None
        """The framework that must launch a searched layout (tools/framework_rules.py); None: no launch rules."""
        candidates = get("candidates")
        if candidates is not None:
            self.explicit = set()
            for raw in candidates:
                checked = self.check(raw)
                if checked.config is not None:
                    self.explicit.add(self.key(checked.config))

    @property
    def num_gpus(self) -> int:
        """GPUs in the job."""
        return self.cluster.num_gpus

    def key(self, config: TrainingConfig) -> str:
        """Canonical key of a layout of this job."""
        return canonical(config, self.num_gpus)

    def plain(self, config: TrainingConfig) -> dict[str, Any]:
        """Sweep-format dict of a layout of this job."""
        return plain(config, self.num_gpus)

    def check(self, raw: dict[str, Any]) -> Checked:
        """Validate a proposed config dict: types, legality, then the request's constraints."""
        values = with_job_fields({k: v for k, v in raw.items() if v is not None}, gbs=self.gbs, seq_len=self.seq_len,
                                 finetune=self.finetune, packed_document_tokens=self.packed_document_tokens,
                                 framework=self.framework)
        try:
            config = TrainingConfig(**values)
        except (ValidationError, TypeError) as err:
            reasons = ([f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in err.errors()]
                       if isinstance(err, ValidationError) else [str(err)])
            return Checked(None, "invalid", reasons)
        reasons = layout_violations(self.model, self.hardware, self.cluster, config)
        if reasons:
            return Checked(config, "illegal", reasons)
        outside = self.outside_constraints(config)
        if outside:
            return Checked(config, "excluded", outside)
        if self.explicit is None and self.launch_framework is not None:
            unlaunchable = framework_violations(self.launch_framework, self.model, self.cluster, config)
            if unlaunchable:
                return Checked(config, "excluded", [f"{self.launch_framework} cannot launch it: {r}"
                                                    for r in unlaunchable])
        return Checked(config)

    def outside_constraints(self, config: TrainingConfig) -> list[str]:
        """The constraints a legal layout breaks (as :func:`tools.search._within` reads them)."""
        values = config.model_dump()
        values["pp_schedule"] = config.schedule
        values["dp"] = config.data_parallel(self.num_gpus)
        active = self.constraints.active()
        broken = [f"{axis}={values[axis]} breaks the constraint {rule}"
                  for axis, rule in zip(active, self.constraints.describe(), strict=False)
                  if axis in values and values[axis] is not None and not self.constraints.allows(axis, values[axis])]
        if not self.constraints.allow_fp8 and config.is_low_precision:
            broken.append(f"precision={config.precision} but FP8 is not allowed")
        return broken

    def in_space(self, config: TrainingConfig) -> bool:
        """Whether the search enumerates this layout for the request (or it is an explicit candidate)."""
        if self.explicit is not None:
            return self.key(config) in self.explicit
        return in_space(self.space, config, self.finetune, self.packed_document_tokens)
