"""`export --out DIR` with an existing folder writes the files inside it under their own names.

Before, the folder was taken as the config file's path: the launcher went beside it, into the folder's parent
(`--out /tmp/runs` wrote /tmp/llama3-8b_...megatron.sh), and a separate config could not be written at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from projtune.cli import app

runner = CliRunner()
LAYOUT = ["-m", "llama3-8b", "-g", "h100-sxm", "-n", "64", "--tp", "2", "--mbs", "1", "--gbs", "256",
          "--seq-len", "8192"]


@pytest.mark.parametrize(("framework", "names"), [
    ("megatron", {"llama3-8b_64xh100-sxm_bf16.megatron.sh"}),
    ("primus", {"llama3-8b_64xh100-sxm_bf16.primus.sh", "llama3-8b_64xh100-sxm_bf16.primus.yaml"}),
])
def test_an_existing_folder_gets_the_files_inside(tmp_path: Path, framework: str, names: set[str]) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    result = runner.invoke(app, ["export", *LAYOUT, "--framework", framework, "--out", str(folder)])
    assert result.exit_code == 0, result.output
    assert {p.name for p in folder.iterdir()} == names
    assert {p.name for p in tmp_path.iterdir()} == {"runs"}          # nothing beside the folder
    launcher = next(p for p in folder.iterdir() if p.suffix == ".sh")
    assert launcher.stat().st_mode & 0o111
