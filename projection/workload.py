"""Per-layer workload of one micro-batch on one GPU: compute times and the comm each layer issues.

Shape legend: T = tokens per micro-batch on this GPU before TP splitting (mbs * seq_len/cp),
h = hidden size, t = TP degree, f = MLP intermediate size, k = experts per token.
GEMM shapes are Megatron-core's column/row-parallel linears: QKV (T x h) @ (h x (q+2kv)/t),
output projection (T x q/t) @ (q/t x h), fc1 (T x h) @ (h x 2f/t) gated, fc2 (T x f/t) @ (f/t x h).
Routed experts run as one grouped GEMM over the experts local to the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from projection.collectives import (GroupPlacement, NetworkParams, all_gather_s, all_reduce_s, all_to_all_s,
                                   p2p_s, reduce_scatter_s)
from projection.compute import (GPU_KERNEL_GAP_S, DeviceRates, attention_fwd_bwd_s, gemm_fwd_bwd_s, streaming_s,
                                unfused_attention_fwd_bwd_s)
from projection.layout import ParallelDims
from projection.framework import WorkloadTraits, framework_record, memory_traits
from projection.model_spec import ModelSpec
from projection.training_config import TrainingConfig

ACT_BYTES = 2                  # bf16 activations
DEEPEP_A2A_FACTOR = 0.65       # Primus projection: DeepEP all-to-all efficiency vs plain A2A (notes Sec. 2.2)
# Dispatchers whose token exchange runs in dedicated communication kernels (DeepEP; NVIDIA HybridEP, Megatron-core's
# flex dispatcher backend, "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep", which like
# DeepEP fuses the permutation into TMA/RDMA dispatch and combine kernels on a few SMs and sends each token once per
# destination node, NVIDIA/Megatron-LM megatron/core/transformer/moe/README.md "DeepEP / HybridEP"): both move the
# same bytes as the all-to-all (one bf16 row per routed token copy, dispatch and combine) at DEEPEP_A2A_FACTOR of
# its time.  No public HybridEP-vs-DeepEP bandwidth ratio for these fabrics was found, so HybridEP takes DeepEP's.
KERNEL_DISPATCHERS = frozenset({"deepep", "hybridep"})
# Dispatchers that permute tokens into per-expert order inside the dispatch kernel and restore them inside the combine
# kernel, so the MoE block runs no separate permute / unpermute pass.  HybridEP: "dispatch(): Permute tokens for
# communication, perform all-to-all communication, and permute tokens for experts in single step; combine(): Unpermute
# tokens for communication, perform all-to-all communication, and unpermute tokens for attention in single step"
# (NVIDIA/Megatron-LM megatron/core/transformer/moe/token_dispatcher.py ``_HybridEPManager``, whose
# ``get_permuted_hidden_states_by_experts`` / ``get_restored_hidden_states_by_experts`` return the rows untouched; at
# 0d8e0714 and b0cc2706, the Megatron-LM submodules of Megatron-Bridge v0.2.0 and v0.3.0, releases 25.11 and 26.02).
# DeepEP is not one of them: ``_DeepepManager`` still calls ``permute`` / ``unpermute`` on the received rows there,
# as the alltoall dispatcher does.
PERMUTE_FUSED_DISPATCHERS = frozenset({"hybridep"})
# Bytes per routed row element of the separate permute + unpermute: each reads and writes one bf16 row (forward).
PERMUTE_PASS_BYTES = 4 * ACT_BYTES
# Element-wise kernels per layer forward, counted from Megatron-core's TransformerLayer with Transformer
# Engine fusions (2 norms, rope, 2 residual adds, activation, casts, ...); an estimate, not a trace.
# They multiply the profile's fitted kernel_overhead_s, so the count only sets how that cost scales.
KERNELS_PER_LAYER_FWD = 14
KERNELS_PER_MOE_FWD = 12       # router, top-k, permute, unpermute, grouped-GEMM setup (same kind of estimate)
# Grouped-GEMM efficiency falls with the tokens each expert gets: eff(M) = moe_efficiency * M / (M + M_HALF).
# Fitted on ../shared/data/microbench/primus-turbo-mi300x/grouped_gemm.json (288 MoE shapes, MI300X): against
# the tile/wave model of projection/compute.py the achieved fraction is 0.353 at M = 512 tokens per expert,
# 0.381 at 1024 and 0.394-0.400 from 2048 up (median over shapes), i.e. 0.90 of the plateau at M = 512.
GROUPED_GEMM_HALF_M = 60.0
# Frameworks whose token-drop MoE path dispatches and combines with one-hot einsums (GShard style):
# MaxText src/MaxText/layers/moe.py ``dense_matmul`` with capacity_factor > 0 builds dispatch/combine
# masks (B, S, E, C), C = S * top_k * capacity_factor / E, and runs "BSM,BSEC->EBCM" and
# "EBCM,BSEC->BSM" as dense matmuls: 2*S*(E*C)*h FLOPs each per sequence, quadratic in S.
# Their backward (ROCm/maxtext@04646953 src/MaxText/layers/moe.py ``generate_masks``): the combine mask is
# ``softmax_probs[..., None] * one_hot(position)``, differentiable through the router weights, so the combine
# einsum's backward runs both operand gradients (two GEMMs); the dispatch mask is ``combine_mask.astype(bool)``,
# which carries no gradient, so the dispatch einsum's backward is the input gradient alone (one GEMM).
# The expert matmuls of that path are einsums with the local experts as a batch dimension over equal,
# capacity-padded shapes ("EBCM,EMH -> EBCH", "EBCH,EHM -> EBCM", same file): XLA lowers a dot with batch
# dimensions to one batched BLAS call (openxla/xla matmul_utils MatrixLayout.batch_size, equal per-batch
# shapes), so they run at the dense GEMM efficiency under the tile/wave model, not the ragged grouped-GEMM
# efficiency (moe_efficiency, GROUPED_GEMM_HALF_M) of a dropless grouped GEMM.
# (WorkloadTraits.einsum_token_drop_dispatch of the framework record, projection/framework.py)
# Frameworks whose dropless expert-parallel path receives into a worst-case buffer: MaxText's sparse_matmul
# (src/MaxText/layers/moe.py) sizes the ragged_all_to_all output as ep * per_device_batch * seq_len *
# min(local experts, top_k) rows ("In the worst case, all of the global input data is assigned to each expert
# in the current shard"), zero-initialised, and local_permute sorts the whole buffer (jnp.repeat with
# total_repeat_length=inputs.shape[0], then a gather), as do the gated activation and the unpermute after the
# expert GEMMs; only the grouped GEMMs stop at the received rows (group_sizes).  So every row of the buffer,
# not only the routed ones, is written once and moved by the local permute, unpermute and activation.
# (WorkloadTraits.ragged_worst_case_buffer)
# Frameworks whose DeepEP path (moe_dispatcher "deepep") also receives into a worst-case buffer: MaxText's
# Primus-Turbo DeepEP integration (``RoutedMoE.sparse_matmul`` with use_deepep_dispatch, the patch branches
# yihuang/moe-turbo-gmm-and-deepep{,-v2,-v3} of ROCm/maxtext that evals/data/maxtext-mi355x-deepseek-v3.yaml ran)
# needs static shapes, so the intranode dispatch returns ``num_worst_tokens`` = ep * tokens rows, of which only the
# received ones are written ("DeepEP allocates num_worst_tokens rows but only populates the first actual_num_recv",
# ROCm/maxtext@3f9775c1 tests/deepep_moe_test.py DeepEPBufferTruncationTest), and ``deepep_fan_out`` expands them
# K-way to (num_recv * top_k, h) (same file, DeepEPFanOutTest: ``expanded_x.shape == (num_recv * num_topk,
# hidden)``, padding rows carry expert id num_local_experts and sort last); the pdbs sweep's profile names that
# tensor bf16[N*K, H] = [1.57 M, 7168] at per-device batch 6, i.e. 8 * 6 * 4096 * 8 rows (AMD-AGI/maxtext-slurm
# branch yihuang/moe @ be4716fc, deepseek3-671b-pdbs-sweep.md, v1/v2/v3 drill-down).  Per forward, over every row
# of that buffer: the fan-out gather composed with the sort (v2/v3: ``recv_x[token_indices[sort_idx]]``) and the
# valid-rows ``jnp.where`` read and write it once (2 passes, h wide), and after the expert GEMMs the unsort gather
# feeds the top-K weighted fan-in reduction (1 read pass; its output is one fp32 row per received token,
# ``float32_weight_sum=True`` by default).  The gathers run fused into their consumers: the DeepEP columns of the
# same profile show no standalone gather kernels (``loop_gather_fusion`` 0.00 s/step against 1.79-3.47 s on the
# ragged path) but a ``loop_select_fusion`` for the valid-rows mask.  No zero fill: rows past the received
# ones are masked, not initialised.  The gated activation runs over the whole buffer, as on the ragged path.
# (WorkloadTraits.deepep_worst_case_buffer)
DEEPEP_BUFFER_PASSES = 3           # h-wide bf16 passes over every buffer row per forward (see above)
FAN_IN_BYTES = 4                   # fp32 fan-in output per received token element
# HBM bytes moved per element cast to a low-precision GEMM input, by recipe (Transformer Engine):
# - fp8 (per-tensor current scaling, Float8CurrentScaling): the recipe Megatron-Bridge and NeMo print as
#   'FP8-CS' / 'FP8 (per-tensor current scaling)' and torchao's dynamic 'tensorwise' scaling.  Two reads of
#   the bf16 input (2 + 2 B: "FP8 Current Scaling requires two tensor reads per quantization: one to compute
#   amax, one to cast", TE docs, features/low_precision_training/fp8_delayed_scaling) and the row-wise and
#   transposed FP8 copies the weight-gradient GEMM needs (1 + 1 B, transformer_engine/common/transpose/
#   cast_transpose.cu).  Delayed scaling saves the amax read (4 B); TrainingConfig cannot name it yet.
#   On chips whose FP8 GEMMs take non-TN layouts (projection.compute.NON_TN_FP8_GEMM_FAMILIES: datacenter
#   Blackwell) Transformer Engine writes the row-wise copy only, which the backward GEMMs read in NN / NT layouts
#   (FP8_TRANSPOSE_BYTES less: 5 B; cast_bytes_per_element).
# - fp8-blockwise (1x128 / 128x128 scales, DeepSeek-V3 style, Float8BlockScaling): one pass - each block's
#   amax is computed inside the cast kernel (TE Float8BlockQuantizer::quantize is a single nvte_quantize_v2,
#   transformer_engine/pytorch/csrc/quantizer.cpp) - writing both 1-D quantised copies with an fp32 scale per
#   128 elements: 2 + 2 x (1 + 4/128) B.
# - mxfp8 (OCP MX, E8M0 scale per 32 elements): row- and column-wise quantisation in one pass, each copy
#   with its 1-byte scale per 32 elements: 2 + 2 x (1 + 1/32) B.
# - nvfp4 (E4M3 scale per 16 FP4 elements + a per-tensor fp32): 2 + 2 x (0.5 + 1/16) B, plus the random
#   Hadamard transform TE applies to the weight-gradient operands (one more bf16 read and write, 4 B).
# Context parallelism in PyTorch's ring attention (torch.distributed.tensor.experimental.context_parallel, file
# torch/distributed/tensor/experimental/_attention.py, the implementation torchtitan's CP uses): every ring step
# after the first is a separate SDPA call whose partial output is merged outside the kernel, unfused and in
# fp32 (_SDPAMerger: out.to(fp32), out - sigmoid(lse_b - lse) * (out - out_b), torch.cat in _partial_update),
# and each step re-concatenates K and V (torch.cat) for the rotater.  The backward accumulates dQ, dK, dV in
# fp32 buffers (grad += grad_, _partial_update's torch.cat) and concatenates dK, dV in fp32 for the all-to-all
# send each step.  HBM bytes per element per ring step, counted from those lines (read + write):
# - forward, per output element: fp32 upcast 6, merge arithmetic 32 (three element-wise passes on fp32)
#   = 38 on a full-query step, 19 + 8 (the cat) on a half-query ("partial") step: 32 on average;
# - forward, per K/V element: torch.cat 4;
# - backward, per K/V element: torch.cat 4, fp32 accumulate 10 (+ the cat on half the steps: 11.5 on
#   average), fp32 torch.cat for the send 8 = 23.5;
# - backward, per query element: fp32 accumulate 11.5 (as dK/dV).
# Megatron-core / Transformer Engine fuse the correction into their CP kernels, so only these frameworks pay.
# (WorkloadTraits.ring_sdpa_context_parallel)
RING_MERGE_FWD_BYTES_PER_OUT = 32.0
RING_MERGE_FWD_BYTES_PER_KV = 4.0
RING_MERGE_BWD_BYTES_PER_KV = 23.5
RING_MERGE_BWD_BYTES_PER_Q = 11.5
RING_MERGE_KERNELS_FWD = 8     # cat, upcast, sub, sigmoid, mul, sub, logsigmoid, cat (per ring step)
RING_MERGE_KERNELS_BWD = 10    # cat, 3 accumulates, 2 partial-update cats, grad cat, zeros, chunks
# torchtitan's Llama attention repeats K/V heads to the query heads before SDPA (torchtitan/models/llama/
# model.py: "repeat k/v heads if n_kv_heads < n_heads", keys = repeat_kv(xk, self.n_rep)), so the ring
# exchanges and merges K/V at the full head count, not the GQA one.
# (WorkloadTraits.repeats_kv_heads)
# Frameworks whose attention runs unfused (no flash kernel): DeepSpeed's 2021 GPT training (Narayanan et al.
# SC'21 comparison) ran Megatron-LM's CoreAttention (projection.compute.unfused_attention_fwd_bwd_s), as its
# memory traits already say (projection.memory_frameworks.DEEPSPEED, flash_attention=False).  Not MaxText:
# the development runs set ``attention: "cudnn_flash_te"`` (AMD-AGI/maxtext-slurm@be4716fc
# configs/deepseek3-671b.gpu.yml), Transformer Engine's fused attention, which on ROCm reaches the AITER/CK
# flash kernels (train_env.sh: NVTE_FUSED_ATTN_CK=1, NVTE_CK_USES_FWD_V3=1, NVTE_CK_USES_BWD_V3=1; the sweep's
# pdbs=6 profile lists ``aiter::fmha_*`` kernels), so its attention is flash attention at attention_efficiency.
# (The framework's default attention backend now says this: FrameworkProfile.default_attention_backend, "unfused" in
# projection/catalog/frameworks/deepspeed.yaml; a run's attention_backend overrides it, DeviceRates.unfused_attention.)
CAST_BYTES_PER_ELEMENT = {"fp8": 2.0 + 2.0 + 2.0, "fp8-blockwise": 2.0 + 2.0 * (1 + 4 / 128),
                          "mxfp8": 2.0 + 2.0 * (1 + 1 / 32), "nvfp4": 2.0 + 2.0 * (0.5 + 1 / 16) + 4.0}
FP8_TRANSPOSE_BYTES = 1.0   # the transposed per-tensor FP8 copy a TN-only chip needs, B per element (see above)
# GPU operations one quantisation of a GEMM input runs on its stream, by recipe (NVIDIA/TransformerEngine@v2.7):
# current scaling (Float8CurrentScalingQuantizer::quantize_impl, pytorch/csrc/quantizer.cpp) runs nvte_compute_amax,
# which zeroes the amax with ``cudaMemsetAsync`` before its reduction kernel (launch_amax_kernel,
# common/recipe/current_scaling.cu), then nvte_compute_scale_from_amax (a <<<1, 1>>> kernel) and nvte_quantize_v2:
# 4 dependent operations, each waiting for the one before; the block recipes (Float8BlockQuantizer,
# MXFP8Quantizer) and NVFP4 quantise in one kernel.  A grouped GEMM's input is quantised expert by expert: TE's
# split_quantize fuses the casts of several tensors into one launch (nvte_multi_cast_transpose) only for delayed
# scaling (extensions/cast.cpp multi_tensor_quantize_impl: "Currently only have fused kernel for FP8 delayed
# scaling"), so each local expert's split pays the recipe's operations.  Same code at the pinned revision the
# grouped-GEMM notes below cite.
CAST_KERNELS_PER_TENSOR = {"fp8": 4, "fp8-blockwise": 1, "mxfp8": 1, "nvfp4": 1}
# Amax reduction of per-tensor current scaling under sequence parallelism: a column-parallel linear's input quantizer
# and a row-parallel linear's grad-output quantizer all-reduce their amax (one fp32, MAX) over the TP group before the
# scale is computed (TE v2.7 module/linear.py, layernorm_linear.py, layernorm_mlp.py
# ``_customize_quantizers_float8_current_scaling``: ``with_amax_reduction = True``, ``amax_reduction_group =
# self.tp_group`` when ``sequence_parallel``; quantizer.cpp: ``amax_reduction_group->allreduce(...)->wait()``).  The
# cast waits for it, so it is latency on the layer's path: per layer forward one per column-parallel TE linear (QKV,
# and FC1 of a dense MLP; an MoE block's experts are GroupedLinear, which has no TP under current scaling) and, in the
# backward, one per row-parallel linear (output projection, FC2), charged as the forward as every TP collective is.
AMAX_BYTES = 4.0
# Frameworks whose MoE grouped GEMM is Transformer Engine's GroupedLinear (Megatron-core moe_grouped_gemm with the
# TE backend): general_grouped_gemm runs one cuBLAS GEMM per local expert, round-robin on TE's compute streams
# (NVIDIA/TransformerEngine@5c62f728 transformer_engine/common/gemm/cublaslt_gemm.cu multi_stream_cublas_gemm:
# ``for (int i = 0; i < num_gemms; i++) ... get_compute_stream(i % num_streams)``; num_streams = 4 in
# transformer_engine/common/include/transformer_engine/gemm.h).  Each expert's GEMM is its own kernel with its own
# launch and tail; the 4 streams overlap the tails of consecutive experts, so one grouped GEMM costs
# ceil(experts / 4) kernel overheads on the GPU (not one, as a single fused kernel would) and one host launch
# per expert.  MaxText (ragged_dot / megablox) and torchtitan (torch._grouped_mm) launch one kernel; Primus is left
# out (its Primus-Turbo grouped GEMM, when enabled, is one kernel, and its rows do not say which ran).
# (WorkloadTraits.te_grouped_mlp)
TE_GROUPED_GEMM_STREAMS = 4
# Expert biases under Megatron-core's TEGroupedMLP (gpt-oss: ``add_bias_linear`` on the experts).  linear_fc1 adds
# its bias inside the grouped GEMM (``skip_bias_add=False``), but linear_fc2 is built with ``skip_bias_add=True`` and
# its bias is applied after the GEMM, expert by expert and unfused, weighted by the router probabilities
# (megatron/core/transformer/moe/experts.py ``TEGroupedMLP._apply_bias``, Megatron-core 0.15/0.16, the versions of
# Megatron-Bridge 25.11/26.02):
#     torch.cat([t + b * p for t, b, p in zip(torch.split(out, tokens_per_expert), biases,
#                                              torch.split(probs, tokens_per_expert))])
# Per local expert ``b * p`` materialises an (n x h) tensor (write 2 B per element) and ``t + b*p`` reads both and
# writes the sum (2 + 2 + 2 B); ``torch.cat`` copies the results into one tensor (2 + 2 B): 12 B per routed
# token-copy x hidden element in the forward (bf16 probabilities; fp32 ones would widen the passes), 2 kernels per
# local expert plus the cat.  The backward (autograd of the same ops) is charged as the model charges every
# element-wise pass, twice the forward.  Other frameworks (MaxText, torchtitan) do not run this code.
# (WorkloadTraits.te_grouped_mlp)
EXPERT_BIAS_APPLY_BYTES = 12.0      # HBM bytes per routed token-copy x hidden element, forward (see above)
EXPERT_BIAS_APPLY_KERNELS = 2       # b * p and t + b*p per local expert (plus one torch.cat)
# Clamped gated activation under Megatron-core's TEGroupedMLP (gpt-oss: ``activation_func_clamp_value`` 7.0, the
# model's ``swiglu_limit``).  With ``bias_activation_fusion`` (the gpt-oss provider's setting, Megatron-Bridge
# src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py) the experts call ``weighted_bias_quick_geglu_impl``, whose
# clamps run eagerly before the compiled (``jit_fuser`` = torch.compile) activation kernel
# (megatron/core/fusions/fused_bias_geglu.py, Megatron-core 0.16.1; the same three ops with the limit 7.0 written in
# at NVIDIA/Megatron-LM@034fd2d3):
#     x_glu, x_linear = input.chunk(2, -1)
#     input = torch.cat((x_glu.clamp(min=None, max=limit), x_linear.clamp(min=-limit, max=limit)), -1)
# Per routed token-copy x expert-FFN element (one element of each [n, f] half): the two clamps read and write a
# half each (2 + 2 B, twice) and the cat reads both halves and writes the [n, 2f] result (4 + 4 B): 16 B and 3
# kernels in the forward, beyond the fused kernel's 3 passes the activation is already charged.  The backward
# (ATen clamp_backward: ``where(self <= max, grad, 0)``, and ``where((self >= min).logical_and_(self <= max), ...)``
# for the two-sided clamp, then the chunk's backward concatenating the two half gradients) moves 8 + 14 + 8 = 30 B in
# about 7 kernels, about the twice-the-forward (32 B, 6 kernels) the model charges every element-wise pass.
# (WorkloadTraits.te_grouped_mlp)
ACTIVATION_CLAMP_BYTES = 16.0       # HBM bytes per routed token-copy x expert-FFN element, forward (see above)
ACTIVATION_CLAMP_KERNELS = 3        # two clamps and the cat


# Sequence-parallel all-gathers of a quantised GEMM input move the quantised bytes.  Megatron-core's Transformer
# Engine layer spec fuses the LayerNorm into the QKV and FC1 column-parallel linears (TELayerNormColumnParallelLinear);
# under an FP8 recipe TE's fused LayerNorm writes its output as FP8 and all-gathers that uint8 tensor across the TP
# group (NVIDIA/TransformerEngine@0004dbd0 transformer_engine/pytorch/module/layernorm_linear.py, _LayerNormLinear
# forward: ``ln_out_dtype = torch.uint8 if (fp8 and not return_layernorm_output)``, then
# ``gather_along_first_dim(ln_out, tp_group)``), 1 B per element instead of bf16's 2; the reduce-scatters after the
# row-parallel projection and FC2 carry the bf16 GEMM outputs.  Only the per-tensor FP8 recipe is priced so (the
# cited code path); an MoE layer's MLP input is gathered by its token dispatcher in bf16, so only its attention
# input counts.  The backward is charged as the forward, as before (its wgrad re-gathers stay uncounted).
TP_GATHER_QUANTISED_BYTES = {"fp8": 1.0}
# (WorkloadTraits.te_quantised_tp_gather)


def traits(config: TrainingConfig) -> WorkloadTraits:
    """The workload traits of the config's framework (its record, :mod:`projection.framework`)."""
    return framework_record(config.framework).workload


def tp_gather_bytes(config: TrainingConfig) -> float:
    """Bytes per element of a sequence-parallel all-gather of a GEMM input that the framework quantises before
    gathering (TP_GATHER_QUANTISED_BYTES), else bf16's ACT_BYTES.  Without sequence parallelism the input is
    replicated and the layer all-reduces its bf16 output instead (the caller's choice)."""
    if traits(config).te_quantised_tp_gather:
        return TP_GATHER_QUANTISED_BYTES.get(config.precision, ACT_BYTES)
    return ACT_BYTES


# Eager element-wise code (FrameworkProfile.eager_elementwise: torchtitan, whose job config leaves torch.compile off by
# default: ``--training.compile`` is a store_true flag, pytorch/torchtitan@0011fb90 torchtitan/config_manager.py, and
# the 64-A100 presets of its docs/performance.md set ``compile = false`` with ``norm_type = "rmsnorm"``, not the
# Triton ``fused_rmsnorm``, train_configs/llama2_13b.toml @0c355e6f, llama2_70b.toml @08e53794).  Each ATen op is one
# kernel that reads its inputs from HBM and writes its output back; the bytes per element below are counted from the
# model code (bf16 activations, fp32 where the code upcasts) and, for the backward, from the autograd formulas of
# those ops (pytorch/pytorch@002ca671 torch/csrc/autograd/FunctionsManual.cpp: mul_tensor_backward ``grad *
# other``, pow_backward ``grad * (exp * self.pow(exp - 1))``, mean_backward ``sum_backward(grad).expand / n``;
# a weight's gradient is the product reduced over the tokens, and a tensor used twice has its gradients summed).
# - RMSNorm (torchtitan/models/norms.py @22ac9448: ``output = self._norm(x.float()).type_as(x); output *
#   self.weight``, ``_norm = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)``), per token x hidden
#   element: forward float() 2+4, pow 4+4, mean 4, x * rsqrt 4+4, type_as 4+2, * weight 2+2 = 36 B in 8 kernels
#   (the add and rsqrt are [T, 1]); backward: * weight (grad 2+2, weight grad 2+2+2 and its reduction 2) 12,
#   to-fp32 2+4, * rsqrt (4+4, and the rsqrt grad 4+4+4 with its row sum 4) 24, mean 4, pow (self.pow(1) copy 4+4,
#   * 2 4+4, * grad 4+4+4) 28, summing x's two gradients 4+4+4, to-bf16 4+2 = 92 B in about 15 kernels.
# - RoPE (torchtitan/models/llama/model.py apply_rotary_emb: ``view_as_complex(xq.float()...)``, ``xq_ *
#   freqs_cis``, ``view_as_real(...).type_as(xq)``, the same for xk), per element of q and of k: forward float()
#   2+4, complex multiply 4+4, type_as 4+2 = 20 B in 3 kernels per tensor (the views are free, freqs_cis is a
#   buffer without gradient); backward the same three passes in reverse, 20 B.
# - SwiGLU (FeedForward.forward: ``self.w2(F.silu(self.w1(x)) * self.w3(x))``), per FFN element: forward silu 2+2,
#   product 4+2 = 10 B in 2 kernels; backward both product gradients (4+2 each) and silu_backward (4+2) = 18 B in
#   3 kernels.
# The fused kernels every framework is charged (layer_cost: FUSED_*_BYTES forward, twice that backward) are replaced
# by these; the residual adds are separate kernels under both stacks and stay as charged.  The host dispatch floor
# (host_launch_s) counts these kernels as launches, but it is a max() against the GPU time, not a sum, so nothing is
# charged twice.  Check (after the fact, nothing fitted on it): torchtitan's H100 Llama 3.1 8B eager / torch.compile
# pairs (benchmarks/llama3_h100_202412_torchtitan.md @b5bcd76c, 8 and 128 GPUs, bf16, per-op SAC; left out of the
# fits, seq_len not stated) measure a 1.157 / 1.162 compile speed-up; with the torchtitan default seq_len 8192 this
# term accounts for 1.19 / 1.20 (compile keeps one read and write per fused group, so somewhat less is expected).
EAGER_NORM_BYTES = (36.0, 92.0)       # (forward, backward) HBM bytes per token x hidden element of one RMSNorm
EAGER_ROPE_BYTES = (20.0, 20.0)       # per element of q and of k
EAGER_SWIGLU_BYTES = (10.0, 18.0)     # per FFN (gate) element
EAGER_NORM_KERNELS = (8, 15)
EAGER_ROPE_KERNELS = (6, 6)           # q and k
EAGER_SWIGLU_KERNELS = (2, 3)
# What layer_cost charges the same ops as fused kernels (per element, forward; the backward twice): a norm and the
# rotary embedding read and write their tensor once (TE fused RMSNorm, fused apply_rotary_pos_emb), the fused
# gated activation reads gate and up and writes the product.
FUSED_NORM_BYTES = 2 * ACT_BYTES
FUSED_ROPE_BYTES = 2 * ACT_BYTES
FUSED_GATED_ACT_BYTES = 3 * ACT_BYTES
# repeat_kv (torchtitan/models/llama/model.py: ``unsqueeze(x, dim=3).expand(bs, slen, n_kv_heads, n_rep,
# head_dim).reshape(...)``: a reshape of an expanded tensor copies) materialises K and V at the query head count
# before SDPA when n_rep > 1 (GQA): per token each of K and V reads its kv width and writes the q width (bf16), and
# the backward (expand's gradient, a sum over the repeats) reads the q width and writes the kv width.  Flash and TE
# attention take GQA K/V as they are, so only frameworks with WorkloadTraits.repeats_kv_heads pay.  The copy stays
# under torch.compile (SDPA is an extern kernel that needs its inputs materialised), so it is keyed on the framework,
# not on eager_elementwise.
REPEAT_KV_KERNELS = 2                 # K and V, forward and backward


@dataclass(frozen=True, slots=True)
class EagerPasses:
    """Element-wise work a framework's code adds beyond what layer_cost charges as fused kernels (one layer
    forward of one micro-batch): HBM bytes and kernels of the forward and of the backward, by recompute module."""

    norm_fwd: float = 0.0
    rope_fwd: float = 0.0
    act_fwd: float = 0.0
    repeat_fwd: float = 0.0
    bwd: float = 0.0
    kernels_fwd: int = 0
    kernels_bwd: int = 0

    @property
    def fwd(self) -> float:
        return self.norm_fwd + self.rope_fwd + self.act_fwd + self.repeat_fwd


NO_EAGER_PASSES = EagerPasses()


def eager_elementwise_bytes(model: ModelSpec, config: TrainingConfig, rates: DeviceRates, norm_elements: float,
                            rope_elements: float, act_elements: float, repeat_elements: float) -> EagerPasses:
    """Extra HBM bytes and kernels of a layer's unfused element-wise code (see EAGER_NORM_BYTES).

    ``norm_elements``: token x hidden elements of the two norms together; ``rope_elements``: elements of q and k;
    ``act_elements``: gated-activation (gate) elements; ``repeat_elements``: token x (kv width + q width) elements of
    one repeated tensor (0 without repeat_kv).  Eager passes apply under ``rates.eager_elementwise`` (gated MLPs only
    for the activation); repeat_kv under WorkloadTraits.repeats_kv_heads.
    """
    eager = rates.eager_elementwise
    repeat = repeat_elements if traits(config).repeats_kv_heads else 0.0
    if not eager and repeat <= 0:
        return NO_EAGER_PASSES
    norm = (EAGER_NORM_BYTES[0] - FUSED_NORM_BYTES, EAGER_NORM_BYTES[1] - 2 * FUSED_NORM_BYTES)
    rope = (EAGER_ROPE_BYTES[0] - FUSED_ROPE_BYTES, EAGER_ROPE_BYTES[1] - 2 * FUSED_ROPE_BYTES)
    gated = eager and model.gated_mlp
    act = (EAGER_SWIGLU_BYTES[0] - FUSED_GATED_ACT_BYTES, EAGER_SWIGLU_BYTES[1] - 2 * FUSED_GATED_ACT_BYTES)
    repeat_bytes = 2 * ACT_BYTES * repeat          # K and V
    kernels = (2 * (EAGER_NORM_KERNELS[0] - 1) + EAGER_ROPE_KERNELS[0] - 1 + (EAGER_SWIGLU_KERNELS[0] - 1) * gated,
               2 * (EAGER_NORM_KERNELS[1] - 2) + EAGER_ROPE_KERNELS[1] - 2 + (EAGER_SWIGLU_KERNELS[1] - 2) * gated)
    rk = REPEAT_KV_KERNELS if repeat > 0 else 0
    if not eager:
        return EagerPasses(repeat_fwd=repeat_bytes, bwd=repeat_bytes, kernels_fwd=rk, kernels_bwd=rk)
    return EagerPasses(
        norm_fwd=norm[0] * norm_elements, rope_fwd=rope[0] * rope_elements,
        act_fwd=act[0] * act_elements * gated, repeat_fwd=repeat_bytes,
        bwd=norm[1] * norm_elements + rope[1] * rope_elements + act[1] * act_elements * gated + repeat_bytes,
        kernels_fwd=kernels[0] + rk, kernels_bwd=kernels[1] + rk)


def grouped_gemm_kernels(framework: str, local_experts: int) -> tuple[int, int]:
    """(GPU kernel overheads, host launches) of one grouped GEMM over ``local_experts`` experts, beyond the one
    kernel every GEMM is charged (WorkloadTraits.te_grouped_mlp)."""
    if not framework_record(framework).workload.te_grouped_mlp or local_experts <= 1:
        return 0, 0
    return -(-local_experts // TE_GROUPED_GEMM_STREAMS) - 1, local_experts - 1


def single_expert_gemm(framework: str, local_experts: int) -> bool:
    """True when a GPU's routed-expert GEMMs are ordinary dense GEMMs: one local expert under Transformer Engine.

    Megatron-core builds the experts as TEGroupedMLP (``moe_grouped_gemm``) or SequentialMLP; with one local
    expert (num_experts == ep, e.g. Mixtral 8x7B at EP 8) TEGroupedMLP's GroupedLinear holds ``num_gemms`` = 1
    and TE's ``general_grouped_gemm`` hands that one GEMM to nvte_multi_stream_cublas_gemm, which issues one
    cublasLtMatmul on the first compute stream (NVIDIA/TransformerEngine@5c62f728
    transformer_engine/common/gemm/cublaslt_gemm.cu, WorkloadTraits.te_grouped_mlp); SequentialMLP runs the one
    expert as a plain MLP of TE Linear layers.  Either way it is one ordinary cuBLAS GEMM over all the routed
    rows, priced by the dense tile/wave model at the dense GEMM efficiency, not by the ragged grouped-GEMM
    efficiency (moe_efficiency, GROUPED_GEMM_HALF_M) of several unequal expert GEMMs.  Other frameworks run a
    single-group call through a grouped kernel (torch._grouped_mm, ragged_dot, Primus-Turbo), which keeps it.
    """
    return local_experts == 1 and framework_record(framework).workload.te_grouped_mlp


def routed_expert_efficiency(config: TrainingConfig, rates: DeviceRates, per_expert: float, local_experts: int,
                             einsum_path: bool = False) -> float:
    """Efficiency of the routed experts' GEMMs: batched dense GEMMs (1.0, the tile/wave model) on MaxText's einsum
    path and for a lone TE expert (:func:`single_expert_gemm`), a ragged grouped GEMM otherwise
    (``moe_efficiency`` falling with the tokens per expert, GROUPED_GEMM_HALF_M)."""
    if einsum_path or single_expert_gemm(config.framework, local_experts):
        return 1.0
    return rates.moe_efficiency * per_expert / (per_expert + GROUPED_GEMM_HALF_M)


def expert_bias_apply(model: ModelSpec, config: TrainingConfig, routed: float, local_experts: int
                      ) -> tuple[float, int]:
    """(HBM bytes, kernels) of one forward of TEGroupedMLP's unfused, per-expert fc2 bias add
    (WorkloadTraits.te_grouped_mlp); (0, 0) without expert biases or under another framework.

    ``routed`` token copies this GPU's ``local_experts`` process, each ``hidden_size`` wide.
    """
    if not model.expert_bias or not traits(config).te_grouped_mlp or routed <= 0:
        return 0.0, 0
    return (EXPERT_BIAS_APPLY_BYTES * routed * model.hidden_size,
            EXPERT_BIAS_APPLY_KERNELS * local_experts + 1)


def activation_clamp(model: ModelSpec, config: TrainingConfig, routed: float, ffn_local: float) -> tuple[float, int]:
    """(HBM bytes, kernels) of one forward of the eager clamps and cat in front of TEGroupedMLP's fused clamped
    activation (WorkloadTraits.te_grouped_mlp); (0, 0) without a clamp or under another framework.

    ``routed`` token copies on this GPU's experts, each ``ffn_local`` (expert FFN width on this GPU) wide per half.
    """
    if model.activation_clamp <= 0 or not traits(config).te_grouped_mlp or routed <= 0:
        return 0.0, 0
    return ACTIVATION_CLAMP_BYTES * routed * ffn_local, ACTIVATION_CLAMP_KERNELS


def capacity_factor(config: TrainingConfig) -> float:
    """Expert work per routed token copy: the padded capacity factor with token-drop routing, else 1.

    With token-drop routing every expert computes on its full capacity (``moe_capacity_factor`` times
    the balanced share), padded when fewer tokens arrive (Megatron ``moe_pad_expert_input_to_capacity``,
    MaxText's dense_matmul path), and the all-to-all carries the padded buffers.  Dropless and balanced
    routing compute on the routed tokens only.
    """
    if config.moe_routing != "token-drop" or config.moe_capacity_factor is None:
        return 1.0
    return config.moe_capacity_factor


OP_SAC = "op_sac"
"""What torchtitan's per-op selective AC re-runs (its ``recompute: selective``; the same trait
:func:`projection.memory_frameworks.memory_traits` gives the memory side): the policy saves the outputs of
``aten.mm``, SDPA and reduce-scatter "except every second mm" and recomputes every other op (torchtitan
torchtitan/parallelisms/parallelize_llama.py ``_custom_policy`` @004b3148), i.e. in a Llama block wk, wo and w3
(the 2nd, 4th and 6th of wq, wk, wv, wo, w1, w3, w2) plus the norms, rotary embedding and gated activation.
Not a ``RECOMPUTE_MODULES`` name: a config cannot select it, the framework's meaning of selective does."""


def selective_recompute_modules(config: TrainingConfig) -> tuple[str, ...]:
    """What ``recompute: selective`` re-runs in the backward: the config's Megatron-core modules, or torchtitan's
    per-op policy (:data:`OP_SAC`) under a framework whose selective AC is op-level; () without selective."""
    if config.recompute != "selective":
        return ()
    return (OP_SAC,) if memory_traits(config.framework).op_level_selective_ac else tuple(config.recompute_modules)


MODULES_INSIDE_MOE: tuple[str, ...] = ("moe_act", "shared_experts")
"""Recompute modules that are parts of Megatron-core's ``moe`` module (the whole MoE layer)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerCost:
    """Seconds one layer takes for one micro-batch on one GPU."""

    fwd_s: float                  # forward compute
    bwd_input_s: float            # backward: activation gradients (B)
    bwd_weight_s: float           # backward: weight gradients (W)
    attention_fwd_s: float        # forward of the attention core (re-run by selective recompute of core_attn)
    tp_comm_s: float              # forward TP/SP collectives (backward issues as much again)
    cp_comm_s: float              # forward CP ring exchange
    ep_comm_s: float              # forward EP dispatch + combine
    flops_fwd: float              # forward model FLOPs of the layer (for MFU bookkeeping)
    module_fwd_s: tuple[tuple[str, float], ...] = ()
    """Forward seconds of the other modules selective recompute can re-run (RECOMPUTE_MODULES names, without
    core_attn): layernorm, mlp, moe, moe_act, shared_experts, mla_up_proj; a module the layer lacks is absent."""

    def recompute_s(self, modules: tuple[str, ...]) -> float:
        """Forward seconds that selective recompute of ``modules`` re-runs in the backward pass."""
        inside = MODULES_INSIDE_MOE if "moe" in modules else ()   # recomputing the MoE layer re-runs these too
        extra = sum(seconds for name, seconds in self.module_fwd_s if name in modules and name not in inside)
        return (self.attention_fwd_s if "core_attn" in modules else 0.0) + extra


@dataclass(frozen=True, slots=True, kw_only=True)
class CommGroups:
    """Placements of the parallel groups a layer talks over."""

    tp: GroupPlacement
    cp: GroupPlacement
    ep: GroupPlacement


def _attended_keys(seq_len: int, window: int) -> float:
    """Mean keys a query attends to under a causal mask (with an optional sliding window)."""
    if window <= 0 or window >= seq_len:
        return seq_len / 2.0
    return window - window * window / (2.0 * seq_len)


# Flash attention skips only the key tiles a query tile cannot see; the tiles a sliding window cuts through are
# computed whole (scores, exponentials and both MMAs) and masked.  FlashAttention-2 (Dao-AILab/flash-attention
# csrc/flash_attn/src/flash_fwd_kernel.h): a query block m of kBlockM rows runs key blocks from
# ``n_block_min = max(0, (m * kBlockM - window_size_left) / kBlockN)`` to
# ``n_block_max = ceil_div((m + 1) * kBlockM + window_size_right, kBlockN)``, and its head-dim-64 forward uses
# kBlockM = kBlockN = 128 (flash_fwd_launch_template.h run_mha_fwd_hdim64, Flash_fwd_kernel_traits<64, 128, 128, 4>).
# A 128-key window (gpt-oss; Megatron-core window_size (128, 0)) so runs 2 key tiles, 256 keys per query, about
# twice the 126 it attends.  cuDNN's fused attention (what Transformer Engine runs for gpt-oss's sinks) is tiled the
# same way; its tile sizes are not published, so FlashAttention-2's are used.  The causal diagonal's partly masked
# tiles (T / 2 extra keys per query, 3% at 4K) are left inside the fitted attention_efficiency.
ATTENTION_TILE = 128


def _computed_keys(seq_len: int, window: int) -> float:
    """Mean keys per query a tiled flash kernel computes (ATTENTION_TILE): whole tiles under a sliding window, the
    attended keys (_attended_keys) under a plain causal mask."""
    if window <= 0 or window >= seq_len:
        return seq_len / 2.0
    tile = ATTENTION_TILE
    blocks = -(-seq_len // tile)                    # query blocks
    reach = -(-window // tile)                      # key blocks behind the diagonal one a window reaches
    ramp = min(blocks, reach + 1)                   # the first blocks see fewer (block m runs m + 1)
    total = ramp * (ramp + 1) / 2 + max(0, blocks - reach - 1) * (reach + 1)
    return min(seq_len / 2.0 + tile / 2.0, tile * total / blocks)


def _document_keys(doc_len: int) -> tuple[float, float]:
    """(attended, computed) mean keys per query of causal attention restricted to documents of ``doc_len`` tokens.

    Packed fine-tuning sequences carry their document boundaries (cu_seqlens) to the fused attention kernel, which
    then attends within each document only (NVIDIA NeMo 24.07 user guide, features/optimizations/sequence_packing:
    packed sequences for SFT/PEFT "should be treated individually"; Transformer Engine's THD layout).  A document of
    ``d`` tokens attends (d + 1) / 2 keys per query; tiled like the causal diagonal (ATTENTION_TILE, blocks start at
    the document start), query block m runs m + 1 key blocks, so the kernel computes
    ``tile^2 * n (n + 1) / 2 / d`` keys per query for ``n = ceil(d / tile)`` blocks.
    """
    tile = ATTENTION_TILE
    blocks = -(-doc_len // tile)
    return (doc_len + 1) / 2.0, tile * tile * blocks * (blocks + 1) / 2.0 / doc_len


def ring_merge_s(tokens: float, out_width: float, kv_width: float, cp: int, rates: DeviceRates
                 ) -> tuple[float, float]:
    """(forward, backward) seconds of the unfused ring-attention merge of PyTorch's context parallelism.

    ``tokens`` local to the GPU (mbs * seq_len / cp), ``out_width`` = local query heads x value head dim,
    ``kv_width`` = K/V heads held x head dim; ``cp - 1`` ring steps each move the bytes per element of
    RING_MERGE_* at the achievable HBM bandwidth (memory bound, one kernel per element-wise op).
    """
    steps = cp - 1
    if steps <= 0:
        return 0.0, 0.0
    out_elems = tokens * out_width
    kv_elems = 2.0 * tokens * kv_width          # K and V
    fwd = streaming_s(steps * (RING_MERGE_FWD_BYTES_PER_OUT * out_elems + RING_MERGE_FWD_BYTES_PER_KV * kv_elems),
                      steps * RING_MERGE_KERNELS_FWD, rates)
    bwd = streaming_s(steps * (RING_MERGE_BWD_BYTES_PER_Q * out_elems + RING_MERGE_BWD_BYTES_PER_KV * kv_elems),
                      steps * RING_MERGE_KERNELS_BWD, rates)
    return fwd, bwd


def ragged_buffer_bytes(model: ModelSpec, config: TrainingConfig, dims: ParallelDims, tokens: float,
                        local_experts: int, ffn_local: float) -> float:
    """HBM bytes of one MoE layer forward spent on a worst-case ragged all-to-all receive buffer (see
    WorkloadTraits.ragged_worst_case_buffer), or on a static-shape DeepEP receive buffer
    (WorkloadTraits.deepep_worst_case_buffer); 0 where the framework receives exactly the routed tokens.

    ``tokens`` on this GPU, ``local_experts`` held by it.  The buffer has ``ep * tokens * min(local_experts,
    top_k)`` rows: zero-initialised (h wide, written once), sorted into expert order and back by the local
    permute and unpermute (2 + 2 passes, h wide; the routed tokens' global permute and unpermute are charged
    with them) and run through the gated activation (3 passes, expert FFN wide), whose routed rows are charged
    with the routed tokens, so here only the padding rows pay it.  The DeepEP buffer has ``ep * tokens * top_k``
    rows, DEEPEP_BUFFER_PASSES h-wide passes each, the padding rows' activation and the fp32 fan-in output.
    """
    if config.moe_routing != "dropless" or dims.ep <= 1:
        return 0.0
    h = model.hidden_size
    if config.moe_dispatcher == "deepep" and traits(config).deepep_worst_case_buffer:
        received = dims.ep * tokens                  # num_worst_tokens: every local token from every EP rank
        rows = received * model.top_k                # fanned out K-way
        padding = max(0.0, rows - tokens * model.top_k)
        return (ACT_BYTES * (rows * DEEPEP_BUFFER_PASSES * h + padding * 3 * ffn_local)
                + FAN_IN_BYTES * received * h)
    if not traits(config).ragged_worst_case_buffer or config.moe_dispatcher != "alltoall":
        return 0.0
    rows = dims.ep * tokens * min(local_experts, model.top_k)
    padding = max(0.0, rows - tokens * model.top_k)
    return ACT_BYTES * (rows * (1 + 4) * h + padding * 3 * ffn_local)


def cast_kernels(precision: str, gemms: int, inputs: int) -> tuple[int, int]:
    """(GPU kernels, host launches) of a layer forward's casts beyond KERNELS_PER_LAYER_FWD's one per GEMM.

    ``gemms`` low-precision GEMM launches quantise ``inputs`` tensors (a grouped GEMM one per local expert).
    Every further input is one more full cast kernel.  Current scaling's memset, amax and scale operations
    (CAST_KERNELS_PER_TENSOR) are launched from the host, so they count against the host dispatch floor; on the
    GPU the amax pass is charged as the bytes it reads (CAST_BYTES_PER_ELEMENT) and the memset and scale kernel
    touch one float, so none is charged the fixed per-kernel cost of an element-wise pass (``kernel_overhead_s``):
    they pay the gap of a dependent chain instead (:func:`cast_chain_s`).
    """
    extra_casts = max(0, inputs - gemms)
    return extra_casts, max(0, CAST_KERNELS_PER_TENSOR.get(precision, 1) * inputs - gemms)


def cast_chain_s(precision: str, inputs: int) -> float:
    """GPU seconds of a layer forward's quantisation chains beyond their cast kernels: every operation a recipe runs
    before the cast of an input (CAST_KERNELS_PER_TENSOR - 1: current scaling's memset, amax and scale) waits for the
    one before it and pays the GPU's launch-to-launch gap (GPU_KERNEL_GAP_S, s per operation), ``inputs`` times (a
    grouped GEMM quantises each local expert's split).  0 for the one-kernel block recipes."""
    return max(0, CAST_KERNELS_PER_TENSOR.get(precision, 1) - 1) * inputs * GPU_KERNEL_GAP_S


def cast_bytes_per_element(config: TrainingConfig, rates: DeviceRates) -> float:
    """HBM bytes per element cast to a low-precision GEMM input (CAST_BYTES_PER_ELEMENT): per-tensor FP8 quantised
    by Transformer Engine on a chip whose FP8 GEMMs take non-TN layouts writes no transposed copy
    (FP8_TRANSPOSE_BYTES less; DeviceRates.fp8_transpose_free, WorkloadTraits.te_fp8_quantizers)."""
    base = CAST_BYTES_PER_ELEMENT[config.precision]
    return base - FP8_TRANSPOSE_BYTES if drops_fp8_transpose(config, rates.fp8_transpose_free) else base


def drops_fp8_transpose(config: TrainingConfig, transpose_free: bool) -> bool:
    """Whether a per-tensor FP8 tensor is kept without its transposed copy: Transformer Engine's quantizers on a chip
    whose FP8 GEMMs take non-TN layouts (``transpose_free``: projection.compute.fp8_transpose_free); read by the
    cast bytes (:func:`cast_bytes_per_element`) and the FP8 weight copies (memory_terms.fp8_copy_bytes)."""
    return config.precision == "fp8" and transpose_free and traits(config).te_fp8_quantizers


def sp_amax_reduce_s(config: TrainingConfig, net: NetworkParams, groups: CommGroups, moe: bool) -> float:
    """Seconds of a layer forward's amax all-reduces (AMAX_BYTES over the TP group, one per column-parallel TE
    linear: 2 in a dense layer, 1 in an MoE layer) under per-tensor current scaling with sequence parallelism
    (Transformer Engine's amax reduction, see AMAX_BYTES); 0 otherwise (a one-GPU TP group reduces nothing)."""
    if config.precision != "fp8" or not config.sequence_parallel or not traits(config).te_fp8_quantizers:
        return 0.0
    return (1 if moe else 2) * all_reduce_s(AMAX_BYTES, groups.tp, net)


def fp8_cast_elements(model: ModelSpec, tokens: float, tp: int, routed: float, etp: int = 1) -> float:
    """Elements cast to FP8 per layer forward on one GPU: the input of every FP8 GEMM.

    QKV and output-projection inputs; then fc1 and fc2 inputs of the dense MLP, or, in an MoE
    layer (``routed`` token copies on this GPU's experts), each expert's own routed copies
    (h in, expert FFN width out) plus the shared experts' inputs.  The router stays in 16 bits.
    """
    h = model.hidden_size
    elements = tokens * (h + model.q_width / tp)
    if routed <= 0:
        return elements + tokens * (h + model.ffn_hidden_size / tp)
    elements += routed * (h + model.moe_ffn_hidden_size / etp)
    if model.num_shared_experts:
        elements += tokens * (h + model.shared_expert_ffn_hidden_size / tp)
    return elements


@dataclass(slots=True)
class _Gemms:
    """The GEMMs of one layer forward as a PyTorch block issues them, accumulated: seconds of the forward and of the
    backward's input and weight gradients, model FLOPs, launches, and the low-precision inputs they quantise."""

    rates: DeviceRates
    fwd: float = 0.0
    bwd_in: float = 0.0
    bwd_w: float = 0.0
    flops: float = 0.0
    launches: int = 0             # forward kernel launches of the layer (backward launches about twice as many)
    quantised_calls: int = 0      # low-precision GEMMs
    quantised_inputs: int = 0     # the inputs they quantise (one per expert)
    matmul_fwd: list[float] = field(default_factory=list)   # forward seconds of each matmul, in issue order

    def linear(self, m: float, n: float, k: float, *, groups_: int = 1, eff: float = 1.0, model_flops: bool = True,
               weight: bool = True, quantised: bool = True, parts: tuple[float, ...] = (1.0,),
               constant_left: bool = False) -> None:
        """One GEMM (``parts``: the shares of the separate matmuls a PyTorch block runs for a fused one).

        ``constant_left``: the (m x k) operand is a constant of the backward (a 0/1 mask with no gradient), so
        the backward runs only the gradient of the (k x n) activation operand.
        """
        self.launches += 1
        if quantised:
            self.quantised_calls += 1
            self.quantised_inputs += groups_
        f, di, dw = gemm_fwd_bwd_s(m, n, k, self.rates, groups=groups_, efficiency=eff)
        self.matmul_fwd.extend(f * share for share in parts)
        self.fwd = self.fwd + f
        if constant_left:  # only the (k x n) operand's gradient: an activation gradient
            self.bwd_in += dw
        else:
            self.bwd_in, self.bwd_w = self.bwd_in + di, self.bwd_w + (dw if weight else 0.0)
            if not weight:  # both operands are activations: the second backward GEMM is an input gradient too
                self.bwd_in += dw
        self.flops += 2.0 * m * n * k * groups_ if model_flops else 0.0


@dataclass(frozen=True, slots=True)
class _Attention:
    """The attention block's results beyond its projection GEMMs (those are in the layer's :class:`_Gemms`)."""

    fwd_s: float                  # the attention kernel (and torchtitan's ring merge), forward
    bwd_s: float                  # and backward
    kv_heads: float               # K/V heads one GPU holds for attention
    up_proj_s: float              # forward of the MLA up-projections (recompute module mla_up_proj)


def _attention(model: ModelSpec, layer: int, config: TrainingConfig, dims: ParallelDims, rates: DeviceRates,
               g: _Gemms) -> _Attention:
    """Attention block of ``layer``: the projection GEMMs (into ``g``) and the attention kernel."""
    t = dims.tp
    h = model.hidden_size
    seq_local = config.seq_len / dims.cp
    tokens = config.mbs * seq_local
    a_local = model.num_attention_heads / t
    linear = g.linear
    up_proj = 0.0
    # Attention projections.
    if model.uses_mla:
        qk = model.head_dim
        if model.q_lora_rank:
            linear(tokens, model.q_lora_rank, h)
            before = g.fwd
            linear(tokens, a_local * qk, model.q_lora_rank)
            up_proj = g.fwd - before
        else:
            linear(tokens, a_local * qk, h)
        linear(tokens, model.kv_lora_rank + model.qk_rope_head_dim, h)
        before = g.fwd
        linear(tokens, a_local * (qk - model.qk_rope_head_dim + model.v_head_dim), model.kv_lora_rank)
        up_proj += g.fwd - before
    else:
        qkv = model.q_width + 2 * model.kv_width
        linear(tokens, qkv / t, h, parts=(model.q_width / qkv, model.kv_width / qkv, model.kv_width / qkv))
    linear(tokens, h, a_local * model.v_head_dim)
    window = model.attention_windows[layer] if model.attention_windows else 0
    keys = _attended_keys(config.seq_len, window)
    tiled = _computed_keys(config.seq_len, window)      # what the kernel computes: whole tiles of a window
    doc = config.packed_document_tokens
    if doc is not None and doc < config.seq_len and not window:
        keys, tiled = _document_keys(doc)               # per-document (THD) attention of packed fine-tuning data
    attn_flops = 2.0 * config.mbs * a_local * seq_local * keys * (model.head_dim + model.v_head_dim)
    if rates.unfused_attention and dims.cp == 1:
        # the full s x s scores (mask applied after QK^T); GPT-3-style models carry attention dropout
        attn_fwd, attn_bwd = unfused_attention_fwd_bwd_s(config.mbs * a_local, seq_local, config.seq_len,
                                                         model.head_dim, model.v_head_dim, rates,
                                                         dropout=model.model_type == "gpt2")
    else:
        attn_fwd, attn_bwd = attention_fwd_bwd_s(attn_flops * tiled / keys, rates,
                                                 config.mbs * a_local * seq_local * tiled)
    kv_heads = (a_local if traits(config).repeats_kv_heads
                else model.num_kv_heads / t)                    # K/V heads one GPU holds for attention
    if dims.cp > 1 and traits(config).ring_sdpa_context_parallel:
        merge_fwd, merge_bwd = ring_merge_s(config.mbs * seq_local, a_local * model.v_head_dim,
                                            kv_heads * model.head_dim, dims.cp, rates)
        attn_fwd, attn_bwd = attn_fwd + merge_fwd, attn_bwd + merge_bwd
    g.flops += attn_flops
    return _Attention(attn_fwd, attn_bwd, kv_heads, up_proj)


@dataclass(frozen=True, slots=True)
class _Mlp:
    """The MLP or MoE block's results beyond its GEMMs (those are in the layer's :class:`_Gemms`)."""

    moe: bool
    fixed_s: float                # per-MoE-layer overhead (router, dispatch bookkeeping), forward
    ep_comm_s: float              # dispatch + combine
    routed: float                 # token copies (padded) this GPU's experts process
    stream_bytes: float           # element-wise HBM bytes of the block (activation, permutes, buffers)
    kernels: int                  # element-wise kernels of the block beyond KERNELS_PER_LAYER_FWD
    gemms_fwd_s: float            # forward of the block's GEMMs
    shared_s: float               # forward of the shared experts' GEMMs
    act_elements: float           # elements of the gated activation
    act_bytes: float              # its fused HBM bytes
    clamp_bytes: float            # eager clamps in front of a clamped activation (MoE)
    clamp_kernels: int
    ungraphed: int = 0            # forward launches a CUDA graph of the layer cannot capture (dropless MoE block)


def _mlp(model: ModelSpec, layer: int, config: TrainingConfig, dims: ParallelDims, rates: DeviceRates,
         net: NetworkParams, groups: CommGroups, g: _Gemms) -> _Mlp:
    """MLP block of ``layer``: dense, or router + shared experts + routed experts and the EP dispatch."""
    t = dims.tp
    h = model.hidden_size
    seq_local = config.seq_len / dims.cp
    tokens = config.mbs * seq_local
    linear = g.linear
    mats = 2 if model.gated_mlp else 1
    moe = bool(model.moe_layers and model.moe_layers[layer])
    fixed = rates.moe_layer_overhead_s if moe else 0.0
    ep_comm = 0.0
    routed = 0.0
    stream_bytes = 0.0
    kernels = 0
    mlp_start = g.fwd
    shared = 0.0
    clamp_bytes, clamp_kernels = 0.0, 0
    ungraphed = 0                 # forward launches a CUDA graph of the layer cannot capture
    if moe:
        linear(tokens / (t if config.sequence_parallel else 1), model.num_experts, h, quantised=False)  # router
        if model.num_shared_experts:
            before = g.fwd
            linear(tokens, mats * model.shared_expert_ffn_hidden_size / t, h)
            linear(tokens, h, model.shared_expert_ffn_hidden_size / t)
            shared = g.fwd - before
        cf = capacity_factor(config)
        routed = tokens * model.top_k / t * dims.etp * cf     # token copies (padded) this GPU's experts process
        local_experts = max(1, model.num_experts // dims.ep)
        per_expert = routed / local_experts
        einsum_path = cf != 1.0 and traits(config).einsum_token_drop_dispatch   # MaxText dense_matmul
        if einsum_path:
            slots = seq_local * model.top_k * cf               # E * C capacity slots per sequence
            linear(slots, h, seq_local, groups_=config.mbs, model_flops=False, weight=False,
                   quantised=False, constant_left=True)                                        # dispatch
            linear(seq_local, h, slots, groups_=config.mbs, model_flops=False, weight=False,
                   quantised=False)                                                            # combine
        ffn_local = model.moe_ffn_hidden_size / dims.etp
        grouped_eff = routed_expert_efficiency(config, rates, per_expert, local_experts, einsum_path)
        linear(per_expert, mats * ffn_local, h, groups_=local_experts, eff=grouped_eff)
        linear(per_expert, h, ffn_local, groups_=local_experts, eff=grouped_eff)
        gpu_extra, host_extra = grouped_gemm_kernels(config.framework, local_experts)   # per-expert GEMMs
        per_expert_s = 2 * gpu_extra * rates.kernel_overhead_s          # fc1 and fc2, each pass of each
        g.fwd, g.bwd_in, g.bwd_w = g.fwd + per_expert_s, g.bwd_in + per_expert_s, g.bwd_w + per_expert_s
        g.launches += 2 * host_extra
        if config.moe_routing != "token-drop":   # data-dependent shapes stay outside the graph (host_dispatch_s);
            ungraphed = KERNELS_PER_MOE_FWD + 2 * host_extra + 2   # token-drop pads to capacity, so it is captured
        # permute + unpermute (the einsum path's dispatch and combine einsums replace them; HybridEP does them inside
        # its dispatch and combine kernels, PERMUTE_FUSED_DISPATCHERS) and the activation
        separate_permute = not (einsum_path or config.moe_dispatcher in PERMUTE_FUSED_DISPATCHERS)
        stream_bytes += (PERMUTE_PASS_BYTES * routed * h if separate_permute else 0) + 3 * ACT_BYTES * routed * ffn_local
        stream_bytes += ragged_buffer_bytes(model, config, dims, tokens / t, local_experts, ffn_local)
        kernels += KERNELS_PER_MOE_FWD
        bias_bytes, bias_kernels = expert_bias_apply(model, config, routed, local_experts)
        stream_bytes += bias_bytes
        kernels += bias_kernels
        clamp_bytes, clamp_kernels = activation_clamp(model, config, routed, ffn_local)
        stream_bytes += clamp_bytes
        kernels += clamp_kernels
        act_elements = routed * ffn_local
        act_bytes = FUSED_GATED_ACT_BYTES * act_elements    # gated activation: read gate + up, write the product
        dispatch_bytes = ACT_BYTES * tokens * model.top_k / t * h * cf
        if config.moe_dispatcher == "allgather":
            one = all_gather_s(dispatch_bytes / model.top_k * groups.ep.size, groups.ep, net)
        else:
            one = all_to_all_s(dispatch_bytes, groups.ep, net)
            one *= DEEPEP_A2A_FACTOR if config.moe_dispatcher in KERNEL_DISPATCHERS else 1.0
        ep_comm = 2.0 * one  # dispatch + combine
    else:
        linear(tokens, mats * model.ffn_hidden_size / t, h, parts=(1.0 / mats,) * mats)
        linear(tokens, h, model.ffn_hidden_size / t)
        act_elements = tokens * model.ffn_hidden_size / t
        act_bytes = FUSED_GATED_ACT_BYTES * act_elements
        stream_bytes += act_bytes
    return _Mlp(moe=moe, fixed_s=fixed, ep_comm_s=ep_comm, routed=routed, stream_bytes=stream_bytes, kernels=kernels,
                gemms_fwd_s=g.fwd - mlp_start, shared_s=shared, act_elements=act_elements, act_bytes=act_bytes,
                clamp_bytes=clamp_bytes, clamp_kernels=clamp_kernels, ungraphed=ungraphed)


@dataclass(frozen=True, slots=True)
class _Elementwise:
    """The layer's element-wise passes (norms, residuals, rotary embedding, casts, the MLP block's) and launches."""

    stream_s: float               # fused element-wise kernels, forward (the backward charges twice)
    eager_fwd_s: float            # eager PyTorch element-wise code beyond the fused kernels, forward
    eager_bwd_s: float            # and backward
    host_fwd_s: float             # host time to launch the layer's forward kernels
    norm_bytes: float
    rope_bytes: float
    eager: EagerPasses


def _elementwise(model: ModelSpec, config: TrainingConfig, dims: ParallelDims, rates: DeviceRates, g: _Gemms,
                 mlp: _Mlp) -> _Elementwise:
    """Element-wise passes of the layer at the streaming rate, and the host time of all its forward launches."""
    t = dims.tp
    h = model.hidden_size
    tokens = config.mbs * config.seq_len / dims.cp
    stream_bytes = mlp.stream_bytes
    kernels = KERNELS_PER_LAYER_FWD + mlp.kernels
    sp_div = t if config.sequence_parallel else 1
    norm_elements = 2 * tokens * h / sp_div                           # 2 norms
    norm_bytes = FUSED_NORM_BYTES * norm_elements                     # read + write each
    stream_bytes += norm_bytes + 6 * ACT_BYTES * tokens * h / sp_div  # and 2 residual adds (read 2, write 1)
    rope_elements = tokens * (model.q_width + model.kv_width) / t
    rope_bytes = FUSED_ROPE_BYTES * rope_elements                     # rotary embedding of q and k
    stream_bytes += rope_bytes
    repeat_elements = (tokens * (model.kv_width + model.q_width) / t
                       if not model.uses_mla and model.num_kv_heads < model.num_attention_heads else 0.0)
    eager = eager_elementwise_bytes(model, config, rates, norm_elements, rope_elements, mlp.act_elements,
                                    repeat_elements)
    if config.is_low_precision:  # casts of every low-precision GEMM input, at the recipe's bytes per element
        stream_bytes += cast_bytes_per_element(config, rates) * fp8_cast_elements(model, tokens, t, mlp.routed,
                                                                                 dims.etp)
        # KERNELS_PER_LAYER_FWD holds one cast per GEMM; the per-expert casts and the recipe's further launches:
        extra_casts, cast_launches = cast_kernels(config.precision, g.quantised_calls, g.quantised_inputs)
        kernels += extra_casts
        g.launches += cast_launches - extra_casts
    stream = streaming_s(stream_bytes, kernels, rates)
    if config.is_low_precision:
        stream += cast_chain_s(config.precision, g.quantised_inputs)
    g.launches += kernels + 1 + eager.kernels_fwd   # element-wise kernels and the attention kernel
    eager_fwd = streaming_s(eager.fwd, eager.kernels_fwd, rates) if eager.kernels_fwd else 0.0
    eager_bwd = streaming_s(eager.bwd, eager.kernels_bwd, rates) if eager.kernels_bwd else 0.0
    host_fwd = host_dispatch_s(g.launches, rates, mlp.ungraphed)
    return _Elementwise(stream, eager_fwd, eager_bwd, host_fwd, norm_bytes, rope_bytes, eager)


def _tp_cp_comm(model: ModelSpec, config: TrainingConfig, dims: ParallelDims, net: NetworkParams,
                groups: CommGroups, moe: bool, kv_heads: float) -> tuple[float, float]:
    """(TP, CP) communication seconds of the layer's forward."""
    h = model.hidden_size
    tokens = config.mbs * config.seq_len / dims.cp
    # TP: 2 all-reduces (or all-gather + reduce-scatter pairs with SP) per layer in forward.
    # (an all-reduce is a reduce-scatter + an all-gather; SP runs them as separate collectives)
    tp_comm = 0.0
    if dims.tp > 1:
        quantised = tp_gather_bytes(config) if config.sequence_parallel else ACT_BYTES   # no SP: all-reduces
        gathers = (all_gather_s(quantised * tokens * h, groups.tp, net)
                   + all_gather_s((ACT_BYTES if moe else quantised) * tokens * h, groups.tp, net))
        tp_comm = (gathers + 2.0 * reduce_scatter_s(ACT_BYTES * tokens * h, groups.tp, net)
                   + sp_amax_reduce_s(config, net, groups, moe))
    # CP: the ring passes K/V to the next rank cp - 1 times, one send/recv per step.  Inside a domain each
    # step is a point-to-point transfer (p2p_s: the achieved NVSwitch bandwidth, or one xGMI link of an AMD
    # mesh, not the sum of its 7 links: a ring neighbour is one peer); across domains an all-gather.
    cp_comm = 0.0
    if dims.cp > 1:
        kv_bytes = ACT_BYTES * tokens * 2 * kv_heads * model.head_dim
        cp_comm = (dims.cp - 1) * p2p_s(kv_bytes, cross_domain=False, net=net) if groups.cp.num_domains == 1 else (
            all_gather_s(kv_bytes * dims.cp, groups.cp, net))
    return tp_comm, cp_comm


def _recompute_modules(rates: DeviceRates, g: _Gemms, attn: _Attention, mlp: _Mlp, elem: _Elementwise
                       ) -> dict[str, float]:
    """What selective recompute of each module re-runs, forward seconds (Megatron-core
    TransformerConfig.recompute_modules): its GEMMs at the same rates, its element-wise passes at the streaming rate
    (one kernel each).  Eager element-wise code re-runs with its module, at its own bytes and kernels
    (EAGER_*_KERNELS forward)."""
    eager = elem.eager
    eager_act = bool(eager.act_fwd)
    act_s = streaming_s(mlp.act_bytes + eager.act_fwd, 1 + (EAGER_SWIGLU_KERNELS[0] - 1) * eager_act, rates)
    if mlp.moe:                   # recomputing moe_act re-runs the clamps in front of the fused activation too
        act_s += streaming_s(mlp.clamp_bytes, mlp.clamp_kernels, rates)
    eager_norm = bool(eager.norm_fwd)
    norm_s = streaming_s(elem.norm_bytes + eager.norm_fwd, 2 * (EAGER_NORM_KERNELS[0] if eager_norm else 1), rates)
    modules = {"layernorm": norm_s, "mlp": mlp.gemms_fwd_s + act_s} if not mlp.moe else {
        "layernorm": norm_s, "moe": mlp.gemms_fwd_s + act_s + mlp.fixed_s, "moe_act": act_s}
    if mlp.shared_s:
        modules["shared_experts"] = mlp.shared_s
    if attn.up_proj_s:
        modules["mla_up_proj"] = attn.up_proj_s
    rope_s = streaming_s(elem.rope_bytes + eager.rope_fwd, EAGER_ROPE_KERNELS[0] if eager.rope_fwd else 1, rates)
    repeat_s = streaming_s(eager.repeat_fwd, REPEAT_KV_KERNELS, rates) if eager.repeat_fwd else 0.0
    modules[OP_SAC] = sum(g.matmul_fwd[1::2]) + norm_s + act_s + rope_s + repeat_s
    return modules


def layer_cost(model: ModelSpec, layer: int, config: TrainingConfig, dims: ParallelDims, rates: DeviceRates,
               net: NetworkParams, groups: CommGroups) -> LayerCost:
    """Compute and communication of ``layer`` for one micro-batch, block by block: attention (:func:`_attention`),
    MLP or MoE (:func:`_mlp`), element-wise passes (:func:`_elementwise`), TP/CP communication
    (:func:`_tp_cp_comm`); then the host-bound floor and what selective recompute re-runs."""
    g = _Gemms(rates)
    attn = _attention(model, layer, config, dims, rates, g)
    mlp = _mlp(model, layer, config, dims, rates, net, groups, g)
    elem = _elementwise(model, config, dims, rates, g, mlp)
    tp_comm, cp_comm = _tp_cp_comm(model, config, dims, net, groups, mlp.moe, attn.kv_heads)
    # Host-bound floor: the GPU never runs ahead of the CPU that launches its kernels (eager frameworks).
    fwd_total = max(g.fwd + attn.fwd_s + elem.stream_s + elem.eager_fwd_s + mlp.fixed_s, elem.host_fwd_s)
    bwd_total = g.bwd_in + attn.bwd_s + 2 * elem.stream_s + elem.eager_bwd_s + 2 * mlp.fixed_s
    bwd_total = max(bwd_total, 2 * elem.host_fwd_s - g.bwd_w)
    modules = _recompute_modules(rates, g, attn, mlp, elem)
    return LayerCost(
        module_fwd_s=tuple(sorted(modules.items())),
        fwd_s=fwd_total,
        bwd_input_s=bwd_total,
        bwd_weight_s=g.bwd_w,
        attention_fwd_s=attn.fwd_s,
        tp_comm_s=tp_comm,
        cp_comm_s=cp_comm,
        ep_comm_s=mlp.ep_comm_s,
        flops_fwd=g.flops,
    )


def host_dispatch_s(launches: float, rates: DeviceRates, ungraphed: float = 0.0) -> float:
    """Host (CPU) time to issue one layer pass, seconds: each launched op costs ``rates.host_launch_s`` (Python,
    autograd and ATen dispatch plus cudaLaunchKernel, FrameworkProfile.host_launch_s or the user's
    ``projtune bench host`` figure).  Under CUDA graphs the pass is one graph launch (Megatron-core
    ``--enable-cuda-graph`` captures each transformer layer's forward and backward: megatron/core/transformer/
    cuda_graphs.py CudaGraphManager) plus the ``ungraphed`` launches it cannot capture: a dropless MoE block's
    router, permutation and grouped GEMMs have data-dependent shapes ("moe cuda graph is only supported with
    drop-padding MoE", megatron-core 0.16.1 transformer_config.py __post_init__).  Token-drop routing pads every
    expert to its capacity (Megatron-Bridge ``apply_moe_token_drop``: capacity factor 1.0,
    ``moe_pad_expert_input_to_capacity=True``, NVIDIA-NeMo/Megatron-Bridge@684a6861
    src/megatron/bridge/training/utils/moe_token_drop.py), so its MoE block is captured.  The GPU waits whenever this
    exceeds the kernels' own time (layer_cost's max against the GPU work): TP shrinks the GPU work but not the
    launch count."""
    return ((1.0 + ungraphed) if rates.cuda_graphs else launches) * rates.host_launch_s


def head_cost(model: ModelSpec, config: TrainingConfig, dims: ParallelDims, rates: DeviceRates
              ) -> tuple[float, float, float]:
    """(forward, backward-input, backward-weight) of final norm, LM head and cross-entropy, seconds."""
    tokens = config.mbs * config.seq_len / dims.cp
    f, di, dw = gemm_fwd_bwd_s(tokens, model.vocab_size / dims.tp, model.hidden_size, rates)
    loss_bytes = 3 * 4 * tokens * model.vocab_size / dims.tp  # fp32 softmax read/write, grad write
    loss = streaming_s(loss_bytes, 4, rates)
    return f + loss, di + loss, dw


def embedding_cost(model: ModelSpec, config: TrainingConfig, dims: ParallelDims, rates: DeviceRates
                   ) -> tuple[float, float]:
    """(forward, backward) of the embedding lookup and its gradient scatter, seconds."""
    tokens = config.mbs * config.seq_len / dims.cp
    fwd = streaming_s(2 * ACT_BYTES * tokens * model.hidden_size, 2, rates)
    return fwd, 2 * fwd
