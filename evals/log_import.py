"""Turn Megatron-LM / Primus and torchtitan training logs into a sweep file.

One log file is one run; all files form one sweep (same model, GPU type and count).
Metrics are medians over the logged iterations after warm-up; what a log does not
show goes to the run's `unknown:` list instead of being guessed. Units: Megatron
prints memory in MB = 2^20 bytes and iteration time in ms; the sweep format wants GiB
and seconds. Entry points: `import_logs` and `render_yaml`.
"""

from __future__ import annotations

import ast
import math
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evals.sweep_models import GPU_IDS, SweepFile
from projection.errors import unknown_name_message
from projection.errors import clip
from projection.safe_yaml import flow_depth
from projection.training_config import MAX_GPUS
from projection.vocabulary import RECOMPUTES

_MIB_PER_GIB = 1024
_WARMUP_LINES = 2           # skip at least this many logged iterations ...
_WARMUP_FRACTION = 0.10     # ... or this fraction of them, whichever is more
_EXPECTED_KEYS = ("tp", "pp", "cp", "mbs", "gbs", "seq_len", "precision", "recompute", "zero")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_MEGATRON_ARG = re.compile(r"^\s*(\w+) \.{3,} (.*?)\s*$")
# Captured numbers are ASCII decimals ("1.2.3", Unicode digits and 5,000-digit runs do not match).
_DEC = r"([0-9]{1,12}(?:\.[0-9]{1,9})?)(?![0-9.])"
_MEGATRON_ITER = re.compile(r"iteration\s+[0-9]{1,12}/\s*[0-9]{1,12} \|.*elapsed time per iteration \(ms\): " + _DEC)
_MEGATRON_TFLOPS = re.compile(r"throughput per GPU \(TFLOP/s/GPU\): " + _DEC)
_MEGATRON_TOKENS = re.compile(r"tokens per GPU \(tokens/s/GPU\): " + _DEC)
_MEGATRON_GBS = re.compile(r"global batch size:\s+([0-9]{1,9})(?![0-9])")
_MEGATRON_MEM = re.compile(r"memory \(MB\) \|.*?max allocated: " + _DEC)
_TITAN_STEP = re.compile(r"step:\s*[0-9]{1,12}\s.*?(?:tps|wps):\s*([0-9]{1,3}(?:,[0-9]{3}){1,4}|[0-9]{1,15})"
                         r"(?![0-9.,])")
_TITAN_FIELD = {"tflops": re.compile(r"tflops:\s*" + _DEC), "mfu": re.compile(r"mfu:\s*" + _DEC + "%"),
                "memory": re.compile(r"memory:\s*" + _DEC + "GiB")}
_TITAN_MESH = re.compile(r"Building [0-9]{1,2}-D device mesh with \[([^\]]{0,400})\], \[([^\]]{0,400})\]")
MAX_LOG_BYTES = 64 * 1024 * 1024
"""Largest log read, bytes (a long pretraining log is tens of MB); bigger files are refused before reading."""
MAX_LITERAL_CHARS = 100_000
"""Longest Python literal (a torchtitan args dict, a Megatron argument value) given to ``ast.literal_eval``."""
_TITAN_ARGS = re.compile(r"Running with args: (\{.*\})\s*$", re.MULTILINE)
_TITAN_MODEL = re.compile(r"with \w*ModelArgs\((.*)\)")
_TITAN_SCHEDULES = {"1F1B": "1f1b", "Interleaved1F1B": "interleaved", "GPipe": "gpipe",
                    "InterleavedZeroBubble": "zero-bubble", "ZBVZeroBubble": "zbv"}
# Device names as printed by torch.cuda.get_device_name(), first match wins.
_GPU_NAMES = (("GB300", "gb300"), ("GB200", "gb200"), ("B300", "b300"), ("B200", "b200"),
              ("H200", "h200"), ("H800", "h800"), ("H100 80GB", "h100-sxm"),
              ("A100-SXM4-80GB", "a100-80gb"), ("A100 80GB", "a100-80gb"), ("A100-SXM4-40GB", "a100-40gb"),
              ("MI355X", "mi355x"), ("MI325X", "mi325x"), ("MI300X", "mi300x"))


class LogImportError(ValueError):
    """A log that cannot be turned into a run; the message names the file and what is missing.

    ``flag``: the `projtune sweeps import` option that supplies what the logs do not show (``--gpus``), or
    None; the message then ends with "; pass <flag>" (anchors, read without that option, say how instead).
    """

    def __init__(self, message: str, flag: str | None = None) -> None:
        self.what, self.flag = message, flag
        super().__init__(message + (f"; pass {flag}" if flag else ""))


@dataclass(slots=True)
class _ParsedLog:
    """What one log shows: config keys, metrics, model fields, cluster facts."""

    path: Path
    framework: str
    config: dict[str, Any] = field(default_factory=dict)
    measured: dict[str, float] = field(default_factory=dict)
    model: dict[str, Any] | None = None
    num_gpus: int | None = None
    gpu: str | None = None
    note: str = ""


def import_logs(
    paths: Sequence[Path | str], *, model: str | None = None, gpu: str | None = None,
    num_gpus: int | None = None, sweep_name: str | None = None,
) -> SweepFile:
    """Build one sweep from training logs, one run per file.

    Args:
        paths: Megatron-LM / Primus or torchtitan log files.
        model: Catalog id; overrides the architecture read from the logs.
        gpu: Hardware id (one of GPU_IDS); overrides the device name in the logs, and is
            needed when they name none (Megatron logs do not).
        num_gpus: GPU count, used when the logs show no world size or device mesh.
        sweep_name: Name of the sweep; derived from model, GPU and count if None.

    Raises:
        LogImportError: A log has no iteration lines, or model/GPU/count are unknown or
            differ between logs.
    """
    if not paths:
        raise LogImportError("no log files given")
    logs = [_parse(Path(p)) for p in paths]
    gpu_id = _one("gpu", gpu, logs, lambda log: log.gpu) or None
    if gpu_id is None:
        raise LogImportError("GPU type not found in the logs", f"--gpu (one of {', '.join(GPU_IDS)})")
    if gpu_id not in GPU_IDS:
        raise LogImportError(unknown_name_message("gpu", gpu_id, GPU_IDS))
    count = _one("num_gpus", num_gpus, logs, lambda log: log.num_gpus)
    if count is None:
        raise LogImportError("GPU count not found in the logs (world_size / device mesh)", "--gpus")
    model_spec: str | dict[str, Any] | None = model or _one("model", None, logs, lambda log: log.model)
    if model_spec is None:
        raise LogImportError(f"model architecture not found in {logs[0].path}", "--model (catalog id)")
    fixed = {k: v for k, v in logs[0].config.items() if all(log.config.get(k) == v for log in logs)}
    runs = [_run(log, fixed) for log in logs]
    label = model_spec if isinstance(model_spec, str) else model_spec["model_type"]
    return SweepFile.model_validate({
        "source": "training logs: " + ", ".join(log.path.name for log in logs),
        "sweeps": [{
            "name": sweep_name or _slug(f"import-{label}-{gpu_id}-{count}g"),
            "notes": "imported by evals.log_import",
            "model": model_spec,
            "cluster": {"gpu": gpu_id, "num_gpus": count},
            "fixed": fixed,
            "runs": runs,
        }],
    })


def render_yaml(sweepfile: SweepFile) -> str:
    """Return the sweep file as YAML in the layout of the development data."""
    data = sweepfile.model_dump(exclude_unset=True, exclude_none=True)
    for sweep in data["sweeps"]:
        sweep["fixed"] = _Flow(sweep.get("fixed", {}))
        for run in sweep["runs"]:
            run["config"] = _Flow(run.get("config", {}))
            run["measured"] = _Flow(run["measured"])
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)


class _Flow(dict[str, Any]):
    """A mapping written in flow style ({a: 1, b: 2})."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(
    _Flow, lambda dumper, data: dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=True)
)


def _one(what: str, given: Any, logs: list[_ParsedLog], get: Callable[[_ParsedLog], Any]) -> Any:
    """Return the value all logs agree on (or `given` where they show none)."""
    seen = {str(get(log)): get(log) for log in logs if get(log) is not None}
    if len(seen) > 1:
        raise LogImportError(f"logs differ in {what}: one sweep needs one {what} ({', '.join(seen)})")
    found = next(iter(seen.values()), None)
    if given is not None and found is not None and what != "gpu" and given != found:
        raise LogImportError(f"{what}={given} given, but the logs show {found}")
    return given if given is not None else found


def _run(log: _ParsedLog, fixed: dict[str, Any]) -> dict[str, Any]:
    expected = (*_EXPECTED_KEYS, "ep") if log.model and log.model.get("num_local_experts") else _EXPECTED_KEYS
    unknown = [k for k in expected if k not in log.config]
    run: dict[str, Any] = {
        "config": {k: v for k, v in log.config.items() if k not in fixed},
        "measured": log.measured,
        "notes": f"imported from {log.path.name}: {log.note}",
    }
    if unknown:
        run["unknown"] = unknown
    return run


def _parse(path: Path) -> _ParsedLog:
    try:
        size = path.stat().st_size
        if size > MAX_LOG_BYTES:
            raise LogImportError(f"{clip(path.name)}: {size} bytes; logs up to {MAX_LOG_BYTES} bytes are read")
        text = _ANSI.sub("", path.read_bytes().decode("utf-8", errors="replace"))
    except IsADirectoryError as err:
        raise LogImportError(f"{clip(path.name)}: is a folder; give its log files (e.g. {clip(path.name)}/*.log)") \
            from err
    except OSError as err:
        raise LogImportError(f"{clip(path.name)}: cannot read: {clip(err.strerror or type(err).__name__)}") from err
    # A log cut off while being written (a killed job, a copy in progress) ends inside a line: 'tps: 7' of
    # 'tps: 7,123' would be read as 7 tokens/s.  Only lines that end are read.
    complete, _, cut = text.rpartition("\n")
    cut_off = bool(complete and cut.strip())
    if cut_off:
        text = complete + "\n"
    parse = (_parse_megatron if _MEGATRON_ITER.search(text) else
             _parse_torchtitan if _TITAN_STEP.search(text) else None)
    if parse is not None:
        log = _checked(path, parse, text)
        if cut_off:
            log.note += "; its last line, cut off without a newline, was not read"
        return log
    raise LogImportError(
        f"{path}: no iteration lines found (expected Megatron 'iteration N/M | ... elapsed time "
        "per iteration (ms): ...' or torchtitan 'step: N ... tps: ...' lines)"
    )


def _checked(path: Path, parse: Callable[[Path, str], _ParsedLog], text: str) -> _ParsedLog:
    """Parse, then check every config value and count the log gave through the one reader per quantity."""
    from projection.quantities import QuantityError, read_count

    try:
        log = parse(path, text)
        for key, value in list(log.config.items()):
            if key in _COUNT_KEYS:
                log.config[key] = read_count(value, key, low=1)
        if log.num_gpus is not None:
            log.num_gpus = read_count(log.num_gpus, "world size", high=MAX_GPUS)
        if log.model is not None:
            log.model = {k: read_count(v, k, low=0) if k in _MODEL_COUNTS else v for k, v in log.model.items()}
    except QuantityError as err:
        raise LogImportError(f"{clip(path.name)}: {err}") from err
    if not all(math.isfinite(v) and v >= 0 for v in log.measured.values()):
        raise LogImportError(f"{clip(path.name)}: a logged metric is not a finite number")
    return log


_COUNT_KEYS = ("tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "gbs", "seq_len", "fsdp_size", "recompute_num_layers")
_MODEL_COUNTS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                 "intermediate_size", "vocab_size", "num_local_experts", "num_experts_per_tok")


def _median_after_warmup(values: list[float]) -> tuple[float, str]:
    """Return the median after the warm-up lines (6 significant digits) and a note on it."""
    skip = max(_WARMUP_LINES, math.ceil(_WARMUP_FRACTION * len(values)))
    if not values[skip:]:    # said plainly: a warm-up step is slower than a steady one
        return (float(f"{values[-1]:.6g}"), f"only {len(values)} logged iteration(s), all within the {skip} skipped "
                                            "as warm-up elsewhere: the last one is read (expect it slower than a "
                                            "steady step)")
    median = float(f"{statistics.median(values[skip:]):.6g}")
    return median, f"median of {len(values) - skip} of {len(values)} logged iterations"


def _parse_megatron(path: Path, text: str) -> _ParsedLog:
    framework = "primus" if "primus" in text.lower() else "megatron"
    log = _ParsedLog(path=path, framework=framework)
    args = {m[1]: _value(m[2]) for line in text.splitlines()
            if (m := _MEGATRON_ARG.match(line.rsplit(" : ", 1)[-1][:MAX_LITERAL_CHARS]))}
    iterations = [m for line in text.splitlines() if (m := _MEGATRON_ITER.search(line))]
    lines = [m.string for m in iterations]
    median_ms, log.note = _median_after_warmup([float(m[1]) for m in iterations])
    log.measured["iteration_time_s"] = median_ms / 1000
    for key, pattern in (("tokens_per_sec_per_gpu", _MEGATRON_TOKENS), ("model_tflops_per_gpu", _MEGATRON_TFLOPS)):
        values = [float(m[1]) for line in lines if (m := pattern.search(line))]
        if values:
            log.measured[key] = _median_after_warmup(values)[0]
    memory_mib = [float(m[1]) for m in _MEGATRON_MEM.finditer(text)]
    if memory_mib:
        log.measured["peak_memory_gib"] = round(max(memory_mib) / _MIB_PER_GIB, 3)
    log.note += ("; TFLOP/s as printed by Megatron (its own FLOP formula)" if "model_tflops_per_gpu"
                 in log.measured else "") + ("; peak memory = max 'max allocated' of the memory reports"
                                             if memory_mib else "")
    log.config = {"framework": framework, **_megatron_config(args)}
    if "gbs" not in log.config and (m := _MEGATRON_GBS.search(lines[-1])):
        log.config["gbs"] = int(m[1])
    log.num_gpus = args.get("world_size")
    log.model = _megatron_model(args)
    return log


def _value(raw: str) -> Any:
    """A Python literal as printed by the framework (bounded: long or deeply nested text stays text)."""
    if len(raw) > MAX_LITERAL_CHARS or flow_depth(raw, "([{", ")]}") > 32:
        return raw
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return raw


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _megatron_config(args: dict[str, Any]) -> dict[str, Any]:
    names = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
             "cp": "context_parallel_size", "mbs": "micro_batch_size", "gbs": "global_batch_size",
             "seq_len": "seq_length", "sequence_parallel": "sequence_parallel"}
    config = {key: args[name] for key, name in names.items() if args.get(name) is not None}
    if args.get("virtual_pipeline_model_parallel_size"):
        config["vpp"] = args["virtual_pipeline_model_parallel_size"]
    elif "virtual_pipeline_model_parallel_size" in args and config.get("pp"):
        config["vpp"] = 1
    recipe = {"blockwise": "fp8-blockwise", "mxfp8": "mxfp8"}
    if args.get("fp4"):
        config["precision"] = "nvfp4"
    elif args.get("fp8"):
        config["precision"] = recipe.get(str(args.get("fp8_recipe")), "fp8")
    elif args.get("bf16") or args.get("fp16"):
        config["precision"] = "bf16" if args.get("bf16") else "fp16"
    if "recompute_granularity" in args:
        config["recompute"] = args["recompute_granularity"] or "none"
        if config["recompute"] == "full" and args.get("recompute_num_layers"):
            config["recompute_num_layers"] = args["recompute_num_layers"]
        if config["recompute"] == "selective" and isinstance(args.get("recompute_modules"), list):
            config["recompute_modules"] = args["recompute_modules"]
    if "use_distributed_optimizer" in args:
        sharded = args.get("use_torch_fsdp2") or args.get("data_parallel_sharding_strategy") == "optim_grads_params"
        config["zero"] = 3 if sharded else int(bool(args["use_distributed_optimizer"]))
    if args.get("num_experts"):
        config["ep"] = args.get("expert_model_parallel_size") or 1
        config["etp"] = args.get("expert_tensor_parallel_size") or config.get("tp", 1)
        dispatcher = str(args.get("moe_token_dispatcher_type"))
        config["moe_dispatcher"] = "deepep" if args.get("moe_enable_deepep") else (
            "allgather" if dispatcher == "allgather" else "alltoall")
        config["moe_routing"] = ("balanced" if args.get("moe_router_force_load_balancing") else
                                 "token-drop" if args.get("moe_expert_capacity_factor") else "dropless")
    return config


def _megatron_model(args: dict[str, Any]) -> dict[str, Any] | None:
    if not all(args.get(k) for k in ("num_layers", "hidden_size", "num_attention_heads")):
        return None
    moe = bool(args.get("num_experts"))
    model: dict[str, Any] = {
        "model_type": "mixtral" if moe else ("gpt2" if args.get("swiglu") is False else "llama"),
        "hidden_size": args["hidden_size"], "num_hidden_layers": args["num_layers"],
        "num_attention_heads": args["num_attention_heads"],
    }
    if args.get("group_query_attention") and args.get("num_query_groups"):
        model["num_key_value_heads"] = args["num_query_groups"]
    if args.get("kv_channels") and args["kv_channels"] != args["hidden_size"] // args["num_attention_heads"]:
        model["head_dim"] = args["kv_channels"]
    ffn = (args.get("moe_ffn_hidden_size") if moe else None) or args.get("ffn_hidden_size")
    if ffn:
        model["intermediate_size"] = ffn
    if args.get("padded_vocab_size"):
        model["vocab_size"] = args["padded_vocab_size"]  # padded to a multiple for TP
    if "untie_embeddings_and_output_weights" in args:
        model["tie_word_embeddings"] = not args["untie_embeddings_and_output_weights"]
    if moe:
        model["num_local_experts"] = args["num_experts"]
        model["num_experts_per_tok"] = args.get("moe_router_topk") or 2
    return model


def _parse_torchtitan(path: Path, text: str) -> _ParsedLog:
    log = _ParsedLog(path=path, framework="torchtitan")
    steps = [m for line in text.splitlines() if (m := _TITAN_STEP.search(line))]
    lines = [m.string for m in steps]
    tps = [float(m[1].replace(",", "")) for m in steps]
    log.measured["tokens_per_sec_per_gpu"], log.note = _median_after_warmup(tps)
    for key, name in (("model_tflops_per_gpu", "tflops"), ("mfu", "mfu")):
        values = [float(m[1]) for line in lines if (m := _TITAN_FIELD[name].search(line))]
        if values:
            log.measured[key] = _median_after_warmup(values)[0] / (100 if key == "mfu" else 1)
    if "model_tflops_per_gpu" in log.measured:
        log.note += "; TFLOP/s as printed by torchtitan (its own 6*N + attention formula)"
    memory = [float(m[1]) for line in lines if (m := _TITAN_FIELD["memory"].search(line))]
    if memory:
        log.measured["peak_memory_gib"] = max(memory)
        log.note += "; peak memory = max of the logged (max reserved) memory"
    log.config = {"framework": "torchtitan", **_titan_config(text)}
    if (mesh := _mesh(text)) is not None:
        log.num_gpus = math.prod(mesh.values()) if math.prod(mesh.values()) <= MAX_GPUS else MAX_GPUS + 1
    device = next((gpu for name, gpu in _GPU_NAMES if f"NVIDIA {name}" in text or f"AMD Instinct {name}" in text
                   or f"CUDA capacity: {name}" in text), None)
    log.gpu = device
    log.model = _titan_model(text)
    return log


def _titan_config(text: str) -> dict[str, Any]:
    args_match = _TITAN_ARGS.search(text)
    args = _dict(_value(args_match[1]) if args_match else {})
    training, par = _dict(args.get("training")), _dict(args.get("parallelism"))
    mesh = _mesh(text) or {}
    config: dict[str, Any] = {}
    if mesh:
        config.update(tp=mesh.get("tp", 1), pp=mesh.get("pp", 1), cp=mesh.get("cp", 1))
        shard, replicate = mesh.get("dp_shard", 1), mesh.get("dp_replicate", 1)
        config["zero"] = 3 if shard > 1 else 0
        if shard > 1 and replicate > 1:
            config["fsdp_size"] = shard
        local = training.get("local_batch_size") or training.get("batch_size")
        if local:
            global_batch = training.get("global_batch_size") or -1
            if not isinstance(global_batch, int) or not isinstance(local, int):
                raise LogImportError(f"training batch sizes must be whole numbers, got {clip(local, 30)} and "
                                     f"{clip(global_batch, 30)}")
            config["gbs"] = global_batch if global_batch > 0 else local * shard * replicate
            config["mbs"] = par.get("pipeline_parallel_microbatch_size", 1) if config["pp"] > 1 else local
    if training.get("seq_len"):
        config["seq_len"] = training["seq_len"]
    converters = _dict(args.get("model")).get("converters", [])
    converters = [c for c in converters if isinstance(c, str)] if isinstance(converters, list) else []
    float8 = _dict(args.get("float8")) or _dict(_dict(_dict(args.get("quantize")).get("linear")).get("float8"))
    if "float8" in converters or "quantize.linear.float8" in converters:
        config["precision"] = "fp8-blockwise" if float8.get("recipe_name") == "rowwise" else "fp8"
    elif any("mx" in c for c in converters):
        config["precision"] = "mxfp8"
    elif training.get("mixed_precision_param") in ("bfloat16", "float16"):
        config["precision"] = "bf16" if training["mixed_precision_param"] == "bfloat16" else "fp16"
    mode = _dict(args.get("activation_checkpoint")).get("mode")
    if isinstance(mode, str) and mode in RECOMPUTES:   # torchtitan's AC modes that are also sweep-format names
        config["recompute"] = mode
    if config.get("pp", 1) > 1 and str(par.get("pipeline_parallel_schedule")) in _TITAN_SCHEDULES:
        config["pp_schedule"] = _TITAN_SCHEDULES[par["pipeline_parallel_schedule"]]
    return config


def _mesh(text: str) -> dict[str, int] | None:
    """torchtitan's device mesh {name: size}; a mesh whose names and sizes do not pair up is refused."""
    match = _TITAN_MESH.search(text)
    if match is None:
        return None
    names = [n.strip(" '\"") for n in match[1].split(",")]
    sizes = [x.strip() for x in match[2].split(",")]
    if len(names) != len(sizes) or not all(re.fullmatch(r"[0-9]{1,6}", x) for x in sizes):
        raise LogImportError(f"device mesh {clip(match[0], 60)}: names and sizes do not pair up (one whole size "
                             "per name)")
    return dict(zip(names, (int(x) for x in sizes), strict=True))


def _titan_model(text: str) -> dict[str, Any] | None:
    match = _TITAN_MODEL.search(text)
    if not match:
        return None
    fields = {m[1]: _value(m[2]) for m in re.finditer(r"(\w+)=([^,()]+)", match[1])}
    if not all(k in fields for k in ("dim", "n_layers", "n_heads", "vocab_size")):
        return None
    dim, multiple, factor = fields["dim"], fields.get("multiple_of", 256), fields.get("ffn_dim_multiplier")
    if factor in (None, "None"):
        factor = 1.0
    numbers = (dim, multiple, factor, fields["n_layers"], fields["n_heads"], fields["vocab_size"])
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < 2 ** 31 for v in numbers):
        raise LogImportError(f"ModelArgs fields must be positive finite numbers: {clip(match[1], 60)}")
    # Llama FFN size rule of torchtitan models/llama3 (FeedForward.__init__).
    ffn = int(factor * int(2 * 4 * dim / 3))
    return {"model_type": "llama", "hidden_size": dim, "num_hidden_layers": fields["n_layers"],
            "num_attention_heads": fields["n_heads"],
            "num_key_value_heads": fields.get("n_kv_heads") or fields["n_heads"],
            "intermediate_size": multiple * math.ceil(ffn / multiple), "vocab_size": fields["vocab_size"]}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def parse_log(path: Path | str) -> Any:
    """What one training log shows (framework, config keys, measured metrics, model fields, GPU, GPU count).

    Used by ``projtune diagnose`` to project the layout a log ran.  Raises LogImportError.
    """
    log = _parse(Path(path))
    if log.model is None and log.config.get("model"):
        log.model = log.config["model"]
    return log
