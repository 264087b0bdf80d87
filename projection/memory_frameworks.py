"""What each training framework allocates per parameter, and how its allocator behaves (memory traits).

One small table, one row per framework family, each value cited to the framework's source (which framework
has which row: its record, :mod:`projection.framework`):

- **Megatron-core** (``megatron``, ``nemo``, ``primus``): bf16 model weights (2 B), fp32 main
  gradients (4 B: Megatron-LM ``--accumulate-allreduce-grads-in-fp32`` is forced on for bf16,
  ``megatron/training/arguments.py``; the DDP grad buffer holds them, ``param_and_grad_buffer.py``),
  fp32 master weights + Adam ``exp_avg``/``exp_avg_sq`` (12 B), sharded by the distributed optimizer
  (Megatron-LM ``megatron/training/theoretical_memory_usage.py``, ``compute_weight_and_optimizer_memory``:
  ``6 + 12 / data_parallel_size`` bytes per parameter).  PyTorch CUDA caching allocator.
- **torchtitan** (FSDP2 ``fully_shard`` with ``MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32)``, ``torchtitan/distributed/parallel_dims.py`` / ``models/llama3/infra/parallelize.py``):
  fp32 sharded parameters (4 B), fp32 sharded gradients (4 B), AdamW moments (8 B); the bf16
  unsharded copy of a block lives only while it runs.  Its loss upcasts the logits to fp32
  (``torchtitan/components/loss.py``: ``cross_entropy(pred.flatten(0, 1).float(), ...)``).  Its TP
  plan shards the norms over the sequence (``SequenceParallel()`` for ``attention_norm`` /
  ``ffn_norm`` in ``apply_tp``, ``models/llama3/infra/parallelize.py``), so TP implies SP; its
  "selective" AC is per-op SAC (:func:`projection.activations.op_sac_layer_bytes`).
- **DeepSpeed ZeRO** (Rajbhandari et al. 2020, Sec. 3: "2Ψ + 2Ψ + KΨ" with K = 12): fp16
  weights, fp16 gradients, fp32 master + Adam (12 B).
- **MaxText / JAX** (``jax``): bf16 weights and bf16 Adam moments, as the development data's
  XLA memory matrix implies (AMD-AGI/maxtext-slurm pp-vs-fsdp-deepseek3-671b.md: total 236 GiB
  minus temp 178 GiB = 58 GiB of arguments for 671 B parameters over 64 devices = 6 B/param;
  MaxText ``weight_dtype``/``mu_dtype`` set to bfloat16 there), bf16 gradients in XLA's temp
  allocation; XLA materialises attention scores when no flash kernel is configured (MaxText
  ``attention: dot_product``, the ROCm default); the BFC allocator leaves ~268 of 288 GiB usable
  (same source, "HBM ceiling ~268 GiB per device after BFCAllocator overhead").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryTraits:
    """Bytes per parameter and allocator behaviour of one framework."""

    name: str
    weight_bytes: float            # model weights as the forward pass reads them (per element)
    grad_bytes: float              # main gradients (per element)
    optimizer_bytes: float         # optimizer states incl. any fp32 master copy (per element)
    flash_attention: bool          # no s^2 attention scores saved (flash / fused attention)
    loss_bytes_per_logit: float | None  # bytes per (token, vocab) live in the loss; None: the framework profile's
    score_bytes: int               # bytes per attention score kept without flash attention
    usable_fraction: float         # share of HBM the framework's allocator can hand out
    op_level_selective_ac: bool = False  # "selective" recompute means torchtitan's per-op SAC policy
    tp_sequence_parallel: bool = False   # TP always shards the norm regions over the sequence (no SP switch)
    caching_allocator: bool        # PyTorch CUDA caching allocator (fragmentation + workspaces)


MEGATRON = MemoryTraits(name="megatron", weight_bytes=2, grad_bytes=4, optimizer_bytes=12, flash_attention=True,
                        loss_bytes_per_logit=None, score_bytes=2, usable_fraction=1.0, caching_allocator=True)
# torchtitan's loss (``cross_entropy(pred.flatten(0, 1).float(), ...)``): bf16 logits (2) + their fp32 upcast (4)
# + the fp32 gradient (4) + its bf16 cast into the LM head's backward (2) = 12 B per (token, vocab) entry.
TORCHTITAN = MemoryTraits(name="torchtitan", weight_bytes=4, grad_bytes=4, optimizer_bytes=8, flash_attention=True,
                          loss_bytes_per_logit=12.0, score_bytes=2, usable_fraction=1.0, caching_allocator=True,
                          op_level_selective_ac=True, tp_sequence_parallel=True)
# DeepSpeed 2021 (Narayanan et al. SC'21 comparison): Megatron-style attention without a flash kernel.
DEEPSPEED = MemoryTraits(name="deepspeed", weight_bytes=2, grad_bytes=2, optimizer_bytes=12, flash_attention=False,
                         loss_bytes_per_logit=None, score_bytes=2, usable_fraction=1.0, caching_allocator=True)
# XLA dot-product attention keeps the fp32 softmax input and the bf16 probabilities (6 B per score); with the
# source's temp 178 GiB this is what brings DeepSeek-V3 at per-device batch 7 to its measured 236 GiB.
JAX_XLA = MemoryTraits(name="jax", weight_bytes=2, grad_bytes=2, optimizer_bytes=4, flash_attention=False,
                       loss_bytes_per_logit=None, score_bytes=6, usable_fraction=268 / 288, caching_allocator=False)

# NeMo AutoModel: FSDP2 with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) over fp32 sharded parameters
# (nemo_automodel/components/distributed/fsdp2.py), as torchtitan, but HF model code: no per-op SAC, no implied SP;
# its loss takes the framework profile's bytes per logit.
AUTOMODEL = MemoryTraits(name="automodel", weight_bytes=4, grad_bytes=4, optimizer_bytes=8, flash_attention=True,
                         loss_bytes_per_logit=None, score_bytes=2, usable_fraction=1.0, caching_allocator=True)
