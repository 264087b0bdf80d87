"""Turn domain errors into one-line messages and exit code 2 at the CLI edge (never a traceback)."""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from pydantic import ValidationError

from evals.sweep_models import nearest
from projection.errors import ProjtuneError, clip

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
        hint = ""
        if item["type"] == "literal_error" and isinstance(item.get("input"), str):
            allowed = re.findall(r"'([^']*)'", str(item.get("ctx", {}).get("expected", "")))
            near = nearest(item["input"].lower(), allowed)
            hint = f"; did you mean '{near}'?" if near else ""
        parts.append(f"{clip(field)}: {msg} (got {clip(item.get('input'))}){hint}")
    message = "; ".join(parts[:5])
    return message + (f"; and {len(parts) - 5} more problems" if len(parts) > 5 else "")


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
        except ValidationError as err:
            fail(validation_message(err))
        except (FileNotFoundError, IsADirectoryError, PermissionError) as err:
            fail(f"{err.strerror}: {err.filename}")
        return None

    return wrapper  # type: ignore[return-value]
