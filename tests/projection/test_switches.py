"""The run-time switches (comm_overlap, cuda_graphs, compile, attention_backend, grad_reduce_in_fp32, the MoE
dispatcher) move a projection in the physically right direction, and each priced term is pinned: replacing it by
zero (monkeypatched) makes one of these tests fail.

Directions (issue 25): overlapping nothing is never faster; CUDA graphs are never slower; unfused attention is never
faster than fused and keeps the s x s scores in memory; a Triton flash kernel sits between; fp32 gradient reduction
doubles the DP gradient bytes and the gradient buffer.
"""

from __future__ import annotations

import pytest

from projection import compute, engine, workload
from projection.compute import CUDA_GRAPH_GAP_SAVING_S, device_rates
from projection.device_profile import DeviceProfile
from projection.engine import _dp_comm_parts, network_for, project
from projection.framework import framework_profile
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.model_spec import load_model
from projection.switches import FP32_GRAD_BYTES, LOW_GRAD_BYTES, TRITON_ATTENTION_SPEED, resolve_switches
from projection.training_config import Cluster, TrainingConfig
from projection.vocabulary import COMM_OVERLAPS, FRAMEWORKS

DENSE = load_model("llama3-70b")
MOE = load_model("mixtral-8x7b")
H100 = Cluster(gpu="h100-sxm", num_gpus=64)
# A profile with every overlap share strictly inside (0, 1), so each switch has something to hide.
PROFILE = DeviceProfile(hardware_id="h100-sxm", tp_overlap_fraction=0.5, ep_overlap_fraction=0.5,
                        dp_overlap_fraction=0.8, cp_overlap_fraction=0.7)
EVERY = TrainingConfig(tp=4, pp=4, vpp=2, cp=2, mbs=1, gbs=64, seq_len=8192, sequence_parallel=True, zero=1,
                       framework="megatron")


@pytest.fixture(autouse=True)
def _fresh_caches():
    """Monkeypatched terms must not leak through the engine's memo caches into other tests."""
    engine._COSTS_CACHE.clear()
    engine._PREPARED_CACHE.clear()
    yield
    engine._COSTS_CACHE.clear()
    engine._PREPARED_CACHE.clear()


def _clear() -> None:
    engine._COSTS_CACHE.clear()
    engine._PREPARED_CACHE.clear()


def _time(config: TrainingConfig, model=DENSE, cluster: Cluster = H100, **kwargs) -> float:
    return project(model, cluster, config, profile=PROFILE, **kwargs).iteration_time_s


def _without(config: TrainingConfig, comm: str) -> TrainingConfig:
    return config.model_copy(update={"comm_overlap": tuple(c for c in COMM_OVERLAPS if c != comm)})


# ---- defaults come from the framework record ------------------------------------------------------------------

def test_every_framework_states_its_switch_defaults() -> None:
    for name in FRAMEWORKS:
        switches = resolve_switches(TrainingConfig(framework=name), framework_profile(name))
        assert switches.overlaps <= set(COMM_OVERLAPS), name
        assert switches.grad_reduce_bytes in (FP32_GRAD_BYTES, LOW_GRAD_BYTES), name
    jax = resolve_switches(TrainingConfig(framework="jax"), framework_profile("jax"))
    assert jax.compile and "dp" not in jax.overlaps                  # XLA compiles; FSDP gathers not pipelined
    assert resolve_switches(TrainingConfig(framework="deepspeed"), framework_profile("deepspeed")
                            ).attention_backend == "unfused"
    mds = resolve_switches(TrainingConfig(framework="megatron-deepspeed"), framework_profile("megatron-deepspeed"))
    assert mds.overlaps == frozenset() and mds.attention_backend == "unfused" and mds.grad_reduce_bytes == 2
    # megatron-core overlaps DP, TP, PP and CP by default, but not the expert exchange: overlap_moe_expert_parallel_comm
    # defaults to False (TransformerConfig), so a MoE run overlaps it only where its record says comm_overlap with ep
    megatron = framework_profile(None)
    assert resolve_switches(TrainingConfig(ep=2), megatron).overlaps == frozenset(COMM_OVERLAPS) - {"ep"}
    assert resolve_switches(TrainingConfig(), megatron).overlaps == frozenset(COMM_OVERLAPS) - {"ep"}
    assert "ep" in resolve_switches(TrainingConfig(ep=2, comm_overlap=COMM_OVERLAPS), megatron).overlaps


def test_a_run_value_overrides_the_default() -> None:
    config = TrainingConfig(framework="jax", comm_overlap=("dp",), compile=False, attention_backend="triton",
                            grad_reduce_in_fp32=True, cuda_graphs=True)
    s = resolve_switches(config, framework_profile("jax"))
    assert (s.overlaps, s.compile, s.attention_backend, s.grad_reduce_bytes, s.cuda_graphs) == (
        frozenset({"dp"}), False, "triton", FP32_GRAD_BYTES, True)


def test_comm_overlap_names_each_communication_once() -> None:
    with pytest.raises(ValueError, match="twice"):
        TrainingConfig(comm_overlap=("dp", "dp"))


# ---- exposed communication per overlap switch -------------------------------------------------------------------

@pytest.mark.parametrize("comm", COMM_OVERLAPS)
def test_turning_one_overlap_off_is_slower(comm: str) -> None:
    config = EVERY if comm != "ep" else EVERY.model_copy(update={"cp": 1, "ep": 8, "vpp": 1})
    model = MOE if comm == "ep" else DENSE
    on = _time(config.model_copy(update={"comm_overlap": COMM_OVERLAPS}), model)
    off = _time(_without(config, comm), model)
    assert off > on * (1 + 1e-6), comm


def test_nothing_overlapped_is_never_faster() -> None:
    for config in (EVERY, EVERY.model_copy(update={"zero": 0, "vpp": 1}), EVERY.model_copy(update={"pp": 1, "vpp": 1}),
                   EVERY.model_copy(update={"zero": 3, "pp": 1, "vpp": 1, "tp": 1, "cp": 1})):
        for framework in ("megatron", "torchtitan", "jax", "deepspeed"):
            c = config.model_copy(update={"framework": framework})
            none = _time(c.model_copy(update={"comm_overlap": ()}))
            assert none >= _time(c) - 1e-12, (c, framework)
            assert none >= _time(c.model_copy(update={"comm_overlap": COMM_OVERLAPS})) - 1e-12


def test_dp_not_overlapped_exposes_every_dp_collective() -> None:
    config = TrainingConfig(tp=8, pp=1, mbs=1, gbs=64, seq_len=4096, zero=1, framework="megatron")
    prof = project(DENSE, H100, config.model_copy(update={"comm_overlap": ()}), profile=PROFILE)
    hidden = project(DENSE, H100, config, profile=PROFILE)
    dims = parallel_dims(config, H100)
    total = sum(_dp_comm_parts(DENSE, config, dims, network_for(load_hardware("h100-sxm"), H100, PROFILE),
                               framework_profile("megatron")))
    assert prof.breakdown.dp_comm_s == pytest.approx(total, rel=1e-9)
    assert hidden.breakdown.dp_comm_s < total    # hidden up to its window (one micro-batch here)


def test_pp_not_overlapped_blocks_each_chunk_for_its_send(monkeypatch: pytest.MonkeyPatch) -> None:
    config = EVERY.model_copy(update={"cp": 1})
    off = _without(config, "pp")
    slower = _time(off) - _time(config.model_copy(update={"comm_overlap": COMM_OVERLAPS}))
    assert slower > 0
    monkeypatch.setattr(engine, "_blocking_p2p", lambda stages, p2p: stages)
    _clear()
    assert _time(off) == pytest.approx(_time(config.model_copy(update={"comm_overlap": COMM_OVERLAPS})))


# ---- host dispatch, CUDA graphs, compile -------------------------------------------------------------------------

# A small model on many GPUs of TP: little GPU work per layer, the same number of launches (host-bound when eager).
SMALL = load_model("llama3.2-1b")
HOST = Cluster(gpu="h100-sxm", num_gpus=8)
SMALL_CONFIG = TrainingConfig(tp=8, mbs=1, gbs=8, seq_len=1024, framework="torchtitan", comm_overlap=())


def test_a_slow_host_makes_a_small_layer_host_bound() -> None:
    fast_host = _time(SMALL_CONFIG, SMALL, HOST.model_copy(update={"host_op_s": 1e-6}))
    slow_host = _time(SMALL_CONFIG, SMALL, HOST.model_copy(update={"host_op_s": 40e-6}))
    assert slow_host > 1.2 * fast_host


def test_host_dispatch_term_is_priced(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = HOST.model_copy(update={"host_op_s": 40e-6})
    before = _time(SMALL_CONFIG, SMALL, slow)
    monkeypatch.setattr(workload, "host_dispatch_s", lambda launches, rates, ungraphed=0.0: 0.0)
    _clear()
    assert _time(SMALL_CONFIG, SMALL, slow) < 0.9 * before


def test_tp_shrinks_gpu_work_but_not_the_launches() -> None:
    slow = HOST.model_copy(update={"host_op_s": 40e-6})
    tp1 = project(SMALL, slow, SMALL_CONFIG.model_copy(update={"tp": 1}), profile=PROFILE)
    tp8 = project(SMALL, slow, SMALL_CONFIG, profile=PROFILE)
    # host-bound: the layer time does not fall by 8x with TP 8 (the launches stay)
    assert tp8.breakdown.compute_s > tp1.breakdown.compute_s / 4


def test_cuda_graphs_are_never_slower_and_remove_the_host_floor() -> None:
    slow = HOST.model_copy(update={"host_op_s": 40e-6})
    eager = _time(SMALL_CONFIG, SMALL, slow)
    graphed = _time(SMALL_CONFIG.model_copy(update={"cuda_graphs": True}), SMALL, slow)
    assert graphed < 0.8 * eager
    for config in (EVERY, SMALL_CONFIG):
        model = DENSE if config is EVERY else SMALL
        assert _time(config.model_copy(update={"cuda_graphs": True}), model) <= _time(config, model)


def test_cuda_graphs_capture_a_padded_token_drop_moe_block_but_not_a_dropless_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Megatron-core graphs a MoE block only with drop-padding (token-drop pads each expert to its capacity); a
    dropless block's router, permutation and grouped GEMMs launch from the host under graphs too.  Same GPU work
    either way (capacity factor 1.0), so with a slow host only the dropless run pays its ungraphed launches."""
    model = load_model("qwen3-30b-a3b")
    slow = HOST.model_copy(update={"host_op_s": 200e-6})
    base = TrainingConfig(tp=1, ep=8, mbs=1, gbs=8, seq_len=4096, zero=1, framework="megatron", cuda_graphs=True)
    dropless = _time(base, model, slow)
    padded = _time(base.model_copy(update={"moe_routing": "token-drop"}), model, slow)
    assert dropless > 1.05 * padded
    eager = base.model_copy(update={"cuda_graphs": False})        # without graphs both launch every op
    assert _time(eager, model, slow) == pytest.approx(
        _time(eager.model_copy(update={"moe_routing": "token-drop"}), model, slow))
    original = workload.host_dispatch_s
    monkeypatch.setattr(workload, "host_dispatch_s", lambda launches, rates, ungraphed=0.0: original(launches, rates))
    _clear()
    assert _time(base, model, slow) == pytest.approx(padded)     # the ungraphed launches are the whole difference


def test_cuda_graphs_shorten_the_launch_gap() -> None:
    hardware = load_hardware("h100-sxm")
    plain = device_rates(hardware, PROFILE, "bf16").kernel_overhead_s
    graphed = device_rates(hardware, PROFILE, "bf16", cuda_graphs=True).kernel_overhead_s
    assert plain - graphed == pytest.approx(CUDA_GRAPH_GAP_SAVING_S) and CUDA_GRAPH_GAP_SAVING_S > 0


def test_compile_fuses_the_eager_elementwise_code() -> None:
    config = TrainingConfig(tp=1, mbs=1, gbs=8, seq_len=8192, framework="torchtitan", zero=3)
    eager = _time(config, load_model("llama3-8b"), HOST)
    compiled = _time(config.model_copy(update={"compile": True}), load_model("llama3-8b"), HOST)
    assert compiled < eager
    megatron = config.model_copy(update={"framework": "megatron"})        # already fused: no change
    assert _time(megatron.model_copy(update={"compile": True}), load_model("llama3-8b"), HOST) == pytest.approx(
        _time(megatron, load_model("llama3-8b"), HOST))


# ---- attention backends -------------------------------------------------------------------------------------------

def test_unfused_attention_is_never_faster_and_keeps_the_scores() -> None:
    for seq in (2048, 8192):
        config = EVERY.model_copy(update={"cp": 1, "seq_len": seq})
        fused = project(DENSE, H100, config.model_copy(update={"attention_backend": "fused"}), profile=PROFILE)
        triton = project(DENSE, H100, config.model_copy(update={"attention_backend": "triton"}), profile=PROFILE)
        unfused = project(DENSE, H100, config.model_copy(update={"attention_backend": "unfused"}), profile=PROFILE)
        assert fused.iteration_time_s < triton.iteration_time_s
        assert fused.iteration_time_s < unfused.iteration_time_s
        assert unfused.memory.peak_bytes > fused.memory.peak_bytes == triton.memory.peak_bytes


def test_triton_attention_runs_at_its_cited_speed() -> None:
    assert 0 < TRITON_ATTENTION_SPEED < 1
    hardware = load_hardware("h100-sxm")
    fused = device_rates(hardware, PROFILE, "bf16").attention_efficiency
    slow = device_rates(hardware, PROFILE, "bf16", attention_multiplier=TRITON_ATTENTION_SPEED).attention_efficiency
    assert slow == pytest.approx(fused * TRITON_ATTENTION_SPEED)


def test_unfused_attention_term_is_priced(monkeypatch: pytest.MonkeyPatch) -> None:
    config = EVERY.model_copy(update={"cp": 1, "attention_backend": "unfused"})
    before = _time(config)
    monkeypatch.setattr(workload, "unfused_attention_fwd_bwd_s", lambda *a, **k: (0.0, 0.0))
    _clear()
    assert _time(config) < before


# ---- gradient reduction dtype -------------------------------------------------------------------------------------

def test_fp32_gradient_reduction_doubles_dp_bytes_and_the_grad_buffer() -> None:
    config = TrainingConfig(tp=8, pp=1, mbs=1, gbs=64, seq_len=4096, zero=0, framework="megatron")
    dims = parallel_dims(config, H100)
    net = network_for(load_hardware("h100-sxm"), H100, PROFILE)
    fw = framework_profile("megatron").model_copy(update={"grad_bucket_elements": 1e12})   # one bucket: bytes only
    low = sum(_dp_comm_parts(DENSE, config.model_copy(update={"grad_reduce_in_fp32": False}), dims, net, fw))
    high = sum(_dp_comm_parts(DENSE, config.model_copy(update={"grad_reduce_in_fp32": True}), dims, net, fw))
    assert high > 1.8 * low
    mem_low = project(DENSE, H100, config.model_copy(update={"grad_reduce_in_fp32": False}), profile=PROFILE).memory
    mem_high = project(DENSE, H100, config.model_copy(update={"grad_reduce_in_fp32": True}), profile=PROFILE).memory
    grads = [(a.gradients_bytes, b.gradients_bytes) for a, b in zip(mem_low.stages, mem_high.stages, strict=True)]
    assert all(b == pytest.approx(2 * a) and a > 0 for a, b in grads)
    assert _time(config.model_copy(update={"grad_reduce_in_fp32": True, "comm_overlap": ()})) > _time(
        config.model_copy(update={"grad_reduce_in_fp32": False, "comm_overlap": ()}))


# ---- MoE dispatchers ---------------------------------------------------------------------------------------------

def test_kernel_dispatchers_move_the_tokens_faster_than_the_all_to_all(monkeypatch: pytest.MonkeyPatch) -> None:
    config = TrainingConfig(tp=1, ep=8, pp=1, mbs=1, gbs=64, seq_len=4096, zero=1, framework="megatron",
                            comm_overlap=())
    times = {d: project(MOE, H100, config.model_copy(update={"moe_dispatcher": d}), profile=PROFILE)
             for d in ("alltoall", "deepep", "hybridep")}
    assert times["hybridep"].breakdown.ep_comm_s == pytest.approx(times["deepep"].breakdown.ep_comm_s)
    assert times["hybridep"].breakdown.ep_comm_s < times["alltoall"].breakdown.ep_comm_s
    assert times["hybridep"].memory.peak_bytes > times["alltoall"].memory.peak_bytes    # registered buffers
    monkeypatch.setattr(workload, "DEEPEP_A2A_FACTOR", 1.0)
    _clear()
    same = project(MOE, H100, config.model_copy(update={"moe_dispatcher": "hybridep"}), profile=PROFILE)
    assert same.breakdown.ep_comm_s == pytest.approx(times["alltoall"].breakdown.ep_comm_s)


def test_hybridep_permutes_inside_its_dispatch_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """HybridEP's dispatch / combine kernels leave the rows in expert order (Megatron-LM ``_HybridEPManager``), so its
    step drops DeepEP's separate permute + unpermute passes; at the same all-to-all price it is faster by them."""
    config = TrainingConfig(tp=1, ep=8, pp=1, mbs=2, gbs=128, seq_len=4096, zero=1, framework="megatron",
                            comm_overlap=())
    deepep = project(MOE, H100, config.model_copy(update={"moe_dispatcher": "deepep"}), profile=PROFILE)
    hybridep = project(MOE, H100, config.model_copy(update={"moe_dispatcher": "hybridep"}), profile=PROFILE)
    assert hybridep.breakdown.ep_comm_s == pytest.approx(deepep.breakdown.ep_comm_s)
    assert hybridep.iteration_time_s < deepep.iteration_time_s * 0.999
    monkeypatch.setattr(workload, "PERMUTE_FUSED_DISPATCHERS", frozenset())
    _clear()
    unfused = project(MOE, H100, config.model_copy(update={"moe_dispatcher": "hybridep"}), profile=PROFILE)
    assert unfused.iteration_time_s == pytest.approx(deepep.iteration_time_s)


def test_compute_module_keeps_the_graph_constant() -> None:
    assert compute.CUDA_GRAPH_GAP_SAVING_S == CUDA_GRAPH_GAP_SAVING_S


def test_cuda_graphs_leave_the_dropless_moe_block_on_the_host() -> None:
    slow = Cluster(gpu="h100-sxm", num_gpus=8, host_op_s=200e-6)
    config = TrainingConfig(tp=1, ep=8, mbs=1, gbs=8, seq_len=256, framework="megatron", cuda_graphs=True,
                            comm_overlap=())
    dropless = project(MOE, slow, config, profile=PROFILE).iteration_time_s
    fast = project(MOE, slow.model_copy(update={"host_op_s": 1e-9}), config, profile=PROFILE).iteration_time_s
    assert dropless > fast      # the expert block's launches still pay the host, graphs or not


def test_overlapped_comm_hides_at_most_under_its_window() -> None:
    from projection.engine import _hidden_up_to

    assert _hidden_up_to(10.0, 0.5, 1.0) == 9.0      # window-bound: only 1 s of compute to hide under
    assert _hidden_up_to(1.0, 0.5, 10.0) == 0.5      # share-bound
    assert _hidden_up_to(1.0, 0.0, 10.0) == 1.0      # not overlapped: all exposed
