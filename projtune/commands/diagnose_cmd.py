"""`projtune diagnose FILE|ARGS`: project an existing launch config or training log and compare it with the best."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from projtune.count_option import count_parser
from projtune.errors import user_errors
from tools.json_out import json_text


@user_errors
def diagnose_command(
    source: Annotated[list[str], typer.Argument(
        help="A file (Megatron-LM arguments, Primus YAML, Megatron-Bridge overrides, torchtitan TOML, MaxText YAML or "
             "`python3 -m MaxText.train` script, Megatron/Primus/torchtitan training log), "
             "or Megatron-LM arguments after `--`: projtune diagnose --gpu h100-sxm --gpus 64 -- --tensor-model-... ")],
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Catalog id (default: from the file).")] = None,
    gpu: Annotated[Optional[str], typer.Option("--gpu", "-g", help="Hardware id (default: from the file).")] = None,
    gpus: Annotated[Optional[int], typer.Option("--gpus", "-n", parser=count_parser("--gpus"),
                                                help="GPUs in the job (default: from the file).")] = None,
    gpus_per_node: Annotated[int, typer.Option(parser=count_parser("--gpus-per-node"), help="GPUs per node.")] = 8,
    no_search: Annotated[bool, typer.Option("--no-search", help="Only project the given layout.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    """Project a config you already run, show where its time and memory go, and compare it with the best layout."""
    from evals.log_import import LogImportError, parse_log
    from projection.errors import ProjtuneError
    from tools.diagnose import diagnose

    try:
        result = diagnose(" ".join(source), model=model, gpu=gpu, num_gpus=gpus, gpus_per_node=gpus_per_node,
                          search=not no_search, log_reader=parse_log)
    except LogImportError as err:
        raise ProjtuneError(str(err)) from err
    if as_json:
        typer.echo(json_text(result.model_dump(mode="json")))
        return
    y = result.yours
    typer.echo(f"{result.model} on {result.num_gpus} x {result.gpu} ({result.kind}, {result.framework}): {y.layout}")
    total = sum(y.time_s.values()) or 1.0
    typer.echo("  time per step: " + ", ".join(f"{k.removesuffix('_s')} {v:.3f} s ({v / total:.0%})"
                                                for k, v in sorted(y.time_s.items(), key=lambda kv: -kv[1]) if v))
    typer.echo(f"  memory (fullest stage, {y.peak_memory_gib:.1f} GiB): "
               + ", ".join(f"{k.removesuffix('_gib')} {v:.1f}" for k, v in y.memory_gib.items()))
    for note in result.notes:
        typer.echo(f"  read: {note}")
    if result.measured:
        typer.echo("  measured: " + ", ".join(f"{k} {v:,.4g}" for k, v in result.measured.items()))
    typer.echo(result.summary)


def register(app: typer.Typer) -> None:
    """Add `diagnose` to the CLI."""
    app.command("diagnose")(diagnose_command)
