"""CUDA graphs and the expert-parallel overlap cost memory (projection/memory_terms.py: cuda_graph_buffer_bytes,
ep_overlap_buffer_bytes): the production path (project_memory) and the one-rank reference carry the terms, and
neither switch ever lowers memory."""

from __future__ import annotations

import pytest

from projection.layout import parallel_dims
from projection.memory import project_memory
from projection.memory_terms import (
    CUDA_GRAPH_BACKWARD_SURFACES,
    EP_OVERLAP_TOKEN_COPIES,
    activation_context,
    hidden_state_bytes,
    stage_memory,
)
from projection.model_spec import load_model
from projection.pipeline import peak_in_flight_closed_form
from projection.training_config import Cluster, TrainingConfig
from memory_setup import H100, MIXTRAL, PROFILE

LLAMA = load_model("llama3-8b")
DENSE = TrainingConfig(tp=2, pp=2, vpp=2, mbs=2, gbs=256, seq_len=8192, sequence_parallel=True, zero=1,
                       comm_overlap=("dp", "tp", "pp", "cp"), cuda_graphs=False)
MOE = TrainingConfig(tp=1, pp=2, vpp=2, ep=8, mbs=1, gbs=64, seq_len=4096, zero=1,
                     comm_overlap=("dp", "tp", "pp", "cp"), cuda_graphs=False)


def _memory(model, config, gpus):
    cluster = Cluster(gpu="h100-sxm", num_gpus=gpus)
    return project_memory(model, H100, config, parallel_dims(config, cluster), PROFILE)


def test_cuda_graphs_add_a_static_input_copy_per_set_in_flight_and_two_backward_surfaces() -> None:
    on = DENSE.model_copy(update={"cuda_graphs": True})
    off_ranks, on_ranks = _memory(LLAMA, DENSE, 64).stages, _memory(LLAMA, on, 64).stages
    hidden = hidden_state_bytes(activation_context(LLAMA, DENSE), LLAMA.hidden_size)
    assert hidden == 2 * 2 * 8192 * LLAMA.hidden_size / 2          # bf16 x mbs 2 x s 8192 x h / tp 2 (SP)
    dims = parallel_dims(DENSE, Cluster(gpu="h100-sxm", num_gpus=64))
    for rank, (a, b) in enumerate(zip(off_ranks, on_ranks, strict=True)):
        sets = peak_in_flight_closed_form(DENSE.schedule, dims.pp, dims.vpp, dims.num_microbatches, rank)
        assert b.transient_bytes - a.transient_bytes == pytest.approx(hidden * (sets + CUDA_GRAPH_BACKWARD_SURFACES))
        assert b.transient_bytes > a.transient_bytes                  # zeroing the term fails here
        assert (b.weights_bytes, b.activations_bytes) == (a.weights_bytes, a.activations_bytes)


def test_expert_overlap_adds_the_second_micro_batch_token_buffers_on_moe_ranks() -> None:
    on = MOE.model_copy(update={"comm_overlap": ("dp", "tp", "pp", "ep", "cp")})
    off_ranks, on_ranks = _memory(MIXTRAL, MOE, 16).stages, _memory(MIXTRAL, on, 16).stages
    ctx = activation_context(MIXTRAL, MOE)
    extra = EP_OVERLAP_TOKEN_COPIES * MIXTRAL.top_k * hidden_state_bytes(ctx, MIXTRAL.hidden_size)
    assert extra > 0
    for a, b in zip(off_ranks, on_ranks, strict=True):
        assert b.transient_bytes - a.transient_bytes == pytest.approx(extra)


@pytest.mark.parametrize(("model", "config", "gpus", "update"), [
    (LLAMA, DENSE, 64, {"cuda_graphs": True}),
    (LLAMA, DENSE.model_copy(update={"pp": 1, "vpp": 1, "mbs": 1}), 64, {"cuda_graphs": True}),
    (LLAMA, DENSE.model_copy(update={"tp": 1, "sequence_parallel": False, "cp": 2}), 64, {"cuda_graphs": True}),
    (MIXTRAL, MOE, 16, {"comm_overlap": ("dp", "tp", "pp", "ep", "cp")}),
    (MIXTRAL, MOE.model_copy(update={"mbs": 2, "recompute": "selective"}), 16,
     {"comm_overlap": ("dp", "tp", "pp", "ep", "cp")}),
])
def test_the_switches_never_lower_memory(model, config, gpus, update) -> None:
    off, on = _memory(model, config, gpus), _memory(model, config.model_copy(update=update), gpus)
    assert on.peak_bytes > off.peak_bytes
    assert on.static_peak_bytes == off.static_peak_bytes            # weights, grads, optimizer: untouched
    for a, b in zip(off.stages, on.stages, strict=True):
        assert b.total_bytes >= a.total_bytes


def test_reference_rank_equals_the_production_path_with_the_switches() -> None:
    overlap = {"comm_overlap": ("dp", "tp", "pp", "ep", "cp")}
    for model, config, gpus in ((LLAMA, DENSE.model_copy(update={"cuda_graphs": True}), 64), (LLAMA, DENSE, 64),
                                (MIXTRAL, MOE.model_copy(update=overlap), 16)):
        dims = parallel_dims(config, Cluster(gpu="h100-sxm", num_gpus=gpus))
        batch = project_memory(model, H100, config, dims, PROFILE).stages
        for rank in range(dims.pp):
            assert stage_memory(model, config, dims, PROFILE, rank) == batch[rank]
