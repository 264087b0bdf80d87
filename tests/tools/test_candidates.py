"""The candidate space: legal by construction, deduplicated, within constraints, sane."""

from __future__ import annotations

import pytest

from projection.hardware import load_hardware
from projection.legality import layout_violations
from projection.model_spec import load_model
from projection.training_config import Cluster
from tools.candidate_columns import enumerate_candidates
from tools.constraints import Constraints


def _space(model: str, gpu: str, n: int, gbs: int, seq: int, constraints: Constraints | None = None):
    m, h = load_model(model), load_hardware(gpu)
    cluster = Cluster(gpu=h.id, num_gpus=n)
    return m, h, cluster, list(enumerate_candidates(m, h, cluster, constraints or Constraints(), gbs, seq))


@pytest.mark.parametrize(("model", "gpu", "n", "gbs", "seq"), [
    ("llama3-8b", "h100-sxm", 8, 64, 8192),
    ("mixtral-8x7b", "mi300x", 64, 256, 4096),
    ("llama3-70b", "h100-sxm", 64, 128, 32768),
])
def test_every_candidate_is_legal_and_unique(model: str, gpu: str, n: int, gbs: int, seq: int) -> None:
    m, h, cluster, configs = _space(model, gpu, n, gbs, seq)
    assert configs
    for c in configs:
        assert layout_violations(m, h, cluster, c) == [], c
        assert c.sequence_parallel == (c.tp > 1)
        assert c.zero in (0, 1, 3) and (c.zero != 3 or (c.pp == 1 and c.tp <= 8))
        assert (c.vpp > 1) == (c.schedule == "interleaved")
        assert c.schedule != "zero-bubble" or c.pp > 1
        assert c.precision in ("bf16", "fp8", "fp8-blockwise", "mxfp8")
        assert c.mbs & (c.mbs - 1) == 0
    keys = [c.model_dump_json() for c in configs]
    assert len(keys) == len(set(keys))


def test_cp_only_for_long_sequences() -> None:
    # gbs >= num_gpus: short sequences keep CP 1 (tools/candidates.py docstring)
    *_, short = _space("llama3-8b", "h100-sxm", 16, 64, 8192)
    *_, long = _space("llama3-8b", "h100-sxm", 16, 64, 32768)
    assert {c.cp for c in short} == {1}
    assert max(c.cp for c in long) > 1
    *_, pinned = _space("llama3-8b", "h100-sxm", 16, 64, 8192, Constraints(cp=2))
    assert {c.cp for c in pinned} == {2}


def test_short_sequence_cp_where_gpus_outnumber_sequences() -> None:
    # gbs 8 < 64 GPUs at 8k tokens: CP 2 and 4 (>= 2,048 tokens per rank), only with mbs 1; gbs 64 on 16: none
    *_, short = _space("llama3-8b", "h100-sxm", 64, 8, 8192)
    assert {c.cp for c in short} == {1, 2, 4}
    assert {c.mbs for c in short if c.cp > 1} == {1} and max(c.mbs for c in short) > 1
    *_, at_4k = _space("llama3-8b", "h100-sxm", 64, 8, 4096)
    assert {c.cp for c in at_4k} == {1, 2}


def test_ep_only_for_moe() -> None:
    *_, dense = _space("llama3-8b", "h100-sxm", 8, 64, 4096)
    *_, moe = _space("mixtral-8x7b", "mi300x", 64, 256, 4096)
    assert {c.ep for c in dense} == {1}
    assert {c.ep for c in moe} >= {1, 2, 4, 8}


def test_constraints_are_respected() -> None:
    constraints = Constraints.parse(["tp<=2", "precision=bf16", "pp in 1,2", "recompute!=full", "mbs=1"])
    *_, configs = _space("llama3-8b", "h100-sxm", 8, 64, 8192, constraints)
    assert configs
    assert {c.tp for c in configs} <= {1, 2}
    assert {c.precision for c in configs} == {"bf16"}
    assert {c.pp for c in configs} <= {1, 2}
    assert "full" not in {c.recompute for c in configs}
    assert {c.mbs for c in configs} == {1}
    *_, no_fp8 = _space("llama3-8b", "h100-sxm", 8, 64, 8192, Constraints(allow_fp8=False))
    assert {c.precision for c in no_fp8} == {"bf16"}
