"""The `projtune` command line (the typer app): thin commands over the projection engine, evals, tools and agent.

The console script is :func:`projtune.cli.main`, which installs the Ctrl-C handler before importing this."""

from __future__ import annotations

import typer

from projtune.commands import agent_cmd, bench_cmd, diagnose_cmd, eval_cmd, project_cmd, search_cmd

app = typer.Typer(
    name="projtune",
    help="Projection-guided tuning for distributed LLM training: fit, speed and the best layout.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("project")(project_cmd.project_command)
app.command("memory")(project_cmd.memory_command)


for _commands in (eval_cmd, search_cmd, agent_cmd, bench_cmd, diagnose_cmd):
    _commands.register(app)
