"""Megatron-LM command line: model, parallel sizes, VPP, SP, optimizer sharding, recompute, FP8, MoE, overlap.

Options are kept as Megatron-LM argparse *dests* (``tensor_model_parallel_size``), the names
Primus overrides use; :func:`flags` renders them as the command-line flags of
``megatron/training/arguments.py`` (NVIDIA/Megatron-LM; ``--fp8-format`` has dest ``fp8``,
``--disable-bias-linear`` sets ``add_bias_linear`` False, ``--no-gradient-accumulation-fusion``
sets ``gradient_accumulation_fusion`` False).  Rules the layout must meet are in
:mod:`tools.framework_rules`; the tests build megatron-core's ``TransformerConfig`` and rank
generators from these dests.
"""

from __future__ import annotations

import shlex
from typing import Any

from projection.training_config import TrainingConfig
from tools.exports.common import Job, LaunchConfig, comment_block
from tools.exports.pipeline_split import megatron_split_dests

FRAMEWORK = "megatron"
"""The launch framework this module exports to (tools/exports/__init__.py registers it under this name)."""
# Precision -> Transformer Engine FP8 recipe (--fp8-recipe choices: tensorwise, delayed, mxfp8, blockwise, custom).
# "fp8" is per-tensor current scaling ("tensorwise", Float8CurrentScaling): what the projection prices
# (projection/workload.py CAST_BYTES_PER_ELEMENT) and what Megatron-Bridge / NeMo print as FP8-CS.
MEGATRON_FP8_RECIPE = {"fp8": "tensorwise", "fp8-blockwise": "blockwise", "mxfp8": "mxfp8"}
# dest -> flag where the flag is not --<dest with dashes> (value is the dest value the flag sets).
SPECIAL_FLAGS: dict[tuple[str, Any], str] = {
    ("add_bias_linear", False): "--disable-bias-linear",
    ("gradient_accumulation_fusion", False): "--no-gradient-accumulation-fusion",
    ("overlap_p2p_comm", False): "--no-overlap-p2p-communication",
}
RENAMED = {"fp8": "--fp8-format"}
SHELL_SPECIAL = frozenset("[], |()*;&<>$'\"\\`")   # a value with one of these is shell-quoted
SOURCE = "flags: NVIDIA/Megatron-LM megatron/training/arguments.py (pretrain_gpt.py)"
USER_MUST_ADD = ["data: DATA_PATH (a Megatron prefix ..._text_document; or replace --data-path by --mock-data)",
                 "tokenizer: TOKENIZER (Hugging Face name or path)", "checkpoints: CHECKPOINT_DIR",
                 "schedule: TRAIN_ITERS, LR, WARMUP_ITERS (defaults are placeholders for a smoke run)"]


def model_dests(job: Job) -> dict[str, Any]:
    """Architecture of the model as Megatron-LM dests."""
    m, c = job.model, job.config
    d: dict[str, Any] = {"num_layers": m.num_layers, "hidden_size": m.hidden_size,
                         "ffn_hidden_size": m.ffn_hidden_size, "num_attention_heads": m.num_attention_heads}
    if m.uses_mla:
        d.update({"multi_latent_attention": True, "q_lora_rank": m.q_lora_rank or None,
                  "kv_lora_rank": m.kv_lora_rank, "qk_head_dim": m.head_dim - m.qk_rope_head_dim,
                  "qk_pos_emb_head_dim": m.qk_rope_head_dim, "v_head_dim": m.v_head_dim})
        if d["q_lora_rank"] is None:
            del d["q_lora_rank"]
    else:
        if m.num_kv_heads != m.num_attention_heads:
            d["group_query_attention"] = True
            d["num_query_groups"] = m.num_kv_heads
        if m.head_dim * m.num_attention_heads != m.hidden_size:
            d["kv_channels"] = m.head_dim
    d["seq_length"] = c.seq_len
    d["max_position_embeddings"] = max(c.seq_len, m.learned_positions or 0)
    d["position_embedding_type"] = "learned_absolute" if m.learned_positions else "rope"
    d.update(_rope_and_window_dests(job))
    d["normalization"] = "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"
    if m.model_type == "gpt_oss":
        # gpt-oss: clamped SwiGLU with alpha 1.702 and (linear + 1) (Megatron-LM examples/gptoss/02_train.sh)
        # and a learned attention sink per head (softmax_type learnable)
        d.update({"quick_geglu": True, "glu_linear_offset": 1.0, "softmax_type": "learnable"})
    elif m.gated_mlp and m.activation == "silu":
        d["swiglu"] = True
    elif m.activation == "relu2":
        d["squared_relu"] = True
    if m.activation_clamp:
        d["activation_func_clamp_value"] = m.activation_clamp
    if not m.tie_embeddings:
        d["untie_embeddings_and_output_weights"] = True
    if not m.linear_bias and not (m.attention_bias and m.expert_bias):
        # Megatron has one switch for every linear's bias (add_bias_linear, default on) and one for q/k/v
        # (add_qkv_bias); gpt-oss has biases on attention and expert linears alike: the default
        d["add_bias_linear"] = False
        if m.attention_bias:
            d["add_qkv_bias"] = True
    if m.qk_norm:
        d["qk_layernorm"] = True
    if m.is_moe:
        d.update(_moe_dests(job))
    return d


def _rope_and_window_dests(job: Job) -> dict[str, Any]:
    """Rotary base (the catalog config's ``rope_theta``; Megatron's default is 10000) and sliding windows.

    Windows: ``--window-size W-1,0`` for a Hugging Face ``sliding_window`` W (the window counts the token itself;
    Megatron-LM examples/gptoss/02_train.sh writes 127,0 for gpt-oss' 128) and ``--window-attn-skip-freq`` as the
    per-layer list (1 = sliding window, 0 = full attention, arguments.py moe_freq_type).
    """
    from projection.model_spec import catalog_config

    m, d = job.model, {}
    if not m.learned_positions:
        theta = catalog_config(m.name).get("rope_theta")
        if theta is None:
            job.warnings.append("the model's rotary base (rope_theta) is not in the catalog entry: add --rotary-base "
                                "from its config.json (Megatron's default is 10000)")
        else:
            d["rotary_base"] = int(float(theta))
    windows = [w for w in m.attention_windows if w]
    if windows:
        if len(set(windows)) > 1:
            job.warnings.append("layers have different window sizes; Megatron takes one (the largest is written)")
        d["window_size"] = f"{max(windows) - 1},0"
        if not all(m.attention_windows):
            d["window_attn_skip_freq"] = "[" + ",".join("1" if w else "0" for w in m.attention_windows) + "]"
    return d


def _moe_dests(job: Job) -> dict[str, Any]:
    m, c = job.model, job.config
    d: dict[str, Any] = {"num_experts": m.num_experts, "moe_router_topk": m.top_k,
                         "moe_ffn_hidden_size": m.moe_ffn_hidden_size, "moe_grouped_gemm": True,
                         "moe_router_load_balancing_type": "aux_loss"}
    if m.num_shared_experts:
        d["moe_shared_expert_intermediate_size"] = m.num_shared_experts * m.shared_expert_ffn_hidden_size
    if m.moe_layers and not all(m.moe_layers):
        d["moe_layer_freq"] = "[" + ",".join("1" if x else "0" for x in m.moe_layers) + "]"
    d["moe_token_dispatcher_type"] = "flex" if c.moe_dispatcher == "deepep" else c.moe_dispatcher
    if c.moe_dispatcher == "deepep":
        d["moe_enable_deepep"] = True
    if c.moe_routing == "token-drop":
        d["moe_expert_capacity_factor"] = c.moe_capacity_factor or 1.0
        d["moe_pad_expert_input_to_capacity"] = True
    return d


def recompute_dests(c: TrainingConfig) -> dict[str, Any]:
    """Megatron-core recompute settings of a layout (``recompute_granularity`` None = no recompute).

    Full: block + N recomputes the first N layers of each model chunk; uniform + 1 recomputes every layer.
    The projection's ``recompute_num_layers`` counts layers per pipeline stage; with VPP a rank holds ``vpp``
    chunks and megatron-core applies the block count to each (transformer_block.py ``_checkpointed_forward``
    runs per chunk), so the stage count is split over the chunks: ``ceil(N / vpp)`` each (see
    :func:`chunk_recompute_layers`).  Megatron-LM and Megatron-Bridge (``model.`` overrides) share these
    TransformerConfig fields.
    """
    if c.recompute == "selective":
        return {"recompute_granularity": "selective", "recompute_modules": list(c.recompute_modules)}
    if c.recompute == "full":
        return {"recompute_granularity": "full",
                "recompute_method": "uniform" if c.recompute_num_layers is None else "block",
                "recompute_num_layers": 1 if c.recompute_num_layers is None else chunk_recompute_layers(c)}
    return {"recompute_granularity": None}


def chunk_recompute_layers(c: TrainingConfig) -> int:
    """Megatron's per-chunk ``--recompute-num-layers`` for the projection's per-stage count (exact when vpp
    divides it)."""
    return -(-int(c.recompute_num_layers or 0) // c.vpp)


def parallel_dests(job: Job) -> dict[str, Any]:
    """Parallel sizes, batch, precision, recompute, optimizer sharding and overlap as Megatron-LM dests."""
    c, layers = job.config, job.model.num_layers
    d: dict[str, Any] = {"tensor_model_parallel_size": c.tp, "pipeline_model_parallel_size": c.pp}
    d.update(megatron_split_dests(layers, c))
    d["context_parallel_size"] = c.cp
    if job.model.is_moe:
        d["expert_model_parallel_size"] = c.ep
        d["expert_tensor_parallel_size"] = c.etp
    if c.sequence_parallel and c.tp > 1:
        d["sequence_parallel"] = True
    d.update({"micro_batch_size": c.mbs, "global_batch_size": c.gbs})
    d["fp16" if c.precision == "fp16" else "bf16"] = True
    if c.precision in MEGATRON_FP8_RECIPE:
        d["fp8"] = "hybrid"
        d["fp8_recipe"] = MEGATRON_FP8_RECIPE[c.precision]
    d.update({k: v for k, v in recompute_dests(c).items() if v is not None})
    if c.recompute == "full" and c.vpp > 1 and c.recompute_num_layers is not None:
        per_chunk = chunk_recompute_layers(c)
        note = (f"--recompute-num-layers {per_chunk} applies to each of the {c.vpp} virtual chunks of a stage: "
                f"{per_chunk * c.vpp} layers per stage")
        if per_chunk * c.vpp == c.recompute_num_layers:
            job.assumptions.append(note + ", as projected")
        else:
            job.warnings.append(note + f"; the projection recomputes {c.recompute_num_layers}")
    d.update(_sharding_dests(job))
    d.update(_fp8_and_moe_overlap_dests(job))
    if c.finetune == "sft":
        d["finetune"] = True
        job.assumptions.append("SFT: --finetune loads only the model weights of --load (CHECKPOINT_DIR: the "
                               "pretrained checkpoint) and restarts the iteration count; all weights train, as "
                               "projected")
    return d


def _fp8_and_moe_overlap_dests(job: Job) -> dict[str, Any]:
    """``--fp8-param-gather`` where the memory model holds FP8 primary weights, and the expert all-to-all overlap
    where the projection hides it (megatron-core TransformerConfig.__post_init__ rules of
    ``overlap_moe_expert_parallel_comm``: EP > 1, alltoall or flex dispatcher, VPP under PP, no full recompute)."""
    c, out = job.config, {}
    if job.fp8_primary_weights():
        if c.zero == 1:
            out["fp8_param_gather"] = True
            job.assumptions.append("FP8 primary weights (--fp8-param-gather): no bf16 copy of the GEMM weights is "
                                   "held and the parameter all-gather moves FP8, as the memory model assumes")
        else:
            why = ("validate_args turns it off under torch FSDP2 (TE >= 2.0)" if c.zero == 3
                   else "it needs the distributed optimizer (validate_args)")
            job.warnings.append(f"the memory model holds FP8 primary weights, but --fp8-param-gather is not "
                                f"written: {why}; this run keeps bf16 weights too")
    if job.ep_overlap():
        blockers = moe_overlap_blockers(c)
        if blockers:
            job.warnings.append(f"the projection hides {job.profile.ep_overlap_fraction:.0%} of expert all-to-all, "
                                "but Megatron cannot turn on --overlap-moe-expert-parallel-comm here ("
                                + "; ".join(blockers) + "): that comm is exposed")
        else:
            out["overlap_moe_expert_parallel_comm"] = True
            job.assumptions[:] = [a for a in job.assumptions if "overlap-moe-expert-parallel-comm" not in a]
            job.assumptions.append(f"expert all-to-all overlaps compute (--overlap-moe-expert-parallel-comm; the "
                                   f"projection hides {job.profile.ep_overlap_fraction:.0%} of it)")
    return out


def _sharding_dests(job: Job) -> dict[str, Any]:
    c, p = job.config, job.profile
    d: dict[str, Any] = {}
    if c.zero == 3:
        # validate_args: --use-torch-fsdp2 needs no gradient-accumulation fusion and a torch_dist/torch_dcp checkpoint.
        d.update({"use_torch_fsdp2": True, "gradient_accumulation_fusion": False, "ckpt_format": "torch_dist"})
        job.assumptions.append("FSDP2 prefetches parameter all-gathers under compute (the projection hides "
                               f"{p.dp_overlap_fraction:.0%} of FSDP comm); export CUDA_DEVICE_MAX_CONNECTIONS=8")
        return d
    if c.zero == 1:
        d["use_distributed_optimizer"] = True
    d.update(switch_dests(job))
    if job.switches.overlapped("dp"):
        job.assumptions.append(f"the DP gradient reduce{' and parameter all-gather' if c.zero == 1 else ''} overlaps "
                               f"the backward pass (the projection hides {p.dp_overlap_fraction:.0%} of DP comm)")
    else:
        job.assumptions.append("DP communication is not overlapped (comm_overlap without dp): fully exposed")
    if job.tp_overlap():
        d["tp_comm_overlap"] = True
        job.assumptions.append(f"TP comm/GEMM overlap (userbuffers) is on (the projection hides "
                               f"{p.tp_overlap_fraction:.0%} of TP comm)")
    elif c.tp > 1:
        job.assumptions.append("TP comm is not overlapped (the profile's tp_overlap_fraction is "
                               f"{p.tp_overlap_fraction:.1%})")
    return d


def moe_overlap_blockers(c: TrainingConfig) -> list[str]:
    """Why megatron-core refuses ``overlap_moe_expert_parallel_comm`` for a layout (empty = allowed)."""
    from projection.switches import ep_overlap_blockers

    return ep_overlap_blockers(c)


def device_connections(job: Job) -> dict[str, str]:
    """CUDA_DEVICE_MAX_CONNECTIONS as validate_args wants it: 1 with TP or CP (before Blackwell), more than 1
    with torch FSDP2 or the expert all-to-all overlap."""
    c = job.config
    if c.zero == 3 or (job.ep_overlap() and c.tp == 1 and c.cp == 1):
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}
    if c.tp > 1 or c.cp > 1:
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    return {}


def switch_dests(job: Job) -> dict[str, Any]:
    """The run-time switches as Megatron-LM dests: DP overlap (``--overlap-grad-reduce``, with the distributed
    optimizer ``--overlap-param-gather``), ``--no-overlap-p2p-communication`` when PP send/receive is not overlapped
    (``overlap_p2p_comm`` is on by default, interleaved schedule), ``--cuda-graph-impl local`` (per-layer graphs)."""
    c, s = job.config, job.switches
    d: dict[str, Any] = {}
    if s.overlapped("dp"):
        d["overlap_grad_reduce"] = True
        if c.zero == 1:
            d["overlap_param_gather"] = True
    if c.pp > 1 and c.vpp > 1 and not s.overlapped("pp"):
        d["overlap_p2p_comm"] = False
    if s.cuda_graphs:
        # megatron-core 0.16.1: --enable-cuda-graph is deprecated ("use --cuda-graph-impl=local instead",
        # megatron/training/arguments.py validate_args); the default --cuda-graph-scope (empty) captures whole layers
        d["cuda_graph_impl"] = "local"
        job.assumptions.append("CUDA graphs replay each transformer layer (--cuda-graph-impl local, whole-layer "
                               "scope): one host launch per layer pass in the projection; their static buffers are "
                               "in the memory projection")
    if not s.overlapped("cp") and c.cp > 1:
        job.warnings.append("Transformer Engine always overlaps the context-parallel ring exchange: comm_overlap "
                            "without cp cannot be set in Megatron-LM")
    return d


def megatron_dests(job: Job) -> dict[str, Any]:
    """Every Megatron-LM dest of the layout: model, then parallel settings."""
    return model_dests(job) | parallel_dests(job)


def flag_of(dest: str, value: Any) -> str:
    """The command-line flag that sets ``dest`` to ``value``."""
    special = SPECIAL_FLAGS.get((dest, value)) if isinstance(value, bool) else None
    return special or RENAMED.get(dest) or "--" + dest.replace("_", "-")


def flags(dests: dict[str, Any]) -> list[str]:
    """Command-line lines, one flag (and its value) each."""
    lines = []
    for dest, value in dests.items():
        flag = flag_of(dest, value)
        if isinstance(value, bool):
            lines.append(flag)
        elif isinstance(value, list):
            lines.append(f"{flag} {' '.join(str(v) for v in value)}")
        elif isinstance(value, str) and any(ch in value for ch in SHELL_SPECIAL):
            lines.append(f"{flag} {shlex.quote(value)}")     # e.g. a pipeline layout 'Et|(tt|)*30mL'
        else:
            lines.append(f"{flag} {value}")
    return lines


# What the launcher adds after the layout: data, tokenizer, schedule and checkpoints (real Megatron-LM flags).
RUN_ARGS = ['--data-path "$DATA_PATH"', "--split 99,1,0", "--tokenizer-type HuggingFaceTokenizer",
            '--tokenizer-model "$TOKENIZER"', '--train-iters "$TRAIN_ITERS"', '--lr "$LR"', "--min-lr 0.0",
            "--lr-decay-style cosine", '--lr-warmup-iters "$WARMUP_ITERS"', '--save "$CHECKPOINT_DIR"',
            '--load "$CHECKPOINT_DIR"', "--save-interval 1000", "--log-interval 10"]
ENTRY = "pretrain_gpt.py"


def export(job: Job) -> LaunchConfig:
    """A runnable bash launcher: the layout as a LAYOUT_ARGS array, torchrun on each node, data and tokenizer
    as <placeholders>."""
    from tools.exports.common import launcher_script, torchrun_words

    dests = megatron_dests(job)
    body = flags(dests)
    options = {flag_of(k, v): v for k, v in dests.items()}
    run = ["TRAIN_ITERS=${TRAIN_ITERS:-1000}  # your schedule", "LR=${LR:-3.0e-4}",
           "WARMUP_ITERS=${WARMUP_ITERS:-100}", "", "LAYOUT_ARGS=(", *[f"    {line}" for line in body], ")",
           f"{torchrun_words(job)} \\", f'    {ENTRY} "${{LAYOUT_ARGS[@]}}" \\',
           *[f"    {arg} \\" for arg in RUN_ARGS[:-1]], f"    {RUN_ARGS[-1]}"]
    text = launcher_script(job, SOURCE + f"; entry point {ENTRY} (run from the Megatron-LM checkout)", run,
                           env=device_connections(job))
    filename = job.stem() + ".megatron.sh"
    return LaunchConfig(framework="megatron", text=text, options=options, warnings=job.warnings,
                        assumptions=job.assumptions, user_must_add=USER_MUST_ADD, command=f"bash {filename}",
                        filename=filename, launcher=text, launcher_filename=filename)
