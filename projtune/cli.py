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
        command()
    except BaseException as err:
        if not _is_interrupt(err):
            raise
        print("interrupted (Ctrl-C): stopped; files are left as they were or complete", file=sys.stderr)
        sys.exit(INTERRUPTED_EXIT)
