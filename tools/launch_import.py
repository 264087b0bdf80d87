"""Read a launch config back into sweep-format config keys: Megatron-LM arguments, Primus YAML, torchtitan TOML.

The inverse of :func:`tools.launch_config.export_launch_config` (round-trip tested), and
useful on its own to project a layout someone already runs.  Keys the text does not set are
left out, so the result can be merged over defaults.  ``num_layers`` (of the model) is needed
only where the format gives per-stage layer counts instead of degrees (Megatron
``--num-layers-per-virtual-pipeline-stage`` without ``--num-layers``; torchtitan
``pipeline_parallel_layers_per_stage`` and layer-selective AC).
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

import yaml

from projection.errors import ProjtuneError, clip
from projection.quantities import QuantityError, read_count
from projection.vocabulary import IMPORT_FRAMEWORKS
from tools.launch_config import MEGATRON_FP8_RECIPE, TORCHTITAN_QUANT, TORCHTITAN_SCHEDULE

# Flags whose dest is not the flag name (megatron/training/arguments.py): flag -> (dest, value it sets).
_FLAG_DESTS = {"fp8_format": ("fp8", None), "disable_bias_linear": ("add_bias_linear", False),
               "no_gradient_accumulation_fusion": ("gradient_accumulation_fusion", False),
               "no_overlap_p2p_communication": ("overlap_p2p_comm", False)}


class LaunchConfigError(ProjtuneError):
    """A launch config that cannot be parsed."""


_INT_ARGS = {
    "tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp", "context_parallel_size": "cp",
    "expert_model_parallel_size": "ep", "expert_tensor_parallel_size": "etp", "micro_batch_size": "mbs",
    "global_batch_size": "gbs", "seq_length": "seq_len",
}


def megatron_args(text: str) -> dict[str, Any]:
    """Parse Megatron command-line arguments into dest -> value (True for bare flags, lists for nargs).

    ``text`` is an argument list or a launch script: :func:`tools.launch_shell.command_words` expands its
    variables (with their defaults), arrays and conditionals and keeps the words after the training script.
    Numbers are converted.
    """
    from tools.launch_shell import ShellScriptError, command_words

    try:
        tokens, _ = command_words(text)
    except ShellScriptError as err:
        raise LaunchConfigError(f"cannot parse Megatron arguments: {err}") from err
    args: dict[str, Any] = {}
    earlier: dict[str, Any] = {}
    _megatron_tokens(tokens, args, None, earlier)
    for dest, first in earlier.items():
        if first != args.get(dest):
            raise LaunchConfigError(f"--{dest.replace('_', '-')} is given twice with different values "
                                    f"({clip(first, 30)} and {clip(args.get(dest), 30)}); keep one")
    return args


_PLAIN_INT = re.compile(r"[0-9]{1,15}", re.ASCII)
_PLAIN_FLOAT = re.compile(r"[0-9]{0,15}\.[0-9]{1,15}(?:[eE][-+]?[0-9]{1,3})?|[0-9]{1,15}[eE][-+]?[0-9]{1,3}", re.ASCII)


def _number(token: str) -> Any:
    """An ASCII integer or decimal as a number; anything else (``$TP``, ``①``, 5,000 digits) stays text, for
    :func:`projection.quantities.read_count` to refuse where a number is needed."""
    if _PLAIN_INT.fullmatch(token):
        return int(token)
    if _PLAIN_FLOAT.fullmatch(token):
        return float(token)
    return token


def _megatron_tokens(tokens: list[str], args: dict[str, Any], key: str | None,
                     earlier: dict[str, Any] | None = None) -> str | None:
    for token in tokens:
        if token.startswith("--"):
            name, _, inline = token[2:].partition("=")
            key = name.replace("-", "_")
            key, value = _FLAG_DESTS.get(key, (key, None))
            if earlier is not None and key in args and key not in earlier:
                earlier[key] = args[key]
            args[key] = True if value is None else value
            if inline:
                args[key] = _number(inline)
            if value is not None:
                key = None
        elif key is not None:
            token = _number(token)  # type: ignore[assignment]
            current = args[key]
            args[key] = token if current is True else ([*current, token] if isinstance(current, list)
                                                        else [current, token])
    return key


def _count(args: dict[str, Any], dest: str) -> int:
    """The whole positive count a Megatron dest holds (:func:`projection.quantities.read_count`), else one line."""
    try:
        return read_count(args[dest], f"--{dest.replace('_', '-')}")
    except QuantityError as err:
        raise LaunchConfigError(str(err)) from err


def _from_megatron_dests(args: dict[str, Any], num_layers: int | None) -> dict[str, Any]:
    """Sweep-format keys from Megatron argument dests (shared by Megatron and Primus)."""
    config: dict[str, Any] = {}
    for dest, key in _INT_ARGS.items():
        if args.get(dest) is not None:
            config[key] = _count(args, dest)
    layers = _count(args, "num_layers") if args.get("num_layers") is not None else num_layers
    pp = config.get("pp", 1)
    if args.get("num_virtual_stages_per_pipeline_rank"):
        config["vpp"] = _count(args, "num_virtual_stages_per_pipeline_rank")
    elif args.get("num_layers_per_virtual_pipeline_stage"):
        if layers is None:
            raise LaunchConfigError("num_layers_per_virtual_pipeline_stage needs the model's layer count (num_layers)")
        per_chunk = _count(args, "num_layers_per_virtual_pipeline_stage")
        if layers % (pp * per_chunk):
            raise LaunchConfigError(f"--num-layers-per-virtual-pipeline-stage {per_chunk} does not divide the "
                                    f"{layers} layers over {pp} pipeline stages")
        config["vpp"] = layers // (pp * per_chunk)
    config.update(_megatron_split(args, pp))
    fp8 = args.get("fp8")
    if fp8:
        recipes = {v: k for k, v in MEGATRON_FP8_RECIPE.items()} | {"delayed": "fp8"}   # both per-tensor
        config["precision"] = recipes.get(str(args.get("fp8_recipe", "delayed")), "fp8")
    elif args.get("fp16"):
        config["precision"] = "fp16"
    elif args.get("bf16"):
        config["precision"] = "bf16"
    granularity = args.get("recompute_granularity")
    if granularity == "selective" or (granularity is None and args.get("recompute_activations")):
        config["recompute"] = "selective"
        modules = args.get("recompute_modules")
        if modules:
            config["recompute_modules"] = [modules] if isinstance(modules, str) else list(modules)
    elif granularity == "full":
        config["recompute"] = "full"
        method, count = args.get("recompute_method"), args.get("recompute_num_layers")
        if method == "block" and count is not None:  # per model chunk: a stage of vpp chunks recomputes vpp x
            config["recompute_num_layers"] = _count(args, "recompute_num_layers") * config.get("vpp", 1)
    elif granularity in (None, False, "none"):
        config["recompute"] = "none"
    config["sequence_parallel"] = bool(args.get("sequence_parallel"))
    if args.get("use_torch_fsdp2"):
        config["zero"] = 3
    elif args.get("use_distributed_optimizer"):
        config["zero"] = 1
    else:
        config["zero"] = 0
    if args.get("patch_zero_bubble") and args.get("enable_zero_bubble", True):  # Primus zero-bubble presets
        config["pp_schedule"] = "zbv" if args.get("zero_bubble_v_schedule") else "zero-bubble"
    elif config.get("vpp", 1) > 1:
        config["pp_schedule"] = "interleaved"
    dispatcher = args.get("moe_token_dispatcher_type")
    if dispatcher:
        config["moe_dispatcher"] = "deepep" if dispatcher == "flex" or args.get("moe_enable_deepep") else dispatcher
    return config


def _megatron_split(args: dict[str, Any], pp: int) -> dict[str, Any]:
    """A stated pipeline split (tools/exports/pipeline_split.py writes it): ``--pipeline-model-parallel-layout``
    (it sets the virtual stages: vpp = its stages / pp), else ``--decoder-first/last-pipeline-num-layers``
    (Megatron-Bridge: ``num_layers_in_first/last_pipeline_stage``)."""
    from projection.pipeline_split import parse_layout

    layout = args.get("pipeline_model_parallel_layout")
    if isinstance(layout, str) and layout.strip():
        try:
            stages = len(parse_layout(layout))
        except ValueError as err:
            raise LaunchConfigError(str(err)) from err
        if stages % pp:
            raise LaunchConfigError(f"the pipeline layout has {stages} stages, not a multiple of the pipeline size "
                                    f"{pp}")
        return {"pp_layout": layout, "vpp": stages // pp}
    split: dict[str, Any] = {}
    for key, dests in (("pp_first_stage_layers", ("decoder_first_pipeline_num_layers",
                                                  "num_layers_in_first_pipeline_stage")),
                       ("pp_last_stage_layers", ("decoder_last_pipeline_num_layers",
                                                 "num_layers_in_last_pipeline_stage"))):
        dest = next((d for d in dests if args.get(d) is not None), None)
        if dest is not None:
            split[key] = _count(args, dest)
    return split


def megatron_switches(args: dict[str, Any]) -> dict[str, Any]:
    """The run-time switches a Megatron-LM command line states (a flag it omits is Megatron-LM's argparse default,
    megatron/training/arguments.py): DP overlap with ``--overlap-grad-reduce`` (or torch FSDP2, which prefetches),
    TP with ``--tp-comm-overlap``, PP unless ``--no-overlap-p2p-communication``, EP with
    ``--overlap-moe-expert-parallel-comm``, CP always (Transformer Engine's ring attention); CUDA graphs with
    ``--enable-cuda-graph`` / ``--external-cuda-graph`` / ``--cuda-graph-impl``; the attention backend from
    ``--attention-backend`` (unfused and local = unfused); fp32 gradient reduction with
    ``--accumulate-allreduce-grads-in-fp32`` or bf16 without ``--grad-reduce-in-bf16`` (validate_args forces it)."""
    overlap = [c for c, on in (("dp", bool(args.get("overlap_grad_reduce") or args.get("use_torch_fsdp2"))),
                               ("tp", bool(args.get("tp_comm_overlap"))),
                               ("pp", args.get("overlap_p2p_comm", True) is not False),
                               ("ep", bool(args.get("overlap_moe_expert_parallel_comm"))), ("cp", True)) if on]
    switches: dict[str, Any] = {"comm_overlap": overlap}
    impl = args.get("cuda_graph_impl")
    switches["cuda_graphs"] = bool(args.get("enable_cuda_graph") or args.get("external_cuda_graph")
                                   or impl in ("local", "transformer_engine"))
    backend = args.get("attention_backend")
    if backend is not None:
        switches["attention_backend"] = "unfused" if backend in ("unfused", "local") else "fused"
    # validate_args: bf16 accumulates and reduces in fp32 unless --grad-reduce-in-bf16
    switches["grad_reduce_in_fp32"] = bool(args.get("accumulate_allreduce_grads_in_fp32")
                                           or (args.get("bf16") and not args.get("grad_reduce_in_bf16")))
    dispatcher = args.get("moe_token_dispatcher_type")
    if dispatcher == "flex" and args.get("moe_flex_dispatcher_backend") == "hybridep":
        switches["moe_dispatcher"] = "hybridep"
    return switches


def primus_overrides(text: str) -> dict[str, Any]:
    """The ``modules.pre_trainer.overrides`` mapping of a Primus YAML, ``${VAR:default}`` read as the default (read
    by the bounded safe reader)."""
    from projection.safe_yaml import YamlLimitError, load_bounded
    from tools.launch_shell import expand_primus

    text, _ = expand_primus(text)
    try:
        data = load_bounded(text)
    except YamlLimitError as err:
        raise LaunchConfigError(f"Primus YAML refused: {err}" + (f" (line {err.line})" if err.line else "")) \
            from err
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise LaunchConfigError(f"cannot parse Primus YAML{where}: {clip(getattr(err, 'problem', '') or err)}") \
            from err
    if not isinstance(data, dict):
        raise LaunchConfigError("Primus YAML must be a mapping (modules.pre_trainer.overrides)")
    overrides: Any = data
    if "modules" in data:
        for part in ("modules", "pre_trainer", "overrides"):
            if not isinstance(overrides, dict) or not isinstance(overrides.get(part), dict):
                raise LaunchConfigError(f"Primus YAML: '{part}' must be a mapping (modules.pre_trainer.overrides)")
            overrides = overrides[part]
    return {str(k): v for k, v in overrides.items()}


def _from_torchtitan(text: str, num_layers: int | None) -> dict[str, Any]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise LaunchConfigError(f"cannot parse torchtitan TOML: {err}") from err
    par, train = _section(data, "parallelism"), _section(data, "training")
    ac = _section(data, "activation_checkpoint")

    def count(table: dict[str, Any], key: str, default: int, low: int = 1) -> int:
        return _titan_count(table, key, default, low)

    config: dict[str, Any] = {"tp": count(par, "tensor_parallel_degree", 1),
                              "pp": count(par, "pipeline_parallel_degree", 1),
                              "cp": count(par, "context_parallel_degree", 1)}
    config["sequence_parallel"] = config["tp"] > 1 and _titan_bool(par, "enable_sequence_parallel", True)
    if "expert_parallel_degree" in par:
        config["ep"] = count(par, "expert_parallel_degree", 1)
        # torchtitan 0.3.0: experts are not TP-sharded under EP; without EP they follow TP
        config["etp"] = count(par, "expert_tensor_parallel_degree", 1 if config["ep"] > 1 else config["tp"])
    shard = count(par, "data_parallel_shard_degree", -1, low=-1)
    replicate = count(par, "data_parallel_replicate_degree", 1)
    if shard == 0:
        raise LaunchConfigError("[parallelism] data_parallel_shard_degree: 0 is not a degree (-1 = the rest, or >= 1)")
    if shard > 0:
        config["dp"] = shard * replicate
    if shard in (0, 1):  # -1: FSDP over the ranks left (resolved with the GPU count, tools.launch_defaults)
        config["zero"] = 0
    elif par.get("fsdp_reshard_after_forward") == "never":
        config["zero"] = 2
    else:
        config["zero"] = 3
        if replicate > 1:
            config["fsdp_size"] = shard * config["cp"]  # torchtitan's FSDP group is dp_shard * cp
    for key, name in (("global_batch_size", "gbs"), ("seq_len", "seq_len")):
        if key in train:
            config[name] = count(train, key, 1)
    pp = config["pp"]
    if pp > 1:
        config["mbs"] = count(par, "pipeline_parallel_microbatch_size", 1)
        schedules = {v: k for k, v in TORCHTITAN_SCHEDULE.items()}
        config["pp_schedule"] = schedules.get(par.get("pipeline_parallel_schedule", "1F1B"), "1f1b")
        per_stage = count(par, "pipeline_parallel_layers_per_stage", 0, low=0) or None
        if per_stage and num_layers:
            # torchtitan pipeline_parallel.py: stages = ceil((layers + first_less + last_less) / layers_per_stage)
            extra = count(par, "pipeline_parallel_first_stage_less_layers", 1, low=0) + \
                count(par, "pipeline_parallel_last_stage_less_layers", 1, low=0)
            stages = -(-(num_layers + extra) // per_stage)
            config["vpp"] = max(1, stages // pp)
            config.update(_torchtitan_split(par, num_layers, per_stage, stages, config["vpp"]))
        elif config["pp_schedule"] in ("interleaved", "zbv"):
            raise LaunchConfigError("an interleaved torchtitan schedule needs pipeline_parallel_layers_per_stage and "
                                    "the model's layer count (num_layers) to recover vpp")
    elif "local_batch_size" in train:
        config["mbs"] = count(train, "local_batch_size", 1)
    config["precision"] = _torchtitan_precision(data)
    chosen = re.search(r"--config[ =](\w+)", text)  # torchtitan 0.3.0: the config function sets the converters
    if config["precision"] == "bf16" and chosen:
        from tools.framework_rules import TORCHTITAN_CONFIGS

        config["precision"] = next((p for (_, p), (_, name) in TORCHTITAN_CONFIGS.items() if name == chosen[1]),
                                   "bf16")
    config.update(_torchtitan_ac(ac, num_layers, pp))
    return config


def _torchtitan_split(par: dict[str, Any], num_layers: int, per_stage: int, stages: int, vpp: int) -> dict[str, Any]:
    """The stated split of torchtitan's first/last stage less layers (pipeline_parallel.py: the first and the last
    virtual stage hold ``per_stage - less`` layers, the others ``per_stage``); nothing where it is the projection's
    default split (:func:`projection.pipeline_split.default_counts`)."""
    from projection.pipeline_split import default_counts, render_layout

    first = per_stage - _titan_count(par, "pipeline_parallel_first_stage_less_layers", 1, low=0)
    last = per_stage - _titan_count(par, "pipeline_parallel_last_stage_less_layers", 1, low=0)
    counts = (first, *(per_stage,) * (stages - 2), last) if stages > 1 else (num_layers,)
    if stages > 1 and (min(first, last) < 0 or sum(counts) != num_layers):
        raise LaunchConfigError(f"torchtitan TOML: {stages} stages of {per_stage} layers less first/last "
                                f"({per_stage - first}/{per_stage - last}) do not hold the {num_layers} layers")
    if stages < 2 or counts == default_counts(num_layers, stages):
        return {}
    if vpp == 1:
        return {"pp_first_stage_layers": first, "pp_last_stage_layers": last}
    return {"pp_layout": render_layout(first, per_stage, stages - 2, last)}


def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    table = data.get(name, {})
    if not isinstance(table, dict):
        raise LaunchConfigError(f"torchtitan TOML: [{name}] must be a table, got {type(table).__name__}")
    return table


def _titan_count(table: dict[str, Any], key: str, default: int, low: int = 1) -> int:
    """A whole count of a torchtitan table (wrong types, inf, dates and out-of-range values refused in one line)."""
    if key not in table:
        return default
    if not isinstance(table[key], int) or isinstance(table[key], bool):
        raise LaunchConfigError(f"torchtitan TOML: {key} must be a TOML integer, got {clip(table[key], 30)}")
    try:
        return read_count(table[key], key, low=low)
    except QuantityError as err:
        raise LaunchConfigError(f"torchtitan TOML: {err}") from err


def _titan_bool(table: dict[str, Any], key: str, default: bool) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise LaunchConfigError(f"torchtitan TOML: {key} must be true or false, got {clip(value, 30)}")
    return value


def _torchtitan_precision(data: dict[str, Any]) -> str:
    def section(dotted: str) -> dict[str, Any]:
        node: Any = data
        for part in dotted.split("."):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        return node if isinstance(node, dict) else {}

    converters = data.get("model", {}).get("converters", []) if isinstance(data.get("model"), dict) else []
    if not isinstance(converters, list):
        raise LaunchConfigError(f"torchtitan TOML: [model] converters must be a list, got {clip(converters, 30)}")
    converters = [c for c in converters if isinstance(c, str)]
    for precision, (name, recipe) in TORCHTITAN_QUANT.items():
        legacy = name.rsplit(".", 1)[-1]  # [float8] / [mx] before the quantize refactor
        if name in converters or legacy in converters:
            chosen = section(name).get("recipe_name") or section(legacy).get("recipe_name")
            if chosen == recipe:
                return precision
    if any(c in converters for c in ("quantize.linear.float8", "float8")):
        return "fp8"
    if any(c in converters for c in ("quantize.linear.mx", "mx")):
        return "mxfp8"
    return "bf16"


def _torchtitan_ac(ac: dict[str, Any], num_layers: int | None, pp: int) -> dict[str, Any]:
    mode = ac.get("mode", "selective")
    if mode == "none":
        return {"recompute": "none"}
    if mode == "full":
        return {"recompute": "full"}
    if mode != "selective":
        raise LaunchConfigError(f"torchtitan TOML: [activation_checkpoint] mode must be none, selective or full, "
                                f"got {clip(mode, 30)}")
    option = ac.get("selective_ac_option", "op")  # torchtitan 0.3.0 selective AC is op-level
    if option == "op":
        return {"recompute": "selective"}
    try:   # layer-selective: every Nth layer, N >= 1 (torchtitan's int(selective_ac_option))
        every = read_count(option, "[activation_checkpoint] selective_ac_option ('op' or a layer period)")
    except QuantityError as err:
        raise LaunchConfigError(f"torchtitan TOML: {err}") from err
    if num_layers is None:
        raise LaunchConfigError("layer-selective AC (every Nth layer) needs the model's layer count (num_layers)")
    stage_layers = -(-num_layers // pp)
    return {"recompute": "full", "recompute_num_layers": stage_layers // every}


def import_launch_config(text: str, framework: str, *, num_layers: int | None = None, **job: Any) -> dict[str, Any]:
    """Parse a Megatron argument list, a Primus YAML overlay, a torchtitan TOML or a MaxText YAML / command into
    sweep-format config keys (``job``: what :func:`import_with_notes` needs for MaxText).

    Raises:
        LaunchConfigError: unknown framework, unparsable text, or a per-stage layer count without ``num_layers``.
    """
    return import_with_notes(text, framework, num_layers=num_layers, **job)[0]


def import_with_notes(text: str, framework: str, *, num_layers: int | None = None, num_gpus: int | None = None,
                      gpus_per_node: int = 8, model_name: str = "", source_dir: Any = None
                      ) -> tuple[dict[str, Any], list[str]]:
    """:func:`import_launch_config` and what the reading assumed (framework defaults, layouts, unresolved shell).

    MaxText (:mod:`tools.maxtext_import`) resolves its mesh against the GPUs: it needs ``num_gpus``,
    ``gpus_per_node`` and ``num_layers``; ``source_dir`` is where a config file the launch names is looked for.
    """
    from tools.launch_defaults import LayoutError, primus_switches, primus_with_defaults, switch_notes
    from tools.launch_shell import ShellScriptError, command_words

    if framework == "megatron":
        try:
            unresolved = command_words(text)[1]
        except ShellScriptError as err:
            raise LaunchConfigError(f"cannot parse Megatron arguments: {err}") from err
        notes = [f"not resolved in the script (empty): {'; '.join(unresolved)}"] if unresolved else []
        dests = megatron_args(text)
        config = _from_megatron_dests(dests, num_layers) | megatron_switches(dests)
        return config, notes + switch_notes(dests, config)
    if framework == "primus":
        overrides, notes = primus_with_defaults(primus_overrides(text))
        overrides = {k: v for k, v in overrides.items() if v is not False}
        config = _from_megatron_dests(overrides, num_layers)
        try:
            switches, more = primus_switches(overrides, num_layers)
        except LayoutError as err:
            raise LaunchConfigError(str(err)) from err
        return config | switches, notes + more + switch_notes(overrides, config)
    if framework == "megatron-bridge":
        from tools.exports.megatron_bridge import megatron_dests_of, read_overrides

        try:
            dests = megatron_dests_of(read_overrides(text))
        except ProjtuneError as err:
            raise LaunchConfigError(str(err)) from err
        config = _from_megatron_dests(dests, num_layers)
        return config, switch_notes(dests, config)
    if framework == "torchtitan":
        return _from_torchtitan(text, num_layers), []
    if framework == "maxtext":
        from tools.maxtext_import import MaxTextError, launch_keys, layout_of

        if num_gpus is None or num_layers is None:
            raise LaunchConfigError("a MaxText launch needs the GPU count and the model's layer count to read its mesh")
        try:
            keys, variables, notes = launch_keys(text, source_dir)
            config, more = layout_of(keys, variables, num_gpus=num_gpus, gpus_per_node=gpus_per_node,
                                     num_layers=num_layers, model_name=model_name)
        except MaxTextError as err:
            raise LaunchConfigError(str(err)) from err
        return config, notes + more
    raise LaunchConfigError(f"unknown framework '{framework}' (known: {', '.join(IMPORT_FRAMEWORKS)})")
