"""Validate an export with the framework's own config code (where it installs on CPU), else with its cited rules.

- torchtitan (``pip install torchtitan==0.3.0``, test extra): ``ConfigManager.parse_args``
  (tyro parsing of every ``--section.key`` and the ``Trainer.Config`` / ``ParallelismConfig``
  ``__post_init__`` checks), the model config's ``update_from_config`` (TP divides heads, no
  weight tying with PP, seq_len within RoPE), ``ParallelDims`` and ``build_mesh`` on a fake
  process group of the job's world size (the EP/FSDP mesh rule), the pipeline split
  (``_get_pipeline_metadata``, ``_generate_llm_fqn_per_model_part``,
  ``_get_pp_rank_to_stage_indices_mapping``) and the batch/sequence checks of
  ``Trainer.__init__`` (copied: they run after device setup).
- Megatron-LM / Primus / Megatron-Bridge (``pip install megatron-core==0.16.1``, test extra):
  megatron-core's ``TransformerConfig`` / ``MLATransformerConfig`` ``__post_init__`` built as
  Megatron-LM's ``core_transformer_config_from_args`` builds it, the decoder and expert
  ``RankGenerator`` of ``parallel_state.initialize_model_parallel`` with its pipeline-group
  consistency assertion, and ``ConstantNumMicroBatchesCalculator``; plus the rules of
  Megatron-LM's ``validate_args`` (``megatron/training/arguments.py``, not in megatron-core).
- MaxText (JAX; not installed): the rules of ``src/MaxText/configs/types.py``
  (:func:`tools.exports.maxtext.maxtext_problems`).

Each validator returns the problems it found (empty = the framework accepts the config).
"""

from __future__ import annotations

import contextlib
import io
import shlex
import sys
import tempfile
import tomllib
import warnings
from pathlib import Path
from typing import Any

import yaml

from projection.model_spec import ModelSpec
from projection.training_config import Cluster
from tools.exports.common import LaunchConfig

MEGATRON_ARGS = "Megatron-LM arguments.py validate_args"


def validate(launch: LaunchConfig, model: ModelSpec, cluster: Cluster) -> list[str]:
    """The problems the framework's own validation finds in an export (empty = accepted)."""
    if launch.framework == "torchtitan":
        return validate_torchtitan(launch, model, cluster)
    if launch.framework == "maxtext":
        from tools.exports.maxtext import maxtext_problems

        options = yaml.safe_load(launch.text)
        return maxtext_problems(options, num_gpus=cluster.num_gpus, gpus_per_node=cluster.gpus_per_node,
                                num_layers=model.num_layers)
    if launch.framework == "megatron-bridge":
        from projection.training_config import TrainingConfig
        from tools.exports.common import Job
        from tools.exports.megatron import model_dests

        overrides = bridge_dests(launch.text)
        # the recipe sets the architecture: take it from the model, as the recipe for it would
        arch = model_dests(Job(model, cluster, TrainingConfig(seq_len=int(overrides["seq_length"]))))
        return validate_megatron(arch | overrides, cluster.num_gpus)
    return validate_megatron(megatron_text_dests(launch), cluster.num_gpus)


# ---------------------------------------------------------------------------------------------- Megatron family
def megatron_text_dests(launch: LaunchConfig) -> dict[str, Any]:
    """Megatron-LM dests from the exported text (command line or Primus YAML)."""
    from tools.launch_import import megatron_args

    if launch.framework == "primus":
        return dict(yaml.safe_load(launch.text)["modules"]["pre_trainer"]["overrides"])
    return megatron_args(launch.text)


def bridge_dests(text: str) -> dict[str, Any]:
    """Megatron dests from Bridge overrides text (:func:`tools.exports.megatron_bridge.megatron_dests_of`)."""
    from tools.exports.megatron_bridge import megatron_dests_of, read_overrides

    return megatron_dests_of(read_overrides(text))


def _validate_args_rules(d: dict[str, Any], world: int) -> list[str]:
    """The rules of Megatron-LM's validate_args that concern a layout (NVIDIA/Megatron-LM arguments.py)."""
    p: list[str] = []
    tp, pp, cp = (int(d.get(k, 1)) for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                             "context_parallel_size"))
    ep = int(d.get("expert_model_parallel_size", 1))
    if world % (tp * pp * cp):
        p.append(f"world size ({world}) is not divisible by total_model_size ({tp * pp * cp})")
    layers = int(d.get("num_layers", 0))
    if d.get("num_layers_per_virtual_pipeline_stage") and d.get("num_virtual_stages_per_pipeline_rank"):
        p.append("No more than one of --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank")
    uneven = any(d.get(k) is not None for k in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
                                                "pipeline_model_parallel_layout"))
    if d.get("pipeline_model_parallel_layout") and d.get("num_virtual_stages_per_pipeline_rank"):
        p.append("No more than one of the following arguments can be set at the same time: "
                 "--num-virtual-stages-per-pipeline-rank, --pipeline-model-parallel-layout")
    if not d.get("num_virtual_stages_per_pipeline_rank") and not uneven:
        extra = int(bool(d.get("account_for_embedding_in_pipeline_split"))) + \
            int(bool(d.get("account_for_loss_in_pipeline_split")))
        if layers and (layers + extra) % pp:
            p.append("Number of layers should be divisible by the pipeline-model-parallel size")
        if d.get("num_layers_per_virtual_pipeline_stage") and \
                ((layers + extra) // pp) % int(d["num_layers_per_virtual_pipeline_stage"]):
            p.append("number of layers per pipeline stage must be divisible number of layers per virtual "
                     "pipeline stage")
    if d.get("overlap_param_gather"):
        if not (d.get("use_distributed_optimizer") or d.get("use_megatron_fsdp")):
            p.append("--overlap-param-gather only supported with distributed optimizer or megatron fsdp")
        if not d.get("overlap_grad_reduce"):
            p.append("Must use --overlap-param-gather with --overlap-grad-reduce")
    if d.get("use_torch_fsdp2"):
        if pp != 1:
            p.append("--use-torch-fsdp2 is not supported with pipeline parallelism")
        if ep != 1:
            p.append("--use-torch-fsdp2 is not supported with expert parallelism")
        if d.get("use_distributed_optimizer"):
            p.append("--use-torch-fsdp2 is not supported with MCore's distributed optimizer")
        if d.get("gradient_accumulation_fusion", True):
            p.append("--use-torch-fsdp2 is not supported with gradient accumulation fusion")
        if d.get("ckpt_format", "torch_dist") not in ("torch_dist", "torch_dcp"):
            p.append("--use-torch-fsdp2 requires --ckpt-format torch_dist or torch_dcp")
        if not d.get("untie_embeddings_and_output_weights"):
            p.append("--use-torch-fsdp2 requires --untie-embeddings-and-output-weights")
        if d.get("fp16"):
            p.append("--use-torch-fsdp2 not supported with fp16 yet")
    seq = int(d.get("seq_length", 0))
    if cp > 1 and seq % (2 * cp):
        p.append("seq-length should be a multiple of 2 * context-parallel-size if context-parallel-size > 1.")
    if seq and int(d.get("max_position_embeddings", seq)) < seq:
        p.append(f"max_position_embeddings must be greater than or equal to seq_length ({seq})")
    if d.get("recompute_granularity") == "selective" and d.get("recompute_method") is not None:
        p.append("recompute method is not yet supported for selective recomputing granularity")
    if d.get("tp_comm_overlap") and not (d.get("sequence_parallel") and tp > 1):
        p.append("Tensor parallel communication/GEMM overlap can happen only when sequence parallelism is enabled")
    if ep > 1:
        experts = d.get("num_experts")
        if experts is None:
            p.append("num_experts must be non None to use expert model parallelism")
        elif int(experts) % ep:
            p.append("Number of experts should be a multiple of expert model parallel_size.")
        if d.get("fp16"):
            p.append("Expert parallelism is not supported with fp16 training.")
    if d.get("moe_grouped_gemm") and not d.get("bf16"):
        p.append("Currently GroupedGEMM for MoE only supports bf16 dtype.")
    if d.get("fp8") and d.get("fp8") not in ("e4m3", "hybrid"):
        p.append(f"--fp8-format {d['fp8']}: choices are e4m3, hybrid")
    if d.get("fp8_recipe", "delayed") not in ("tensorwise", "delayed", "mxfp8", "blockwise", "custom"):
        p.append(f"--fp8-recipe {d['fp8_recipe']}: choices are tensorwise, delayed, mxfp8, blockwise, custom")
    return [f"{m} ({MEGATRON_ARGS})" for m in p]


def _transformer_kwargs(d: dict[str, Any]) -> tuple[type, dict[str, Any]]:
    """megatron-core config class and kwargs, as Megatron-LM core_transformer_config_from_args builds them."""
    import dataclasses

    import torch
    import torch.nn.functional as F
    from megatron.core.transformer import MLATransformerConfig, TransformerConfig

    cls = MLATransformerConfig if d.get("multi_latent_attention") else TransformerConfig
    names = {f.name for f in dataclasses.fields(cls)}
    kw = {k: v for k, v in d.items() if k in names}
    dtype = torch.bfloat16 if d.get("bf16") else torch.float16 if d.get("fp16") else torch.float32
    kw["params_dtype"] = kw["pipeline_dtype"] = dtype
    kw["num_moe_experts"] = d.get("num_experts")
    kw["expert_tensor_parallel_size"] = d.get("expert_tensor_parallel_size", d.get("tensor_model_parallel_size", 1))
    if d.get("num_virtual_stages_per_pipeline_rank"):
        kw["virtual_pipeline_model_parallel_size"] = int(d["num_virtual_stages_per_pipeline_rank"])
    # core_transformer_config_from_args: the uneven first/last stage flags; validate_args: vpp from the layout
    kw["num_layers_in_first_pipeline_stage"] = d.get("decoder_first_pipeline_num_layers")
    kw["num_layers_in_last_pipeline_stage"] = d.get("decoder_last_pipeline_num_layers")
    if d.get("pipeline_model_parallel_layout"):
        from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

        stages = PipelineParallelLayerLayout.get_num_stages_from_str(d["pipeline_model_parallel_layout"])
        kw["virtual_pipeline_model_parallel_size"] = stages // int(d.get("pipeline_model_parallel_size", 1)) or None
    if d.get("swiglu"):
        kw["activation_func"], kw["gated_linear_unit"] = F.silu, True
    elif d.get("quick_geglu"):  # arguments.py core_transformer_config_from_args: quick_gelu, gated
        from megatron.core.fusions.fused_bias_geglu import quick_gelu

        kw["activation_func"], kw["gated_linear_unit"] = quick_gelu, True
    if isinstance(kw.get("window_size"), str):  # arguments.py tuple_type
        kw["window_size"] = tuple(int(x) for x in kw["window_size"].strip("()").split(","))
    if isinstance(kw.get("window_attn_skip_freq"), str):
        kw["window_attn_skip_freq"] = yaml.safe_load(kw["window_attn_skip_freq"])
    if not d.get("group_query_attention"):
        kw.pop("num_query_groups", None)
    if isinstance(kw.get("moe_layer_freq"), str):
        kw["moe_layer_freq"] = yaml.safe_load(kw["moe_layer_freq"])
    if kw.get("recompute_modules") is not None and isinstance(kw["recompute_modules"], str):
        kw["recompute_modules"] = [kw["recompute_modules"]]
    return cls, kw


# Transformer Engine is CUDA-only; its version checks in TransformerConfig answer as this release would
# (TE 2.8, the release of NGC PyTorch containers late 2025, which megatron-core 0.16 targets).
TE_VERSION = "2.8.0"


@contextlib.contextmanager
def _transformer_engine() -> Any:
    from unittest import mock

    from packaging.version import Version

    def te_min(version: str, check_equality: bool = True) -> bool:
        return Version(TE_VERSION) >= Version(version) if check_equality else Version(TE_VERSION) > Version(version)

    with mock.patch("megatron.core.transformer.transformer_config.is_te_min_version", te_min), \
            mock.patch("megatron.core.utils.get_te_version", lambda: Version(TE_VERSION)):
        yield


def validate_megatron(d: dict[str, Any], world: int) -> list[str]:
    """validate_args rules + megatron-core's TransformerConfig, rank generators and micro-batch calculator."""
    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
    from megatron.core.parallel_state import RankGenerator

    problems = _validate_args_rules(d, world)
    cls, kw = _transformer_kwargs(d)
    try:
        with warnings.catch_warnings(), _transformer_engine():
            warnings.simplefilter("ignore")
            cls(**kw)
    except (AssertionError, ValueError, TypeError, NotImplementedError, ZeroDivisionError) as err:
        problems.append(f"megatron.core {cls.__name__}: {err}")
    tp, pp, cp = (int(d.get(k, 1)) for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                             "context_parallel_size"))
    ep, etp = int(d.get("expert_model_parallel_size", 1)), int(kw["expert_tensor_parallel_size"])
    try:
        if world % (tp * pp * cp) or world % (etp * ep * pp):
            raise RuntimeError(f"world_size ({world}) is not divisible by tp*pp*cp or etp*ep*pp")
        dp = world // (tp * pp * cp)
        dense = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order="tp-cp-ep-dp-pp")
        expert = RankGenerator(tp=etp, ep=ep, dp=world // (etp * ep * pp), pp=pp, cp=1, order="tp-cp-ep-dp-pp")
        if dense.get_ranks("pp") != expert.get_ranks("pp"):
            raise AssertionError("Pipeline parallel groups are expected to be the same for Non-Expert and Expert part")
        ConstantNumMicroBatchesCalculator(int(d["global_batch_size"]), int(d["micro_batch_size"]), dp, False, 0)
    except (AssertionError, RuntimeError, ValueError) as err:
        problems.append(f"megatron.core parallel_state / num_microbatches_calculator: {err or type(err).__name__}")
    return problems


# ---------------------------------------------------------------------------------------------- torchtitan
def titan_options_from_text(text: str) -> dict[str, Any]:
    """'section.key' -> value from the exported TOML."""
    from tools.exports.common import flatten_dotted

    return flatten_dotted(tomllib.loads(text))


# GPU family -> (vendor, compute capability / gfx version) that torchtitan's quantisation converters query.
_CAPABILITY = {"ampere": ("cuda", (8, 0)), "hopper": ("cuda", (9, 0)), "blackwell": ("cuda", (10, 0)),
               "blackwell-ultra": ("cuda", (10, 3)), "cdna3": ("rocm", (9, 4)), "cdna4": ("rocm", (9, 5))}


@contextlib.contextmanager
def _target_gpu(gpu: str) -> Any:
    """Answer torchtitan's float8/MX hardware checks (tools/utils.has_cuda/rocm_capability) for the target GPU.

    The converters refuse at config time on a machine without that GPU; the validator runs on
    CPU for the job's GPU, so it answers as that GPU would.
    """
    from unittest import mock

    from projection.hardware import load_hardware

    vendor, capability = _CAPABILITY.get(load_hardware(gpu).family, ("cuda", (0, 0)))

    def cuda(major: int, minor: int) -> bool:
        return vendor == "cuda" and capability >= (major, minor)

    def rocm(major: int, minor: int) -> bool:
        return vendor == "rocm" and capability >= (major, minor)

    targets = [("torchtitan.components.quantization.float8", "has_cuda_capability", cuda),
               ("torchtitan.components.quantization.float8", "has_rocm_capability", rocm),
               ("torchtitan.components.quantization.mx", "has_cuda_capability", cuda)]
    with contextlib.ExitStack() as stack:
        for module, name, fake in targets:
            stack.enter_context(mock.patch(f"{module}.{name}", fake))
        yield


def validate_torchtitan(launch: LaunchConfig, model: ModelSpec, cluster: Cluster) -> list[str]:
    """Parse the export with torchtitan's ConfigManager and run its parallel-dims, mesh and pipeline checks."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed.pipeline_parallel import (
        _generate_llm_fqn_per_model_part,
        _get_pipeline_metadata,
        _get_pp_rank_to_stage_indices_mapping,
    )

    from tools.exports.torchtitan import CONFIG_FUNCTION

    options = titan_options_from_text(launch.text)
    if not launch.files:
        return ["the torchtitan export has no config module to load its TOML"]
    module = next(iter(launch.files)).removesuffix(".py")
    args = ["--module", module, "--config", CONFIG_FUNCTION]
    err = io.StringIO()
    with tempfile.TemporaryDirectory() as folder:  # ConfigManager loads the TOML from file through the module
        for name, text in {launch.filename: launch.text, **launch.files}.items():
            (Path(folder) / name).write_text(text)
        sys.path.insert(0, folder)
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), \
                    warnings.catch_warnings(), _target_gpu(cluster.gpu):
                warnings.simplefilter("ignore")
                cfg = ConfigManager().parse_args(args)
        except SystemExit:
            text = " ".join(line.strip("│ ╭╮╰╯─") for line in err.getvalue().splitlines() if line.strip("│ ╭╮╰╯─ "))
            return [f"torchtitan ConfigManager rejected the config: {text[:400]}"]
        except (ValueError, ImportError, AttributeError, KeyError) as error:
            return [f"torchtitan ConfigManager: {error}"]
        finally:
            sys.path.remove(folder)
            sys.modules.pop(module, None)
    config_name = CONFIG_FUNCTION
    problems: list[str] = []
    for name, value in options.items():
        section, _, key = name.rpartition(".")
        if section == "activation_checkpoint":
            from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

            kind = {"none": type(None), "selective": SelectiveAC.Config, "full": FullAC.Config}.get(value)
            if kind is None or type(cfg.activation_checkpoint) is not kind:
                problems.append(f"{name}: loaded {type(cfg.activation_checkpoint).__qualname__}, exported {value!r}")
            continue
        got = getattr(getattr(cfg, section), key)
        if got != value:
            problems.append(f"{name}: parsed {got!r}, exported {value!r}")
    model_cfg = cfg.model_spec.model
    if len(model_cfg.layers) != model.num_layers:
        problems.append(f"{module}.{config_name} has {len(model_cfg.layers)} layers, {model.name} {model.num_layers}")
    try:
        model_cfg.update_from_config(config=cfg)
    except (ValueError, NotImplementedError, AssertionError) as error:
        problems.append(f"torchtitan update_from_config: {error}")
    par, world = cfg.parallelism, cluster.num_gpus
    try:
        dims = ParallelDims.from_config(par, world)
    except AssertionError as error:
        return problems + [f"torchtitan ParallelDims: {error}"]
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        dims.build_mesh()
    except (ValueError, RuntimeError, AssertionError) as error:
        problems.append(f"torchtitan ParallelDims.build_mesh: {str(error)[:300]}")
    finally:
        dist.destroy_process_group()
    if dims.pp > 1:
        try:
            stages, layers, first, last = _get_pipeline_metadata(dims, par, model_cfg)
            _generate_llm_fqn_per_model_part(stages, layers, first, last)
            _get_pp_rank_to_stage_indices_mapping(0, dims.pp, par.pipeline_parallel_schedule, stages)
        except (ValueError, AssertionError) as error:
            problems.append(f"torchtitan pipeline split: {error}")
    # torchtitan/trainer.py Trainer.__init__ (after device setup, so copied here):
    divisor = (dims.tp if par.enable_sequence_parallel else 1) * (2 * dims.cp if dims.cp > 1 else 1)
    if cfg.training.seq_len % divisor:
        problems.append(f"Training sequence length ({cfg.training.seq_len}) must be divisible by {divisor}")
    batch_degree = dims.dp_replicate * dims.dp_shard
    gbs = cfg.training.global_batch_size
    if gbs > 0 and gbs % (cfg.training.local_batch_size * batch_degree):
        problems.append("global batch size must be multiple of local batch size times data-parallel degree")
    return problems
