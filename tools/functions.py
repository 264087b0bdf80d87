"""The tool functions: pure functions from a pydantic input to a pydantic output over the projection engine.

Each docstring is the tool description an LLM reads (first line = what it does; then when
to use it and what comes back).  Functions raise :class:`projection.errors.ProjtuneError` on
bad input; :func:`tools.registry.call_tool` turns that into a structured error.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from projection.engine import Projection
from projection.engine import project as project_layout
from projection.errors import IllegalLayoutError
from projection.hardware import HardwareSpec
from projection.hardware import list_hardware as catalog_hardware
from projection.job import profile_for, resolve_job
from projection.layout import parallel_dims
from projection.legality import layout_violations, tp_span
from projection.legality import legal_axes as engine_legal_axes
from projection.memory import GIB, MemoryResult, project_memory
from projection.model_spec import ModelSpec, list_model_ids, load_model
from projection.params import active_params, total_params
from projection.summary import memory_dict, projection_dict
from projection.training_config import Cluster, TrainingConfig
from tools import schemas as s
from tools.launch_config import LaunchConfig
from tools.launch_config import export_launch_config as export_layout
from tools.layout_score import projected_layout
from tools.search import SearchRequest, SearchResult, run_search


def _job(inp: s.JobInput) -> tuple[ModelSpec, HardwareSpec, Cluster]:
    job = resolve_job(inp.model, inp.gpu, inp.num_gpus, gpus_per_node=inp.gpus_per_node,
                      nics_per_node=inp.nics_per_node, nic_gbps=inp.nic_gbps, nvlink_domain=inp.nvlink_domain,
                      host_op_s=inp.host_op_s)
    return job.model, job.hardware, job.cluster


def _layout(config: dict[str, Any]) -> str:
    from tools.formatting import layout_text

    return layout_text(config)


def _checked(model: ModelSpec, hardware: HardwareSpec, cluster: Cluster, config: TrainingConfig) -> None:
    reasons = layout_violations(model, hardware, cluster, config)
    if reasons:
        raise IllegalLayoutError(reasons)


def list_models(inp: s.ListModelsInput) -> s.ListModelsOutput:
    """List the catalog models with their size and shape.

    Use it to find a valid model id (for every other tool) or to see layer, head and expert
    counts, which bound the parallel degrees (tp divides heads, ep divides experts).
    """
    rows = []
    for model_id in list_model_ids():
        m = load_model(model_id)
        if (inp.contains and inp.contains.lower() not in model_id) or (inp.moe_only and not m.is_moe):
            continue
        rows.append(s.ModelInfo(
            id=model_id, model_type=m.model_type, params_billion=round(total_params(m) / 1e9, 2),
            active_params_billion=round(active_params(m) / 1e9, 2), num_layers=m.num_layers,
            hidden_size=m.hidden_size, num_attention_heads=m.num_attention_heads, num_kv_heads=m.num_kv_heads,
            num_experts=m.num_experts, top_k=m.top_k, vocab_size=m.vocab_size,
        ))
    return s.ListModelsOutput(models=rows)


def list_hardware(inp: s.ListHardwareInput) -> s.ListHardwareOutput:
    """List the catalog GPUs: memory, peak FLOP/s, supported precisions and interconnect.

    Use it to find a valid gpu id and to see whether FP8 is available and how much HBM a
    layout may use.
    """
    rows = []
    for h in catalog_hardware():
        if inp.vendor and h.vendor != inp.vendor:
            continue
        fp8 = h.peak_flops_per_s.get("fp8") if "fp8" in h.supported_precisions else None
        rows.append(s.HardwareInfo(
            id=h.id, display_name=h.display_name, vendor=h.vendor, family=h.family,
            hbm_gib=round(h.hbm_capacity_bytes / GIB, 2), hbm_tbyte_per_s=h.hbm_bandwidth_bytes_per_s / 1e12,
            bf16_tflops=h.peak_flops_per_s["bf16"] / 1e12, fp8_tflops=fp8 / 1e12 if fp8 else None,
            supported_precisions=list(h.supported_precisions), gpus_per_node=h.gpus_per_node,
            scale_up_gbyte_per_s=h.scale_up_bytes_per_s / 1e9, scale_up_domain_gpus=h.scale_up_domain_gpus,
            nic_gbit_per_s=h.nic_bytes_per_s * 8 / 1e9, nics_per_node=h.nics_per_node,
        ))
    return s.ListHardwareOutput(hardware=rows)


def legal_axes(inp: s.LegalAxesInput) -> s.LegalAxesOutput:
    """List the legal values of each parallel, batch and precision axis for a model on a cluster.

    Each list is legal on its own; a full layout must also satisfy the notes (products and
    divisibility). Use it before proposing layouts by hand; `search` does this for you.
    """
    model, hardware, cluster = _job(inp)
    axes = engine_legal_axes(model, hardware, cluster, seq_len=inp.seq_len)
    notes = [
        f"tp*pp*cp must divide num_gpus={cluster.num_gpus}; dp = num_gpus/(tp*pp*cp)",
        "gbs must be divisible by mbs*dp",
        f"pp*vpp <= num_layers={model.num_layers}; vpp > 1 needs pp > 1 and the interleaved schedule",
        (f"tp <= gpus_per_node={cluster.gpus_per_node}" if (span := tp_span(hardware, cluster)) == cluster.gpus_per_node
         else f"tp <= {span} (one NVLink domain)") + "; sequence_parallel=true is the usual choice when tp > 1",
        "cp needs seq_len divisible by 2*cp",
    ]
    if model.is_moe:
        notes.append(f"ep divides num_experts={model.num_experts}; ep*etp divides tp*cp*dp")
    return s.LegalAxesOutput(
        tp=list(axes.tp), pp=list(axes.pp), vpp=list(axes.vpp), cp=list(axes.cp), ep=list(axes.ep),
        mbs=list(axes.mbs), precision=list(axes.precision), recompute=list(axes.recompute), zero=list(axes.zero),
        pp_schedule=list(axes.pp_schedule), notes=notes,
    )


def _memory_output(memory: MemoryResult, layout: str) -> s.MemoryOutput:
    return s.MemoryOutput.model_validate(memory_dict(memory) | {"layout": layout})


def _anchoring(inp: Any, model: ModelSpec, hardware: HardwareSpec, cluster: Cluster) -> Any:
    """The job's anchoring (:func:`tools.anchoring.anchoring_for`) when the input gives anchors, else None."""
    if not getattr(inp, "anchors", None):
        return None
    from projection.job import job_on
    from tools.anchoring import anchoring_for

    job = job_on(model, cluster, hardware=hardware, profile=profile_for(hardware, inp.profile_path))
    return anchoring_for(job, inp.anchors)


def check_memory(inp: s.MemoryInput) -> s.MemoryOutput:
    """Check whether one layout fits in GPU memory: per-stage weights, gradients, optimizer, activations.

    Cheap (no step-time projection). Returns the verdict (fits / at risk / out of memory),
    peak GiB, headroom and every pipeline stage's terms. An illegal layout is an error that
    lists every broken rule. `anchors` (measured runs that logged a peak) add their measured -
    projected offset.
    """
    model, hardware, cluster = _job(inp)
    _checked(model, hardware, cluster, inp.layout)
    dims = parallel_dims(inp.layout, cluster)
    memory = project_memory(model, hardware, inp.layout, dims, profile_for(hardware, inp.profile_path))
    layout = _layout(inp.layout.model_dump(exclude_none=True) | {"dp": dims.dp})
    anchoring = _anchoring(inp, model, hardware, cluster)
    if anchoring is None or not anchoring.corrections.memory_offset_gib:
        return _memory_output(memory, layout)
    from projection.anchor import offset_memory

    offset = anchoring.corrections.memory_offset_gib
    return _memory_output(offset_memory(memory, offset), layout).model_copy(
        update={"memory_offset_gib": offset, "unanchored_peak_gib": memory.peak_bytes / GIB})


def _project(model: ModelSpec, hardware: HardwareSpec, cluster: Cluster, config: TrainingConfig,
             profile_path: str | None, flops_formula: str = "6nd") -> Projection:
    _checked(model, hardware, cluster, config)
    return project_layout(model, cluster, config, hardware=hardware, profile=profile_for(hardware, profile_path),
                          flops_formula=flops_formula, check=False)  # type: ignore[arg-type]


def project(inp: s.ProjectInput) -> s.ProjectOutput:
    """Project one layout: step time, tokens/s/GPU, MFU, time breakdown, bottleneck and memory.

    Use it to evaluate a specific layout. The breakdown (compute, tp/cp/ep comm, pp bubble,
    dp comm, optimizer, overhead) names the bottleneck to attack next.
    """
    model, hardware, cluster = _job(inp)
    projection = _project(model, hardware, cluster, inp.layout, inp.profile_path, inp.flops_formula)
    anchoring = _anchoring(inp, model, hardware, cluster)
    if anchoring is not None:
        from tools.anchoring import anchored

        unanchored, projection = projection, anchored(projection, anchoring.corrections)
    data = projection_dict(projection)
    data["layout"] = _layout(data["config"])
    data["memory"] = data["memory"] | {"layout": data["layout"]}
    if anchoring is not None:
        data["anchoring"] = anchoring
        data["unanchored"] = s.UnanchoredNumbers(
            iteration_time_s=unanchored.iteration_time_s, tokens_per_sec_per_gpu=unanchored.tokens_per_s_per_gpu,
            tokens_per_sec_per_gpu_low=unanchored.tokens_per_sec_per_gpu_low,
            tokens_per_sec_per_gpu_high=unanchored.tokens_per_sec_per_gpu_high, mfu=unanchored.mfu,
            peak_gib=unanchored.memory.peak_bytes / GIB)
        data["memory"] |= {"memory_offset_gib": anchoring.corrections.memory_offset_gib,
                           "unanchored_peak_gib": unanchored.memory.peak_bytes / GIB}
    return s.ProjectOutput.model_validate(data)


def search(inp: SearchRequest) -> SearchResult:
    """Search every legal layout of a job and return the top-k by tokens/s/GPU, with reasons.

    Enumerates TP, PP, VPP, CP, EP, micro-batch, recompute, precision, ZeRO level and
    pipeline schedule; drops layouts that do not fit in memory; projects the rest; ranks by
    throughput (ties: more memory headroom). Constraints pin or bound axes, e.g.
    {"tp": "<=8", "precision": "bf16", "pp": [1, 2, 4], "min_headroom": 0.1}. Pass
    `candidates` to rank only your own layouts. When nothing fits, `message` says why
    (e.g. how many GPUs the smallest fitting layout needs). `anchors` (measured runs of the
    job, as data) correct every layout before ranking; `anchoring` says how.
    """
    return run_search(inp)


def _row(index: int, p: Projection, fastest: float) -> s.CompareRow:
    return s.CompareRow(**projected_layout(p), index=index,
                        relative_throughput=p.tokens_per_s_per_gpu / fastest if fastest else 0.0)


def compare(inp: s.CompareInput) -> s.CompareOutput:
    """Compare two or more layouts of the same job side by side: throughput, MFU, memory and bottleneck.

    Every layout must be legal (an error names the bad one: field layouts.N). The fastest
    gets relative_throughput 1.0.
    """
    model, hardware, cluster = _job(inp)
    projections = []
    for i, config in enumerate(inp.layouts):
        try:
            projections.append(_project(model, hardware, cluster, config, inp.profile_path))
        except IllegalLayoutError as err:
            err.field = f"layouts.{i}"  # type: ignore[attr-defined]
            raise
    fastest = max(p.tokens_per_s_per_gpu for p in projections)
    rows = [_row(i, p, fastest) for i, p in enumerate(projections)]
    best = max(rows, key=lambda r: (r.tokens_per_sec_per_gpu, r.headroom_fraction))
    lines = [f"#{r.index} {r.layout}: {r.tokens_per_sec_per_gpu:,.0f} tok/s/GPU ({r.relative_throughput:.0%}), "
             f"MFU {r.mfu:.1%}, {r.peak_memory_gib:.1f} GiB ({r.verdict}), bottleneck {r.bottleneck}" for r in rows]
    return s.CompareOutput(rows=rows, fastest=best.index, summary="\n".join(lines))


def _diffs(a: dict[str, float], b: dict[str, float], suffix: str) -> list[s.TermDiff]:
    terms = [s.TermDiff(term=k.removesuffix(suffix), a=a[k], b=b[k], b_minus_a=b[k] - a[k]) for k in a if k in b]
    return sorted(terms, key=lambda t: -abs(t.b_minus_a))


def explain(inp: s.ExplainInput) -> s.ExplainOutput:
    """Explain why layout A beats layout B (or the reverse), in numbers, term by term.

    Returns the winner and speedup, each step-time term of both (compute, tp/cp/ep comm,
    pp bubble, dp comm, optimizer, overhead; largest gap first) and the peak-stage memory
    terms, plus a short summary naming the terms that decide it.
    """
    model, hardware, cluster = _job(inp)
    pa = _project(model, hardware, cluster, inp.a, inp.profile_path)
    pb = _project(model, hardware, cluster, inp.b, inp.profile_path)
    anchoring = _anchoring(inp, model, hardware, cluster)
    if anchoring is not None:   # compare what search and tune rank: the anchored projections
        from tools.anchoring import anchored

        pa, pb = anchored(pa, anchoring.corrections), anchored(pb, anchoring.corrections)
    fastest = max(pa.tokens_per_s_per_gpu, pb.tokens_per_s_per_gpu)
    ra, rb = _row(0, pa, fastest), _row(1, pb, fastest)
    ratio = pa.tokens_per_s_per_gpu / pb.tokens_per_s_per_gpu
    winner = "tie" if abs(ratio - 1.0) < 1e-3 else ("a" if ratio > 1 else "b")
    time_terms = _diffs(pa.breakdown.as_dict(), pb.breakdown.as_dict(), "_s")
    mem_a = {k: v for k, v in memory_dict(pa.memory)["stages"][_peak_index(pa)].items() if k.endswith("_gib")}
    mem_b = {k: v for k, v in memory_dict(pb.memory)["stages"][_peak_index(pb)].items() if k.endswith("_gib")}
    memory_terms = _diffs(mem_a, mem_b, "_gib")
    gap = pb.iteration_time_s - pa.iteration_time_s
    top = ", ".join(f"{t.term} {t.b_minus_a:+.3f} s" for t in time_terms[:3])
    speedup = max(ratio, 1 / ratio)
    lead = "a tie" if winner == "tie" else f"{winner.upper()} is {speedup - 1:.1%} faster"
    summary = (f"{lead}: A {ra.layout} at {ra.tokens_per_sec_per_gpu:,.0f} tok/s/GPU vs B {rb.layout} at "
               f"{rb.tokens_per_sec_per_gpu:,.0f}. Iteration B - A = {gap:+.3f} s, mostly {top}. "
               f"Peak memory A {ra.peak_memory_gib:.1f} GiB ({ra.verdict}) vs B {rb.peak_memory_gib:.1f} GiB "
               f"({rb.verdict}).")
    return s.ExplainOutput(winner=winner, speedup=1.0 if winner == "tie" else speedup, a=ra, b=rb,
                           time_terms_s=time_terms, memory_terms_gib=memory_terms, summary=summary)


def _peak_index(p: Projection) -> int:
    stages = p.memory.stages
    return max(range(len(stages)), key=lambda i: stages[i].total_bytes)


def export_launch_config(inp: s.ExportInput) -> LaunchConfig:
    """Write a layout as a launch config: Megatron-LM arguments, a Primus YAML overlay or a torchtitan TOML.

    Option names are the framework's own. `warnings` lists what the framework cannot
    express exactly (e.g. zero-bubble in upstream Megatron). An illegal layout is an error.
    """
    model, hardware, cluster = _job(inp)
    _checked(model, hardware, cluster, inp.layout)
    return export_layout(model, cluster, inp.layout, inp.framework)


def run_benchmark(inp: s.BenchmarkInput) -> s.BenchmarkOutput:
    """Measure one layout's layers on the local GPU (measured mode) instead of projecting them.

    Only works on a machine with a CUDA/ROCm GPU; elsewhere it returns available=false and
    says so (use `project` then). Slow (tens of seconds): call it for the top one or two
    layouts only.
    """
    model, hardware, cluster = _job(inp)
    _checked(model, hardware, cluster, inp.layout)
    try:
        import torch
    except ImportError:
        return s.BenchmarkOutput(available=False, message="no GPU here: PyTorch is not installed; use `project`")
    if not torch.cuda.is_available():
        return s.BenchmarkOutput(available=False, message="no GPU here: torch.cuda.is_available() is False; "
                                                          "measured mode needs a CUDA or ROCm GPU, use `project`")
    try:
        from bench.api import run_layer_benchmark  # type: ignore[import-not-found]
    except ImportError:
        return s.BenchmarkOutput(available=False, message="measured mode is not installed here (bench.api "
                                                          "missing); use `project`")
    results = run_layer_benchmark(model=model, hardware=hardware, cluster=cluster, config=inp.layout)
    data = results.model_dump(mode="json") if hasattr(results, "model_dump") else dict(results)
    return s.BenchmarkOutput(available=True, message=f"measured on {torch.cuda.get_device_name(0)}", results=data)


TUNE_PROGRESS: ContextVar[Callable[[str, dict[str, Any]], None] | None] = ContextVar("projtune_tune_progress",
                                                                                     default=None)
"""Progress reporter of a long tool call (the agent's ``tune``, :mod:`agent.tool`): the MCP server sets it to
send ``notifications/progress``; the tool reads it.  Lives here so the tools layer never imports the agent."""

