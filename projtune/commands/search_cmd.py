"""`projtune search`, `export`, `tools schema|list|call`, `mcp`, and the `models` / `hardware` catalog listings."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Callable

import typer
from rich.markup import escape

from projection.vocabulary import FINETUNES, LAUNCH_FRAMEWORKS, MOE_DISPATCHERS, choices_help
from projtune.anchor_input import AnchorOpt
from projtune.commands.project_cmd import (
    CpOpt,
    EpOpt,
    EtpOpt,
    FsdpSizeOpt,
    GbsOpt,
    HostOpOpt,
    MbsOpt,
    PpOpt,
    RecomputeLayersOpt,
    RecomputeOpt,
    SeqLenOpt,
    SpOpt,
    TpOpt,
    VppOpt,
)
from projtune.count_option import count_parser
from projtune.errors import fail, user_errors
from tools.json_out import json_text

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Catalog id or HF config.json path.")]
GpuOpt = Annotated[str, typer.Option("--gpu", "-g", help="Hardware id, e.g. h100-sxm, mi300x.")]
GpusOpt = Annotated[int, typer.Option("--gpus", "-n", parser=count_parser("--gpus"), help="GPUs in the job.")]
NodeOpt = Annotated[int, typer.Option("--gpus-per-node", parser=count_parser("--gpus-per-node"), help="GPUs per node.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
IntOpt = int | None
PARTIAL_EXIT_CODE = 3   # `projtune search --deadline-s`: stopped with a partial result
NicsOpt = Annotated[int | None, typer.Option("--nics", min=1, max=64,
                                             help="Scale-out NICs per node (default: the GPU's catalog node).")]
NicGbpsOpt = Annotated[float | None, typer.Option("--nic-gbps", min=0.001, max=1e5,
                                                  help="Line rate of one NIC, Gbit/s (default: the catalog's).")]
PackedOpt = Annotated[int | None, typer.Option(
    "--packed-document-tokens", parser=count_parser("--packed-document-tokens"), help="Fine-tuning on packed sequences: mean tokens per document (1..seq-len); "
                                     "attention is per document, and every layout carries it.")]
DomainOpt = Annotated[int | None, typer.Option("--nvlink-domain", min=1, max=576,
                                               help="GPUs in one NVLink domain, e.g. 72 for GB200 NVL72 "
                                                    "(default: the catalog's); TP may span it.")]


@user_errors
def search_command(
    model: ModelOpt, gpu: GpuOpt, gpus: GpusOpt,
    gbs: Annotated[int, typer.Option(parser=count_parser("--gbs"), help="Global batch size (sequences).")],
    seq_len: Annotated[int, typer.Option(parser=count_parser("--seq-len"), help="Sequence length (tokens).")],
    gpus_per_node: NodeOpt = 8,
    constraint: Annotated[list[str] | None, typer.Option(
        "--constraint", "-C", help="Axis rule, repeatable: 'tp<=8', 'precision=bf16', 'pp in 1,2,4', "
                                   "'headroom>=10%', 'fp8=false'.")] = None,
    top: Annotated[int, typer.Option("--top", "-k", help="How many layouts to show.")] = 5,
    pareto: Annotated[bool, typer.Option("--pareto", help="Also show the throughput/headroom Pareto front.")] = False,
    profile: Annotated[Path | None, typer.Option(help="Device profile file.")] = None,
    framework: Annotated[str | None, typer.Option(
        help=f"The framework the layouts run on: {choices_help(LAUNCH_FRAMEWORKS)} (or a recipe name: jax, nemo, "
             "deepspeed, ...); its profile and memory traits price every layout and only what it can launch is "
             "kept. Default: megatron's profile, no launch filter.")] = None,
    deadline_s: Annotated[float | None, typer.Option(
        "--deadline-s", min=0.0, help="Stop after this many seconds with a partial result (JSON \"complete\": "
                                      "false, a notice on stderr, exit code 3). Default: no limit.")] = None,
    nics: NicsOpt = None, nic_gbps: NicGbpsOpt = None, nvlink_domain: DomainOpt = None,
    finetune: Annotated[str | None, typer.Option(
        help=f"Fine-tuning job: {choices_help(FINETUNES)} (lora: frozen base weights; none = pre-training).")] = None,
    packed_document_tokens: PackedOpt = None,
    anchor: AnchorOpt = None,
    host_op_s: HostOpOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search every legal layout, screen memory, project the survivors and rank them by tokens/s/GPU.

    Exit codes: 0 a complete result; 1 no layout fits; 3 stopped at --deadline-s (partial result).
    """
    from projection.module_heap import loading_modules

    with loading_modules():   # the search and the engine, loaded for good (projection/module_heap.py)
        from projtune.anchor_input import read_cli_anchors
        from tools.constraints import Constraints
        from tools.search import SearchRequest, run_search

    request = SearchRequest(model=model, gpu=gpu, num_gpus=gpus, gpus_per_node=gpus_per_node, gbs=gbs,
                            anchors=read_cli_anchors(anchor, gpu=gpu), seq_len=seq_len,
                            constraints=Constraints.parse(constraint or []), top_k=top,
                            profile_path=str(profile) if profile else None, framework=framework,
                            nics_per_node=nics, nic_gbps=nic_gbps, nvlink_domain=nvlink_domain,
                            finetune=finetune, packed_document_tokens=packed_document_tokens, host_op_s=host_op_s)
    result = _run_with_progress(lambda *a, **k: run_search(*a, deadline_s=deadline_s, **k), request,
                                show=not as_json)
    if as_json:
        typer.echo(json_text(result.model_dump(mode="json")))
    else:
        _print_search(result, pareto)
    if not result.complete:
        if as_json:    # the text report prints the message already
            typer.echo(f"projtune search: {result.message}", err=True)
        raise typer.Exit(PARTIAL_EXIT_CODE)
    if not result.ranked:
        raise typer.Exit(1)


def _run_with_progress(run: Any, request: Any, *, show: bool) -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    if not show or not console.is_terminal:
        return run(request)
    columns = (TextColumn("searching layouts"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    # auto_refresh off: no refresh thread, so the search may still fork its worker processes
    with Progress(*columns, console=console, transient=True, auto_refresh=False) as bar:
        task = bar.add_task("search", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)
            bar.refresh()

        return run(request, progress=update)


def _candidate_table(title: str, rows: list[Any]) -> Any:
    from rich.table import Table

    table = Table(title=title)
    table.add_column("#", justify="right")
    table.add_column("layout", ratio=1, overflow="fold")
    anchored = any(c.unanchored_tokens_per_sec_per_gpu is not None for c in rows)
    for name in ("tok/s/GPU", *(("unanchored",) if anchored else ()), "MFU", "iter s", "GiB", "free"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("bottleneck", no_wrap=True)
    for c in rows:
        free = f"{c.headroom_fraction:.0%}" + ("" if c.verdict == "fits" else f" {c.verdict}")
        unanchored = (f"{c.unanchored_tokens_per_sec_per_gpu:,.0f}",) if anchored else ()
        table.add_row(str(c.rank or ""), escape(c.layout), f"{c.tokens_per_sec_per_gpu:,.0f}", *unanchored, f"{c.mfu:.1%}",
                      f"{c.iteration_time_s:.3f}", f"{c.peak_memory_gib:.1f}", free, c.bottleneck)
    return table


def framework_line(result: Any) -> str:
    """Which framework priced the layouts, saying when it is the default."""
    if result.framework_default:
        return (f"priced with the {result.framework} framework profile and memory traits (the default; --framework "
                "names another)")
    from projection.framework import resolve_framework

    launch = resolve_framework(result.request.framework).launch
    return (f"priced with the {result.framework} framework profile and memory traits; "
            + (f"only layouts {launch} can launch" if launch else "no launch rules (projtune does not export to it)"))


def _print_search(result: Any, pareto: bool) -> None:
    from projtune.render import console

    r = result.request
    console.print(f"[bold]{r.model if isinstance(r.model, str) else 'model'}[/] on {r.num_gpus} x {r.gpu}, "
                  f"gbs {r.gbs}, seq {r.seq_len}"
                  + (f", {r.finetune} fine-tuning" if r.finetune else "")
                  + (f", packed {r.packed_document_tokens}-token documents" if r.packed_document_tokens else ""))
    console.print(framework_line(result), highlight=False)
    if result.anchoring is not None:
        console.print(result.anchoring.summary, soft_wrap=True, highlight=False)
        for note in result.anchoring.corrections.notes:
            console.print(f"  [yellow]note[/]: {note}", soft_wrap=True, highlight=False)
    if result.ranked:
        console.print(_candidate_table("Best layouts", result.ranked))
        for c in result.ranked:
            console.print(f"  #{c.rank}: {c.reason}", soft_wrap=True, highlight=False)
        for c in result.ranked:
            if c.band_reasons and (c.rank == 1 or c.band_reasons != result.ranked[0].band_reasons):
                console.print(f"  #{c.rank} 80% interval is wide: " + "; ".join(c.band_reasons), soft_wrap=True,
                              highlight=False, markup=False)
    if pareto and result.pareto:
        console.print(_candidate_table("Pareto front (throughput vs memory headroom)", result.pareto))
    console.print(f"enumerated {result.enumerated}, screened out {result.screened_out} (memory), "
                  f"projected {result.projected} in {result.elapsed_s:.2f} s")
    if result.message:
        console.print(("[yellow]" if result.ranked or not result.complete else "[bold red]no layout:[/] ")
                      + result.message, soft_wrap=True,
                      highlight=False)


@user_errors
def export_command(
    model: ModelOpt, gpu: GpuOpt, gpus: GpusOpt,
    framework: Annotated[str, typer.Option(help=" | ".join(LAUNCH_FRAMEWORKS))
                         ] = "megatron",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write to this file (default: stdout).")] = None,
    gpus_per_node: NodeOpt = 8,
    tp: TpOpt = None, pp: PpOpt = None, vpp: VppOpt = None, cp: CpOpt = None, ep: EpOpt = None,
    etp: EtpOpt = None, mbs: MbsOpt = None, gbs: GbsOpt = None, seq_len: SeqLenOpt = None,
    precision: Annotated[str | None, typer.Option(help="bf16|fp16|fp8|fp8-blockwise|mxfp8")] = None,
    recompute: RecomputeOpt = None,
    recompute_num_layers: RecomputeLayersOpt = None,
    recompute_modules: Annotated[str | None, typer.Option(help="Selective: comma list.")] = None,
    sequence_parallel: SpOpt = False,
    zero: IntOpt = None, fsdp_size: FsdpSizeOpt = None,
    schedule: Annotated[str | None, typer.Option("--schedule", help="1f1b|interleaved|zero-bubble")] = None,
    dispatcher: Annotated[str | None, typer.Option("--dispatcher", help=choices_help(MOE_DISPATCHERS))] = None,
    finetune: Annotated[str | None, typer.Option("--finetune", help="sft|lora: write the fine-tuning settings "
                                                 "(PEFT for LoRA) as projected")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write one layout as a runnable launcher plus the config file the framework reads (Megatron-LM script,
    Primus YAML, torchtitan TOML + config module, Megatron-Bridge overrides, MaxText YAML).  With --out, a .sh
    path gets the launcher (executable) and the config beside it; another path gets the config and the
    launcher beside it."""
    from tools.registry import call_tool

    layout = {"tp": tp, "pp": pp, "vpp": vpp, "cp": cp, "ep": ep, "etp": etp, "mbs": mbs, "gbs": gbs,
              "seq_len": seq_len, "precision": precision, "recompute": recompute,
              "recompute_num_layers": recompute_num_layers, "zero": zero, "fsdp_size": fsdp_size,
              "pp_schedule": schedule, "moe_dispatcher": dispatcher, "finetune": finetune}
    config: dict[str, Any] = {k: v for k, v in layout.items() if v is not None}
    if recompute_modules:
        config["recompute_modules"] = [m for m in recompute_modules.split(",") if m]
    if sequence_parallel:
        config["sequence_parallel"] = True
    payload = call_tool("export_launch_config", {"model": model, "gpu": gpu, "num_gpus": gpus,
                                                 "gpus_per_node": gpus_per_node, "layout": config,
                                                 "framework": framework})
    if not payload["ok"]:
        fail(payload["error"]["message"])
    result = payload["result"]
    if out is not None:
        from tools.exports.common import LaunchConfig
        from tools.exports.files import write_export

        written = write_export(LaunchConfig.model_validate(result), out)
    if as_json:
        typer.echo(json_text(result))
    elif out is None:
        typer.echo(result["text"], nl=False)
    else:
        typer.echo("wrote " + ", ".join(str(p) for p in written), err=True)
    for warning in result["warnings"]:
        typer.echo(f"warning: {warning}", err=True)


@user_errors
def tools_schema_command() -> None:
    """Print the OpenAI function-calling schemas of every tool (one JSON array on stdout)."""
    import agent.tool  # noqa: F401 - registers the agent's `tune` tool
    from tools.openai_schema import openai_tools

    typer.echo(json_text(openai_tools(), indent=2))


@user_errors
def tools_list_command(as_json: JsonOpt = False) -> None:
    """List the tools with their one-line descriptions."""
    import agent.tool  # noqa: F401 - registers the agent's `tune` tool
    from tools.registry import registered

    if as_json:
        typer.echo(json_text({"tools": [{"name": t.name, "description": t.description} for t in registered()]}))
        return
    for t in registered():
        typer.echo(f"{t.name:22s} {t.description.split('. ')[0]}")


@user_errors
def tools_call_command(
    name: Annotated[str, typer.Argument(help="Tool name (see `projtune tools list`).")],
    args: Annotated[str, typer.Option("--args", "-a", help="Arguments as a JSON object, or @FILE.")] = "{}",
) -> None:
    """Call one tool with JSON arguments; print its JSON result (exit 2 on a structured error)."""
    import agent.tool  # noqa: F401 - registers the agent's `tune` tool
    from tools.registry import call_tool

    try:
        text = Path(args[1:]).read_text(encoding="utf-8") if args.startswith("@") else args
    except UnicodeDecodeError as err:
        fail(f"--args file '{args[1:]}' is not UTF-8 text (byte {err.start}): give a JSON object")
    try:
        arguments = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:   # RecursionError: nested deeper than the parser goes
        fail(f"--args is not valid JSON: {err}")
    payload = call_tool(name, arguments)
    typer.echo(json_text(payload))
    if not payload["ok"]:
        raise typer.Exit(2)


@user_errors
def mcp_command(
    http: Annotated[bool, typer.Option("--http", help="Serve streamable HTTP instead of stdio.")] = False,
    port: Annotated[int, typer.Option(help="HTTP port (with --http).")] = 8765,
    host: Annotated[str, typer.Option(help="HTTP bind address (with --http).")] = "127.0.0.1",
) -> None:
    """Serve every tool over MCP: stdio by default, or streamable HTTP at http://HOST:PORT/mcp."""
    import agent.tool  # noqa: F401 - registers the agent's `tune` tool
    from projection.settings import load_settings
    from tools.mcp_server import serve

    load_settings()               # a PROJTUNE_* value that is not allowed: one line and exit 2 now, not per call
    serve(http=http, host=host, port=port, announce=lambda url: print(f"projtune MCP server on {url}", file=sys.stderr))


@user_errors
def models_command(as_json: JsonOpt = False) -> None:
    """List the catalog models."""
    from tools.functions import list_models
    from tools.schemas import ListModelsInput

    out = list_models(ListModelsInput())
    _echo_listing(out, out.models, _model_line, as_json)


@user_errors
def hardware_command(as_json: JsonOpt = False) -> None:
    """List the catalog GPUs."""
    from tools.functions import list_hardware
    from tools.schemas import ListHardwareInput

    out = list_hardware(ListHardwareInput())
    _echo_listing(out, out.hardware, _hardware_line, as_json)


def _echo_listing(out: Any, rows: list[Any], line: Callable[[Any], str], as_json: bool) -> None:
    """Print a catalog listing: the whole tool output as one JSON object, or one text line per row."""
    if as_json:
        typer.echo(json_text(out.model_dump(mode="json")))
        return
    for row in rows:
        typer.echo(line(row))


def _model_line(m: Any) -> str:
    moe = f", {m.num_experts} experts top-{m.top_k}" if m.num_experts else ""
    return (f"{m.id:20s} {m.params_billion:8.1f}B  {m.num_layers} layers, h={m.hidden_size}, "
            f"{m.num_attention_heads} heads / {m.num_kv_heads} kv{moe}")


def _hardware_line(h: Any) -> str:
    fp8 = f"{h.fp8_tflops:,.0f}" if h.fp8_tflops else "-"
    return (f"{h.id:16s} {h.hbm_gib:6.1f} GiB  bf16 {h.bf16_tflops:7,.0f}  fp8 {fp8:>7s} TFLOP/s  "
            f"{', '.join(h.supported_precisions)}")


def register(app: typer.Typer) -> None:
    """Add search, export, tools, mcp (and models/hardware unless another module has) to the CLI."""
    app.command("search")(search_command)
    app.command("export")(export_command)
    app.command("mcp")(mcp_command)
    tools_app = typer.Typer(help="The LLM-callable tools: schemas, list, call.", no_args_is_help=True)
    tools_app.command("schema")(tools_schema_command)
    tools_app.command("list")(tools_list_command)
    tools_app.command("call")(tools_call_command)
    app.add_typer(tools_app, name="tools")
    existing = {c.name or getattr(c.callback, "__name__", "") for c in app.registered_commands}
    if "models" not in existing:
        app.command("models")(models_command)
    if "hardware" not in existing:
        app.command("hardware")(hardware_command)
