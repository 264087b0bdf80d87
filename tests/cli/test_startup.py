"""Start-up imports only what the command needs (issue 31): module counts of `projtune --help` and `projtune project`.

Counted in a fresh interpreter (``sys.modules`` after the console script's ``main`` returns), as a user
starts the command.  Bounds are today's counts plus a little slack (a few new stdlib or dependency
modules pass; an eager import of the agent, the evals or the engine does not); the named heavy
packages must not load at all.  Speed itself is measured, not tested: benchmarks/bench_startup.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from projtune.app import COMMAND_MODULES, MODULES, app, app_for, build_app, command_name, group_name

ROOT = Path(__file__).resolve().parents[2]
OWN = ("projection", "tools", "evals", "agent", "projtune", "bench", "prompts")
PROJECT = ["project", "-m", "llama3-8b", "-g", "h100-sxm", "-n", "8", "--tp", "1", "--mbs", "1", "--gbs", "8",
           "--seq-len", "4096"]
# (argv, most modules in all, most of the project's own modules, packages that must not load); `project` was at
# 50 own modules, 52 since its count flags read numbers with projection.quantities (projtune/count_option.py)
CASES = {
    "help": (["--help"], 370, 20, ("pydantic", "numpy", "yaml", "langgraph", "evals", "agent", "projection.engine")),
    "project": (PROJECT, 500, 52, ("langgraph", "langchain_core", "agent", "evals", "scipy", "matplotlib", "torch",
                                   "tools.search", "projtune.commands.agent_cmd", "projtune.commands.eval_cmd")),
}
_COUNT = """
import contextlib, io, json, sys
from projtune.cli import main
sys.argv = ["projtune", *sys.argv[1:]]
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main()
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _modules_after(argv: list[str]) -> list[str]:
    done = subprocess.run([sys.executable, "-c", _COUNT, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_command_loads_few_modules(case: str) -> None:
    argv, most, most_own, absent = CASES[case]
    modules = _modules_after(argv)
    own = [m for m in modules if m.split(".")[0] in OWN]
    loaded = [name for name in absent if any(m == name or m.startswith(name + ".") for m in modules)]
    assert loaded == [], f"projtune {argv[0]} loads {loaded}"
    assert len(own) <= most_own, f"projtune {argv[0]} loads {len(own)} project modules (at most {most_own}): {own}"
    assert len(modules) <= most, f"projtune {argv[0]} loads {len(modules)} modules (at most {most})"


def _names(built: typer.Typer) -> list[str]:
    return ([command_name(c) for c in built.registered_commands]
            + [group_name(g) for g in built.registered_groups])


def test_every_command_is_mapped_to_the_module_that_registers_it() -> None:
    assert sorted(_names(app)) == sorted(COMMAND_MODULES)
    for module in MODULES:
        assert sorted(_names(build_app((module,)))) == sorted(k for k, v in COMMAND_MODULES.items() if v == module)


@pytest.mark.parametrize("name", sorted(COMMAND_MODULES))
def test_a_command_line_gets_the_same_command_from_its_module_alone(name: str) -> None:
    assert _names(app_for([name])) == [name]       # typer converts that command's options alone
    runner = CliRunner()
    alone = runner.invoke(app_for([name, "--help"]), [name, "--help"], terminal_width=100)
    full = runner.invoke(app, [name, "--help"], terminal_width=100)
    assert (alone.exit_code, alone.output) == (full.exit_code, full.output)


def test_a_bad_option_reads_the_same_from_the_command_alone() -> None:
    runner = CliRunner()
    line = ["memory", "--tp", "two"]
    alone = runner.invoke(app_for(line), line, terminal_width=100)
    full = runner.invoke(app, line, terminal_width=100)
    assert alone.exit_code == full.exit_code == 2 and alone.output == full.output and "--tp" in alone.output


def test_no_command_or_an_unknown_one_gets_the_full_app() -> None:
    assert sorted(_names(app_for([]))) == sorted(_names(app_for(["projet"]))) == sorted(COMMAND_MODULES)
    result = CliRunner().invoke(app_for(["projet"]), ["projet"])
    assert result.exit_code == 2 and "No such command 'projet'" in result.output


_PRELOAD = """
import json, sys
from projtune.app import preload
before = set(sys.modules)
preload(sys.argv[1:])
print(json.dumps(sorted(set(sys.modules) - before)))
"""


@pytest.mark.parametrize("argv, loads", [(PROJECT, True), (["memory", *PROJECT[1:]], True),
                                         ([*PROJECT, "--help"], False), (["--help"], False),
                                         (["tune", "tune llama3 8b on 8 h100"], False)])
def test_preload_loads_what_the_command_runs_with_and_nothing_for_help(argv: list[str], loads: bool) -> None:
    done = subprocess.run([sys.executable, "-c", _PRELOAD, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=True)
    added = json.loads(done.stdout.strip().splitlines()[-1])
    assert ("projection.engine" in added) is loads, added


def test_run_modules_are_the_modules_the_run_imports() -> None:
    """project_cmd.RUN_MODULES lists exactly the modules its ``_run`` imports inside loading_modules (a module added
    to one and not the other would load late again, or load for nothing)."""
    import ast
    import inspect

    from projtune.commands import project_cmd

    tree = ast.parse(inspect.getsource(project_cmd._run))
    block = next(n for n in ast.walk(tree) if isinstance(n, ast.With))
    imported = [n.module for n in block.body if isinstance(n, ast.ImportFrom)]
    assert tuple(imported) == project_cmd.RUN_MODULES["project"] == project_cmd.RUN_MODULES["memory"]
