"""The `projtune` console script: Ctrl-C handled from the first moment, then the CLI (projtune/app.py).

Ctrl-C at any moment (start-up imports included) ends the command with one line on stderr and
exit code :data:`INTERRUPTED_EXIT` (130 = 128 + SIGINT, the shell convention), never a
traceback.  The handler raises :class:`Interrupted`, a ``BaseException`` that no ``except
Exception`` and none of click's handlers catch, so ``finally`` blocks and context managers still
run (a report folder being built is removed; see projtune/atomic_output.py).  Processes forked
by the command (search workers, deadline children) exit at once and quietly on the same signal.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from typing import Any

INTERRUPTED_EXIT = 130


class Interrupted(BaseException):
    """Ctrl-C (SIGINT) in the projtune process."""


def __getattr__(name: str) -> Any:
    """``from projtune.cli import app`` keeps working (the app is built on first use)."""
    if name == "app":
        from projtune.app import app

        return app
    raise AttributeError(f"module 'projtune.cli' has no attribute {name!r}")


def _is_interrupt(err: BaseException) -> bool:
    if isinstance(err, Interrupted | KeyboardInterrupt):
        return True
    if isinstance(err, BaseExceptionGroup):
        return any(_is_interrupt(e) for e in err.exceptions)
    return isinstance(err.__context__, Interrupted) and not isinstance(err, SystemExit)


def usage_line(err: Any) -> str:
    """One line for a click usage error (unknown command or option, a value of the wrong type, a missing
    argument): click's own message (with its "did you mean" and possible options) and where the help is.

    typer would draw it as a usage line, a hint line and a boxed panel; the CLI's rule is one line."""
    message = " ".join(err.format_message().split()).rstrip(".").replace("Value error, ", "")
    message = re.sub(r"^(Invalid value for '(--[\w-]+)'[^:]*): \2: ", r"\1: ", message)   # the flag named once
    ctx = getattr(err, "ctx", None)
    where = f"; see '{ctx.command_path} --help'" if ctx is not None else ""
    return f"error: {message}{where}"


def run_command(command: Any) -> int:
    """Run the typer app outside click's standalone mode and return the exit code.

    click's usage errors become :func:`usage_line` and exit code 2; ``typer.Exit(n)`` gives ``n``; a command
    that returns normally gives 0; an aborted prompt (end of input) gives 1 with one line.
    """
    import typer

    # typer >= 0.20 runs its own copy of click (typer._click): its exception classes are found from the ones
    # typer exports, as typer itself recognises NoArgsIsHelpError by name.
    click_exception = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
    try:
        code = command(prog_name="projtune", standalone_mode=False)
    except click_exception as err:
        if type(err).__name__ == "NoArgsIsHelpError":
            return 2                  # typer has printed the help already
        line = usage_line(err)
        print(line, file=sys.stderr)
        if "--json" in sys.argv[1:]:      # the command never ran: its --json asked for a machine-readable answer
            from projtune.errors import json_error

            print(json_error(line.removeprefix("error: ")))
        return int(err.exit_code)
    except typer.Abort:
        print("aborted: no input", file=sys.stderr)
        return 1
    return code if isinstance(code, int) and not isinstance(code, bool) else 0


def main() -> None:
    """Console-script entry point."""
    main_pid = os.getpid()

    def on_sigint(_signum: int, _frame: Any) -> None:
        if os.getpid() != main_pid:
            os._exit(INTERRUPTED_EXIT)      # a forked worker: the parent reports the interruption
        raise Interrupted()

    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:   # nohup / background jobs keep ignoring it
        signal.signal(signal.SIGINT, on_sigint)
    try:
        from projection.module_heap import collect_rarely, loading_modules

        collect_rarely()
        with loading_modules():       # typer and the command's module, loaded for good
            from projtune.app import app_for, preload

            command = app_for(sys.argv[1:])
            preload(sys.argv[1:])     # what the command runs with, loaded in the same block
        sys.exit(run_command(command))
    except BaseException as err:
        if not _is_interrupt(err):
            raise
        print("interrupted (Ctrl-C): stopped; files are left as they were or complete", file=sys.stderr)
        sys.exit(INTERRUPTED_EXIT)
