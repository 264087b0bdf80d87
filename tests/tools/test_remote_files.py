"""Remote calls read no files (issue 29): over MCP a ``model`` argument never reaches the server's file system.

Whatever the name (bare ``creds``, ``notes``, ``CONFIG.JSON``, ``config.json``, ``./x``), the answer is the
same whether a file of that name exists in the server's working directory or not, and no content of it
appears (an existence oracle would let a caller probe the server's files).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tools.registry import call_tool

SECRET = "remote-canary-5b7e"
NAMES = ["creds", "notes", "CONFIG.JSON", "config.json", "Config.Yaml", "model.yml", "./creds", "../creds",
         "~/creds", "sub/config.json", "creds.JSON"]
CALLS = {
    "check_memory": {"gpu": "h100-sxm", "num_gpus": 8, "layout": {"tp": 2, "mbs": 1, "gbs": 32, "seq_len": 4096}},
    "project": {"gpu": "h100-sxm", "num_gpus": 8, "layout": {"tp": 2, "mbs": 1, "gbs": 32, "seq_len": 4096}},
    "legal_axes": {"gpu": "h100-sxm", "num_gpus": 8, "seq_len": 4096},
    "export_launch_config": {"gpu": "h100-sxm", "num_gpus": 8, "layout": {"tp": 2, "gbs": 32, "seq_len": 4096},
                             "framework": "megatron"},
}
CONFIG = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
          "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "_name_or_path": SECRET}


def _answers(folder: Path, populate: bool) -> dict[tuple[str, str], str]:
    if populate:
        (folder / "sub").mkdir()
        for name in NAMES:
            if name.startswith(("~", "..")):
                continue
            (folder / name).write_text(json.dumps(CONFIG))
    here = os.getcwd()
    os.chdir(folder)
    try:
        return {(tool, name): json.dumps(call_tool(tool, {"model": name, **args}, untrusted=True), sort_keys=True)
                for tool, args in CALLS.items() for name in NAMES}
    finally:
        os.chdir(here)


def test_model_names_read_no_files_and_answer_alike(tmp_path: Path) -> None:
    present, absent = tmp_path / "present", tmp_path / "absent"
    present.mkdir()
    absent.mkdir()
    with_files, without = _answers(present, True), _answers(absent, False)
    for key, answer in with_files.items():
        assert SECRET not in answer and "model_type" not in answer.lower().replace("model_type'", ""), key
        assert answer == without[key], key
        assert json.loads(answer)["ok"] is False, key


@pytest.mark.parametrize("name", ["creds", "CONFIG.JSON"])
def test_a_local_caller_still_reads_a_config_file(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text(json.dumps(CONFIG))
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        payload = call_tool("check_memory", {"model": name, **CALLS["check_memory"]})
    finally:
        os.chdir(here)
    assert payload["ok"], payload
