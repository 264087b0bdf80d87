"""Load measured sweep files run by run, so that one broken run loses only itself.

Loading has three layers. A file that is not YAML, or has no `sweeps` list, is one
file-level issue and is skipped. A sweep whose header (name, model, cluster, fixed) is
invalid is one sweep-level issue and is skipped. A run that breaks the format is one
run-level issue and is kept as a *broken* run, so the eval can report it as skipped.
Every issue message names the file (and line), the sweep, the run index (0-based, as
in the `runs:` list) and the key, and says what is allowed.

Files are read within :mod:`projection.safe_yaml`'s limits (16 MiB, 2M values with anchors and
aliases expanded, 64 levels of nesting): a file beyond them is one file-level issue and the
other files are still loaded and scored.  A run (or sweep header) holding a NaN or infinite
number (``measured: .inf``) is broken with the path of that value.  Values quoted in issues
are cut to :data:`MAX_SHOWN` characters.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError

from evals.sweep_models import (
    CONFIG_KEYS,
    GPU_IDS,
    ClusterSpec,
    ConfigKeys,
    Measured,
    Run,
    Sweep,
    SweepFile,
    SweepHeader,
    primary_metric,
)
from projection.errors import clip, unknown_name_message
from projection.safe_yaml import YamlLimitError, compose_bounded, non_finite_paths, read_text_bounded, yaml_problem

__all__ = [
    "CONFIG_KEYS", "GPU_IDS", "ClusterSpec", "ConfigKeys", "LoadIssue", "LoadResult", "LoadedRun",
    "LoadedSweep", "Measured", "Run", "Sweep", "SweepFile", "SweepFormatError", "SweepHeader",
    "load_sweep_files", "primary_metric",
]

_SUFFIXES = (".yaml", ".yml")
MAX_SHOWN = 80


class SweepFormatError(ValueError):
    """Sweep files that break the format; str(err) has one line per issue."""

    def __init__(self, issues: Sequence[LoadIssue]) -> None:
        self.issues = list(issues)
        super().__init__("\n".join(str(issue) for issue in self.issues))


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadIssue:
    """One problem found while loading; `level` says what was lost."""

    file: str
    sweep: str | None = None
    """Sweep name, or "#i" (index in `sweeps:`) when the name is unreadable."""
    run_index: int | None = None
    """Index of the run in the sweep's `runs:` list (0-based)."""
    line: int | None = None
    """1-based line in the file where the broken item starts."""
    detail: str

    @property
    def level(self) -> Literal["file", "sweep", "run"]:
        """Return "file" (file skipped), "sweep" (sweep skipped) or "run" (run broken)."""
        if self.sweep is None:
            return "file"
        return "sweep" if self.run_index is None else "run"

    @property
    def message(self) -> str:
        """Return e.g. "x.yaml:12: sweep 'foo' run 3: unknown config key 'vp' (...)"."""
        parts = [self.file if self.line is None else f"{self.file}:{self.line}"]
        if self.sweep is not None:
            label = self.sweep if self.sweep.startswith("#") else f"'{self.sweep}'"
            parts.append(f"sweep {label}" + ("" if self.run_index is None else f" run {self.run_index}"))
        return ": ".join([*parts, self.detail])

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedRun:
    """One run as loaded: valid (with its effective config) or broken (with the reason)."""

    index: int
    """Index in the sweep's `runs:` list (0-based)."""
    line: int | None
    run: Run | None
    """The validated run; None when broken."""
    config: dict[str, Any]
    """Effective config: `fixed` merged with the run's config, only keys that are set."""
    metric: str | None
    """Primary metric (spec: *Measured metrics*); None if only memory/oom/layer time."""
    missing_keys: tuple[str, ...]
    """Keys that make the run incomplete (its `unknown:` list, then absent mbs/gbs/seq_len)."""
    broken: str | None
    """Why the run breaks the format; None for a valid run."""

    @property
    def incomplete(self) -> bool:
        """Return True if the run lists `unknown` keys or lacks mbs, gbs or seq_len."""
        return bool(self.missing_keys)

    @property
    def complete(self) -> bool:
        """Return True for a valid run that is not incomplete."""
        return self.broken is None and not self.missing_keys


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedSweep:
    """A loaded sweep; `sweep.runs` holds the valid runs, `runs` every run in file order."""

    file: str
    """Path of the file, as given (or as found under a given directory)."""
    file_source: str
    """The file's default citation."""
    line: int | None
    sweep: Sweep
    runs: tuple[LoadedRun, ...]

    @property
    def name(self) -> str:
        """Return the sweep's name."""
        return self.sweep.name

    @property
    def source(self) -> str:
        """Return the sweep's citation (its own, else the file's)."""
        return self.sweep.source or self.file_source

    @property
    def rankable(self) -> bool:
        """Return True if at least two valid runs share a primary metric."""
        metrics = [r.metric for r in self.runs if r.broken is None and r.metric is not None]
        return any(metrics.count(m) >= 2 for m in set(metrics))


@dataclass(slots=True)
class LoadResult:
    """Everything that loaded, and every issue met on the way."""

    sweeps: list[LoadedSweep] = field(default_factory=list)
    errors: list[LoadIssue] = field(default_factory=list)

    def raise_for_issues(self) -> None:
        """Raise SweepFormatError listing every issue, if there is any."""
        if self.errors:
            raise SweepFormatError(self.errors)


def load_sweep_files(paths: Sequence[Path | str]) -> LoadResult:
    """Load sweep files; directories are searched recursively for *.yaml / *.yml."""
    if isinstance(paths, str | Path):
        paths = [paths]
    result = LoadResult()
    first_file_of: dict[str, str] = {}
    for given in paths:
        files = _files_of(Path(given))
        if not files:   # an empty folder is not "0 issues": nothing was read
            result.errors.append(LoadIssue(file=str(given), detail=f"a folder without sweep files "
                                                                   f"({' / '.join('*' + s for s in _SUFFIXES)})"))
        for path in files:
            _load_file(path, result, first_file_of)
    return result


def _files_of(path: Path) -> list[Path]:
    """The file itself, or a folder's sweep files (recursively; README files left out)."""
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.rglob("*")
                  if p.is_file() and p.suffix in _SUFFIXES and not p.name.lower().startswith("readme"))


def _load_file(path: Path, result: LoadResult, first_file_of: dict[str, str]) -> None:
    file = str(path)
    try:
        data, root = _read_yaml(path)
    except yaml.MarkedYAMLError as err:
        line, problem = yaml_problem(err)
        result.errors.append(LoadIssue(file=file, line=line, detail=f"malformed YAML: {problem}"))
        return
    except YamlLimitError as err:
        result.errors.append(LoadIssue(file=file, line=err.line, detail=f"refused: {err}"))
        return
    except OSError as err:        # the reason alone ("No such file or directory"), not the exception's repr
        result.errors.append(LoadIssue(file=file, detail=f"cannot read: {err.strerror or type(err).__name__}"))
        return
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError, ValueError) as err:
        result.errors.append(LoadIssue(file=file, detail=f"cannot read: {type(err).__name__}: {_shown(err)}"))
        return
    if not isinstance(data, dict) or not isinstance(data.get("sweeps"), list) or not data["sweeps"]:
        detail = "not a sweep file: expected a mapping with 'source' and a non-empty 'sweeps' list"
        result.errors.append(LoadIssue(file=file, detail=detail))
        return
    header_errors = _file_header_errors(data)
    if header_errors:
        result.errors.append(LoadIssue(file=file, detail="; ".join(header_errors)))
        return
    sweep_lines, run_lines = _node_lines(root)
    for i, raw in enumerate(data["sweeps"]):
        loaded = _load_sweep(
            raw, index=i, file=file, file_source=data["source"],
            line=_at(sweep_lines, i), run_lines=_at(run_lines, i) or [],
            result=result, first_file_of=first_file_of,
        )
        if loaded is not None:
            result.sweeps.append(loaded)


def _file_header_errors(data: dict[str, Any]) -> list[str]:
    try:
        SweepFile.model_validate({**data, "sweeps": []})
    except ValidationError as err:
        return _describe(err, SweepFile, skip=("sweeps",))
    return []


def _load_sweep(
    raw: object, *, index: int, file: str, file_source: str, line: int | None,
    run_lines: list[int | None], result: LoadResult, first_file_of: dict[str, str],
) -> LoadedSweep | None:
    name = raw.get("name") if isinstance(raw, dict) else None
    label = name if isinstance(name, str) and name else f"#{index}"
    if not isinstance(raw, dict):
        detail = f"expected a mapping, got {type(raw).__name__}"
        result.errors.append(LoadIssue(file=file, sweep=label, line=line, detail=detail))
        return None
    header_raw = {k: v for k, v in raw.items() if k != "runs"}
    errors: list[str] = [f"{path} is not a finite number" for path in non_finite_paths(header_raw)]
    header: SweepHeader | None = None
    try:
        header = SweepHeader.model_validate(header_raw)
    except ValidationError as err:
        errors += _describe(err, SweepHeader)
    raw_runs = raw.get("runs")
    if not isinstance(raw_runs, list) or not raw_runs:
        errors.append("'runs' must be a non-empty list")
    if header is not None and header.name in first_file_of:
        errors.append(f"duplicate sweep name (first defined in {first_file_of[header.name]})")
    if errors or header is None or not isinstance(raw_runs, list):
        result.errors.append(LoadIssue(file=file, sweep=label, line=line, detail="; ".join(errors)))
        return None
    first_file_of[header.name] = file
    runs = [
        _load_run(raw_run, header, index=j, line=_at(run_lines, j), file=file, result=result)
        for j, raw_run in enumerate(raw_runs)
    ]
    good = [raw_runs[r.index] for r in runs if r.broken is None]
    sweep = Sweep.model_validate({**header_raw, "runs": good})
    return LoadedSweep(file=file, file_source=file_source, line=line, sweep=sweep, runs=tuple(runs))


def _load_run(
    raw: object, header: SweepHeader, *, index: int, line: int | None, file: str,
    result: LoadResult,
) -> LoadedRun:
    bad_numbers = non_finite_paths(raw)
    try:
        if bad_numbers:
            run, broken = None, "; ".join(f"{path} is not a finite number" for path in bad_numbers)
        else:
            run = Run.model_validate(raw)
            broken = header.layout_error(run)
    except ValidationError as err:
        run, broken = None, "; ".join(_describe(err, Run))
    if run is None or broken is not None:
        result.errors.append(
            LoadIssue(file=file, sweep=header.name, run_index=index, line=line, detail=str(broken))
        )
        return LoadedRun(index=index, line=line, run=None, config={}, metric=None,
                         missing_keys=(), broken=broken)
    return LoadedRun(
        index=index, line=line, run=run, config=header.effective_config(run),
        metric=primary_metric(run.measured), missing_keys=tuple(run.missing_keys(header)),
        broken=None,
    )


def _read_yaml(path: Path) -> tuple[Any, yaml.Node | None]:
    return compose_bounded(read_text_bounded(path))


def _shown(value: object) -> str:
    """A value as quoted in an issue, cut to MAX_SHOWN characters."""
    return clip(value, MAX_SHOWN)


def _node_lines(root: yaml.Node | None) -> tuple[list[int | None], list[list[int | None]]]:
    """Return the 1-based start line of each sweep and of each run of each sweep."""
    sweeps = _child(root, "sweeps")
    if not isinstance(sweeps, yaml.SequenceNode):
        return [], []
    sweep_lines: list[int | None] = [n.start_mark.line + 1 for n in sweeps.value]
    run_lines: list[list[int | None]] = []
    for node in sweeps.value:
        runs = _child(node, "runs")
        items = runs.value if isinstance(runs, yaml.SequenceNode) else []
        run_lines.append([n.start_mark.line + 1 for n in items])
    return sweep_lines, run_lines


def _child(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
                return value_node
    return None


def _at(items: list[Any], i: int) -> Any:
    return items[i] if i < len(items) else None


# Field names by the model that rejects an unknown key, for "allowed: ..." lists.
_KEY_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "config": ("config key", CONFIG_KEYS),
    "fixed": ("config key", CONFIG_KEYS),
    "measured": ("metric", tuple(Measured.model_fields)),
    "baselines": ("metric", tuple(Measured.model_fields)),
    "cluster": ("cluster key", tuple(ClusterSpec.model_fields)),
}


def _describe(err: ValidationError, model: type[BaseModel], skip: tuple[str, ...] = ()) -> list[str]:
    """Turn pydantic errors into one readable message each (key, problem, what is allowed)."""
    messages = []
    for e in err.errors(include_url=False):
        loc = tuple(e["loc"])
        if loc[:1] and loc[0] in skip:
            continue
        path = ".".join(str(p) for p in loc)
        if e["type"] == "extra_forbidden":
            kind, allowed = _allowed_keys(loc[:-1], model)
            messages.append(unknown_name_message(kind, _shown(loc[-1]), allowed))
        elif e["type"] == "literal_error":
            allowed = tuple(re.findall(r"'([^']*)'", e["ctx"]["expected"]))
            messages.append(f"{path}: " + unknown_name_message("value", _shown(e["input"]), allowed))
        elif e["type"] == "value_error":
            label = "'unknown' list" if path == "unknown" else path
            messages.append(f"{label}: {e['ctx']['error']}" if path else str(e["ctx"]["error"]))
        elif e["type"] == "missing":
            messages.append(f"missing required key '{path}'")
        else:
            given = e["input"]
            quoted = repr(given[:MAX_SHOWN + 1]) if isinstance(given, str) else given
            messages.append(f"{path}: {e['msg'].lower()} (got {_shown(quoted)})")
    return messages


def _allowed_keys(parent: tuple[Any, ...], model: type[BaseModel]) -> tuple[str, tuple[str, ...]]:
    for part in reversed(parent):
        if isinstance(part, str) and part in _KEY_KINDS:
            return _KEY_KINDS[part]
    if model is SweepHeader:
        return "sweep key", (*SweepHeader.model_fields, "runs")
    if model is SweepFile:
        return "file key", tuple(SweepFile.model_fields)
    return "run key", tuple(model.model_fields)
