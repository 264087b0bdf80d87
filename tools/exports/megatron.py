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

from typing import Any

from projection.training_config import TrainingConfig
from tools.exports.common import Job, LaunchConfig, comment_block

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
SOURCE = "flags: NVIDIA/Megatron-LM megatron/training/arguments.py (pretrain_gpt.py)"
USER_MUST_ADD = ["data: --data-path PREFIX [--split 99,1,0] (or --mock-data)",
                 "tokenizer: --tokenizer-type HuggingFaceTokenizer --tokenizer-model PATH",
                 "schedule: --train-iters N --lr LR --lr-decay-style cosine --lr-warmup-iters N",
                 "checkpoints: --save DIR --load DIR --save-interval N"]


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
    d["normalization"] = "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"
    if m.gated_mlp and m.activation == "silu":
        d["swiglu"] = True
    elif m.activation == "relu2":
        d["squared_relu"] = True
    if not m.tie_embeddings:
        d["untie_embeddings_and_output_weights"] = True
    if not m.linear_bias:
        d["add_bias_linear"] = False
        if m.attention_bias:
            d["add_qkv_bias"] = True
    if m.qk_norm:
        d["qk_layernorm"] = True
    if m.is_moe:
        d.update(_moe_dests(job))
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

    Full: block + N recomputes the first N layers of each stage; uniform + 1 recomputes every layer.
    Megatron-LM and Megatron-Bridge (``model.`` overrides) share these TransformerConfig fields.
    """
    if c.recompute == "selective":
        return {"recompute_granularity": "selective", "recompute_modules": list(c.recompute_modules)}
    if c.recompute == "full":
        return {"recompute_granularity": "full",
                "recompute_method": "uniform" if c.recompute_num_layers is None else "block",
                "recompute_num_layers": 1 if c.recompute_num_layers is None else c.recompute_num_layers}
    return {"recompute_granularity": None}


def parallel_dests(job: Job) -> dict[str, Any]:
    """Parallel sizes, batch, precision, recompute, optimizer sharding and overlap as Megatron-LM dests."""
    c, layers = job.config, job.model.num_layers
    d: dict[str, Any] = {"tensor_model_parallel_size": c.tp, "pipeline_model_parallel_size": c.pp}
    stages = c.pp * c.vpp
    if c.pp > 1 and layers % stages and (layers + 2) % stages == 0:
        d["account_for_embedding_in_pipeline_split"] = True
        d["account_for_loss_in_pipeline_split"] = True
    if c.vpp > 1:
        d["num_virtual_stages_per_pipeline_rank"] = c.vpp
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
    if c.recompute == "full":
        if c.vpp > 1 and c.recompute_num_layers is not None:
            job.warnings.append("Megatron applies --recompute-num-layers to each virtual chunk; the projection "
                                "applies it to the whole stage")
    d.update(_sharding_dests(job))
    return d


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
    if job.ep_overlap():
        job.assumptions.append(f"the projection hides {p.ep_overlap_fraction:.0%} of expert all-to-all; Megatron "
                               "needs --overlap-moe-expert-parallel-comm (with VPP under PP) to match")
    if c.tp > 1 or c.cp > 1:
        job.assumptions.append("export CUDA_DEVICE_MAX_CONNECTIONS=1 (validate_args requires it with TP or CP "
                               "before Blackwell)")
    return d


def switch_dests(job: Job) -> dict[str, Any]:
    """The run-time switches as Megatron-LM dests: DP overlap (``--overlap-grad-reduce``, with the distributed
    optimizer ``--overlap-param-gather``), ``--no-overlap-p2p-communication`` when PP send/receive is not overlapped
    (``overlap_p2p_comm`` is on by default, interleaved schedule), ``--enable-cuda-graph`` (per-layer graphs)."""
    c, s = job.config, job.switches
    d: dict[str, Any] = {}
    if s.overlapped("dp"):
        d["overlap_grad_reduce"] = True
        if c.zero == 1:
            d["overlap_param_gather"] = True
    if c.pp > 1 and c.vpp > 1 and not s.overlapped("pp"):
        d["overlap_p2p_comm"] = False
    if s.cuda_graphs:
        d["enable_cuda_graph"] = True
        job.assumptions.append("CUDA graphs replay each transformer layer (--enable-cuda-graph): one host launch per "
                               "layer pass in the projection")
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
        elif isinstance(value, str) and any(ch in value for ch in "[], "):
            lines.append(f"{flag} '{value}'")
        else:
            lines.append(f"{flag} {value}")
    return lines


def export(job: Job) -> LaunchConfig:
    dests = megatron_dests(job)
    body = flags(dests)
    options = {flag_of(k, v): v for k, v in dests.items()}
    head = comment_block(job, SOURCE)
    text = "\n".join(head + [f"# add: {u}" for u in USER_MUST_ADD]
                     + [line + " \\" for line in body[:-1]] + body[-1:]) + "\n"
    command = "torchrun --nproc-per-node {n} pretrain_gpt.py {args}".format(
        n=min(job.cluster.gpus_per_node, job.cluster.num_gpus), args=" ".join(body))
    return LaunchConfig(framework="megatron", text=text, options=options, warnings=job.warnings,
                        assumptions=job.assumptions, user_must_add=USER_MUST_ADD, command=command,
                        filename=job.stem() + ".megatron.args")
