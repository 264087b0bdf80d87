"""Diagnose an existing launch config or training log: project it, say where time and memory go, compare with the best.

Input: a Megatron-LM command line (a file, a launch script or a string), a Primus experiment
YAML, Megatron-Bridge overrides or a torchtitan TOML (read by :mod:`tools.launch_import`), a MaxText
YAML or ``python3 -m MaxText.train`` launch (:mod:`tools.maxtext_import`), or a Megatron / Primus /
torchtitan training log (:func:`evals.log_import.parse_log`).  The model, GPU and
GPU count come from the arguments, else from a projtune export header (``# MODEL on N x GPU:``),
else (Megatron arguments) from the catalog model with the same shape.  The best layout is the
top of a search of the same job restricted to what the same framework can launch
(:mod:`tools.framework_rules`); "change these flags" lists the framework's own options that differ.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from projection.errors import ProjtuneError, clip, not_a_file
from projection.legality import layout_violations
from projection.model_spec import ModelSpec, list_model_ids, load_model
from projection.job import job_on
from projection.training_config import Cluster, TrainingConfig
from projection.vocabulary import COMM_OVERLAPS
from tools.maxtext_import import TEXT_HINT as MAXTEXT_COMMAND, is_maxtext_yaml

_HEADER = re.compile(r"^#\s*(?P<model>\S+) on (?P<gpus>[0-9]{1,7}) x (?P<gpu>[\w.-]+):", re.MULTILINE)
_BRIDGE_WORDS = re.compile(r"^(?:model|train|ddp|dist)\.\w+=", re.MULTILINE)  # Megatron-Bridge overrides
_LOG_HINT = re.compile(r"elapsed time per iteration \(ms\)|step:\s*\d+\s.*?(?:tps|wps):")
_INT_FLAGS = ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
              "--expert-model-parallel-size", "--expert-tensor-parallel-size", "--micro-batch-size",
              "--global-batch-size", "--seq-length", "--num-layers", "--num-layers-per-virtual-pipeline-stage",
              "--num-virtual-stages-per-pipeline-rank", "--recompute-num-layers", "--hidden-size",
              "--num-attention-heads", "--num-query-groups", "--ffn-hidden-size", "--moe-ffn-hidden-size",
              "--num-experts", "--moe-router-topk", "--kv-channels", "--padded-vocab-size",
              "--max-position-embeddings")
MAX_SOURCE_BYTES = 4 * 1024 * 1024
"""Largest config or log file diagnose reads (real launch files and logs are far smaller)."""


class Projected(BaseModel):
    """A layout's projected numbers."""

    model_config = ConfigDict(extra="forbid")

    layout: str
    config: dict[str, Any]
    tokens_per_sec_per_gpu: float
    mfu: float
    iteration_time_s: float
    peak_memory_gib: float
    headroom_fraction: float = Field(description="1 - peak / HBM capacity.")
    verdict: str
    bottleneck: str
    time_s: dict[str, float] = Field(description="Step-time terms, seconds.")
    memory_gib: dict[str, float] = Field(description="Memory terms of the fullest stage, GiB.")


class Diagnosis(BaseModel):
    """The diagnosis of one config: its projection, the best layout found, and what to change."""

    model_config = ConfigDict(extra="forbid")

    source: str
    kind: str = Field(description="megatron-args | primus-yaml | torchtitan-toml | bridge-overrides | bridge-yaml | "
                      "maxtext-yaml | maxtext-command | training-log")
    framework: str
    model: str
    gpu: str
    num_gpus: int
    yours: Projected
    framework_problems: list[str] = Field(default_factory=list,
                                          description="Rules of the framework the given layout breaks.")
    measured: dict[str, float] = Field(default_factory=dict, description="What a training log measured.")
    best: Projected | None = None
    gain: float = Field(0.0, description="best / yours - 1 in tokens/s/GPU (negative where yours does not fit and "
                        "the best that does is slower).")
    change_flags: list[str] = Field(default_factory=list, description="The framework's options to change.")
    searched: int = 0
    notes: list[str] = Field(default_factory=list, description="What reading the file assumed: framework defaults "
                             "taken for what it leaves out, layouts and partial recompute as projected, unresolved "
                             "shell variables.")
    switch_gains: list[str] = Field(default_factory=list, description="What switching a run-time switch (overlap, "
                                    "CUDA graphs) of the given layout would gain, e.g. 'with CUDA graphs: +3.1%'.")
    summary: str


def _is_file(source: str) -> bool:
    try:
        return Path(source).is_file()
    except OSError:  # e.g. an argument string longer than a file name may be
        return False


def read_source(source: str) -> tuple[str, str, str]:
    """(kind, framework, text) of a file path or a Megatron argument string."""
    from projection.safe_yaml import MAX_BYTES

    path = Path(source)
    if source.lstrip().startswith("--"):
        return "megatron-args", "megatron", source
    if _is_file(source):
        size = path.stat().st_size
        if size > min(MAX_BYTES, MAX_SOURCE_BYTES):
            raise ProjtuneError(f"{clip(path.name)}: {size} bytes; diagnose reads files up to {MAX_SOURCE_BYTES} bytes")
        text = path.read_bytes().decode("utf-8", errors="replace")
    elif MAXTEXT_COMMAND.search(source):
        return "maxtext-command", "maxtext", source
    elif "pretrain_gpt" in source or "\n" in source:
        return "megatron-args", "megatron", source
    elif path.suffix or "/" in source:
        raise ProjtuneError(f"{not_a_file('', clip(source))} (give a file or a quoted Megatron argument list)")
    else:
        raise ProjtuneError(f"'{clip(source)}' is neither a file nor a Megatron argument list (starting with --)")
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return "torchtitan-toml", "torchtitan", text
    if _BRIDGE_WORDS.search(text) and not text.lstrip().startswith("--"):
        return "bridge-overrides", "megatron-bridge", text
    if suffix in (".yaml", ".yml"):
        data = _yaml(text, source)
        if isinstance(data, dict) and "modules" in data:
            return "primus-yaml", "primus", text
        if isinstance(data, dict) and {"model", "train"} & set(data) and not any(str(k).startswith("ici_")
                                                                                  for k in data):
            return "bridge-yaml", "megatron-bridge", text
        if is_maxtext_yaml(data):
            return "maxtext-yaml", "maxtext", text
        raise ProjtuneError(f"{clip(source)}: YAML without modules.pre_trainer (Primus), Megatron-Bridge or MaxText "
                            "keys; diagnose reads Megatron arguments, Primus YAML, Megatron-Bridge overrides, "
                            "torchtitan TOML, MaxText YAML or command lines and training logs")
    if _LOG_HINT.search(text):
        return "training-log", "", text
    if MAXTEXT_COMMAND.search(text):
        return "maxtext-command", "maxtext", text
    return "megatron-args", "megatron", text


def _yaml(text: str, source: str) -> Any:
    from projection.safe_yaml import YamlLimitError, load_bounded

    try:
        return load_bounded(text)
    except YamlLimitError as err:
        where = f"line {err.line}: " if err.line else ""
        raise ProjtuneError(f"{clip(source)}: {where}YAML refused: {err}") from err
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "somewhere"
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ProjtuneError(f"{clip(source)}: {where}: cannot parse YAML: {clip(problem)}") from err


def check_megatron_text(text: str, source: str) -> None:
    """One-line errors for misspelt layout flags and non-integer sizes, naming the line.

    The words are those of the training command after shell expansion (:mod:`tools.launch_shell`); a flag's
    line is the first line of the file that holds it.
    """
    from tools.launch_config import known_options
    from tools.launch_shell import ShellScriptError, command_words

    from projection.quantities import QuantityError, read_count

    known = sorted(known_options("megatron"))
    lines = text.splitlines()

    def line_of(flag: str) -> int:
        return next((n for n, line in enumerate(lines, 1) if flag in line.split("#", 1)[0]), 1)

    try:
        words, unresolved = command_words(text)
    except ShellScriptError as err:
        raise ProjtuneError(f"{source}: {err}") from err
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        flag = word.split("=", 1)[0]
        if flag not in known:
            near = difflib.get_close_matches(flag, known, n=1, cutoff=0.88)
            if near:
                raise ProjtuneError(f"{source}: line {line_of(flag)}: unknown flag {clip(flag)} (did you mean {near[0]}?)")
        if flag in _INT_FLAGS:
            value = word.split("=", 1)[1] if "=" in word else (words[i + 1] if i + 1 < len(words) else "")
            try:
                read_count(value.strip("'\""), flag)
            except QuantityError as err:
                unset = f"; unresolved in the file: {', '.join(unresolved[:3])}" if unresolved else ""
                raise ProjtuneError(f"{source}: line {line_of(flag)}: {err} (a positive integer){unset}") from err


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _catalog_match(shape: dict[str, Any]) -> str | None:
    """The catalog model with this shape: layers, hidden size, heads and experts must match; KV heads and FFN
    width break ties (llama2-7b and llama3-8b share the first four)."""
    from projection.quantities import QuantityError, read_count

    want = [shape.get(k) for k in ("num_layers", "hidden_size", "num_attention_heads")]
    if None in want:
        return None
    try:
        shape = {k: read_count(v, k, low=0) if k in _SHAPE_KEYS and v is not None else v for k, v in shape.items()}
    except QuantityError as err:
        raise ProjtuneError(f"model shape: {err}") from err
    want = [shape.get(k) for k in ("num_layers", "hidden_size", "num_attention_heads")]
    matches: list[tuple[int, str]] = []
    for model_id in list_model_ids():
        m = load_model(model_id)
        if [m.num_layers, m.hidden_size, m.num_attention_heads] != [int(w) for w in want] or \
                m.num_experts != int(shape.get("num_experts") or 0):
            continue
        score = sum(1 for key, have in (("num_kv_heads", m.num_kv_heads), ("ffn_hidden_size", m.ffn_hidden_size))
                    if shape.get(key) is not None and int(shape[key]) == have)
        hint = _norm(str(shape.get("tokenizer_model") or ""))
        score += 2 * bool(hint and _norm(model_id) in hint)  # e.g. meta-llama/Meta-Llama-3-70B -> llama3-70b
        matches.append((score, model_id))
    if not matches:
        return None
    top = max(score for score, _ in matches)
    tied = [model_id for score, model_id in matches if score == top]
    shapes = {repr(load_model(t).model_dump(exclude={"name", "source", "published_params"})) for t in tied}
    if len(shapes) > 1:  # same-shape models that project differently (e.g. the vocabulary): the user decides
        raise ProjtuneError(f"the model shape matches {', '.join(tied)} (the arguments carry no vocabulary); "
                            "pass --model")
    return tied[0]


def _named_model(kind: str, text: str, source: str = "") -> str | None:
    """The catalog model a Primus ``modules.pre_trainer.model`` file or a torchtitan ``[model]`` names (a
    Megatron-Bridge override file: its name, e.g. llama3_8b_pretrain_override_example.yaml)."""
    from tools.launch_shell import expand_primus

    hints: list[str] = []
    try:
        if kind == "primus-yaml":
            data = yaml.safe_load(expand_primus(text)[0])
            hints.append(str(data["modules"]["pre_trainer"].get("model") or "").removesuffix(".yaml"))
        elif kind == "torchtitan-toml":
            section = tomllib.loads(text).get("model", {})
            hints += [str(section.get("hf_assets_path", "")).rstrip("/").rsplit("/", 1)[-1],
                      f"{section.get('name', '')}{section.get('flavor', '')}"]
        elif kind.startswith("bridge-"):
            hints.append(Path(source).name.split("_pretrain")[0].split("_finetune")[0])
        elif kind.startswith("maxtext-"):
            from tools.framework_rules import MAXTEXT_MODELS
            from tools.maxtext_import import launch_keys

            named = str(launch_keys(text, Path(source).parent if _is_file(source) else None)[0].get("model_name", ""))
            hints += [m for m, name in MAXTEXT_MODELS.items() if name == named] or [named]
    except (yaml.YAMLError, tomllib.TOMLDecodeError, KeyError, TypeError, AttributeError):
        return None
    for hint in (_norm(h) for h in hints if h):
        found = sorted((m for m in list_model_ids() if _norm(m) == hint or _norm(m) in hint), key=len, reverse=True)
        if found:
            return found[0]
    return None
_SHAPE_KEYS = ("num_layers", "hidden_size", "num_attention_heads", "num_experts", "num_kv_heads", "ffn_hidden_size")


def _megatron_shape(args: dict[str, Any]) -> dict[str, Any]:
    shape = dict(args)
    shape["num_kv_heads"] = args.get("num_query_groups") if args.get("group_query_attention") else \
        args.get("num_attention_heads")
    return shape


def _job(header: dict[str, str], model: str | None, gpu: str | None, num_gpus: int | None,
         guessed_model: str | None, source: str) -> tuple[str, str, int]:
    model = model or header.get("model") or guessed_model
    gpu = gpu or header.get("gpu")
    count = num_gpus or (int(header["gpus"]) if "gpus" in header else None)
    missing = [name for name, value in (("--model", model), ("--gpu", gpu), ("--gpus", count)) if not value]
    if missing:
        raise ProjtuneError(f"{source}: the file does not say the {', '.join(missing)}; pass "
                            f"{' '.join(m + ' ...' for m in missing)}")
    return str(model), str(gpu), int(count)  # type: ignore[arg-type]


def _config(keys: dict[str, Any], source: str, framework: str) -> TrainingConfig:
    """The layout a launch file or log sets, run on ``framework`` (its record prices it)."""
    from projection.framework import resolve_framework

    values = {k: v for k, v in keys.items() if k in TrainingConfig.model_fields and k != "framework"}
    values["framework"] = resolve_framework(framework).name
    for need, what in (("gbs", "global batch size"), ("seq_len", "sequence length")):
        if need not in values:
            raise ProjtuneError(f"{source}: no {what} ({need}) in the config; add it to the file")
    return TrainingConfig(**values)


def projected(model: ModelSpec, cluster: Cluster, config: TrainingConfig, profile: Any = None) -> Projected:
    """Project one layout (memory terms of its fullest stage)."""
    from projection.engine import project
    from projection.memory import GIB
    from projection.summary import config_dict, stage_memory_dict
    from tools.exports.common import layout_line

    p = project(model, cluster, config, profile=profile)
    stage = max(p.memory.stages, key=lambda s: s.total_bytes)
    memory = {k: float(v) for k, v in stage_memory_dict(stage).items()
              if k.endswith("_gib") and k != "total_gib" and v}
    cfg = config_dict(p)
    return Projected(layout=layout_line(cfg), config=cfg, tokens_per_sec_per_gpu=p.tokens_per_s_per_gpu, mfu=p.mfu,
                     iteration_time_s=p.iteration_time_s, peak_memory_gib=p.memory.peak_bytes / GIB,
                     headroom_fraction=p.memory.headroom_fraction, verdict=p.memory.verdict,
                     bottleneck=p.breakdown.bottleneck, time_s=p.breakdown.as_dict(), memory_gib=memory)


def _options_of(kind: str, text: str) -> dict[str, Any]:
    """The framework options the given text sets (flags for Megatron, dests for Primus, section.key for torchtitan)."""
    from tools.exports.checks import titan_options_from_text
    from tools.exports.megatron import flag_of
    from tools.launch_import import megatron_args

    if kind == "megatron-args":
        return {flag_of(k, v): v for k, v in megatron_args(text).items()}
    if kind == "primus-yaml":
        from tools.launch_import import primus_overrides

        return primus_overrides(text)
    if kind == "torchtitan-toml":
        return titan_options_from_text(text)
    if kind.startswith("bridge-"):
        from tools.exports.megatron_bridge import read_overrides

        return read_overrides(text)
    if kind.startswith("maxtext-"):
        from tools.maxtext_import import launch_keys

        return launch_keys(text)[0]
    return {}


def flag_changes(framework: str, yours: dict[str, Any], best: dict[str, Any], layout_keys: set[str]) -> list[str]:
    """What to change, in the framework's own option names: 'FLAG old -> new', 'add FLAG [value]', 'remove FLAG'.

    A Megatron bare flag is stored as True (or False for --no-*/--disable-* flags): present either way.
    """
    def bare(key: str, value: Any) -> bool:
        return framework == "megatron" and isinstance(value, bool)

    changes = []
    for key, value in best.items():
        if key not in layout_keys or yours.get(key) == value:
            continue
        if key not in yours:
            changes.append(f"add {key}" if bare(key, value) else f"add {key} {value}")
        else:
            changes.append(f"{key} {yours[key]} -> {value}")
    for key, value in yours.items():
        if key in layout_keys and key not in best and value is not None:
            changes.append(f"remove {key}" if bare(key, value) else f"remove {key} {value}")
    return changes


def diagnose(source: str, *, model: str | None = None, gpu: str | None = None, num_gpus: int | None = None,
             gpus_per_node: int = 8, search: bool = True, log_reader: Callable[[Path], Any] | None = None
             ) -> Diagnosis:
    """Diagnose one config file (or Megatron argument string) and compare it with the best layout.

    ``log_reader`` reads a training log (``evals.log_import.parse_log``; passed in by the CLI, since
    tools sit below evals in the layering of tests/test_architecture.py).

    Raises:
        ProjtuneError: unreadable or malformed input (one line naming the line), an unknown model/GPU, or an
            illegal layout.
    """
    from projection.errors import IllegalLayoutError
    from projection.job import resolve_job
    from tools.framework_rules import framework_violations
    from tools.launch_defaults import fill_defaults
    from tools.launch_import import import_with_notes, megatron_args

    kind, framework, text = read_source(source)
    name = clip(Path(source).name, 60) if kind != "megatron-args" or _is_file(source) else clip(source, 57)
    header = (m.groupdict() if (m := _HEADER.search(text)) else {})
    measured: dict[str, float] = {}
    notes: list[str] = []
    guessed = None
    if kind == "training-log":
        if log_reader is None:
            raise ProjtuneError(f"{name}: a training log needs a log reader (projtune diagnose passes "
                                "evals.log_import.parse_log)")
        log = log_reader(Path(source))
        framework, keys, measured = log.framework, dict(log.config), dict(log.measured)
        gpu, num_gpus = gpu or log.gpu, num_gpus or log.num_gpus
        if model is None and isinstance(log.model, str):
            model = log.model
        if model is None and log.model is not None:
            guessed = _catalog_match({"num_layers": log.model.get("num_hidden_layers"),
                                      "hidden_size": log.model.get("hidden_size"),
                                      "num_attention_heads": log.model.get("num_attention_heads"),
                                      "num_experts": log.model.get("num_local_experts"),
                                      "num_kv_heads": log.model.get("num_key_value_heads"),
                                      "ffn_hidden_size": log.model.get("intermediate_size")})
    else:
        if kind == "megatron-args":
            check_megatron_text(text, name)
            args = megatron_args(text)   # parsed (and its values checked) even when the model is given
            if model is None and "model" not in header:   # the shape names the model only when nothing else does
                guessed = _catalog_match(_megatron_shape(args))
        if kind == "torchtitan-toml":
            try:
                tomllib.loads(text)
            except tomllib.TOMLDecodeError as err:
                raise ProjtuneError(f"{name}: cannot parse TOML: {err}") from err
        if model is None and not header:
            guessed = guessed or _named_model(kind, text, source)
        model_id, _, count = _job(header, model, gpu, num_gpus, guessed, name)
        keys, notes = import_with_notes(text, framework, num_layers=load_model(model_id).num_layers, num_gpus=count,
                                        gpus_per_node=gpus_per_node, model_name=load_model(model_id).name,
                                        source_dir=Path(source).parent if _is_file(source) else None)
        if model is None and not header.get("model") and guessed:
            notes.insert(0, f"model {guessed}: named by the file")
    model_id, gpu_id, count = _job(header, model, gpu, num_gpus, guessed, name)
    job = resolve_job(model_id, gpu_id, count, gpus_per_node=gpus_per_node)
    spec, hardware, cluster = job.model, job.hardware, job.cluster
    if kind != "training-log":
        notes += fill_defaults(framework, keys, text, count, model=spec.name)
    keys.pop("dp", None)
    config = _config(keys, name, framework)
    reasons = layout_violations(spec, hardware, cluster, config)
    if reasons:
        raise IllegalLayoutError(reasons)
    yours = projected(spec, cluster, config)
    problems = framework_violations(framework, spec, cluster, config)
    result = Diagnosis(source=name, kind=kind, framework=framework, model=spec.name, gpu=hardware.id,
                       num_gpus=count, yours=yours, framework_problems=problems, measured=measured, notes=notes, summary="",
                       switch_gains=switch_gains(spec, cluster, config, framework, yours.tokens_per_sec_per_gpu))
    if search:
        _compare(result, spec, cluster, config, kind, text)
    result.summary = summary_line(result)
    return result


def _compare(result: Diagnosis, spec: ModelSpec, cluster: Cluster, config: TrainingConfig, kind: str,
             text: str) -> None:
    from tools.exports import export_launch_config
    from tools.search import SearchRequest, run_search

    from tools.constraints import Constraints

    # Same job at the same numerics: the comparison keeps the given precision recipe and attention kernel (a
    # change of either is the user's call, not a layout change).
    kept = [f"precision={config.precision}"] + ([f"attention_backend={config.attention_backend}"]
                                                if config.attention_backend is not None else [])
    request = SearchRequest(model=spec.name, gpu=cluster.gpu, num_gpus=cluster.num_gpus,
                            gpus_per_node=cluster.gpus_per_node, gbs=config.gbs, seq_len=config.seq_len, top_k=1,
                            framework=result.framework, constraints=Constraints.parse(kept))
    found = run_search(request, workers=1)
    result.searched = found.enumerated
    if not found.ranked:
        return
    best_config = TrainingConfig(**{k: v for k, v in found.ranked[0].config.items() if v is not None})
    best = projected(spec, cluster, best_config)
    # a layout that does not fit is compared with the best that does, even when that one is slower
    if best.tokens_per_sec_per_gpu <= result.yours.tokens_per_sec_per_gpu * (1 + 1e-9) and \
            (result.yours.verdict != "out of memory" or best.verdict == "out of memory"):
        return
    result.best = best
    result.gain = best.tokens_per_sec_per_gpu / result.yours.tokens_per_sec_per_gpu - 1
    from tools.exports.common import Job
    from tools.exports.megatron import model_dests

    best_options = export_launch_config(spec, cluster, best_config, result.framework).options
    try:  # apples to apples: the same exporter writes both layouts
        yours = export_launch_config(spec, cluster, config, result.framework).options
    except ProjtuneError:  # the framework's rules refuse the given layout: compare with what the file says
        yours = _options_of(kind, text)
    arch = set(model_dests(Job(spec, cluster, best_config))) - {"seq_length"}
    layout_keys = {k for k in set(best_options) | set(yours)
                   if k.removeprefix("--").replace("-", "_") not in arch and k not in arch}
    result.change_flags = flag_changes(result.framework, yours, best_options, layout_keys)


def switch_gains(model: ModelSpec, cluster: Cluster, config: TrainingConfig, framework: str,
                 tokens_per_sec_per_gpu: float) -> list[str]:
    """What each switch the framework offers would gain on the same layout (tools/switch_rules.py): every
    communication overlapped, CUDA graphs on where allowed; only changes worth at least 0.1%."""
    from projection.framework import record_of_launch
    from projection.switches import resolve_switches
    from tools.switch_rules import cuda_graphs_allowed

    job = job_on(model, cluster, config)
    switches = resolve_switches(config, job.framework)
    trials: list[tuple[str, dict[str, Any]]] = []
    missing = [c for c in COMM_OVERLAPS if not switches.overlapped(c)]
    if missing and record_of_launch(framework).megatron_core:
        trials.append((f"overlapping {', '.join(missing)}", {"comm_overlap": COMM_OVERLAPS}))
    if not switches.cuda_graphs and cuda_graphs_allowed(framework, model, config):
        trials.append(("with CUDA graphs (--cuda-graph-impl local)", {"cuda_graphs": True}))
    out = []
    for what, update in trials:
        other = projected(model, cluster, config.model_copy(update=update))
        gain = other.tokens_per_sec_per_gpu / tokens_per_sec_per_gpu - 1
        if gain >= 1e-3:
            out.append(f"{what}: {gain:+.1%}")
    return out


def summary_line(d: Diagnosis) -> str:
    """'your layout: X tokens/s/GPU, fits with Y% headroom, bottleneck B; best found: L, +Z%, change these flags: F'."""
    y = d.yours
    fit = (f"fits with {y.headroom_fraction:.0%} headroom" if y.verdict == "fits"
           else f"{y.verdict} ({y.headroom_fraction:.0%} headroom)")
    share = y.time_s.get(f"{y.bottleneck}_s", 0.0) / max(sum(y.time_s.values()), 1e-12)
    head = (f"your layout: {y.tokens_per_sec_per_gpu:,.0f} tokens/s/GPU, {fit}, bottleneck "
            f"{y.bottleneck.replace('_', ' ')} ({share:.0%} of the step)")
    if d.framework_problems:
        head += f"; {d.framework} cannot launch it as written: {d.framework_problems[0]}"
    if d.switch_gains:
        head += "; switches: " + "; ".join(d.switch_gains)
    if d.best is None:
        return head + f"; best found: this layout is the fastest {d.framework} can launch of {d.searched} searched"
    flags = ", ".join(d.change_flags) if d.change_flags else "(none: same options)"
    return (head + f"; best found: {d.best.layout}, {d.best.tokens_per_sec_per_gpu:,.0f} tokens/s/GPU, "
            f"{d.gain:+.0%}{' (yours does not fit)' if d.gain < 0 else ''}, change these flags: {flags}")
