"""Measured-mode fixes that break a GPU run if wrong, checked on the CPU path.

- FP8 targets: FP8 GEMMs really run (torch._scaled_mm), the precision that ran is recorded,
  and the restore compares the TARGET precision with the MEASURED one (carrying bf16 -> fp8
  by the engine's ratio, and saying so);
- the target's per-GPU slice is timed directly (TP8/EP8 shards on one GPU);
- a grouped GEMM that falls back to a per-expert loop says so;
- the cache key changes with everything that changes the result;
- the embedding and LM head + loss are measured and restored.
"""

from __future__ import annotations

import pytest
import torch

from bench.fp8 import Fp8Linear, fp8_supported
from bench.layers import RoutedExperts
from bench.measurement import HeadTiming, cache_key
from bench.reduction import reduce_layout
from bench.restore import analytic_measurement, project_measured
from bench.runner import BenchOptions, run_measurement
from bench.shapes import LayerShape
from bench.version import code_version
from projection.engine import project
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig

FP8_CPU = fp8_supported(torch.device("cpu"))


def _layout(model: str, gpus: int, **config):
    return load_model(model), Cluster(gpu="h200", num_gpus=gpus), TrainingConfig(**config)


@pytest.mark.skipif(not FP8_CPU, reason="this torch build has no CPU FP8 GEMM")
def test_fp8_linear_runs_fp8_gemms_close_to_the_16_bit_result() -> None:
    torch.manual_seed(0)
    layer = Fp8Linear(64, 32, bias=False, dtype=torch.bfloat16)
    x = torch.randn(48, 64, dtype=torch.bfloat16, requires_grad=True)
    y = layer(x)
    ref = x.float() @ layer.weight.float().t()
    assert layer.fp8_active
    assert (y.float() - ref).norm() / ref.norm() < 0.1            # E4M3: ~3 significant bits
    y.sum().backward()
    assert x.grad is not None and layer.weight.grad is not None


def test_fp8_linear_with_unaligned_shapes_says_it_ran_16_bit() -> None:
    layer = Fp8Linear(24, 32, bias=False)        # 24 is not a multiple of 16
    layer(torch.randn(16, 24))
    assert not layer.fp8_active


def test_restore_compares_target_precision_with_the_measured_one() -> None:
    """A bf16 measurement of an FP8 target: restored by the bf16 -> fp8 ratio (exact on engine costs), with a
    warning; reading it as FP8 (what the old check did: bench precision == target precision) is wrong."""
    model, cluster, fp8 = _layout("llama3-8b", 8, gbs=32, precision="fp8")
    bf16 = fp8.model_copy(update={"precision": "bf16"})
    red_fp8, red_bf16 = reduce_layout(model, cluster, fp8, 1), reduce_layout(model, cluster, bf16, 1)
    measured = analytic_measurement(red_bf16).model_copy(update={"reduction": red_fp8, "measured_precision": "bf16"})
    restored = project_measured(measured, model, cluster, fp8)
    assert restored.projection.iteration_time_s == pytest.approx(project(model, cluster, fp8).iteration_time_s,
                                                                 rel=1e-9)
    assert any("GEMMs measured in bf16" in w for w in restored.warnings)
    as_if_fp8 = project_measured(measured.model_copy(update={"measured_precision": "fp8"}), model, cluster, fp8)
    assert as_if_fp8.projection.iteration_time_s > 1.05 * restored.projection.iteration_time_s
    assert not any("precision" in w for w in as_if_fp8.warnings)


def test_cpu_run_of_an_fp8_lora_target_records_what_ran() -> None:
    model, cluster, config = _layout("llama2-70b", 8, tp=2, gbs=8, seq_len=8192, precision="fp8", finetune="lora")
    m = run_measurement(model, cluster, config, local_gpus=1, options=BenchOptions(
        device="cpu", max_hidden=64, max_tokens=64, warmup=1, iters=1, use_cache=False))
    layer = m.layers[0]
    assert m.measured_precision == layer.gemm_precision
    assert layer.gemm_precision in (("fp8", "mixed") if FP8_CPU else ("float32",))
    assert layer.attention_backend in ("flash", "math") and layer.flops_fwd > 0 and layer.forward_tflops > 0
    assert layer.backward_weight_ms == 0.0 and layer.optimizer_ms == 0.0           # frozen base weights
    assert m.head is not None and m.head.head_forward_ms > 0
    restored = project_measured(m, model, cluster, config)
    assert any("not representative" in w for w in restored.warnings)


def test_the_target_slice_runs_on_one_gpu_instead_of_a_scaled_reduced_layer() -> None:
    model, cluster, config = _layout("mixtral-8x7b", 64, ep=8, tp=2, pp=4, gbs=256)
    m = run_measurement(model, cluster, config, local_gpus=1, options=BenchOptions(
        device="cpu", warmup=1, iters=1, use_cache=False, max_hidden=64, max_tokens=64, head=False))
    assert m.compute_slice == "target"
    assert {"tp", "ep"} <= set(m.reduction.removed_axes())        # collectives: reduced layout
    # Engine costs of the target slice restore exactly (ratio 1), and so do those of the reduced layout.
    red = m.reduction
    direct = project(model, cluster, config).iteration_time_s
    for compute_slice in ("target", "bench"):
        restored = project_measured(analytic_measurement(red, compute_slice=compute_slice), model, cluster, config)
        assert restored.projection.iteration_time_s == pytest.approx(direct, rel=1e-9)


def test_a_per_expert_loop_says_so() -> None:
    shape = LayerShape(batch=1, seq=16, hidden=32, heads=2, kv_heads=1, head_dim=16, v_head_dim=16, window=0,
                       ffn=0, gated=True, activation="silu", norm="rmsnorm", bias=False, moe=True, router_experts=4,
                       local_experts=4, top_k=2, moe_ffn=24, routed_tokens=32)
    experts = RoutedExperts(shape, "cpu", torch.float32)
    experts.grouped = False
    experts.loop_reason = "test"
    assert experts.gemm_path.startswith("per-expert loop")
    model, cluster, config = _layout("mixtral-8x7b", 8, ep=8, gbs=64)
    red = reduce_layout(model, cluster, config, 1)
    m = analytic_measurement(red)
    looped = m.model_copy(update={"source": "gpu", "layers": tuple(
        t.model_copy(update={"expert_gemm": "per-expert loop (test)"}) for t in m.layers)})
    assert any("per-expert loop" in w for w in project_measured(looped, model, cluster, config).warnings)


def test_cache_key_changes_with_everything_that_changes_the_result() -> None:
    base = dict(device_name="H200", driver_version="580", torch_version="2.11", what={"shapes": [1]})
    options = BenchOptions().key_fields()
    key = cache_key(**base, options=options, version="v1")
    assert key == cache_key(**base, options=dict(options), version="v1")
    changed = [cache_key(**base, options=options | {name: value}, version="v1")
               for name, value in (("collectives", False), ("warmup", 1), ("iters", 3), ("slice", "bench"),
                                   ("head", False), ("flex", False))]
    changed.append(cache_key(**base, options=options, version="v2"))
    changed.append(cache_key(**(base | {"what": {"shapes": [1], "fp8": True}}), options=options, version="v1"))
    assert key not in changed and len(set(changed)) == len(changed)
    assert len(code_version()) == 16


def test_measured_head_replaces_the_engines_by_its_difference() -> None:
    model, cluster, config = _layout("llama3-8b", 8, gbs=8, mbs=1)      # pp = 1: one micro-batch path
    red = reduce_layout(model, cluster, config, 1)
    m = analytic_measurement(red, compute_slice="target")
    from projection.layout import parallel_dims
    from projection.workload import embedding_cost, head_cost

    from bench.analytic import analytic_layout

    view = analytic_layout(model, cluster, config)
    hf, hbi, hbw = head_cost(model, config, parallel_dims(config, cluster), view.rates)
    ef, eb = embedding_cost(model, config, parallel_dims(config, cluster), view.rates)
    same = HeadTiming(embedding_forward_ms=ef * 1e3, embedding_backward_ms=eb * 1e3, head_forward_ms=hf * 1e3,
                      head_backward_ms=(hbi + hbw) * 1e3)
    direct = project(model, cluster, config).iteration_time_s
    at_engine = project_measured(m.model_copy(update={"head": same}), model, cluster, config)
    assert at_engine.projection.iteration_time_s == pytest.approx(direct, rel=1e-9)
    slower = same.model_copy(update={"head_forward_ms": same.head_forward_ms + 10.0})
    restored = project_measured(m.model_copy(update={"head": slower}), model, cluster, config)
    micro_batches = config.gbs // config.mbs // 8
    assert restored.projection.iteration_time_s == pytest.approx(direct + micro_batches * 0.010, rel=1e-6)
