"""Outputs that survive a kill: a folder built aside and swapped in whole, a JSONL file appended a line at a time.

:func:`replace_dir` builds the new folder in a hidden sibling (same file system) and swaps it
with the old one in one ``renameat2(RENAME_EXCHANGE)`` call (Linux >= 3.15), else two renames;
so a reader (or a kill at any moment) sees the old folder or the complete new one, never an
empty or half-written one, and never files of two runs mixed.  A folder that holds anything but
a previous output of the same kind is refused rather than replaced (its files are the user's).

:class:`JsonLines` appends each row with one ``write`` to a file opened ``O_APPEND`` and flushed
by the kernel at once (no user-space buffer), so every row written before a kill is in the file.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from projection.errors import ProjtuneError, clip

T = TypeVar("T")
_RENAME_EXCHANGE = 2      # linux/fs.h
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (renameat2 RENAME_EXCHANGE); False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


def replace_dir(target: Path, fill: Callable[[Path], T], *, owned: Callable[[Path], bool],
                what: str = "output folder") -> T:
    """Call ``fill(staging)`` on a fresh sibling folder, then swap it in as ``target``; return what fill returned.

    ``owned(path)`` says whether an existing file inside ``target`` is an earlier output of the same kind;
    a ``target`` with any other file is refused (ProjtuneError) before anything is written.

    Raises:
        ProjtuneError: ``target`` is a file, or a folder holding files that are not this kind of output.
    """
    target = Path(os.path.abspath(target))
    if target.exists() and not target.is_dir():
        raise ProjtuneError(f"{what} '{clip(str(target))}' is a file; give a folder")
    if target.is_dir():
        foreign = [p for p in target.rglob("*") if p.is_file() and not owned(p.relative_to(target))]
        if foreign:
            raise ProjtuneError(f"{what} '{clip(str(target))}' holds {len(foreign)} file(s) that are not a projtune "
                                f"report (e.g. {clip(str(foreign[0].relative_to(target)), 60)}); give a new or "
                                "empty folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=target.parent))
    try:
        result = fill(staging)
        staging.chmod(0o755)                       # mkdtemp makes it private
        if not target.exists():
            os.rename(staging, target)
        elif _exchange(staging, target):          # staging now holds the old folder
            shutil.rmtree(staging, ignore_errors=True)
        else:
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.rename(target, old / "old")
            os.rename(staging, target)
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return result


class JsonLines:
    """A JSONL file written one complete line per ``write`` call (see the module docstring); truncated on open."""

    def __init__(self, path: Path, dump: Callable[[Any], str] = json.dumps) -> None:
        self.path, self._dump = Path(path), dump
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)

    def write(self, row: Any) -> None:
        """Append one row as one line."""
        data = (self._dump(row) + "\n").encode("utf-8")
        written = os.write(self._fd, data)
        while written < len(data):               # a short write on a full disk: finish the line or fail
            written += os.write(self._fd, data[written:])

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> JsonLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
