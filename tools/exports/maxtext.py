"""MaxText YAML: ``ici_*`` (inside a node) and ``dcn_*`` (across nodes) mesh axes, batch, remat and quantisation.

Keys of AI-Hypercomputer/maxtext ``src/MaxText/configs/base.yml`` / ``types.py``: each mesh axis
(data, fsdp, tensor, context, expert, pipeline) has an ICI degree (devices of one node, on
GPUs) and a DCN degree (nodes); the ICI degrees multiply to the GPUs per node and the DCN
degrees to the node count.  ``per_device_batch_size`` counts sequences per device, TP and PP
devices included (fractional when they share a sequence); with PP the batch is split into
``num_pipeline_microbatches``, without it ``gradient_accumulation_steps`` repeat the
micro-batch.  :func:`maxtext_problems` checks the rules of ``types.py`` on an export.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from tools.exports.common import Job, LaunchConfig, comment_block
from tools.framework_rules import MAXTEXT_MODELS, MAXTEXT_QUANT, maxtext_vendor

FRAMEWORK = "maxtext"
"""The launch framework this module exports to (tools/exports/__init__.py registers it under this name)."""
AXES = ("data", "fsdp", "tensor", "context", "expert", "pipeline")
SOURCE = ("MaxText YAML (src/MaxText/configs/base.yml keys, AI-Hypercomputer/maxtext maxtext-tutorial-v1.5.0); "
          "run: python3 -m MaxText.train this.yaml")
USER_MUST_ADD = ["base_output_directory, run_name, dataset_type / dataset_path, tokenizer_path", "steps"]
REMAT = {"none": "minimal_with_context", "full": "full"}
"""Recompute -> remat_policy (src/MaxText/layers/decoders.py get_remat_policy: minimal_with_context saves every matmul
output and the attention context, full saves only the layer input)."""
ATTENTION = {"fused": "cudnn_flash_te", "triton": "flash", "unfused": "dot_product"}
"""Attention kernel -> ``attention`` (layers/attention_op.py: cudnn_flash_te is Transformer Engine's fused attention,
the kernel the development runs set; flash the Pallas kernel; dot_product materialises the scores)."""
# Pipelined FSDP collectives (xla/debug_options_flags.cc; MaxText's A3 example configs/a3/llama_3.1_405b/128vm.sh).
XLA_DP_OVERLAP = ("--xla_gpu_enable_latency_hiding_scheduler=true --xla_gpu_enable_pipelined_all_gather=true "
                  "--xla_gpu_enable_pipelined_reduce_scatter=true --xla_gpu_enable_pipelined_all_reduce=true")


def _split(degrees: dict[str, int], per_node: int) -> tuple[dict[str, int], dict[str, int]]:
    """Place each axis inside a node first (tensor, context, expert, fsdp/data, pipeline), the rest across nodes."""
    ici, dcn, room = {}, {}, per_node
    for axis in ("tensor", "context", "expert", "fsdp", "data", "pipeline"):
        degree = degrees[axis]
        inside = math.gcd(degree, room)
        ici[axis], dcn[axis] = inside, degree // inside
        room //= inside
    return ici, dcn


def maxtext_options(job: Job) -> dict[str, Any]:
    c, m, n = job.config, job.model, job.cluster
    dp = job.dp
    ep = c.ep if m.is_moe else 1
    rest = dp // ep
    # ZeRO-3 shards over fsdp x context x expert (logical_axis_rules 'embed'); fsdp_size (HSDP) leaves data replicas
    fsdp = (c.fsdp_size // (c.cp * ep) if c.fsdp_size else rest) if c.zero == 3 else 1
    degrees = {"data": rest // fsdp, "fsdp": fsdp, "tensor": c.tp, "context": c.cp, "expert": ep, "pipeline": c.pp}
    per_node = min(n.gpus_per_node, n.num_gpus)
    ici, dcn = _split(degrees, per_node)
    o: dict[str, Any] = {"model_name": MAXTEXT_MODELS.get(m.name, m.name), "hardware": "gpu",
                         "max_target_length": c.seq_len}
    if c.pp > 1:
        o["per_device_batch_size"] = c.gbs / n.num_gpus
        o["gradient_accumulation_steps"] = 1
        o["num_pipeline_microbatches"] = job.microbatches
        o["num_layers_per_pipeline_stage"] = m.num_layers // (c.pp * c.vpp)
    else:
        o["per_device_batch_size"] = c.mbs * dp / n.num_gpus
        o["gradient_accumulation_steps"] = job.microbatches
    o["remat_policy"] = REMAT.get(c.recompute, c.recompute)
    o["quantization"] = MAXTEXT_QUANT.get((c.precision, maxtext_vendor(n.gpu)), c.precision)
    if c.attention_backend is not None:   # unset: the jax record's defaults price it (projection/framework.py)
        o["attention"] = ATTENTION[c.attention_backend]
    o["weight_dtype"] = "bfloat16"   # the jax memory model's bf16 weights (mu_dtype inherits it, types.py)
    if m.is_moe:
        o["sparse_matmul"] = True
        o["capacity_factor"] = (c.moe_capacity_factor or 1.0) if c.moe_routing == "token-drop" else -1
    for axis in AXES:
        o[f"ici_{axis}_parallelism"] = ici[axis]
    for axis in AXES:
        o[f"dcn_{axis}_parallelism"] = dcn[axis]
    if c.recompute == "none":
        job.assumptions.append("remat_policy minimal_with_context saves every matmul output and the attention "
                               "context (only element-wise ops recompute); the projection counts that as no recompute")
    if job.switches.overlapped("dp"):
        job.assumptions.append(f"XLA pipelines the FSDP/DP collectives (the launcher's XLA_FLAGS; the projection "
                               f"hides {job.profile.dp_overlap_fraction:.0%} of DP comm)")
    else:
        job.assumptions.append("XLA's GPU defaults leave the FSDP/DP collectives exposed, as projected")
    return o


def maxtext_problems(options: dict[str, Any], *, num_gpus: int, gpus_per_node: int, num_layers: int) -> list[str]:
    """The types.py / mesh rules an exported MaxText config breaks (empty when none; remat policies: types.py
    RematPolicy and the names decoders.py get_remat_policy also takes)."""
    problems = []
    per_node, nodes = min(gpus_per_node, num_gpus), max(1, num_gpus // gpus_per_node)
    ici = math.prod(int(options.get(f"ici_{a}_parallelism", 1)) for a in AXES)
    dcn = math.prod(int(options.get(f"dcn_{a}_parallelism", 1)) for a in AXES)
    if ici != per_node:
        problems.append(f"ici_* parallelism multiplies to {ici}, not the {per_node} devices of a node "
                        "(maxtext_utils.create_device_mesh)")
    if dcn != nodes:
        problems.append(f"dcn_* parallelism multiplies to {dcn}, not the {nodes} nodes (num_slices)")
    if dcn > 1 and nodes <= 1:
        problems.append("DCN parallelism requested but only one slice available.")
    pp = int(options.get("ici_pipeline_parallelism", 1)) * int(options.get("dcn_pipeline_parallelism", 1))
    if pp > 1:
        per_stage = int(options.get("num_layers_per_pipeline_stage", 1))
        repeats, remainder = divmod(num_layers, pp * per_stage)
        if remainder:
            problems.append(f"layers per stage ({per_stage}) times stages ({pp}) must divide the {num_layers} "
                            "decoder layers")
        micro = int(options.get("num_pipeline_microbatches", pp))
        if micro <= 0 or micro % pp:
            problems.append(f"The number of microbatches ({micro}) must be divisible by the number of stages ({pp})")
        batch = round(float(options["per_device_batch_size"]) * num_gpus)  # micro_batch_size_to_train_on
        if micro and batch % micro:
            problems.append(f"batch for one forward pass ({batch}) not divisible by {micro} microbatches")
    if options.get("quantization") in ("fp8", "nanoo_fp8", "fp8_gpu") and \
            int(options.get("gradient_accumulation_steps", 1)) > 1:
        problems.append("FP8 quantization is not compatible with gradient accumulation.")
    if options.get("remat_policy") not in ("full", "minimal", "minimal_with_context", "save_dot_except_mlpwi",
                                           "save_dot_with_context_except_mlp", "save_dot_except_mlp", "save_qkv_proj",
                                           "qkv_proj_offloaded", "custom", "minimal_offloaded", "save_out_proj"):
        problems.append(f"remat_policy {options.get('remat_policy')!r} is not a MaxText RematPolicy")
    if options.get("model_name") not in MAXTEXT_MODELS.values():
        problems.append(f"model_name {options.get('model_name')!r} has no src/MaxText/configs/models file")
    if float(options.get("per_device_batch_size", 1)) <= 0:
        problems.append("per_device_batch_size must be positive")
    return problems


def export(job: Job) -> LaunchConfig:
    """The YAML of the layout, and a launcher that passes the same keys as MaxText's ``key=value`` overrides of
    ``base.yml`` (``python3 -m MaxText.train src/MaxText/configs/base.yml k=v ...``), one process per node."""
    from projection.framework import record_of_launch
    from tools.exports.common import launcher_script

    if job.config.framework is None:   # priced as MaxText runs it: the jax record's switch defaults
        job = Job(job.model, job.cluster, job.config.model_copy(update={"framework": record_of_launch(FRAMEWORK).name}))
    options = maxtext_options(job)
    if job.config.finetune is not None:
        job.warnings.append("MaxText fine-tuning loads the base weights with load_parameters_path=PATH: add it")
    body = yaml.safe_dump(options, sort_keys=False).splitlines()
    head = comment_block(job, SOURCE) + [f"# add: {u}" for u in USER_MUST_ADD]
    pairs = [f"{k}={v}" for k, v in options.items()]
    xla = [f'export XLA_FLAGS="${{XLA_FLAGS:-}} {XLA_DP_OVERLAP}"'] if job.switches.overlapped("dp") else []
    run = [*xla, "export JAX_COORDINATOR_ADDRESS=${JAX_COORDINATOR_ADDRESS:-$MASTER_ADDR}",
           "export NNODES NODE_RANK", "KEYS=(", *[f"    {p}" for p in pairs], ")",
           'python3 -m MaxText.train src/MaxText/configs/base.yml "${KEYS[@]}" run_name="${RUN_NAME:-projtune}" \\',
           '    base_output_directory="$CHECKPOINT_DIR" dataset_path="$DATA_PATH" tokenizer_path="$TOKENIZER"']
    launcher = launcher_script(job, SOURCE + "; this launcher passes the same keys to base.yml (run it on each node)",
                               run)
    return LaunchConfig(framework="maxtext", text="\n".join(head + body) + "\n", options=options,
                        warnings=job.warnings, assumptions=job.assumptions, user_must_add=USER_MUST_ADD,
                        command="python3 -m MaxText.train " + job.stem() + ".maxtext.yml",
                        filename=job.stem() + ".maxtext.yml", launcher=launcher,
                        launcher_filename=job.stem() + ".maxtext.sh")
