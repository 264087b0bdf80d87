"""How far a job is from the evidence the profiles were fitted on: novelty reasons, from calibration data alone.

The evidence summary (``projection/catalog/uncertainty/evidence.yaml``) holds, per GPU family and over all
families (``*``), what the development runs covered: distinct sources (sweep files) and runs, the GPU ids
and frameworks seen, and the ranges of sequence length, model size, GPU count, per-GPU work per kernel and
MoE shape; and, over all runs, the values every run-time switch took.  It is written by
``projtune calibrate --cross-validate evals/data --bands-out <bands.yaml>`` (next to the band table), from
the same runs the profiles are fitted on, and cross-validation builds one per fold from that fold's training
runs.  :func:`novelty` compares one job with it and returns a :class:`Novelty` per way the job lies outside;
:mod:`projection.uncertainty` widens the job's band by each reason's factor.

Definitions:

- *evidence is thin* below ``MIN_SOURCES`` distinct sources: eight runs of one publisher's table are one
  recipe on one cluster, one sample of how the model errs.
- *outside a range*: beyond ``RANGE_MARGIN`` times the fitted extreme (a sequence of 10k against a longest
  fitted 8k is inside: the fitted terms scale smoothly over such a step; 64k is outside).
- *per-GPU work per kernel*: FLOPs of one hidden x hidden projection of one micro-batch on one GPU,
  ``2 * (mbs * seq_len / cp) * hidden^2 / tp``; below the fitted range kernels are short enough for launch
  and host overheads to matter (the host-bound regime, which the profiles' fixed overheads only estimate).
- *scale*: GPUs in the job; a job that spans more than one NVLink/xGMI domain on a family none of whose
  development runs did uses a scale-out efficiency the family was never fitted on.
- *switches*: ``SWITCH_FIELDS`` names TrainingConfig fields read with ``getattr``; a value no development
  run used is a novelty (a field the evidence file does not record yet is skipped until it is rebuilt).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from projection.framework import DEFAULT_FRAMEWORK, RECORDS
from projection.hardware import HardwareSpec
from projection.model_spec import ModelSpec
from projection.safe_yaml import load_catalog
from projection.params import total_params
from projection.training_config import Cluster, TrainingConfig

ANY = "*"
MIN_SOURCES = 2
"""Fewest distinct sources (sweep files) that make a GPU, family or framework evidence rather than one sample."""
RANGE_MARGIN = 1.25
"""A value within this factor beyond a fitted extreme counts as inside the range."""
SWITCH_FIELDS: tuple[str, ...] = ("precision", "finetune", "comm_overlap", "cuda_graphs", "compile",
                                  "attention_backend", "grad_reduce_in_fp32")
"""TrainingConfig fields whose unseen values are a novelty (read with getattr: absent fields are skipped)."""
REASON_KEYS: tuple[str, ...] = ("gpu-family", "gpu", "framework", "switch", "host-bound", "sequence",
                                "model-size", "scale", "moe-shape")
"""Every novelty kind, each with its own width factor in the band table."""


@dataclass(frozen=True, slots=True)
class JobFeatures:
    """What the novelty check reads of one job (plain data; units in the field names)."""

    gpu: str
    family: str
    framework: str
    moe: bool
    seq_len: int
    params: float               # total parameters
    num_gpus: int
    crosses_domain: bool        # more GPUs than one NVLink/xGMI domain
    kernel_flop: float          # 2 * (mbs * seq_len / cp) * hidden^2 / tp, FLOPs
    experts: int
    top_k: int
    ep: int
    switches: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Novelty:
    """One way a job lies outside the evidence: ``key`` (one of ``REASON_KEYS``) and a sentence for the user."""

    key: str
    text: str


class Span(BaseModel):
    """Closed range of a quantity over the development runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    low: float
    high: float


class FamilyEvidence(BaseModel):
    """What the development runs of one GPU family (or of all, ``*``) covered."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    runs: int = Field(ge=0)
    sources: int = Field(ge=0, description="Distinct sources (sweep files).")
    gpus: dict[str, int] = Field(default_factory=dict, description="GPU id -> distinct sources.")
    frameworks: dict[str, int] = Field(default_factory=dict, description="Framework -> distinct sources.")
    seq_len: Span
    params: Span = Field(description="Total parameters.")
    num_gpus: Span
    kernel_flop: Span = Field(description="Per-GPU FLOPs of one hidden x hidden projection of a micro-batch.")
    crosses_domain_sources: int = Field(ge=0, description="Sources with a run spanning several scale-up domains.")
    moe_sources: int = Field(ge=0)
    experts: Span | None = None
    top_k: Span | None = None
    ep: Span | None = None


class Evidence(BaseModel):
    """The evidence summary: per family and over all (``*``), plus switch values seen."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    families: dict[str, FamilyEvidence]
    switches: dict[str, list[str]] = Field(default_factory=dict, description="Switch field -> values seen.")
    written: str = ""


def framework_key(framework: str | None) -> str:
    """The framework name evidence and bands are keyed by (Megatron-core stacks share ``megatron``)."""
    record = RECORDS.get(framework or DEFAULT_FRAMEWORK)   # type: ignore[call-overload]
    return framework if record is None else record.band_name   # a name no record has: no cell, the pooled band


def _switch_values(config: TrainingConfig) -> tuple[tuple[str, str], ...]:
    out = []
    for name in SWITCH_FIELDS:
        value = getattr(config, name, None)
        if value is not None:
            out.append((name, str(value)))
    return tuple(out)


def job_features(model: ModelSpec, cluster: Cluster, config: TrainingConfig, hardware: HardwareSpec) -> JobFeatures:
    """The features :func:`novelty` compares with the evidence."""
    domain = cluster.network_of(hardware)[2]
    tokens = config.mbs * config.seq_len / max(config.cp, 1)
    return JobFeatures(
        gpu=hardware.id, family=hardware.family, framework=framework_key(config.framework), moe=model.is_moe,
        seq_len=config.seq_len, params=float(total_params(model)), num_gpus=cluster.num_gpus,
        crosses_domain=cluster.num_gpus > domain,
        kernel_flop=2.0 * tokens * model.hidden_size ** 2 / max(config.tp, 1),
        experts=model.num_experts if model.is_moe else 0, top_k=model.top_k if model.is_moe else 0,
        ep=config.ep if model.is_moe else 1, switches=_switch_values(config))


@dataclass(frozen=True, slots=True)
class Tagged:
    """One development run's features with its source (what :func:`build_evidence` summarises)."""

    source: str
    features: JobFeatures


def _span(values: Iterable[float]) -> Span | None:
    values = list(values)
    return Span(low=min(values), high=max(values)) if values else None


def _family_evidence(items: Sequence[Tagged]) -> FamilyEvidence:
    sources_of: dict[str, set[str]] = {}
    for item in items:
        sources_of.setdefault(f"gpu:{item.features.gpu}", set()).add(item.source)
        sources_of.setdefault(f"fw:{item.features.framework}", set()).add(item.source)
    moe = [i for i in items if i.features.moe]
    f = [i.features for i in items]
    return FamilyEvidence(
        runs=len(items), sources=len({i.source for i in items}),
        gpus={k[4:]: len(v) for k, v in sorted(sources_of.items()) if k.startswith("gpu:")},
        frameworks={k[3:]: len(v) for k, v in sorted(sources_of.items()) if k.startswith("fw:")},
        seq_len=_span(x.seq_len for x in f), params=_span(x.params for x in f),
        num_gpus=_span(x.num_gpus for x in f), kernel_flop=_span(x.kernel_flop for x in f),
        crosses_domain_sources=len({i.source for i in items if i.features.crosses_domain}),
        moe_sources=len({i.source for i in moe}),
        experts=_span(i.features.experts for i in moe), top_k=_span(i.features.top_k for i in moe),
        ep=_span(i.features.ep for i in moe))


def build_evidence(items: Sequence[Tagged], *, written: str = "") -> Evidence:
    """The evidence summary of development runs (per family and ``*``)."""
    if not items:
        raise ValueError("no runs to summarise as evidence")
    families = {ANY: _family_evidence(items)}
    for family in sorted({i.features.family for i in items}):
        families[family] = _family_evidence([i for i in items if i.features.family == family])
    switches: dict[str, set[str]] = {}
    for item in items:
        for name, value in item.features.switches:
            switches.setdefault(name, set()).add(value)
    return Evidence(families=families, switches={k: sorted(v) for k, v in sorted(switches.items())},
                    written=written)


def _times(value: float, reference: float) -> str:
    ratio = value / reference if reference else float("inf")
    return f"{ratio:.1f}x" if ratio < 10 else f"{ratio:.0f}x"


def _count(value: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def _seq(value: float) -> str:
    return f"{value / 1024:g}k" if value >= 1024 and value % 1024 == 0 else f"{value:g}"


def _outside(value: float, span: Span) -> int:
    """-1 below, +1 above, 0 inside the span widened by RANGE_MARGIN."""
    if value > span.high * RANGE_MARGIN:
        return 1
    if value < span.low / RANGE_MARGIN:
        return -1
    return 0


def _range_reasons(job: JobFeatures, ev: FamilyEvidence, where: str) -> list[Novelty]:
    out: list[Novelty] = []
    side = _outside(job.seq_len, ev.seq_len)
    if side:
        ref = ev.seq_len.high if side > 0 else ev.seq_len.low
        out.append(Novelty("sequence", f"sequence {_seq(job.seq_len)} is {_times(job.seq_len, ref)} the longest "
                           f"fitted {where} ({_seq(ref)})" if side > 0 else f"sequence {_seq(job.seq_len)} is "
                           f"{_times(ref, job.seq_len)} shorter than the shortest fitted {where} ({_seq(ref)})"))
    side = _outside(job.params, ev.params)
    if side:
        ref = ev.params.high if side > 0 else ev.params.low
        out.append(Novelty("model-size", f"model of {_count(job.params)} parameters is {_times(job.params, ref)} "
                           f"the largest fitted {where} ({_count(ref)})" if side > 0 else
                           f"model of {_count(job.params)} parameters is {_times(ref, job.params)} smaller than "
                           f"the smallest fitted {where} ({_count(ref)})"))
    if job.kernel_flop < ev.kernel_flop.low / RANGE_MARGIN:
        out.append(Novelty("host-bound", f"per-GPU work per kernel ({_count(job.kernel_flop)}FLOP) is "
                           f"{_times(ev.kernel_flop.low, job.kernel_flop)} below the smallest fitted {where} "
                           f"({_count(ev.kernel_flop.low)}FLOP): host and launch overheads weigh more"))
    if _outside(job.num_gpus, ev.num_gpus) > 0:
        out.append(Novelty("scale", f"{job.num_gpus} GPUs is {_times(job.num_gpus, ev.num_gpus.high)} the most "
                           f"fitted {where} ({ev.num_gpus.high:g})"))
    elif job.crosses_domain and ev.crosses_domain_sources == 0:
        out.append(Novelty("scale", f"the job spans several NVLink/xGMI domains; no development run {where} does"))
    if job.moe:
        if ev.moe_sources == 0 or ev.experts is None or ev.top_k is None or ev.ep is None:
            out.append(Novelty("moe-shape", f"no MoE development run {where}"))
        else:
            beyond = [f"{name} {value:g} (fitted {span.low:g}-{span.high:g})"
                      for name, value, span in (("experts", job.experts, ev.experts), ("top-k", job.top_k, ev.top_k),
                                                ("EP", job.ep, ev.ep)) if _outside(value, span)]
            if beyond:
                out.append(Novelty("moe-shape", "MoE shape outside the fitted range " + where + ": "
                                   + ", ".join(beyond)))
    return out


def novelty(job: JobFeatures, evidence: Evidence) -> tuple[Novelty, ...]:
    """Every way ``job`` lies outside ``evidence`` (empty: inside the evidence)."""
    out: list[Novelty] = []
    fam = evidence.families.get(job.family)
    gpu = job.gpu.upper()
    if fam is None:
        out.append(Novelty("gpu-family", f"no development run on {gpu} or any {job.family} GPU"))
    elif fam.sources < MIN_SOURCES:
        seen = "" if job.gpu in fam.gpus else f"no development run on {gpu}; "
        out.append(Novelty("gpu-family", f"{seen}{job.family} GPUs have development runs from {fam.sources} "
                           "source only"))
    elif job.gpu not in fam.gpus:
        out.append(Novelty("gpu", f"no development run on {gpu} (its family {job.family} has "
                           f"{fam.sources} sources)"))
    everything = evidence.families[ANY]
    fw_sources = everything.frameworks.get(job.framework, 0)
    if fw_sources == 0:
        out.append(Novelty("framework", f"no development run with framework {job.framework}"))
    elif fw_sources < MIN_SOURCES:
        out.append(Novelty("framework", f"framework {job.framework} has development runs from "
                           f"{fw_sources} source only"))
    unseen = [f"{name}={value}" for name, value in job.switches
              if name in evidence.switches and value not in evidence.switches[name]]
    if unseen:
        out.append(Novelty("switch", "no development run with " + ", ".join(unseen)))
    ranges = (fam, f"on {job.family}") if fam is not None else (everything, "on any GPU")
    out += _range_reasons(job, ranges[0], ranges[1])
    return tuple(out)


def _evidence_path() -> Path:
    return Path(str(resources.files("projection") / "catalog" / "uncertainty" / "evidence.yaml"))


@lru_cache(maxsize=1)
def shipped_evidence() -> Evidence | None:
    """The shipped evidence summary (None before ``projtune calibrate ... --bands-out`` first wrote it)."""
    path = _evidence_path()
    if not path.is_file():
        return None
    return Evidence.model_validate(load_catalog(path.read_text()))


def evidence_path_for(bands_path: Path) -> Path:
    """Where the evidence summary goes when the band table is written to ``bands_path`` (same folder)."""
    return bands_path.with_name("evidence.yaml")


def write_evidence(evidence: Evidence, path: Path) -> Path:
    """Write an evidence summary as YAML (the shipped one is ``projection/catalog/uncertainty/evidence.yaml``)."""
    header = ("# What the development runs cover, per GPU family and over all (*): sources, runs and ranges.\n"
              "# Written by `projtune calibrate --cross-validate evals/data --bands-out <bands.yaml>` next to the\n"
              "# band table (projection/evidence.py explains each field; do not edit by hand).\n")
    data: dict[str, Any] = evidence.model_dump(mode="json", exclude_none=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump(data, sort_keys=False, width=120), encoding="utf-8")
    return path
