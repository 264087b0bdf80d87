"""The `projtune` command line (the typer app): thin commands over the projection engine, evals, tools and agent.

The console script is :func:`projtune.cli.main`, which installs the Ctrl-C handler before importing this.
A command line that names a command builds the app from that command alone (:func:`app_for`):
``projtune project ...`` imports neither the agent nor the evals (only its command's module), and typer converts
only that command's options.  Anything else (``--help``, no argument, a misspelt command) gets the full
app, :data:`app`, with every command (tests/cli/test_startup.py checks the two agree).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import typer

COMMAND_MODULES: dict[str, str] = {
    "project": "project_cmd", "memory": "project_cmd",
    "eval": "eval_cmd", "calibrate": "eval_cmd", "sweeps": "eval_cmd",
    "search": "search_cmd", "export": "search_cmd", "mcp": "search_cmd", "tools": "search_cmd",
    "models": "search_cmd", "hardware": "search_cmd",
    "tune": "agent_cmd", "chat": "agent_cmd",
    "bench": "bench_cmd",
    "diagnose": "diagnose_cmd",
}
"""Each top-level command (or command group) -> the module of projtune/commands that registers it."""
MODULES: tuple[str, ...] = ("project_cmd", "eval_cmd", "search_cmd", "agent_cmd", "bench_cmd", "diagnose_cmd")
"""The command modules, in the order the full app registers them (the order of `projtune --help`)."""


def _typer() -> typer.Typer:
    return typer.Typer(
        name="projtune",
        help="Projection-guided tuning for distributed LLM training: fit, speed and the best layout.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
    )


def build_app(modules: Sequence[str] = MODULES, only: str | None = None) -> typer.Typer:
    """The CLI with the commands of ``modules`` (every command by default); ``only``: that command (or group) of
    them alone (typer converts every registered command's signature to options when the app runs: `memory`'s 40
    are not needed to run `project`)."""
    built = _typer()
    for name in modules:
        _command_module(name).register(built)
    if only is not None:
        built.registered_commands = [c for c in built.registered_commands if command_name(c) == only]
        built.registered_groups = [g for g in built.registered_groups if group_name(g) == only]
    if len(built.registered_commands) + len(built.registered_groups) == 1:
        built.callback()(_group)       # one command stays a subcommand (`projtune diagnose FILE`), as in the full app
    return built


def preload(args: Sequence[str]) -> None:
    """Import the modules the named command runs with (its module's ``RUN_MODULES``), unless it only prints help.

    :func:`projtune.cli.main` calls this inside the same :func:`projection.module_heap.loading_modules` block that
    builds the command, before the command runs: the same imports made from inside the running command (typer's
    call stack, after the app was built and the heap frozen) cost ``projtune project`` about 70 ms more wall time,
    mostly system time (measured 0.39 s against 0.32 s per process, session 9), for the same modules.
    """
    module = COMMAND_MODULES.get(args[0]) if args else None
    if module is None or any(a in ("--help", "-h") for a in args):
        return
    import importlib

    for name in getattr(_command_module(module), "RUN_MODULES", {}).get(args[0], ()):
        importlib.import_module(name)


def _command_module(name: str) -> Any:
    """The command module ``name`` of :data:`MODULES` (plain imports, which tests/test_architecture.py reads)."""
    if name == "project_cmd":
        from projtune.commands import project_cmd as module
    elif name == "eval_cmd":
        from projtune.commands import eval_cmd as module
    elif name == "search_cmd":
        from projtune.commands import search_cmd as module
    elif name == "agent_cmd":
        from projtune.commands import agent_cmd as module
    elif name == "bench_cmd":
        from projtune.commands import bench_cmd as module
    elif name == "diagnose_cmd":
        from projtune.commands import diagnose_cmd as module
    else:
        raise ValueError(f"unknown command module '{name}' (known: {', '.join(MODULES)})")
    return module


def command_name(info: Any) -> str:
    """The name a registered command answers to (typer's CommandInfo: its given name, else the function's)."""
    return str(info.name or info.callback.__name__)


def group_name(info: Any) -> str:
    """The name a registered command group answers to (typer's TyperInfo)."""
    return str(info.name or info.typer_instance.info.name)


def _group() -> None:
    """Projection-guided tuning for distributed LLM training: fit, speed and the best layout."""


def app_for(args: Sequence[str]) -> typer.Typer:
    """The app for one command line: the named command alone, else every command."""
    module = COMMAND_MODULES.get(args[0]) if args else None
    return build_app() if module is None else build_app((module,), only=args[0])


def __getattr__(name: str) -> Any:
    """``app``, the full CLI, is built on first use (a command run builds only what it needs)."""
    if name == "app":
        globals()["app"] = built = build_app()
        return built
    raise AttributeError(f"module 'projtune.app' has no attribute {name!r}")
