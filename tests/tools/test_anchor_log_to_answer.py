"""Log to answer: a Megatron-LM log of a 1-node run, imported as an anchor, changes a 64-GPU search ranking.

Scripted case (issue 27): Llama 3 8B on 64 H100, two candidate layouts a near-tie apart (A: TP1 mbs 2 with full
recompute, B: TP4 SP with selective; 1.7% apart with the shipped profiles, 0.3% the other way anchored).  A is ahead unanchored; B spends less of its
step in compute and more in communication.  The 1-node log measures
its layout 1.55x slower in compute than projected (``T = 1.55 C + R`` of its own projection), so the
raw compute factor is 1.55, shrunk by the shipped shared-error weight ``w`` of a target 8x beyond its anchor
seen through an anchor of compute share ``s`` (``c = 1.55 ** h``, ``h = lam s^2 / (1 + lam s^2)``,
``lam = w / (1 - w)``, projection/anchor.py), and every layout's compute grows by it: B, with less compute,
overtakes A.  The expected step times are computed here by hand from each projection's breakdown:
``t = c * (compute + bubble * compute / (compute + tp + cp + ep)) + (the rest)``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from projection.engine import Projection, project
from projection.job import resolve_job
from projection.training_config import TrainingConfig
from projection.uncertainty import anchor_class, shared_weight
from tools.search import SearchRequest, run_search

GBS, SEQ = 256, 8192
A = {"tp": 1, "pp": 1, "mbs": 2, "recompute": "full", "zero": 1, "precision": "bf16"}
B = {"tp": 4, "pp": 1, "mbs": 1, "sequence_parallel": True, "zero": 1, "recompute": "selective", "precision": "bf16"}
ANCHOR = {"tp": 1, "pp": 1, "mbs": 1, "gbs": 32, "seq_len": SEQ, "precision": "bf16", "recompute": "none", "zero": 1}
COMPUTE_FACTOR = 1.55


def _split(p: Projection) -> tuple[float, float]:
    """(compute with its bubble share, everything else) of a projected step, seconds (by hand)."""
    b = p.breakdown
    stage = b.tp_comm_s + b.cp_comm_s + b.ep_comm_s
    bubble_compute = b.pp_bubble_s * b.compute_s / (b.compute_s + stage)
    compute = b.compute_s + bubble_compute
    return compute, p.iteration_time_s - compute


def posterior_weight(weight: float, shares: tuple[float, ...]) -> float:
    """By hand: the power a raw factor takes from anchors of these compute shares at shared-error weight ``weight``
    (``lam S / (1 + lam S)``, ``lam = w / (1 - w)``, ``S`` the sum of squared shares; ``w = 1``: 1)."""
    if weight >= 1.0:
        return 1.0
    total = weight / (1.0 - weight) * sum(s * s for s in shares)
    return total / (1.0 + total)


def _megatron_log(path: Path, step_ms: float) -> Path:
    """A Megatron-LM log of the anchor layout on one 8-GPU node (no GPU name: Megatron prints none)."""
    args = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "context_parallel_size": 1,
            "micro_batch_size": 1, "global_batch_size": 32, "seq_length": SEQ, "bf16": True, "fp8": None,
            "recompute_granularity": None, "use_distributed_optimizer": True, "use_torch_fsdp2": False,
            "sequence_parallel": False, "world_size": 8, "num_layers": 32, "hidden_size": 4096,
            "ffn_hidden_size": 14336, "num_attention_heads": 32, "group_query_attention": True,
            "num_query_groups": 8, "kv_channels": 128, "padded_vocab_size": 128256, "swiglu": True,
            "untie_embeddings_and_output_weights": True, "num_experts": None}
    lines = ["------------------------ arguments ------------------------"]
    lines += [f"  {k} {'.' * (48 - len(k))} {v}" for k, v in sorted(args.items())]
    lines.append("-------------------- end of arguments ---------------------")
    for i in range(1, 21):
        ms = step_ms * (3 if i == 1 else 1)   # a slow first iteration, skipped as warm-up
        lines.append(f" [2026-01-01 00:00:{i:02d}] iteration {i * 10:8d}/     200 | consumed samples: {i * 320:8d} | "
                     f"elapsed time per iteration (ms): {ms:.1f} | learning rate: 3.0E-04 | global batch size:    32 |")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    target = resolve_job("llama3-8b", "h100-sxm", 64)
    node = target.resized(8)
    anchor = project(node.model, node.cluster, TrainingConfig(**ANCHOR), hardware=node.hardware, profile=node.profile)
    compute, rest = _split(anchor)
    step_ms = round((COMPUTE_FACTOR * compute + rest) * 1000, 1)      # what the log prints, 0.1 ms
    log = _megatron_log(tmp_path_factory.mktemp("runs") / "llama3-8b-1node.log", step_ms)
    factor = (step_ms / 1000 - rest) / compute                           # the factor the logged time implies
    weight = shared_weight(anchor_class(64, (8,)))                        # shipped, cross-validated
    share = compute / (compute + rest)                                   # the anchor's compute share of its step
    applied = factor ** posterior_weight(weight, (share,))
    expected = {}
    for name, values in (("A", A), ("B", B)):
        p = project(target.model, target.cluster, TrainingConfig(**values, gbs=GBS, seq_len=SEQ),
                    hardware=target.hardware, profile=target.profile)
        c, r = _split(p)
        expected[name] = (p.tokens_per_s_per_gpu, GBS * SEQ / (applied * c + r) / 64)
    return {"log": log, "factor": factor, "applied": applied, "expected": expected, "share": share}


def _ranked(anchors: list) -> list:
    request = SearchRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=64, gbs=GBS, seq_len=SEQ, candidates=[A, B],
                            anchors=anchors)
    return run_search(request, workers=1)


def test_the_hand_computed_case_is_a_flip(case: dict) -> None:
    (a0, a1), (b0, b1) = case["expected"]["A"], case["expected"]["B"]
    assert a0 > b0 and b1 > a1, "the scripted case must flip (A ahead unanchored, B ahead anchored)"
    assert abs(case["factor"] - COMPUTE_FACTOR) < 1e-3


def test_a_megatron_log_anchor_changes_the_64_gpu_ranking(case: dict) -> None:
    from evals.anchor_read import read_anchors

    unanchored = _ranked([])
    assert [c.layout.split(" bf16")[0] for c in unanchored.ranked][0].startswith("TP1")
    anchors = read_anchors([case["log"]], default_gpu="h100-sxm")
    assert len(anchors) == 1 and anchors[0].num_gpus == 8 and "taken as the target's" in anchors[0].label
    result = _ranked(anchors)
    first, second = result.ranked
    assert first.layout.startswith("TP4") and second.layout.startswith("TP1"), "the anchor must flip the ranking"
    corrections = result.anchoring.corrections
    assert corrections.raw_compute_factor == pytest.approx(case["factor"], rel=1e-9)
    assert corrections.compute_factor == pytest.approx(case["applied"], rel=1e-9)
    assert corrections.comm_factor == 1.0 and not corrections.comm_solved
    expected = case["expected"]
    assert first.tokens_per_sec_per_gpu == pytest.approx(expected["B"][1], rel=1e-9)
    assert second.tokens_per_sec_per_gpu == pytest.approx(expected["A"][1], rel=1e-9)
    assert first.unanchored_tokens_per_sec_per_gpu == pytest.approx(expected["B"][0], rel=1e-9)
    if case["applied"] == case["factor"]:                     # a fully trusted anchor reproduces its own step
        assert result.anchoring.anchors[0].anchored_s == pytest.approx(result.anchoring.anchors[0].measured_s,
                                                                       rel=1e-9)


def test_the_cli_search_with_anchor_shows_both_numbers(case: dict) -> None:
    from typer.testing import CliRunner

    from projtune.cli import app

    out = CliRunner().invoke(app, ["search", "-m", "llama3-8b", "-g", "h100-sxm", "-n", "8", "--gbs", "32",
                                   "--seq-len", str(SEQ), "-k", "2", "-C", "precision=bf16",
                                   "--anchor", str(case["log"]), "--json"])
    assert out.exit_code == 0, out.output
    import json

    data = json.loads(out.stdout)
    corrections = data["anchoring"]["corrections"]
    assert corrections["raw_compute_factor"] == pytest.approx(case["factor"], rel=1e-9)
    same_scale = posterior_weight(shared_weight("same-scale"), (case["share"],))
    assert corrections["compute_factor"] == pytest.approx(case["factor"] ** same_scale, rel=1e-9)
    assert all(c["unanchored_tokens_per_sec_per_gpu"] > c["tokens_per_sec_per_gpu"] for c in data["ranked"])
