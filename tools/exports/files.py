"""Write an export to disk: the launcher (executable), the config file the framework reads, and its helpers."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from projection.errors import ProjtuneError
from tools.exports.common import LaunchConfig


def write_export(exported: LaunchConfig, target: Path) -> list[Path]:
    """Write ``exported`` so that it runs: a ``.sh`` target gets the launcher (mode 755) and the config file and
    helper files beside it under their own names; any other target gets the config text, with the launcher and
    helpers beside it.  Returns the paths written, ``target`` first.

    An existing folder as ``target`` gets every file inside it under its own name (the launcher's, else the
    config's); before, the files went beside the folder, into its parent.

    Each file is written to a temporary name and renamed, so an interrupted write leaves no partial file.
    """
    if target.is_dir():
        target = target / (exported.launcher_filename or exported.filename)
    if exported.launcher and exported.launcher == exported.text and target.suffix != ".sh":
        # one launcher script, no config file to put at `target`: it went beside it under its own name
        raise ProjtuneError(f"the {exported.framework} export is one launcher script (its arguments are in it): "
                            f"give a .sh file or a folder, not '{target.name}'")
    folder = target.parent
    folder.mkdir(parents=True, exist_ok=True)
    launcher_path = target if target.suffix == ".sh" else folder / (exported.launcher_filename or target.name + ".sh")
    config_path = target if target.suffix != ".sh" else folder / exported.filename
    files: dict[Path, str] = {}
    if exported.launcher and exported.launcher != exported.text:
        files[config_path] = exported.text
    elif not exported.launcher:
        files[config_path] = exported.text
    for name, text in exported.files.items():
        files[folder / name] = text
    written: list[Path] = []
    if exported.launcher:
        _atomic_write(launcher_path, exported.launcher, executable=True)
        written.append(launcher_path)
    for path, text in files.items():
        if path != launcher_path:
            _atomic_write(path, text, executable=False)
            written.append(path)
    return sorted(written, key=lambda p: p != target)


def _atomic_write(path: Path, text: str, *, executable: bool) -> None:
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    temporary.write_text(text if text.endswith("\n") else text + "\n")
    if executable:
        temporary.chmod(temporary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    temporary.replace(path)
