"""Start-up helpers (issue 31): imports with the collector paused and frozen after; shipped YAML on libyaml's parser."""

from __future__ import annotations

import gc
import subprocess
import sys
import types
from importlib import resources
from pathlib import Path

import pytest
import yaml

from projection.module_heap import OLDER_COLLECTION_EVERY, YOUNG_COLLECTION_ALLOCATIONS, loading_modules
from projection.safe_yaml import load_catalog


@pytest.fixture
def clean_heap():
    gc.unfreeze()
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if enabled else gc.disable)()


def test_a_block_that_loads_modules_runs_without_the_collector_and_freezes_the_heap(clean_heap) -> None:
    name = "_projtune_test_module_heap"
    with loading_modules():
        assert not gc.isenabled()
        with loading_modules():                 # nested: acts once, at the outermost
            sys.modules[name] = types.ModuleType(name)
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    del sys.modules[name]
    assert gc.isenabled() and gc.get_freeze_count() > 0


def test_a_block_that_loads_nothing_freezes_nothing(clean_heap) -> None:
    with loading_modules():
        import json  # noqa: F401  (already loaded)
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_the_collector_comes_back_after_an_error_and_stays_off_if_it_was(clean_heap) -> None:
    with pytest.raises(RuntimeError), loading_modules():
        raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    with loading_modules():
        pass
    assert not gc.isenabled()


_THRESHOLDS_AFTER_MAIN = """
import contextlib, gc, io, sys
from projtune.cli import main
sys.argv = ["projtune", "--help"]
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main()
print(*gc.get_threshold())
"""


def test_the_console_script_collects_rarely() -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _THRESHOLDS_AFTER_MAIN], cwd=root, capture_output=True, text=True,
                          timeout=120, check=True)
    young, middle, old = map(int, done.stdout.split())
    assert young == YOUNG_COLLECTION_ALLOCATIONS > 700 and middle == old == OLDER_COLLECTION_EVERY


SHIPPED = sorted(p for p in Path(str(resources.files("projection") / "catalog")).rglob("*.yaml"))


def test_every_shipped_yaml_file_reads_the_same_as_with_the_pure_python_parser() -> None:
    assert len(SHIPPED) > 20
    for path in SHIPPED:
        text = path.read_text(encoding="utf-8")
        assert load_catalog(text) == yaml.safe_load(text), path.name
