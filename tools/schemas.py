"""Pydantic input and output models of the LLM-callable tools (search's live in tools.search).

Field descriptions are what an LLM reads in the tool schema, so they say units, allowed
values and defaults.  Layouts are :class:`projection.training_config.TrainingConfig` (the sweep-format keys), so
every tool validates a layout the same way.  Inputs say ``layout``, never ``config``: LangChain
passes its RunnableConfig to a tool under that name, which would hide the argument.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from projection.anchor import AnchorRun
from projection.flops import FlopsFormula
from projection.hardware import Vendor
from projection.memory_verdict import Verdict
from projection.training_config import (NicGbps, NicsPerNode, NvlinkDomain, PackedDocumentTokens,
                                        TrainingConfig)
from projection.vocabulary import ImportFramework, LaunchFramework
from tools.anchoring import Anchoring
from tools.job_fields import GPU_HELP, MODEL_HELP, JobFields
from tools.launch_config import LaunchConfig
from tools.layout_score import BAND_REASONS_DOC, LayoutScore, ProjectedLayout

_FORBID = ConfigDict(extra="forbid")
ModelRef = str | dict[str, Any]
_MODEL = MODEL_HELP
_GPU = GPU_HELP
_CONFIG = ("Layout in sweep-format keys: tp, pp, vpp, cp, ep, etp, mbs, gbs, seq_len, precision, recompute, "
           "recompute_num_layers, sequence_parallel, zero, pp_schedule, moe_dispatcher, framework; run-time switches "
           "comm_overlap (list of dp/tp/pp/ep/cp, [] = none), cuda_graphs, compile, attention_backend "
           "(fused/triton/unfused), grad_reduce_in_fp32 (unset = the framework's default). dp is derived. "
           "Set gbs and seq_len: their defaults (1, 4096) rarely match the job.")
ANCHORS_HELP = ("Measured runs of this job (same model or a reduced-layer proxy, same GPU type, any layout and scale), "
                "given as data: {label, model, gpu, num_gpus, config, iteration_time_s, peak_memory_gib}. They correct "
                "the projection (compute and communication factors, memory offset; projection/anchor.py); the answer "
                "shows the anchored and the unanchored numbers. `projtune sweeps anchors FILE` prints them from a log.")


class ListModelsInput(BaseModel):
    """Filter for list_models."""

    model_config = _FORBID
    contains: str | None = Field(default=None, description="Only ids containing this text, e.g. 'llama'.")
    moe_only: bool = Field(default=False, description="Only mixture-of-experts models.")


class ModelInfo(BaseModel):
    """Architecture summary of one catalog model."""

    model_config = _FORBID
    id: str
    model_type: str = Field(description="Hugging Face model_type.")
    params_billion: float = Field(description="Total parameters, billions.")
    active_params_billion: float = Field(description="Parameters per token (MoE: top-k experts), billions.")
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    num_experts: int = Field(description="Routed experts per MoE layer; 0 for dense models.")
    top_k: int = Field(description="Experts per token; 0 for dense models.")
    vocab_size: int


class ListModelsOutput(BaseModel):
    """The catalog models."""

    model_config = _FORBID
    models: list[ModelInfo]


class ListHardwareInput(BaseModel):
    """Filter for list_hardware."""

    model_config = _FORBID
    vendor: Vendor | None = Field(default=None, description="Only this vendor's GPUs.")


class HardwareInfo(BaseModel):
    """Datasheet summary of one GPU type."""

    model_config = _FORBID
    id: str
    display_name: str
    vendor: str
    family: str
    hbm_gib: float = Field(description="Usable HBM per GPU, GiB.")
    hbm_tbyte_per_s: float = Field(description="Peak HBM bandwidth, TB/s.")
    bf16_tflops: float = Field(description="Dense BF16 peak, TFLOP/s.")
    fp8_tflops: float | None = Field(description="Dense FP8 peak, TFLOP/s (None if no FP8).")
    supported_precisions: list[str]
    gpus_per_node: int
    scale_up_gbyte_per_s: float = Field(description="Per-GPU NVLink/xGMI bandwidth, one direction, GB/s.")
    scale_up_domain_gpus: int
    nic_gbit_per_s: float = Field(description="Line rate of one scale-out NIC, Gbit/s.")
    nics_per_node: int


class ListHardwareOutput(BaseModel):
    """The catalog GPUs."""

    model_config = _FORBID
    hardware: list[HardwareInfo]


class JobInput(JobFields):
    """Which model on which GPUs (shared by the layout tools)."""


NETWORK_FIELDS = ("nics_per_node", "nic_gbps", "nvlink_domain")
"""Optional cluster network overrides shared by the job inputs, the search and the tune tool."""


class LegalAxesInput(JobInput):
    """Model, cluster and sequence length whose legal axis values to list."""

    seq_len: int = Field(default=4096, ge=1, description="Sequence length, tokens (CP legality depends on it).")


class LegalAxesOutput(BaseModel):
    """Legal values of each axis taken alone; combinations must also satisfy the notes."""

    model_config = _FORBID
    tp: list[int]
    pp: list[int]
    vpp: list[int]
    cp: list[int]
    ep: list[int]
    mbs: list[int]
    precision: list[str]
    recompute: list[str]
    zero: list[int]
    pp_schedule: list[str]
    notes: list[str] = Field(description="Rules that tie axes together.")


class LayoutInput(JobInput):
    """One layout of a job."""

    layout: TrainingConfig = Field(description=_CONFIG)
    profile_path: str | None = Field(default=None, description="Device profile file; default: the shipped one.")


class MemoryInput(LayoutInput):
    """One layout whose memory to check, optionally anchored on measured peaks."""

    anchors: list[AnchorRun] = Field(default_factory=list, description=ANCHORS_HELP)


class StageMemoryOut(BaseModel):
    """Memory of one pipeline rank, GiB."""

    model_config = _FORBID
    rank: int
    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    fp8_copies_gib: float
    activations_gib: float
    transient_gib: float
    overhead_gib: float
    total_gib: float
    microbatches_in_flight: float


class MemoryOutput(BaseModel):
    """Per-GPU memory of a layout and the verdict against HBM."""

    model_config = _FORBID
    layout: str = ""
    verdict: Verdict = Field(
        description="fits / at risk / out of memory: the peak against the framework's usable memory with the "
                    "calibrated margins of projection/memory_verdict.py.")
    peak_gib: float
    peak_rank: int
    capacity_gib: float
    headroom_fraction: float = Field(description="1 - peak / capacity; negative when out of memory.")
    stages: list[StageMemoryOut]
    memory_offset_gib: float = Field(0.0, description="Measured - projected peak of the anchors, GiB, added to every "
                                                      "rank (0 without anchors that logged a peak).")
    unanchored_peak_gib: float | None = Field(None, description="Peak before the anchors' offset (None: unanchored).")


class ProjectInput(LayoutInput):
    """One layout to project."""

    flops_formula: FlopsFormula = Field(default="6nd", description="Model FLOP formula for MFU.")
    anchors: list[AnchorRun] = Field(default_factory=list, description=ANCHORS_HELP)


class UnanchoredNumbers(BaseModel):
    """The projection before the anchors' corrections."""

    model_config = _FORBID
    iteration_time_s: float
    tokens_per_sec_per_gpu: float
    tokens_per_sec_per_gpu_low: float
    tokens_per_sec_per_gpu_high: float
    mfu: float
    peak_gib: float


class ProjectOutput(BaseModel):
    """Projected step time, throughput, MFU, breakdown and memory of one layout."""

    model_config = _FORBID
    model: str
    gpu: str
    num_gpus: int
    layout: str
    config: dict[str, Any] = Field(description="Sweep-format keys with derived dp and pp_schedule.")
    iteration_time_s: float
    iteration_time_s_low: float = Field(description="80% interval on iteration time, low end, seconds.")
    iteration_time_s_high: float = Field(description="80% interval on iteration time, high end, seconds.")
    tokens_per_sec_per_gpu: float
    tokens_per_sec_per_gpu_low: float = Field(description="80% interval, low end (projection/uncertainty.py).")
    tokens_per_sec_per_gpu_high: float = Field(description="80% interval, high end.")
    band_reasons: list[str] = Field(default_factory=list, description=BAND_REASONS_DOC)
    model_tflops_per_gpu: float
    mfu: float
    flops_formula: str
    num_microbatches: int
    bubble_fraction: float
    breakdown_s: dict[str, float] = Field(description="Critical-rank step time by term, seconds.")
    bottleneck: str
    memory: MemoryOutput
    unanchored: UnanchoredNumbers | None = Field(None, description="The same layout without the anchors.")
    anchoring: Anchoring | None = Field(None, description="Corrections and the anchors they came from.")
    switches: dict[str, Any] | None = Field(
        default=None, description="Run-time switches in effect (comm_overlap, cuda_graphs, compile, attention_backend, "
                                  "grad_reduce_in_fp32): the layout's, else its framework's defaults.")

    def score(self) -> LayoutScore:
        """This projection as the one scored-layout shape (:class:`tools.layout_score.LayoutScore`)."""
        return LayoutScore(layout=self.layout, tokens_per_sec_per_gpu=self.tokens_per_sec_per_gpu,
                           tokens_per_sec_per_gpu_low=self.tokens_per_sec_per_gpu_low,
                           tokens_per_sec_per_gpu_high=self.tokens_per_sec_per_gpu_high,
                           band_reasons=tuple(self.band_reasons), mfu=self.mfu,
                           iteration_time_s=self.iteration_time_s, peak_memory_gib=self.memory.peak_gib,
                           headroom_fraction=self.memory.headroom_fraction, verdict=self.memory.verdict,
                           bottleneck=self.bottleneck)


class CompareInput(JobInput):
    """Two or more layouts of the same job."""

    layouts: list[TrainingConfig] = Field(min_length=2, max_length=8, description="Layouts to compare. " + _CONFIG)
    profile_path: str | None = Field(default=None, description="Device profile file; default: the shipped one.")


class CompareRow(ProjectedLayout):
    """One layout's numbers in a comparison (a :class:`tools.layout_score.LayoutScore`, frozen)."""

    index: int = Field(description="Position in the input list.")
    relative_throughput: float = Field(description="Throughput / the fastest layout's.")


class CompareOutput(BaseModel):
    """Layouts side by side, fastest marked."""

    model_config = _FORBID
    rows: list[CompareRow]
    fastest: int = Field(description="Index of the fastest layout.")
    summary: str


class ExplainInput(JobInput):
    """Two layouts of the same job to explain."""

    a: TrainingConfig = Field(description="Layout A. " + _CONFIG)
    b: TrainingConfig = Field(description="Layout B. " + _CONFIG)
    profile_path: str | None = Field(default=None, description="Device profile file; default: the shipped one.")
    anchors: list[AnchorRun] = Field(default_factory=list, description=ANCHORS_HELP + " Both layouts are compared "
                                     "at their anchored projections, as search and tune rank them.")


class TermDiff(BaseModel):
    """One step-time or memory term of A and B."""

    model_config = _FORBID
    term: str
    a: float
    b: float
    b_minus_a: float


class ExplainOutput(BaseModel):
    """Why one layout beats the other, term by term."""

    model_config = _FORBID
    winner: Literal["a", "b", "tie"]
    speedup: float = Field(description="Winner's tokens/s/GPU over the loser's (1.0 for a tie).")
    a: CompareRow
    b: CompareRow
    time_terms_s: list[TermDiff] = Field(description="Step-time breakdown terms, seconds, largest gap first.")
    memory_terms_gib: list[TermDiff] = Field(description="Peak-stage memory terms, GiB.")
    summary: str


class ExportInput(LayoutInput):
    """A layout and the framework to write it for."""

    framework: LaunchFramework = Field(
        default="megatron", description="megatron (command-line args), megatron-bridge (dotted overrides), primus "
                                        "(YAML overlay), torchtitan (TOML + 0.3.0 command line), maxtext (YAML).")


ExportOutput = LaunchConfig


class BenchmarkInput(JobInput):
    """A layout to measure on the local GPU (measured mode)."""

    layout: TrainingConfig = Field(description=_CONFIG)


class BenchmarkOutput(BaseModel):
    """Measured per-layer times, or why nothing was measured."""

    model_config = _FORBID
    available: bool = Field(description="Whether a GPU benchmark ran.")
    message: str
    results: dict[str, Any] | None = None


MAX_TUNE_DEADLINE_S = 3600.0
"""Longest wall-clock limit a tune call may ask for (an hour: the largest searches take seconds to minutes)."""


class TuneInput(BaseModel):
    """The whole tuning question: in words, or as fields (fields win over what the text says)."""

    model_config = _FORBID
    request: str | None = Field(default=None, description="The question in words, e.g. 'tune Mixtral 8x7B for 64 "
                                                          "MI300X, seq 8k, no FP8'. Read by the offline parser.")
    model: ModelRef | None = Field(default=None, description=_MODEL)
    gpu: str | None = Field(default=None, description=_GPU)
    num_gpus: int | None = Field(default=None, ge=1, description="GPUs in the job.")
    gpus_per_node: int | None = Field(default=None, ge=1, description="GPUs per node.")
    nics_per_node: NicsPerNode = None
    nic_gbps: NicGbps = None
    nvlink_domain: NvlinkDomain = None
    gbs: int | None = Field(default=None, ge=1, description="Global batch size, sequences.")
    seq_len: int | None = Field(default=None, ge=1, description="Sequence length, tokens.")
    packed_document_tokens: PackedDocumentTokens = None
    constraints: list[str] = Field(default_factory=list, description="Axis rules: 'tp<=8', 'precision=bf16', ...")
    top_k: int = Field(default=5, ge=1, le=50, description="Layouts to rank.")
    framework: ImportFramework = Field(default="megatron",
                                                                   description="Launch config format of the answer.")
    tokens: str | None = Field(default=None, description="Token budget to plan for (e.g. '15T'): days, GPU-hours.")
    deadline: str | None = Field(default=None, description="Deadline to plan for (e.g. '30d'): smallest GPU count "
                                                           "that meets it (needs tokens).")
    max_rounds: int = Field(default=3, ge=1, le=20, description="Most proposal rounds of the agent.")
    anchors: list[AnchorRun] = Field(default_factory=list, description=ANCHORS_HELP + " With a near-tie the report's "
                                     "benchmark_plan says which 1-node runs to make; give their logs back here.")
    deadline_s: float | None = Field(
        default=None, gt=0, le=MAX_TUNE_DEADLINE_S, allow_inf_nan=False,
        description=f"Wall-clock limit of this call, seconds (at most {MAX_TUNE_DEADLINE_S:g}; over MCP also at most "
                    "the server's $PROJTUNE_TOOL_DEADLINE). When it passes the work stops and the call fails with "
                    "error code 'deadline_exceeded' saying how many layouts and trials were done; no partial answer.")


TuneStatus = Literal["ok", "no_fit", "clarification"]
"""How a tuning run ended: a layout, nothing fits, or a question back (agent/report.py TuneReport reads it)."""


class TuneOutput(BaseModel):
    """The tuning agent's answer: status, a one-line summary, and the full TuneReport."""

    model_config = _FORBID
    status: TuneStatus
    summary: str = Field(description="One line: the best layout and its projected throughput, or the question back.")
    report: dict[str, Any] = Field(description="agent.report.TuneReport as JSON: best, top layouts with 80% "
                                               "intervals and labelled MFU, near-ties, decision, plan, assumptions, "
                                               "launch config.")
