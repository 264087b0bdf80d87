"""Turn domain errors into one-line messages and exit code 2 at the CLI edge (never a traceback).

Imported by every command module at start-up (``projtune --help`` included), so it loads only typer and
:mod:`projection.errors`; pydantic is looked up when an error is being turned into a message.
"""

from __future__ import annotations

import functools
import sys
from contextvars import ContextVar
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from projection.errors import ProjtuneError, clip, literal_suggestion

if TYPE_CHECKING:
    from pydantic import ValidationError

F = TypeVar("F", bound=Callable[..., Any])

USAGE_EXIT = 2


def validation_message(err: ValidationError) -> str:
    """Compress a pydantic error into 'field: problem (input)' parts on one line."""
    parts = []
    for item in err.errors():
        field = ".".join(str(x) for x in item["loc"]) or "input"
        msg = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            msg = "unknown key"
        parts.append(f"{clip(field)}: {msg} (got {clip(item.get('input'))}){literal_suggestion(item)}")
    message = "; ".join(parts[:5])
    return message + (f"; and {len(parts) - 5} more problems" if len(parts) > 5 else "")


def _is_validation_error(err: Exception) -> bool:
    """A pydantic ValidationError (pydantic is loaded by whatever raised one, so this imports nothing new)."""
    from pydantic import ValidationError

    return isinstance(err, ValidationError)


JSON_ERRORS: ContextVar[bool] = ContextVar("projtune_json_errors", default=False)
"""True while a command given ``--json`` runs: its errors are also one JSON object on stdout."""


def json_error(message: str) -> str:
    """The machine-readable form of a usage error under ``--json``: the tools' error envelope."""
    import json

    return json.dumps({"ok": False, "error": {"message": message, "exit_code": USAGE_EXIT}}, ensure_ascii=False)


def fail(message: str) -> None:
    """Print ``error: message`` on stderr (and, under ``--json``, :func:`json_error` on stdout) and exit 2."""
    print(f"error: {message}", file=sys.stderr)
    if JSON_ERRORS.get():
        print(json_error(message))
    raise typer.Exit(USAGE_EXIT)


def user_errors(func: F) -> F:
    """Decorator: domain and validation errors become one line on stderr and exit code 2 (with ``as_json``, also
    :func:`json_error` on stdout)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        token = JSON_ERRORS.set(bool(kwargs.get("as_json")))
        try:
            return func(*args, **kwargs)
        except ProjtuneError as err:
            fail(str(err))
        except OSError as err:    # a file or folder that cannot be read or made: the OS's reason and the path
            if err.filename is None or isinstance(err, BrokenPipeError):
                raise
            fail(f"{err.strerror or type(err).__name__}: {err.filename}")
        except Exception as err:
            if not _is_validation_error(err):
                raise
            fail(validation_message(err))  # type: ignore[arg-type]
        finally:
            JSON_ERRORS.reset(token)
        return None

    return wrapper  # type: ignore[return-value]
