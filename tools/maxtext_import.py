"""Read a MaxText launch back into sweep-format keys: its YAML, its ``python3 -m MaxText.train CONFIG key=value ...``
command line, or both (the command's keys override the YAML it names), over MaxText's ``base.yml`` defaults.

The inverse of :mod:`tools.exports.maxtext` (round-trip tested), and the reader ``projtune diagnose`` uses for real
MaxText files.  Pinned to AI-Hypercomputer/maxtext tag ``maxtext-tutorial-v1.5.0`` (commit 998b3e34, 2025-12-30),
the last release with ``src/MaxText/configs/base.yml`` + ``types.py`` and the ``MaxText.train`` module the exporter
writes (later releases moved them to ``src/maxtext``).  What is read, and how:

- Merge order of ``pyconfig.initialize_pydantic``: ``base.yml`` <- the YAML (its ``base_config`` chain) <- the
  command's ``key=value`` words (OmegaConf ``from_cli``: the last of a repeated key wins) <- ``M_<KEY>``
  environment variables the script sets.  A key the launch leaves out takes the ``base.yml`` default
  (:data:`BASE_DEFAULTS`, line numbers of that file), and the reader says which it took.
- Mesh (``maxtext_utils.create_device_mesh``): the ``ici_*`` degrees multiply to the devices of a slice and the
  ``dcn_*`` degrees to the slices; one axis of each may be ``-1`` (``max_utils.fill_unspecified_mesh_axes``:
  the devices left).  On GPUs a slice is a node (the exporter's convention, and the A3 example
  ``configs/a3/llama_3.1_405b/128vm.sh``: ``ici_fsdp_parallelism=8`` on 8-GPU nodes, ``dcn_fsdp_parallelism=128``
  over 128 nodes); with one node the DCN degrees are ignored (``multi_slice_env`` false).
- Axes -> layout: ``tensor`` (and ``tensor_sequence``) = TP, ``context`` = CP, ``stage`` (``*_pipeline_parallelism``)
  = PP, ``expert`` = EP; data parallelism is ``data`` x ``fsdp`` x ``fsdp_transpose`` x ``expert`` (the expert axis
  also shards the batch, ``logical_axis_rules`` ``activation_batch``).  Weights are sharded (ZeRO-3) when
  ``fsdp``, ``fsdp_transpose`` or ``expert`` is above 1 (the ``embed`` rule shards non-expert weights over
  ``fsdp``, ``fsdp_transpose``, ``context`` and ``expert``); ``data`` replicates them.
- Batch (``types.py`` ``calculate_global_batch_sizes``): ``per_device_batch_size`` x devices sequences per forward
  pass, times ``gradient_accumulation_steps``; with PP the pass is split into ``num_pipeline_microbatches``
  (``-1``: the stage count).  Repeats of the circular pipeline (``num_pipeline_repeats``, ``-1``: decoder layers /
  (stages x ``num_layers_per_pipeline_stage``)) are the virtual stages per rank.
- ``remat_policy``: ``full`` recomputes the layer; ``minimal_with_context`` (``minimal_flash``) saves every matmul
  output and the attention context: no recompute; ``minimal`` recomputes only the attention context (projected as
  no recompute, said).  The ``save_*``, offload and ``custom`` policies recompute a subset of matmuls the
  projection has no input for: refused with the policies it reads.
- ``quantization``: ``""`` bf16; the per-tensor FP8 recipes (``fp8``, ``nanoo_fp8``, ``fp8_nanoo``, ``fp8_gpu``,
  ``fp8_full``, Transformer Engine ``te_fp8_*``) fp8; ``te_mxfp8`` mxfp8; ``te_nvfp4`` nvfp4 (``types.py``
  ``QuantizationType``).
- ``attention`` (:data:`ATTENTION`): ``dot_product`` materialises the scores (unfused); ``autoselected`` and
  ``flash`` train with the Pallas flash kernel on GPUs (Triton); ``cudnn_flash_te`` / ``cudnn_flash_jax`` are fused.
- MoE: ``capacity_factor`` > 0 drops tokens at that capacity, else dropless.
- ``XLA_FLAGS`` set by a launch script: ``--xla_gpu_enable_pipelined_all_gather`` and
  ``..._reduce_scatter`` true = the FSDP collectives overlap (the jax record's default leaves them exposed).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml

from projection.errors import ProjtuneError, clip

MAXTEXT_PIN = "AI-Hypercomputer/maxtext maxtext-tutorial-v1.5.0 (998b3e34)"
BASE_SOURCE = f"{MAXTEXT_PIN} src/MaxText/configs/base.yml"

# base.yml defaults of the keys a layout depends on (line of base.yml at the pin).
BASE_DEFAULTS: dict[str, Any] = {
    "quantization": "",                      # line 104
    "sparse_matmul": True,                   # line 178
    "capacity_factor": -1.0,                 # line 179
    "num_layers_per_pipeline_stage": 1,      # line 249
    "num_pipeline_repeats": -1,              # line 251
    "pipeline_parallel_layers": -1,          # line 252
    "num_pipeline_microbatches": -1,         # line 260
    "remat_policy": "full",                  # line 289
    "attention": "autoselected",             # line 313
    "hardware": "tpu",                       # line 382
    "dcn_data_parallelism": -1,              # lines 475-486
    "dcn_fsdp_parallelism": 1, "dcn_fsdp_transpose_parallelism": 1, "dcn_sequence_parallelism": 1,
    "dcn_context_parallelism": 1, "dcn_context_autoregressive_parallelism": 1, "dcn_tensor_parallelism": 1,
    "dcn_tensor_transpose_parallelism": 1, "dcn_tensor_sequence_parallelism": 1, "dcn_pipeline_parallelism": 1,
    "dcn_expert_parallelism": 1, "dcn_autoregressive_parallelism": 1,
    "ici_data_parallelism": 1,               # lines 487-498
    "ici_fsdp_parallelism": -1, "ici_fsdp_transpose_parallelism": 1, "ici_sequence_parallelism": 1,
    "ici_context_parallelism": 1, "ici_context_autoregressive_parallelism": 1, "ici_tensor_parallelism": 1,
    "ici_tensor_transpose_parallelism": 1, "ici_tensor_sequence_parallelism": 1, "ici_autoregressive_parallelism": 1,
    "ici_pipeline_parallelism": 1, "ici_expert_parallelism": 1,
    "per_device_batch_size": 12.0,           # line 535
    "max_target_length": 2048,               # line 650
    "gradient_accumulation_steps": 1,        # line 704
    "weight_dtype": "float32",               # line 143
    "pipeline_delay_activation_forwarding": False,
}
MESH_AXES = ("data", "pipeline", "fsdp", "fsdp_transpose", "sequence", "context", "context_autoregressive", "tensor",
             "tensor_transpose", "tensor_sequence", "expert", "autoregressive")
"""base.yml ``mesh_axes`` (``stage`` is spelt ``pipeline`` in the ``ici_``/``dcn_`` keys)."""
_NO_EQUIVALENT = ("sequence", "context_autoregressive", "tensor_transpose", "autoregressive")
_READ_AXES = "data, fsdp, fsdp_transpose, tensor, tensor_sequence, context, expert, pipeline"
_FP8 = ("fp8", "nanoo_fp8", "fp8_nanoo", "fp8_gpu", "fp8_full", "te_fp8_delayedscaling", "te_fp8_currentscaling")
QUANTIZATION = {"": "bf16", **dict.fromkeys(_FP8, "fp8"), "te_mxfp8": "mxfp8", "te_nvfp4": "nvfp4"}
REMAT_NONE = ("minimal_with_context", "minimal_flash", "minimal")
ATTENTION = {"cudnn_flash_te": "fused", "cudnn_flash_jax": "fused", "flash": "triton", "autoselected": "triton",
             "dot_product": "unfused"}
"""``attention`` -> kernel class (layers/attention_op.py: ``autoselected`` trains with the Pallas flash kernel on
GPUs, which lowers through Triton; the cuDNN / Transformer Engine kernels are fused; dot_product is unfused)."""
_COMMAND = re.compile(r"^(?:MaxText|maxtext)\.(?:train|trainers\.pre_train\.train)$")
_SCRIPT = re.compile(r"(?:MaxText|maxtext)/(?:train|trainers/pre_train/train)\.py$")
TEXT_HINT = re.compile(r"-m\s+[\"']?(?:MaxText|maxtext)\.|(?:MaxText|maxtext)/train\.py")
"""A launch script that runs MaxText's trainer (``python3 -m MaxText.train`` / ``MaxText/train.py``)."""
MAX_BASE_CONFIG_DEPTH = 5


class MaxTextError(ProjtuneError):
    """A MaxText launch that cannot be read into a layout."""


def is_maxtext_yaml(data: Any) -> bool:
    """Whether a YAML mapping is a MaxText config (its mesh, batch, model or ``base_config`` keys)."""
    return isinstance(data, dict) and any(
        str(k).startswith(("ici_", "dcn_")) or k in ("base_config", "per_device_batch_size", "max_target_length",
                                                        "remat_policy") for k in data)


def _yaml_mapping(text: str, what: str) -> dict[str, Any]:
    from projection.safe_yaml import YamlLimitError, load_bounded

    try:
        data = load_bounded(text)
    except (YamlLimitError, yaml.YAMLError) as err:
        raise MaxTextError(f"{what}: cannot parse MaxText YAML: {clip(str(err).splitlines()[0])}") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise MaxTextError(f"{what}: a MaxText config must be a mapping of keys, got {type(data).__name__}")
    return {str(k): v for k, v in data.items()}


def _yaml_chain(path: Path, notes: list[str], depth: int = 0) -> dict[str, Any]:
    """A YAML file over its ``base_config`` chain (base.yml itself is :data:`BASE_DEFAULTS`)."""
    keys = _yaml_mapping(path.read_text(errors="replace"), path.name)
    base = keys.pop("base_config", None)
    if base in (None, "base.yml") or depth >= MAX_BASE_CONFIG_DEPTH:
        return keys
    parent = path.parent / str(base)
    if not parent.is_file():
        notes.append(f"base_config {clip(base, 60)} of {path.name} is not beside it: its keys are not read "
                     f"({BASE_SOURCE} defaults taken for what the launch leaves out)")
        return keys
    return _yaml_chain(parent, notes, depth + 1) | keys


def _command(text: str) -> tuple[list[str], dict[str, str]] | None:
    """The words after ``-m MaxText.train`` (or ``MaxText/train.py``) of the last command that runs it, and the
    script's variables; None when no command runs MaxText."""
    from tools.launch_shell import ShellScriptError, run_script

    try:
        commands, state = run_script(text)
    except ShellScriptError as err:
        raise MaxTextError(f"cannot read the MaxText launch script: {err}") from err
    for command in reversed(commands):
        words = command.words
        for i, word in enumerate(words):
            if (word == "-m" and i + 1 < len(words) and _COMMAND.match(words[i + 1])) or _SCRIPT.search(word):
                start = i + 2 if word == "-m" else i + 1
                return words[start:], dict(state.scalars)
    return None


def launch_keys(text: str, source_dir: Path | None = None) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """The keys a MaxText YAML or launch command sets (merged in MaxText's order, without base.yml), the script's
    variables (for ``XLA_FLAGS``), and notes on what was read how."""
    notes: list[str] = []
    found = _command(text) if TEXT_HINT.search(text) else None
    if found is None:
        keys = _yaml_mapping(text, "MaxText config")
        base = keys.pop("base_config", None)
        if base not in (None, "base.yml"):
            parent = (source_dir / str(base)) if source_dir else None
            if parent is not None and parent.is_file():
                keys = _yaml_chain(parent, notes) | keys
            else:
                notes.append(f"base_config {clip(base, 60)} is not beside the file: its keys are not read "
                             f"({BASE_SOURCE} defaults taken for what the file leaves out)")
        return keys, {}, notes
    words, variables = found
    keys: dict[str, Any] = {}
    positional = [w for w in words if "=" not in w]
    config = positional[0] if positional and positional[0].endswith((".yml", ".yaml")) else None
    if config is not None and Path(config).name != "base.yml":
        beside = source_dir / Path(config).name if source_dir else None
        if beside is not None and beside.is_file():
            keys = _yaml_chain(beside, notes)
            notes.append(f"config {Path(config).name}: read from beside the script")
        else:
            notes.append(f"config {clip(config, 80)} named by the command is not beside the script: its keys are not "
                         f"read ({BASE_SOURCE} defaults taken for what the command leaves out)")
    stray = [w for w in positional if w != config]
    if stray:
        notes.append(f"not key=value, ignored: {', '.join(clip(w, 30) for w in stray[:5])}")
    for word in words:
        if "=" in word:
            key, _, value = word.partition("=")
            keys[key.strip()] = _scalar(value)
    for name, value in variables.items():   # pyconfig: M_<KEY> environment variables override the YAML
        key = name[2:].lower()
        if name.startswith("M_") and (key in BASE_DEFAULTS or key in keys):
            keys[key] = _scalar(value)
            notes.append(f"{name}={clip(value, 30)}: MaxText's environment override of {key}")
    keys.pop("base_config", None)
    return keys, variables, notes


def _scalar(value: str) -> Any:
    """A command-line value as OmegaConf reads it (YAML scalars: numbers, true/false, strings)."""
    try:
        parsed = yaml.safe_load(value) if len(value) < 200 else value
    except yaml.YAMLError:
        return value
    return "" if parsed is None else parsed


def _number(keys: dict[str, Any], key: str) -> float:
    value = keys[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise MaxTextError(f"MaxText {key}: {clip(value, 30)} is not a number")
    return float(value)


def _whole(keys: dict[str, Any], key: str, low: int = 1) -> int:
    value = _number(keys, key)
    if not value.is_integer() or value < low:
        raise MaxTextError(f"MaxText {key}: {clip(keys[key], 30)} must be a whole number >= {low}")
    return int(value)


def _mesh(keys: dict[str, Any], kind: str, target: int) -> dict[str, int]:
    """The ``kind`` (ici/dcn) degree of each mesh axis, its one ``-1`` filled so they multiply to ``target``."""
    degrees = {axis: _whole(keys, f"{kind}_{axis}_parallelism", low=-1) for axis in MESH_AXES}
    if any(d == 0 for d in degrees.values()):
        bad = next(a for a, d in degrees.items() if d == 0)
        raise MaxTextError(f"{kind}_{bad}_parallelism 0 is not a degree (>= 1, or -1 for the devices left)")
    unset = [a for a, d in degrees.items() if d == -1]
    if len(unset) > 1:
        raise MaxTextError(f"{kind}_*_parallelism: {', '.join(unset)} are all -1; at most one axis can be unspecified "
                           "(max_utils.fill_unspecified_mesh_axes)")
    known = math.prod(d for d in degrees.values() if d != -1)
    if unset:
        if target % known:
            raise MaxTextError(f"{kind}_{unset[0]}_parallelism -1: the other {kind} degrees multiply to {known}, which "
                               f"does not divide the {target} {'devices of a node' if kind == 'ici' else 'nodes'}")
        degrees[unset[0]] = target // known
    elif known != target:
        what = "devices of a node" if kind == "ici" else "nodes (slices)"
        raise MaxTextError(f"{kind}_*_parallelism multiply to {known}, not the {target} {what} "
                           "(maxtext_utils.create_device_mesh); give --gpus / --gpus-per-node or fix the degrees")
    return degrees


def layout_of(keys: dict[str, Any], variables: dict[str, str], *, num_gpus: int, gpus_per_node: int,
              num_layers: int, model_name: str = "") -> tuple[dict[str, Any], list[str]]:
    """Sweep-format config keys of MaxText keys (``base.yml`` defaults for what they leave out), and notes."""
    taken = sorted(k for k in BASE_DEFAULTS if k not in keys and not k.startswith(("ici_", "dcn_"))
                   and k in ("per_device_batch_size", "max_target_length", "remat_policy", "quantization",
                             "gradient_accumulation_steps", "weight_dtype"))
    merged = BASE_DEFAULTS | keys
    notes = [f"not in the launch, {BASE_SOURCE} default taken: "
             + ", ".join(f"{k} {BASE_DEFAULTS[k]!r}" for k in taken)] if taken else []
    per_node = min(gpus_per_node, num_gpus)
    if num_gpus % per_node:
        raise MaxTextError(f"{num_gpus} GPUs are not whole nodes of {per_node}: MaxText's mesh needs equal slices")
    nodes = num_gpus // per_node
    ici = _mesh(merged, "ici", per_node)
    dcn = _mesh(merged, "dcn", nodes) if nodes > 1 else dict.fromkeys(MESH_AXES, 1)
    if nodes == 1 and any(merged[f"dcn_{a}_parallelism"] not in (1, -1) for a in MESH_AXES):
        notes.append("one node: MaxText ignores the dcn_* degrees (one slice, create_device_mesh)")
    degree = {axis: ici[axis] * dcn[axis] for axis in MESH_AXES}
    unread = [a for a in _NO_EQUIVALENT if degree[a] > 1]
    if unread:
        raise MaxTextError(f"mesh axis {unread[0]} of degree {degree[unread[0]]}: projtune has no layout for it "
                           f"(it reads {_READ_AXES})")
    tp, cp, pp, ep = degree["tensor"] * degree["tensor_sequence"], degree["context"], degree["pipeline"], \
        degree["expert"]
    shard = degree["fsdp"] * degree["fsdp_transpose"] * ep
    dp = degree["data"] * shard
    config: dict[str, Any] = {"tp": tp, "cp": cp, "pp": pp, "ep": ep, "sequence_parallel": tp > 1,
                              "seq_len": _whole(merged, "max_target_length")}
    if tp > 1:
        notes.append(f"tensor axis {tp}: projected as TP {tp} with sequence parallelism, as projtune exports MaxText "
                     "layouts (MaxText shards the norm activations over tensor_sequence / context, not tensor: "
                     "base.yml logical_axis_rules activation_norm_length)")
    if shard > 1:
        config["zero"] = 3
        if degree["data"] > 1:
            config["fsdp_size"] = shard * cp
            notes.append(f"data {degree['data']} x fsdp/expert {shard}: weights replicated over data and sharded over "
                         f"the rest (HSDP, fsdp_size {shard * cp})")
    else:
        config["zero"] = 0
        if cp > 1:
            notes.append("zero 0 with context parallelism: MaxText also shards the weights over the context axis "
                         "(logical_axis_rules 'embed'); projected as replicated")
    per_device = _number(merged, "per_device_batch_size")
    accumulate = _whole(merged, "gradient_accumulation_steps")
    forward = int(num_gpus * per_device)          # micro_batch_size_to_train_on (types.py)
    if forward < 1:
        raise MaxTextError(f"per_device_batch_size {per_device:g} on {num_gpus} GPUs is less than one sequence")
    config["gbs"] = forward * accumulate
    if pp > 1:
        if model_name.startswith("deepseek") and merged["pipeline_parallel_layers"] == -1:
            raise MaxTextError("MaxText pipelines only DeepSeek's MoE layers (pipeline_parallel_layers defaults to "
                               "them; the dense layers run outside the pipeline): projtune has no such split")
        layers = num_layers if merged["pipeline_parallel_layers"] == -1 else \
            _whole(merged, "pipeline_parallel_layers")
        if layers != num_layers:
            raise MaxTextError(f"pipeline_parallel_layers {layers} of {num_layers}: projtune pipelines every layer")
        per_stage = _whole(merged, "num_layers_per_pipeline_stage")
        repeats = merged["num_pipeline_repeats"]
        if repeats == -1:
            repeats, remainder = divmod(layers, pp * per_stage)
            if remainder or not repeats:
                raise MaxTextError(f"num_layers_per_pipeline_stage {per_stage} x {pp} stages does not divide the "
                                   f"{layers} decoder layers (types.py)")
        elif _whole(merged, "num_pipeline_repeats") * pp * per_stage != layers:
            raise MaxTextError(f"{pp} stages x {repeats} repeats x {per_stage} layers per stage != {layers} layers")
        micro = merged["num_pipeline_microbatches"]
        if micro == -1:
            micro = 2 * pp if merged["pipeline_delay_activation_forwarding"] else pp
        micro = _whole({"num_pipeline_microbatches": micro}, "num_pipeline_microbatches")
        if micro % pp or forward % (micro * dp):
            raise MaxTextError(f"{forward} sequences per forward pass in {micro} pipeline micro-batches over {dp} "
                               f"data-parallel ranks is not whole (micro-batches divisible by the {pp} stages)")
        config["mbs"] = forward // (micro * dp)
        config["vpp"] = int(repeats)
        if repeats > 1:
            config["pp_schedule"] = "interleaved"
        notes.append(f"pipeline: {pp} stages x {repeats} repeats of {per_stage} layers, {micro} micro-batches per "
                     f"forward pass (MaxText's circular pipeline, projected as "
                     f"{'interleaved ' if repeats > 1 else ''}1F1B)")
    else:
        if forward % dp:
            raise MaxTextError(f"{forward} sequences per forward pass do not split over {dp} data-parallel ranks")
        config["mbs"] = forward // dp
    config.update(_numerics(merged, keys, notes))
    config.update(_xla_overlap(variables, notes))
    if str(merged["hardware"]) not in ("gpu", "gpu_multiprocess"):
        notes.append(f"hardware {merged['hardware']!r}: MaxText runs GPUs with hardware gpu (projected on the GPU "
                     "given)")
    return config, notes


def _numerics(merged: dict[str, Any], keys: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """Precision, recompute, attention kernel (only where ``keys``, the launch's own, set it) and MoE routing."""
    config: dict[str, Any] = {}
    quant = str(merged["quantization"] or "")
    if quant not in QUANTIZATION:
        raise MaxTextError(f"quantization {clip(quant, 30)!r}: projtune projects '' (bf16), "
                           f"{', '.join(_FP8)} (fp8), te_mxfp8, te_nvfp4")
    config["precision"] = QUANTIZATION[quant]
    policy = str(merged["remat_policy"])
    if policy == "full":
        config["recompute"] = "full"
    elif policy in REMAT_NONE:
        config["recompute"] = "none"
        if policy == "minimal":
            notes.append("remat_policy minimal saves every matmul output and recomputes the attention context; "
                         "projected as no recompute")
    else:
        raise MaxTextError(f"remat_policy {clip(policy, 40)!r} recomputes a subset of matmuls the projection has no "
                           f"input for; projtune reads full, {', '.join(REMAT_NONE)} (decoders.py get_remat_policy)")
    attention = str(merged["attention"])
    if attention not in ATTENTION:
        raise MaxTextError(f"attention {clip(attention, 30)!r}: projtune reads {', '.join(ATTENTION)} for training")
    if "attention" in keys:
        config["attention_backend"] = ATTENTION[attention]
    else:   # what projtune's own exports leave out: the jax record's defaults price the attention
        notes.append("attention not set (MaxText autoselected): projected with the jax record's attention defaults")
    factor = merged["capacity_factor"]
    if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 0:
        config["moe_routing"], config["moe_capacity_factor"] = "token-drop", float(factor)
    if str(merged["weight_dtype"]) != "bfloat16":
        notes.append(f"weight_dtype {merged['weight_dtype']}: the jax memory model holds bf16 weights and moments "
                     "(projection/memory_frameworks.py), not the launch's; the run keeps more bytes per parameter")
    return config


def _xla_overlap(variables: dict[str, str], notes: list[str]) -> dict[str, Any]:
    """``comm_overlap`` from the script's ``XLA_FLAGS`` (xla/debug_options_flags.cc names); nothing without them."""
    flags = variables.get("XLA_FLAGS")
    if not flags:
        return {}
    on = dict(re.findall(r"--(xla_gpu_enable_pipelined_\w+|xla_gpu_enable_async_collective_permute)=(\w+)", flags))
    overlap = [c for c, yes in (
        ("dp", on.get("xla_gpu_enable_pipelined_all_gather") == "true"
         and on.get("xla_gpu_enable_pipelined_reduce_scatter") == "true"),
        ("pp", on.get("xla_gpu_enable_async_collective_permute", "true") == "true")) if yes]
    notes.append(f"XLA_FLAGS: overlapped communication {', '.join(overlap) or 'none'} (pipelined all-gather / "
                 "reduce-scatter, async collective-permute)")
    return {"comm_overlap": overlap}
