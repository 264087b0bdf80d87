"""The batch memory screen (projection/memory_batch.py) equals projection/memory.py bit for bit.

Every candidate of several searches (dense and MoE, deep pipelines, VPP, CP, recompute modes) and
random layouts over the families the enumerator does not vary (ZeRO 0-3, HSDP, FP8 recipes, LoRA,
frameworks, schedules, dispatchers, token-drop): peak bytes, static peak bytes, usable capacity and
so the screen's verdict are equal, not close.  Plus the search hook: with the batch screen the
search's top-k and Pareto front are the same as with the scalar one.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from projection import fast_paths
from projection.device_profile import default_profile
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.legality import layout_violations
from projection.memory import project_memory
from projection.memory_batch import MemoryBatcher
from projection.memory_verdict import SHIPPED_MARGINS, passes_screen, verdict
from projection.model_spec import load_model
from projection.training_config import RECOMPUTE_MODULES, Cluster, TrainingConfig
from tools.candidate_columns import enumerate_candidates
from tools.constraints import Constraints
from tools.search import SearchRequest, resolve_request, run_search


def _assert_equal(model_id: str, gpu: str, num_gpus: int, configs: list[TrainingConfig]) -> None:
    model, hardware = load_model(model_id), load_hardware(gpu)
    cluster = Cluster(gpu=gpu, num_gpus=num_gpus)
    profile = default_profile(hardware)
    dims = [parallel_dims(c, cluster) for c in configs]
    batch = MemoryBatcher(model, hardware, profile).peaks(configs, dims)
    for i, (config, d) in enumerate(zip(configs, dims, strict=True)):
        scalar = project_memory(model, hardware, config, d, profile)
        peak, static, usable = (float(batch.peak_bytes[i]), float(batch.static_peak_bytes[i]),
                                float(batch.capacity_bytes[i]))
        assert (peak, static, usable) == (scalar.peak_bytes, scalar.static_peak_bytes, scalar.capacity_bytes), config
        assert verdict(peak, usable) == scalar.verdict
        assert batch.headroom_fraction(i) == scalar.headroom_fraction
        for headroom in (0.0, 0.1, 0.3):
            assert passes_screen(peak, usable, headroom, SHIPPED_MARGINS) == passes_screen(
                scalar.peak_bytes, scalar.capacity_bytes, headroom, scalar.margins)


SEARCHES = [
    # dense, deep pipelines (PP up to 32 with VPP), CP, every recompute mode the enumerator makes
    ("llama3.1-405b", "h100-sxm", 2048, 1024, 8192, Constraints(tp=8, mbs=1)),
    ("llama3-8b", "h100-sxm", 64, 512, 16384, Constraints(mbs="<=2")),
    # MoE with EP/ETP, dispatchers (mixtral on MI300X; DeepSeek-V3 with MLA and shared experts)
    ("mixtral-8x7b", "mi300x", 32, 128, 4096, Constraints(mbs="<=2")),
    ("deepseek-v3", "h100-sxm", 256, 512, 4096, Constraints(tp="<=4", mbs=1)),
]


@pytest.mark.parametrize("search", SEARCHES, ids=[s[0] for s in SEARCHES])
def test_batch_equals_scalar_on_every_candidate_of_a_search(search: tuple) -> None:
    model_id, gpu, num_gpus, gbs, seq, constraints = search
    job = resolve_request(SearchRequest(model=model_id, gpu=gpu, num_gpus=num_gpus, gbs=gbs, seq_len=seq))
    configs = list(enumerate_candidates(job.model, job.hardware, job.cluster, constraints, gbs, seq))
    assert len(configs) > 100
    _assert_equal(model_id, gpu, num_gpus, configs)


_DENSE_MODELS = ("llama3-8b", "llama3-70b", "gpt3-175b", "qwen3-8b", "gpt-oss-20b")
_MOE_MODELS = ("mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b", "gpt-oss-120b")


@st.composite
def layouts(draw: st.DrawFn) -> tuple[str, str, int, TrainingConfig]:
    model_id = draw(st.sampled_from(_DENSE_MODELS + _MOE_MODELS))
    gpu = draw(st.sampled_from(("h100-sxm", "mi300x", "b200")))
    model = load_model(model_id)
    tp = draw(st.sampled_from((1, 2, 4, 8)))
    pp = draw(st.sampled_from((1, 2, 4, 8, 16, 32)))
    vpp = draw(st.sampled_from((1, 2, 3, 4))) if pp > 1 else 1
    cp = draw(st.sampled_from((1, 2, 4)))
    dp = draw(st.sampled_from((1, 2, 4, 8)))
    ep = draw(st.sampled_from((1, 2, 4, 8))) if model.is_moe else 1
    etp = draw(st.sampled_from((1, 2))) if model.is_moe else 1
    mbs = draw(st.sampled_from((1, 2, 4)))
    zero = draw(st.integers(0, 3))
    recompute = draw(st.sampled_from(("none", "selective", "full")))
    modules = tuple(sorted(draw(st.sets(st.sampled_from(RECOMPUTE_MODULES), min_size=1, max_size=3))))
    full_layers = draw(st.sampled_from((None, 0, 1, 3))) if recompute == "full" else None
    schedules = ("interleaved",) if vpp > 1 else ("1f1b", "gpipe", "zero-bubble")
    schedule = draw(st.sampled_from(("zbv",) if vpp == 2 and draw(st.booleans()) else schedules))
    routing = draw(st.sampled_from(("dropless", "balanced", "token-drop")))
    config_args = dict(
        tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp, mbs=mbs, gbs=mbs * dp * draw(st.sampled_from((1, 4, 16, 64))),
        seq_len=draw(st.sampled_from((2048, 4096, 8192))), precision=draw(st.sampled_from(
            ("bf16", "fp16", "fp8", "fp8-blockwise", "mxfp8", "nvfp4"))),
        recompute=recompute, recompute_modules=modules if recompute == "selective" else ("core_attn",),
        recompute_num_layers=full_layers, sequence_parallel=draw(st.booleans()), zero=zero,
        fsdp_size=draw(st.sampled_from((None, 2, 4))) if zero == 3 else None, pp_schedule=schedule,
        framework=draw(st.sampled_from((None, "megatron", "torchtitan", "deepspeed", "jax", "primus"))),
        moe_dispatcher=draw(st.sampled_from(("alltoall", "allgather", "deepep"))), moe_routing=routing,
        moe_capacity_factor=draw(st.sampled_from((1.0, 1.25, 2.0))) if routing == "token-drop" else None,
        finetune=draw(st.sampled_from((None, "sft", "lora"))),
    )
    config = TrainingConfig(**config_args)
    num_gpus = tp * pp * cp * dp
    assume(not layout_violations(model, load_hardware(gpu), Cluster(gpu=gpu, num_gpus=num_gpus), config))
    return model_id, gpu, num_gpus, config


@settings(max_examples=150)
@given(st.lists(layouts(), min_size=1, max_size=6))
def test_batch_equals_scalar_on_random_layouts(drawn: list[tuple[str, str, int, TrainingConfig]]) -> None:
    # a batch per (model, gpu, cluster); several layouts in one batch share the batcher's rows
    by_job: dict[tuple[str, str, int], list[TrainingConfig]] = {}
    for model_id, gpu, num_gpus, config in drawn:
        by_job.setdefault((model_id, gpu, num_gpus), []).append(config)
    for (model_id, gpu, num_gpus), configs in by_job.items():
        _assert_equal(model_id, gpu, num_gpus, configs)


def test_search_with_batch_screen_equals_scalar_screen() -> None:
    request = SearchRequest(model="mixtral-8x7b", gpu="mi300x", num_gpus=16, gbs=64, seq_len=4096, top_k=5,
                            constraints=Constraints(pp="<=4", mbs="<=2"))
    fast = run_search(request, workers=1)
    with fast_paths.disabled():
        exact = run_search(request, workers=1)

    def view(result: object) -> tuple[object, ...]:
        return tuple((tuple(sorted(c.config.items())), c.tokens_per_sec_per_gpu, c.headroom_fraction,
                      c.peak_memory_gib) for c in [*result.ranked, *result.pareto])  # type: ignore[attr-defined]
    assert fast.ranked and view(fast) == view(exact)
    assert (fast.screened_out, fast.projected, fast.pruned) == (exact.screened_out, exact.projected, exact.pruned)
