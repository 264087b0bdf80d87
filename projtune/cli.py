"""The `projtune` command line: thin commands over the projection engine, evals, tools and agent."""

from __future__ import annotations

import typer

from projtune.commands import project_cmd

app = typer.Typer(
    name="projtune",
    help="Projection-guided tuning for distributed LLM training: fit, speed and the best layout.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("project")(project_cmd.project_command)
app.command("memory")(project_cmd.memory_command)


def _register_optional() -> None:
    """Register command groups that live in their own modules (each may be absent while in development)."""
    import importlib

    for module_name in ("catalog_cmd", "eval_cmd", "search_cmd", "agent_cmd", "bench_cmd", "diagnose_cmd"):
        try:
            module = importlib.import_module(f"projtune.commands.{module_name}")
        except ModuleNotFoundError as err:
            if err.name != f"projtune.commands.{module_name}":
                raise
            continue
        module.register(app)


_register_optional()


def main() -> None:
    """Console-script entry point."""
    app()
