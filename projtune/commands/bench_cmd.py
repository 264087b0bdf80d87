"""`projtune bench run|project|device|reduce`: measured mode on the local GPUs.

`run` benchmarks the reduced layout and writes a measurement file, `project` restores a
measurement to a target layout through the engine, `device` fits a device profile to
microbenchmarks, `reduce` only shows the benchmark layout. Without a GPU, `run` and
`device` say so and offer `--cpu` (tiny shapes, a plumbing check, not a performance number).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from projection.vocabulary import MOE_DISPATCHERS, PIPELINE_SCHEDULES, PRECISIONS, RECOMPUTES, choices_help
from projtune.errors import fail, user_errors
from tools.json_out import json_text

IntOpt = int | None
ModelOpt = Annotated[str | None, typer.Option("--model", "-m", help="Catalog id, HF config.json path.")]
TargetGpuOpt = Annotated[str | None, typer.Option(
    "--gpu-target", "--gpu", "-g", help="Hardware id of the target cluster (default: the local GPU).")]
GpusOpt = Annotated[IntOpt, typer.Option("--gpus", "-n", help="GPUs in the target job.")]
BenchGpusOpt = Annotated[IntOpt, typer.Option(
    "--bench-gpus", help="Local GPUs to benchmark on, 1-8 (default: all visible, at most 8; 1 with --cpu).")]
FileOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML/TOML layout file (flags override).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
CpuOpt = Annotated[bool, typer.Option("--cpu", help="Tiny shapes on the CPU: a plumbing check, not representative.")]
NO_GPU = ("no GPU found (torch sees no CUDA/ROCm device); rerun with --cpu for a tiny-shape CPU run "
          "(plumbing check, not representative)")


def _opt(help_text: str, *names: str) -> Any:
    return typer.Option(*names, help=help_text)


TpOpt = Annotated[IntOpt, _opt("Tensor parallel.")]
PpOpt = Annotated[IntOpt, _opt("Pipeline parallel.")]
VppOpt = Annotated[IntOpt, _opt("Virtual pipeline chunks per rank.")]
CpOpt = Annotated[IntOpt, _opt("Context parallel.")]
EpOpt = Annotated[IntOpt, _opt("Expert parallel.")]
EtpOpt = Annotated[IntOpt, _opt("Expert tensor parallel.")]
MbsOpt = Annotated[IntOpt, _opt("Micro-batch size (sequences).")]
GbsOpt = Annotated[IntOpt, _opt("Global batch size (sequences).")]
SeqOpt = Annotated[IntOpt, _opt("Sequence length (tokens).")]
PrecisionOpt = Annotated[str | None, _opt(choices_help(PRECISIONS))]
RecomputeOpt = Annotated[str | None, _opt(choices_help(RECOMPUTES))]
SpOpt = Annotated[bool, _opt("Megatron sequence parallelism.", "--sp")]
ZeroOpt = Annotated[IntOpt, _opt("0 DDP, 1 dist. optimizer, 2 +grads, 3 FSDP.")]
ScheduleOpt = Annotated[str | None, _opt(choices_help(PIPELINE_SCHEDULES), "--schedule")]
DispatcherOpt = Annotated[str | None, _opt(f"MoE: {choices_help(MOE_DISPATCHERS)}", "--dispatcher")]
NodeOpt = Annotated[IntOpt, _opt("GPUs per node (default 8).")]


_LAYOUT_FLAGS = ("model", "gpu_target", "gpus", "gpus_per_node", "tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "gbs",
                 "seq_len", "precision", "recompute", "sequence_parallel", "zero", "schedule", "dispatcher")


def _layout_flags(args: dict[str, Any]) -> dict[str, Any]:
    """The layout flags among a command's arguments."""
    return {k: args[k] for k in _LAYOUT_FLAGS if k in args}


def _layout(base: dict[str, Any], config_file: Path | None, flags: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """Build (model, hardware, cluster, config): base values, then the layout file, then flags."""
    from projtune.layout_input import build_layout, read_layout_file

    values = dict(base)
    if config_file:
        values.update(read_layout_file(config_file))
    if flags.pop("sequence_parallel", False):
        values["sequence_parallel"] = True
    renames = {"gpus": "num_gpus", "schedule": "pp_schedule", "dispatcher": "moe_dispatcher", "gpu_target": "gpu"}
    values.update({renames.get(k, k): v for k, v in flags.items() if v is not None})
    return build_layout(values)


def _local_gpus(requested: int | None, cpu: bool) -> int:
    import torch

    if requested is not None:
        return requested
    return 1 if cpu else max(1, min(8, torch.cuda.device_count()))


def _require_gpu(cpu: bool) -> str | None:
    """Detected catalog id of the local GPU (None on --cpu); exits 2 with the CPU offer when there is none."""
    from bench.runtime import gpu_available, runtime_info

    if cpu:
        return None
    if not gpu_available():
        fail(NO_GPU)
    return runtime_info("cuda").hardware_id


@user_errors
def run_command(
    model: ModelOpt = None, gpu_target: TargetGpuOpt = None, gpus: GpusOpt = None, bench_gpus: BenchGpusOpt = None,
    gpus_per_node: NodeOpt = None, tp: TpOpt = None, pp: PpOpt = None, vpp: VppOpt = None, cp: CpOpt = None,
    ep: EpOpt = None, etp: EtpOpt = None, mbs: MbsOpt = None, gbs: GbsOpt = None, seq_len: SeqOpt = None,
    precision: PrecisionOpt = None, recompute: RecomputeOpt = None, sequence_parallel: SpOpt = False,
    zero: ZeroOpt = None, schedule: ScheduleOpt = None, dispatcher: DispatcherOpt = None, config_file: FileOpt = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Measurement JSON to write.")] = None,
    cpu: CpuOpt = False,
    warmup: Annotated[IntOpt, typer.Option(min=0, help="Warm-up iterations (default 5; 1 with --cpu).")] = None,
    iters: Annotated[IntOpt, typer.Option(min=1, help="Timed iterations (default 20; 3 with --cpu).")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Ignore and do not write the result cache.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Benchmark one layer per kind of the reduced layout on the local GPU(s) and write a measurement file."""
    flags = _layout_flags(locals())
    from bench.measurement import write_measurement
    from bench.runner import BenchOptions, run_measurement

    detected = _require_gpu(cpu)
    if flags["gpu_target"] is None and detected:
        flags["gpu_target"] = detected
    model_spec, hardware, cluster, config = _layout({}, config_file, flags)
    options = BenchOptions(
        device="cpu" if cpu else "cuda", max_hidden=64 if cpu else None, max_tokens=64 if cpu else None,
        warmup=warmup if warmup is not None else (1 if cpu else 5),
        iters=iters if iters is not None else (3 if cpu else 20),
        use_cache=not no_cache)
    measurement = run_measurement(model_spec, cluster, config, local_gpus=_local_gpus(bench_gpus, cpu), options=options)
    stem = f"measurement-{model_spec.name}-{measurement.hardware_id or ('cpu' if cpu else 'gpu')}".replace("/", "_")
    path = out or Path(f"{stem}.json")
    write_measurement(measurement, path)
    if as_json:
        typer.echo(json_text({"file": str(path), **measurement.model_dump(mode="json")}))
        return
    _print_measurement(measurement, path, detected, hardware.id)


def _print_measurement(m: Any, path: Path, detected: str | None, target_gpu: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from projtune.render import layout_text

    console = Console()
    if not m.representative:
        console.print("[bold yellow]NOT REPRESENTATIVE[/]: CPU plumbing run with tiny shapes; do not use the times.")
    if detected and detected != target_gpu:
        console.print(f"[yellow]measured on {detected}, target is {target_gpu}[/]")
    bench = m.reduction.bench_config.model_dump(mode="json", exclude_none=True)
    removed = ", ".join(f"{f.axis} {f.target}->{f.bench}" for f in m.reduction.removed) or "nothing"
    console.print(f"{m.device_name}: bench layout {layout_text(bench)} (removed: {removed})")
    table = Table(title=f"{m.model}: one layer, one micro-batch, one GPU (ms)")
    for column in ("kind", "window", "fwd", "bwd B", "bwd W", "attn core fwd", "experts fwd", "optimizer", "peak GiB"):
        table.add_column(column, justify="right")
    for t in m.layers:
        peak = f"{t.peak_memory_bytes / 2**30:.2f}" if t.peak_memory_bytes is not None else "-"
        table.add_row(t.kind, str(t.window), f"{t.forward_ms:.3f}", f"{t.backward_input_ms:.3f}",
                      f"{t.backward_weight_ms:.3f}", f"{t.attention_forward_ms:.3f}", f"{t.expert_forward_ms:.3f}",
                      f"{t.optimizer_ms:.3f}", peak)
    console.print(table)
    for t in m.layers:
        console.print(f"{t.kind}/w{t.window}: attention {t.attention_backend or '-'}, GEMMs {t.gemm_precision or '-'}"
                      + (f", experts {t.expert_gemm} ({t.expert_precision})" if t.expert_gemm else "")
                      + f", {t.forward_tflops:.1f} TFLOP/s fwd, {t.backward_tflops:.1f} bwd")
    if m.head is not None:
        console.print(f"head: embedding {m.head.embedding_forward_ms:.3f}+{m.head.embedding_backward_ms:.3f} ms, "
                      f"LM head + loss {m.head.head_forward_ms:.3f}+{m.head.head_backward_ms:.3f} ms")
    if m.notes:
        console.print(f"[yellow]{m.notes}[/]")
    for c in (m.tp_all_reduce, m.ep_all_to_all):
        if c is not None:
            console.print(f"{c.op} x{c.group_size} ({c.backend}): {c.time_ms:.3f} ms for {c.message_bytes:,.0f} B")
    console.print(f"wrote {path}")


@user_errors
def project_command(
    measured: Annotated[Path, typer.Option("--measured", help="Measurement file from `projtune bench run`.")],
    model: ModelOpt = None, gpu_target: TargetGpuOpt = None, gpus: GpusOpt = None, gpus_per_node: NodeOpt = None,
    tp: TpOpt = None, pp: PpOpt = None, vpp: VppOpt = None, cp: CpOpt = None, ep: EpOpt = None, etp: EtpOpt = None,
    mbs: MbsOpt = None, gbs: GbsOpt = None, seq_len: SeqOpt = None, precision: PrecisionOpt = None,
    recompute: RecomputeOpt = None, sequence_parallel: SpOpt = False, zero: ZeroOpt = None,
    schedule: ScheduleOpt = None, dispatcher: DispatcherOpt = None, config_file: FileOpt = None,
    profile: Annotated[Path | None, typer.Option(help="Device profile file.")] = None,
    tp_scaling: Annotated[str, typer.Option(help="ratio (analytic, default) | linear (Primus bench_tp/target_tp).")
                          ] = "ratio",
    flops: Annotated[str, typer.Option(help="Model FLOP formula: 6nd|megatron.")] = "6nd",
    as_json: JsonOpt = False,
) -> None:
    """Project a target layout from a measurement (default target: the one the measurement was made for)."""
    flags = _layout_flags(locals())
    from bench.measurement import read_measurement
    from bench.restore import project_measured
    from projection.job import profile_for
    from projection.summary import projection_dict
    from projtune.render import print_projection

    if tp_scaling not in ("ratio", "linear"):
        from projection.errors import nearest

        near = nearest(tp_scaling.lower(), ["ratio", "linear"])
        fail(f"--tp-scaling must be ratio or linear, got {tp_scaling!r}" + (f"; did you mean '{near}'?" if near else ""))
    m = read_measurement(measured)
    red = m.reduction
    base = {"model": red.target_model if model is None else None, **red.target_cluster.model_dump(exclude_none=True),
            **red.target_config.model_dump(exclude_none=True)}
    base = {k: v for k, v in base.items() if v is not None}
    model_spec, hardware, cluster, config = _layout(base, config_file, flags)
    prof = profile_for(hardware, profile)
    result = project_measured(m, model_spec, cluster, config, hardware=hardware, profile=prof,
                              flops_formula=flops, tp_scaling=tp_scaling)  # type: ignore[arg-type]
    data = projection_dict(result.projection) | {"measured": {
        "file": str(measured), "source": m.source, "representative": m.representative, "device": m.device_name,
        "optimizer_ratio": result.optimizer_ratio, "removed": [f.model_dump() for f in red.removed],
        "warnings": list(result.warnings)}}
    if as_json:
        typer.echo(json_text(data))
        return
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    typer.echo(f"measured mode: {m.source} measurement from {m.device_name} ({measured})")
    print_projection(data)


@user_errors
def device_command(
    gpu_target: TargetGpuOpt = None, cpu: CpuOpt = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Profile YAML to write.")] = None,
    warmup: Annotated[int, typer.Option(min=0, help="Warm-up iterations per point.")] = 3,
    iters: Annotated[int, typer.Option(min=1, help="Timed iterations per point.")] = 10,
    fp8: Annotated[bool, typer.Option("--fp8/--no-fp8", help="Also time FP8 GEMMs (torch._scaled_mm).")] = True,
) -> None:
    """Sweep GEMMs, attention, copies (and all-reduce) on the local GPU(s) and fit a device profile."""
    from bench.device import device_profile, profile_yaml, run_sweep
    from bench.runtime import runtime_info
    from projection.job import resolve_device

    detected = _require_gpu(cpu)
    hardware_id = gpu_target or detected
    if hardware_id is None:
        fail("no hardware id: pass --gpu-target ID (the local GPU is not in the catalog)")
    hardware, shipped = resolve_device(str(hardware_id))
    points = run_sweep(device="cpu" if cpu else "cuda", tiny=cpu, warmup=1 if cpu else warmup,
                       iters=3 if cpu else iters, fp8=fp8)
    info = runtime_info("cpu" if cpu else "cuda")
    profile = device_profile(points, hardware, shipped, device_name=info.device_name,
                             representative=not cpu)
    path = out or Path(f"profile-{hardware.id}{'-cpu' if cpu else ''}.yaml")
    path.write_text(profile_yaml(profile, points, hardware))
    if cpu:
        typer.echo("NOT REPRESENTATIVE: CPU plumbing run with tiny shapes")
    typer.echo(profile.fit_note)
    typer.echo(f"wrote {path}")


@user_errors
def reduce_command(
    model: ModelOpt = None, gpu_target: TargetGpuOpt = None, gpus: GpusOpt = None,
    bench_gpus: Annotated[int, typer.Option("--bench-gpus", help="Local GPUs, 1-8.")] = 8,
    gpus_per_node: NodeOpt = None, tp: TpOpt = None, pp: PpOpt = None, vpp: VppOpt = None, cp: CpOpt = None,
    ep: EpOpt = None, etp: EtpOpt = None, mbs: MbsOpt = None, gbs: GbsOpt = None, seq_len: SeqOpt = None,
    precision: PrecisionOpt = None, recompute: RecomputeOpt = None, sequence_parallel: SpOpt = False,
    zero: ZeroOpt = None, schedule: ScheduleOpt = None, dispatcher: DispatcherOpt = None, config_file: FileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the benchmark layout a target layout reduces to on the local GPUs (no benchmark runs)."""
    flags = _layout_flags(locals())
    from bench.reduction import reduce_layout
    from projtune.render import layout_text

    model_spec, _, cluster, config = _layout({}, config_file, flags)
    r = reduce_layout(model_spec, cluster, config, bench_gpus)
    if as_json:
        typer.echo(r.model_dump_json(exclude={"target_model", "bench_model"}))
        return
    typer.echo(f"target: {layout_text(config.model_dump(mode='json', exclude_none=True))} on {cluster.num_gpus} GPUs")
    typer.echo(f"bench:  {layout_text(r.bench_config.model_dump(mode='json', exclude_none=True))} "
               f"on {r.bench_cluster.num_gpus} GPUs" + (f", {r.model.num_experts} experts" if r.bench_model else ""))
    for f in r.removed:
        typer.echo(f"removed {f.axis}: {f.target} -> {f.bench}" + (f" ({f.note})" if f.note else ""))


@user_errors
def host_command(
    iters: Annotated[int, typer.Option(min=3, max=10_000, help="Timed forward+backward steps.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Measure the host (CPU) cost of dispatching one eager op on this machine (tiny tensors, CPU only); pass the
    result to project/search/tune as --host-op-s."""
    import dataclasses

    from bench.host import measure_host
    from tools.json_out import json_text

    result = measure_host(iters=iters)
    if as_json:
        typer.echo(json_text(dataclasses.asdict(result)))
        return
    typer.echo(f"eager block forward+backward: {result.ops_per_step} ATen ops in {result.step_s * 1e3:.2f} ms "
               f"(1 thread) = {result.dispatch_per_op_s * 1e6:.2f} us dispatch per op")
    typer.echo(f"+ driver launch {result.driver_launch_s * 1e6:.1f} us (cited, bench/host.py) = host cost per op "
               f"{result.host_op_s * 1e6:.2f} us")
    typer.echo(f"use it: projtune project ... --host-op-s {result.host_op_s:.3g}")


def register(app: typer.Typer) -> None:
    """Add the `bench` command group to the top-level app."""
    bench = typer.Typer(name="bench", help="Measured mode: benchmark layers on local GPUs, restore to the target.",
                        no_args_is_help=True)
    bench.command("run")(run_command)
    bench.command("project")(project_command)
    bench.command("device")(device_command)
    bench.command("reduce")(reduce_command)
    bench.command("host")(host_command)
    app.add_typer(bench, name="bench")
