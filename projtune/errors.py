"""Turn domain errors into one-line messages and exit code 2 at the CLI edge (never a traceback).

Imported by every command module at start-up (``projtune --help`` included), so it loads only typer and
:mod:`projection.errors`; pydantic is looked up when an error is being turned into a message.
"""

from __future__ import annotations

import functools
import sys
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


def fail(message: str) -> None:
    """Print ``error: message`` on stderr and exit 2."""
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(USAGE_EXIT)


def user_errors(func: F) -> F:
    """Decorator: domain and validation errors become one line on stderr and exit code 2."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
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
        return None

    return wrapper  # type: ignore[return-value]
