"""The 80% band knows how far a job is from its evidence: honest cells, novelty reasons, widening, and the answer."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from projection.engine import project
from projection.evidence import (
    ANY,
    REASON_KEYS,
    JobFeatures,
    Tagged,
    build_evidence,
    job_features,
    novelty,
    shipped_evidence,
)
from projection.hardware import load_hardware
from projection.model_spec import load_model
from projection.summary import projection_dict
from projection.training_config import Cluster, TrainingConfig
from projection.uncertainty import (
    BandTable,
    Widening,
    band_for,
    band_for_job,
    band_table,
    build_table,
    relative_band,
    weighted_percentile,
    widen,
)

H100 = JobFeatures(gpu="h100-sxm", family="hopper", framework="megatron", moe=False, seq_len=8192, params=70e9,
                   num_gpus=64, crosses_domain=True, kernel_flop=1e12, experts=0, top_k=0, ep=1,
                   switches=(("precision", "bf16"),))


def _evidence() -> object:
    """Two sources of dense Megatron runs on Hopper, 4k-8k sequences, 8B-70B, 8-64 GPUs."""
    runs = [Tagged("a.yaml", replace(H100, seq_len=4096, params=8e9, num_gpus=8, crosses_domain=False)),
            Tagged("a.yaml", H100),
            Tagged("b.yaml", replace(H100, gpu="h200", kernel_flop=2e12))]
    return build_evidence(runs)


def test_a_job_inside_the_evidence_has_no_novelty() -> None:
    assert novelty(H100, _evidence()) == ()


def test_a_job_on_a_new_gpu_framework_and_sequence_names_each_reason() -> None:
    job = replace(H100, gpu="mi350x", family="cdna4", framework="llm-foundry", seq_len=32768)
    reasons = {n.key: n.text for n in novelty(job, _evidence())}
    assert set(reasons) == {"gpu-family", "framework", "sequence"}
    assert "MI350X" in reasons["gpu-family"] and "llm-foundry" in reasons["framework"]
    assert "32k is 4.0x the longest fitted on any GPU (8k)" in reasons["sequence"]


def test_each_range_novelty_is_detected() -> None:
    ev = _evidence()
    keys = {
        "host-bound": replace(H100, kernel_flop=1e10), "model-size": replace(H100, params=1e12),
        "scale": replace(H100, num_gpus=1024), "gpu": replace(H100, gpu="h800"),
        "switch": replace(H100, switches=(("precision", "nvfp4"),)), "moe-shape": replace(H100, moe=True),
    }
    for key, job in keys.items():
        assert [n.key for n in novelty(job, ev)] == [key], key
    assert set(keys) | {"gpu-family", "framework", "sequence"} == set(REASON_KEYS)


def test_a_switch_the_evidence_does_not_record_is_not_a_novelty() -> None:
    job = replace(H100, switches=(("precision", "bf16"), ("cuda_graphs", "True")))   # a field added after the build
    assert novelty(job, _evidence()) == ()


def test_one_source_is_thin_evidence_however_many_runs() -> None:
    runs = [Tagged("one.yaml", replace(H100, family="cdna3", gpu="mi300x"))] * 40
    ev = build_evidence(runs + [Tagged("a.yaml", H100), Tagged("b.yaml", H100)])
    assert ev.families["cdna3"].runs == 40 and ev.families["cdna3"].sources == 1
    reasons = novelty(replace(H100, family="cdna3", gpu="mi300x"), ev)
    assert [n.key for n in reasons] == ["gpu-family"] and "1 source only" in reasons[0].text
    assert ev.families[ANY].sources == 3


def test_cells_count_sources_not_runs_and_are_never_one_sided_from_one_source() -> None:
    # 30 runs of one source all 10-20% slower than projected, and a two-sided pool of 12 other sources
    one = [("cdna3", "megatron", False, 0.8 + 0.01 * (i % 10), "one.yaml") for i in range(30)]
    pool = [("hopper", "megatron", False, r, f"s{i}.yaml") for i, r in enumerate(
        (0.85, 0.9, 0.95, 0.98, 1.0, 1.02, 1.05, 1.1, 1.12, 0.93, 1.07, 0.97))]
    table = build_table(one + pool, min_runs=8, min_sources=2)
    cells = {(c.family, c.framework, c.moe): c for c in table.cells}
    assert ("cdna3", "megatron", False) not in cells        # 30 runs, one source: no cell of its own
    # the pooled band weighs the 30 runs as one source: its high side is the pool's, not pulled down by them
    assert table.default.sources == 13 and table.default.high > 1.05
    two = one + [("cdna3", "megatron", False, 0.85, "two.yaml")] * 10
    cell = {(c.family, c.framework, c.moe): c for c in build_table(two + pool).cells}[("cdna3", "megatron", False)]
    assert cell.sources == 2 and cell.high > 1.0             # both sources err slow, yet the band reaches above 1
    raw_low = weighted_percentile([math.log(r[3]) for r in two], [1 / 30] * 30 + [1 / 10] * 10, 0.1)
    assert math.log(cell.low) > raw_low                      # thin cell shrunk toward the (narrower) pooled low side


def test_widening_adds_in_quadrature_once_per_reason() -> None:
    table = BandTable(method="t", min_runs=1, default={"low": 0.9, "high": 1.1, "runs": 1},
                      novelty=(Widening(key="gpu", extra=0.3, runs=5, sources=2),
                               Widening(key="sequence", extra=0.4, runs=5, sources=2)))
    base = (0.9, 1.1)
    assert widen(base, (), table) == base
    low, high = widen(base, ("gpu", "sequence", "gpu"), table)
    assert math.log(high) == pytest.approx(math.sqrt(math.log(1.1) ** 2 + 0.3 ** 2 + 0.4 ** 2))
    assert math.log(1 / low) == pytest.approx(math.sqrt(math.log(1 / 0.9) ** 2 + 0.25))
    assert widen(base, ("gpu",), table)[1] < high
    zero = table.model_copy(update={"novelty": (Widening(key="gpu", extra=0.0, runs=0, sources=0),)})
    assert widen(base, ("gpu",), zero) == base


# ---- the shipped band on real jobs (projection/catalog/uncertainty/{bands,evidence}.yaml) ----------------

def _new_job() -> tuple[object, Cluster, TrainingConfig]:
    """Llama 3 8B on MI350X with llm-foundry at a 64k sequence: a GPU, framework and length no development
    run has."""
    return (load_model("llama3-8b"), Cluster(gpu="mi350x", num_gpus=8),
            TrainingConfig(framework="llm-foundry", tp=1, pp=1, cp=1, mbs=1, gbs=64, seq_len=65536, zero=3))


def test_shipped_evidence_and_widenings_are_there() -> None:
    assert shipped_evidence() is not None
    assert {w.key for w in band_table().novelty} == set(REASON_KEYS)


def test_a_new_gpu_framework_and_sequence_widen_the_band_and_say_why() -> None:
    model, cluster, config = _new_job()
    p = project(model, cluster, config)
    cell = relative_band("cdna4", "llm-foundry", False)
    low, high = p.tokens_per_sec_per_gpu_low / p.tokens_per_s_per_gpu, p.tokens_per_sec_per_gpu_high / p.tokens_per_s_per_gpu
    assert low < cell[0] and high > cell[1]               # wider on both sides than the cell inside the evidence
    keys = {n.key for n in p.band_novelty}
    assert {"gpu-family", "framework", "sequence"} <= keys
    assert (low, high) == pytest.approx(widen(cell, keys, band_table()))
    for key in keys:                                      # every reason adds width (its widening is above zero)
        assert widen(cell, keys - {key}, band_table())[1] < high
    text = " | ".join(p.band_reasons)
    assert "MI350X" in text and "llm-foundry" in text and "sequence 64k" in text
    assert projection_dict(p)["band_reasons"] == list(p.band_reasons)


def test_a_job_inside_the_evidence_keeps_its_cell_band() -> None:
    model = load_model("llama3-70b")
    cluster = Cluster(gpu="h100-sxm", num_gpus=64)
    config = TrainingConfig(tp=4, pp=4, mbs=1, gbs=128, seq_len=8192, precision="fp8", recompute="none")
    features = job_features(model, cluster, config, load_hardware("h100-sxm"))
    assert novelty(features, shipped_evidence()) == ()
    p = project(model, cluster, config)
    low, high = relative_band("hopper", None, False)
    assert p.band_reasons == ()
    assert p.tokens_per_sec_per_gpu_low == pytest.approx(p.tokens_per_s_per_gpu * low)
    assert p.tokens_per_sec_per_gpu_high == pytest.approx(p.tokens_per_s_per_gpu * high)
    assert band_for_job(band_table(), (), "hopper", None, False).low == low


def test_band_for_falls_back_to_the_pooled_band() -> None:
    assert band_for(band_table(), "unknown-family", "unknown", True) in {
        (c.low, c.high) for c in band_table().cells} | {(band_table().default.low, band_table().default.high)}
