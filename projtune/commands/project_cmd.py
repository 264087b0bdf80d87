"""`projtune project` and `projtune memory`: one layout, from flags or a layout file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from projection.vocabulary import (
    ATTENTION_BACKENDS,
    COMM_OVERLAPS,
    FINETUNES,
    FRAMEWORKS,
    MOE_DISPATCHERS,
    PIPELINE_SCHEDULES,
    PRECISIONS,
    RECOMPUTES,
    choices_help,
)
from projtune.anchor_input import AnchorOpt
from projtune.count_option import count_parser
from projtune.errors import user_errors
from tools.json_out import json_text

_DISPATCHER_HELP = f"MoE: {choices_help(MOE_DISPATCHERS)}"
ModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="Catalog id, HF config.json path.")]
GpuOpt = Annotated[Optional[str], typer.Option("--gpu", "-g", help="Hardware id, e.g. h100-sxm, mi300x.")]
GpusOpt = Annotated[Optional[int], typer.Option("--gpus", "-n", parser=count_parser("--gpus"), help="GPUs in the job.")]
FileOpt = Annotated[Optional[Path], typer.Option("--config", "-c", help="YAML/TOML layout file (flags override).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
OverlapOpt = Annotated[Optional[str], typer.Option(
    "--overlap", help=f"Communications overlapped with compute, comma list of {choices_help(COMM_OVERLAPS)}, or "
                      "'none'; default: the framework's.")]
CudaGraphsOpt = Annotated[Optional[bool], typer.Option(
    "--cuda-graphs/--no-cuda-graphs", help="Kernels replayed from CUDA/HIP graphs; default: the framework's.")]
CompileOpt = Annotated[Optional[bool], typer.Option(
    "--compile/--no-compile", help="torch.compile / XLA fuses element-wise work; default: the framework's.")]
AttentionOpt = Annotated[Optional[str], typer.Option(
    "--attention-backend", help=f"{choices_help(ATTENTION_BACKENDS)}; default: the framework's.")]
GradFp32Opt = Annotated[Optional[bool], typer.Option(
    "--grad-reduce-fp32/--grad-reduce-bf16", help="Reduce gradients in fp32 (4 B) or the training dtype (2 B); "
                                                  "default: the framework's.")]
HostOpOpt = Annotated[Optional[float], typer.Option(
    "--host-op-s", help="Measured host time per dispatched op, seconds (`projtune bench host`).")]
FrameworkOpt = Annotated[Optional[str], typer.Option(help=f"{choices_help(FRAMEWORKS)} (profile, memory traits, "
                                                           "default switches)")]
PackedOpt = Annotated[int | None, typer.Option(
    "--packed-document-tokens", parser=count_parser("--packed-document-tokens"), help="Fine-tuning on packed sequences: mean tokens per document (1..seq-len); "
                                     "attention is per document.")]
# The layout flags `project` and `memory` share (one definition each; the help text is the same in both).
GpusPerNodeOpt = Annotated[Optional[int], typer.Option(parser=count_parser("--gpus-per-node"), help="GPUs per node (default 8).")]
TpOpt = Annotated[Optional[int], typer.Option(parser=count_parser("--tp"), help="Tensor parallel.")]
PpOpt = Annotated[Optional[int], typer.Option(parser=count_parser("--pp"), help="Pipeline parallel.")]
VppOpt = Annotated[Optional[int], typer.Option(parser=count_parser("--vpp"), help="Virtual pipeline chunks per rank.")]
CpOpt = Annotated[Optional[int], typer.Option(parser=count_parser("--cp"), help="Context parallel.")]
EpOpt = Annotated[Optional[int], typer.Option(parser=count_parser("--ep"), help="Expert parallel.")]
EtpOpt = Annotated[Optional[int], typer.Option(parser=count_parser("--etp"), help="Expert tensor parallel.")]
MbsOpt = Annotated[Optional[int], typer.Option(parser=count_parser("--mbs"), help="Micro-batch size (sequences).")]
GbsOpt = Annotated[Optional[int], typer.Option(parser=count_parser("--gbs"), help="Global batch size (sequences).")]
SeqLenOpt = Annotated[Optional[int], typer.Option(parser=count_parser("--seq-len"), help="Sequence length (tokens).")]
PrecisionOpt = Annotated[Optional[str], typer.Option(help=choices_help(PRECISIONS))]
RecomputeOpt = Annotated[Optional[str], typer.Option(help=choices_help(RECOMPUTES))]
RecomputeLayersOpt = Annotated[Optional[int], typer.Option(parser=count_parser("--recompute-num-layers"), help="Full recompute: layers per stage.")]
SpOpt = Annotated[bool, typer.Option("--sp", help="Megatron sequence parallelism.")]
ZeroOpt = Annotated[Optional[int], typer.Option(help="0 DDP, 1 dist. optimizer, 2 +grads, 3 FSDP.")]
FsdpSizeOpt = Annotated[Optional[int], typer.Option(parser=count_parser("--fsdp-size"), help="ZeRO-3 shard group (HSDP).")]
ScheduleOpt = Annotated[Optional[str], typer.Option("--schedule", help=choices_help(PIPELINE_SCHEDULES))]
DispatcherOpt = Annotated[Optional[str], typer.Option("--dispatcher", help=_DISPATCHER_HELP)]
FinetuneOpt = Annotated[Optional[str], typer.Option(help=f"{choices_help(FINETUNES)} (none = pre-training).")]


def _layout_values(config_file: Path | None, **flags: Any) -> dict[str, Any]:
    from projtune.layout_input import read_layout_file

    values: dict[str, Any] = read_layout_file(config_file) if config_file else {}
    if flags.pop("sequence_parallel") is True:
        values["sequence_parallel"] = True
    values.update({k: v for k, v in flags.items() if v is not None})
    return values


@user_errors
def project_command(
    model: ModelOpt = None, gpu: GpuOpt = None, gpus: GpusOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    tp: TpOpt = None, pp: PpOpt = None, vpp: VppOpt = None, cp: CpOpt = None, ep: EpOpt = None, etp: EtpOpt = None,
    mbs: MbsOpt = None, gbs: GbsOpt = None, seq_len: SeqLenOpt = None,
    precision: PrecisionOpt = None, recompute: RecomputeOpt = None, recompute_num_layers: RecomputeLayersOpt = None,
    recompute_modules: Annotated[Optional[str], typer.Option(help="Selective: comma list, e.g. core_attn,moe_act")] = None,
    sequence_parallel: SpOpt = False, zero: ZeroOpt = None, fsdp_size: FsdpSizeOpt = None,
    schedule: ScheduleOpt = None, dispatcher: DispatcherOpt = None,
    nic_gbps: Annotated[Optional[float], typer.Option(help="NIC line rate, Gbit/s.")] = None,
    nics_per_node: Annotated[Optional[int], typer.Option(help="NICs per node.")] = None,
    nvlink_domain: Annotated[Optional[int], typer.Option(help="GPUs in one NVLink domain (72 for NVL72).")] = None,
    framework: FrameworkOpt = None,
    finetune: FinetuneOpt = None,
    packed_document_tokens: PackedOpt = None,
    comm_overlap: OverlapOpt = None, cuda_graphs: CudaGraphsOpt = None, compile: CompileOpt = None,
    attention_backend: AttentionOpt = None, grad_reduce_in_fp32: GradFp32Opt = None, host_op_s: HostOpOpt = None,
    config_file: FileOpt = None,
    profile: Annotated[Optional[Path], typer.Option(help="Device profile file (from calibrate/bench).")] = None,
    flops: Annotated[str, typer.Option(help="Model FLOP formula: 6nd|megatron.")] = "6nd",
    measured: Annotated[Optional[Path], typer.Option("--measured", help="Measurement file from `projtune bench run`.")] = None,
    anchor: AnchorOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Project step time, throughput, MFU, memory per stage and the time breakdown of one layout."""
    _run(locals(), memory_only=False)


@user_errors
def memory_command(
    model: ModelOpt = None, gpu: GpuOpt = None, gpus: GpusOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    tp: TpOpt = None, pp: PpOpt = None, vpp: VppOpt = None, cp: CpOpt = None, ep: EpOpt = None, etp: EtpOpt = None,
    mbs: MbsOpt = None, gbs: GbsOpt = None, seq_len: SeqLenOpt = None,
    precision: PrecisionOpt = None, recompute: RecomputeOpt = None, recompute_num_layers: RecomputeLayersOpt = None,
    recompute_modules: Annotated[Optional[str], typer.Option(help="Selective: comma list.")] = None,
    sequence_parallel: SpOpt = False, zero: ZeroOpt = None, fsdp_size: FsdpSizeOpt = None,
    schedule: ScheduleOpt = None, dispatcher: DispatcherOpt = None,
    framework: FrameworkOpt = None,
    finetune: FinetuneOpt = None,
    moe_routing: Annotated[Optional[str], typer.Option(help="MoE: balanced|dropless|token-drop")] = None,
    moe_capacity_factor: Annotated[Optional[float], typer.Option(help="MoE token-drop expert capacity factor.")] = None,
    packed_document_tokens: PackedOpt = None,
    comm_overlap: OverlapOpt = None, cuda_graphs: CudaGraphsOpt = None, compile: CompileOpt = None,
    attention_backend: AttentionOpt = None, grad_reduce_in_fp32: GradFp32Opt = None, host_op_s: HostOpOpt = None,
    config_file: FileOpt = None,
    profile: Annotated[Optional[Path], typer.Option(help="Device profile file.")] = None,
    anchor: AnchorOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show per-GPU memory of every pipeline stage and the verdict (fits / at risk / out of memory)."""
    _run(locals(), memory_only=True)


_RUN_MODULES = ("projection.engine", "projection.errors", "projection.job", "projection.layout", "projection.legality",
                "projection.memory", "projection.memory_report", "projection.summary", "projtune.layout_input",
                "projtune.render")
RUN_MODULES: dict[str, tuple[str, ...]] = {"project": _RUN_MODULES, "memory": _RUN_MODULES}
"""What ``project`` and ``memory`` import to run (:func:`_run`), for :func:`projtune.app.preload`."""


def _run(args: dict[str, Any], *, memory_only: bool) -> None:
    from projection.module_heap import loading_modules

    with loading_modules():   # the engine and the renderer, loaded for good (projection/module_heap.py)
        from projection.engine import project
        from projection.errors import IllegalLayoutError
        from projection.job import profile_for
        from projection.layout import parallel_dims
        from projection.legality import layout_violations
        from projection.memory import project_memory
        from projection.memory_report import memory_breakdown_dict
        from projection.summary import memory_dict, projection_dict
        from projtune.layout_input import build_layout
        from projtune.render import print_memory, print_projection

    args = dict(args)
    as_json, profile_path, config_file = args.pop("as_json"), args.pop("profile"), args.pop("config_file")
    flops = args.pop("flops", "6nd")
    measured = args.pop("measured", None)
    anchor_files = args.pop("anchor", None)
    args["num_gpus"] = args.pop("gpus")
    args["pp_schedule"] = args.pop("schedule")
    args["moe_dispatcher"] = args.pop("dispatcher")
    model, hardware, cluster, config = build_layout(_layout_values(config_file, **args))
    profile = profile_for(hardware, profile_path)
    anchoring = _anchoring(anchor_files, model, hardware, cluster, profile)
    if memory_only:
        reasons = layout_violations(model, hardware, cluster, config)
        if reasons:
            raise IllegalLayoutError(reasons)
        memory = project_memory(model, hardware, config, parallel_dims(config, cluster), profile)
        unanchored_peak = memory.peak_bytes
        if anchoring is not None:
            from projection.anchor import offset_memory

            memory = offset_memory(memory, anchoring.corrections.memory_offset_gib)
        data = {"model": model.name, "gpu": hardware.id, "num_gpus": cluster.num_gpus,
                "config": config.model_dump(mode="json", exclude_none=True), **memory_dict(memory),
                **memory_breakdown_dict(memory)}
        if anchoring is not None:
            from projection.memory import GIB

            data |= {"unanchored_peak_gib": unanchored_peak / GIB, "anchoring": anchoring.model_dump(mode="json")}
        if as_json:
            typer.echo(json_text(data))
        else:
            print_memory(data)
            _print_anchoring(data)
        return
    if measured is not None:
        from bench.measurement import read_measurement
        from bench.restore import project_measured

        restored = project_measured(read_measurement(measured), model, cluster, config, hardware=hardware,
                                    profile=profile, flops_formula=flops)
        for warning in restored.warnings:
            typer.echo(f"warning: {warning}", err=True)
        result = restored.projection
    else:
        result = project(model, cluster, config, hardware=hardware, profile=profile, flops_formula=flops)
    data = projection_dict(result)
    if anchoring is not None:
        from tools.anchoring import anchored

        data = projection_dict(anchored(result, anchoring.corrections))
        data["unanchored"] = {k: v for k, v in projection_dict(result).items()
                              if k in ("iteration_time_s", "tokens_per_sec_per_gpu", "tokens_per_sec_per_gpu_low",
                                       "tokens_per_sec_per_gpu_high", "mfu")}
        data["anchoring"] = anchoring.model_dump(mode="json")
    if as_json:
        typer.echo(json_text(data))
    else:
        print_projection(data)
        _print_anchoring(data)


def _anchoring(files: list[str] | None, model: Any, hardware: Any, cluster: Any, profile: Any) -> Any:
    """The job's anchoring from ``--anchor`` files (None without any)."""
    if not files:
        return None
    from projection.job import job_on
    from projtune.anchor_input import read_cli_anchors
    from tools.anchoring import anchoring_for

    job = job_on(model, cluster, hardware=hardware, profile=profile)
    return anchoring_for(job, read_cli_anchors(files, gpu=hardware.id))


def _print_anchoring(data: dict[str, Any]) -> None:
    """The anchored-vs-unanchored lines of a text report."""
    anchoring = data.get("anchoring")
    if not anchoring:
        return
    from projtune.render import console

    console.print(anchoring["summary"], soft_wrap=True, highlight=False)
    for row in anchoring["anchors"]:
        console.print(f"  anchor {row['label']}: {row['layout']} on {row['num_gpus']} GPUs, measured "
                      f"{row['measured_s']:.3f} s, projected {row['projected_s']:.3f} s, anchored "
                      f"{row['anchored_s']:.3f} s", soft_wrap=True, highlight=False)
    for note in anchoring["corrections"]["notes"]:
        console.print(f"  [yellow]note[/]: {note}", soft_wrap=True, highlight=False)
    un = data.get("unanchored")
    if un:
        console.print(f"unanchored: {un['tokens_per_sec_per_gpu']:,.0f} tokens/s/GPU "
                      f"({un['tokens_per_sec_per_gpu_low']:,.0f} - {un['tokens_per_sec_per_gpu_high']:,.0f}), "
                      f"{un['iteration_time_s']:.3f} s/step; anchored: {data['tokens_per_sec_per_gpu']:,.0f} "
                      f"({data['tokens_per_sec_per_gpu_low']:,.0f} - {data['tokens_per_sec_per_gpu_high']:,.0f}), "
                      f"{data['iteration_time_s']:.3f} s/step", soft_wrap=True, highlight=False)
    if "unanchored_peak_gib" in data:
        console.print(f"memory: unanchored peak {data['unanchored_peak_gib']:.1f} GiB, anchored {data['peak_gib']:.1f} "
                      f"GiB ({anchoring['corrections']['memory_offset_gib']:+.1f} GiB measured offset)",
                      soft_wrap=True, highlight=False)


def register(app: typer.Typer) -> None:
    """Add `project` and `memory` to the CLI."""
    app.command("project")(project_command)
    app.command("memory")(memory_command)
