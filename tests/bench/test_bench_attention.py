"""The attention core computes exactly the (query, key) pairs the engine charges, with a pinned backend.

Reference: full attention over the GLOBAL sequence with an explicit causal (and window) mask,
in float64 on the CPU; a CP rank's output must equal the reference rows of its two
load-balanced chunks.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bench.attention import AttentionCore, attended_pairs, plan


def _brute_pairs(seq: int, cp: int, window: int) -> int:
    total = 0
    for call in plan(seq, cp, window):
        for q in range(call.q_start, call.q_start + call.q_len):
            total += sum(1 for k in range(q + 1) if not window or q - k < window)
    return total


@pytest.mark.parametrize(("seq", "cp", "window"), [(16, 1, 0), (16, 2, 0), (24, 4, 0), (32, 1, 5), (32, 2, 7),
                                                   (8, 8, 3)])
def test_pairs_closed_form_matches_a_brute_force_count(seq: int, cp: int, window: int) -> None:
    assert attended_pairs(seq, cp, window) == _brute_pairs(seq, cp, window)


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_a_cp_rank_computes_its_share_of_the_full_sequence(cp: int) -> None:
    """Load balancing: S_local * S / 2 pairs (+ the diagonal), not the local-only S_local^2 / 2."""
    seq = 64
    full = seq * cp
    assert attended_pairs(seq, cp, 0) == seq * full // 2 + seq // 2
    assert attended_pairs(seq, cp, 0) > cp * (seq * seq // 2) // 2      # far above local-against-local


def _reference(q, k, v, positions: list[int], window: int) -> torch.Tensor:
    """Rows ``positions`` of masked attention over the global sequence (k, v already global)."""
    n = k.shape[2]
    qi = torch.tensor(positions)[:, None]
    ki = torch.arange(n)[None, :]
    mask = ki <= qi
    if window:
        mask &= qi - ki < window
    reps = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(reps, dim=1) for t in (k, v))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize(("cp", "window"), [(1, 0), (2, 0), (4, 0), (1, 6), (2, 5)])
def test_core_output_equals_masked_attention_over_the_global_sequence(cp: int, window: int) -> None:
    torch.manual_seed(cp * 10 + window)
    seq, heads, kv_heads, dim = 16, 4, 2, 8
    core = AttentionCore(seq, cp, window)
    q = torch.randn(1, heads, seq, dim, dtype=torch.float64)
    k = torch.randn(1, kv_heads, seq, dim, dtype=torch.float64)
    v = torch.randn(1, kv_heads, seq, dim, dtype=torch.float64)
    out = core(q, k, v)
    positions = [p for call in core.calls for p in range(call.q_start, call.q_start + call.q_len)]
    ref = _reference(q, torch.cat([k] * cp, dim=2), torch.cat([v] * cp, dim=2), positions, window)
    assert core.backend in ("flash", "math")
    assert (out - ref).norm() / ref.norm() < 1e-10


def test_sliding_window_kernel_never_computes_the_full_masked_matrix() -> None:
    """Window 128 at seq 4096: the banded kernel does < 2x the useful pairs; full masking does ~16x."""
    core = AttentionCore(4096, 1, 128)
    core.backend = "math"
    useful = attended_pairs(4096, 1, 128)
    assert core.kernel_pairs() < 2 * useful
    assert 4096 * 4096 / useful > 16


def test_backend_is_pinned_and_recorded() -> None:
    core = AttentionCore(32, 1, 0)
    q = torch.randn(1, 2, 32, 16)
    k = torch.randn(1, 1, 32, 16)
    assert core.choose(q, k, k) == core.backend == "flash"    # CPU candidates: flash, then math
    windowed = AttentionCore(32, 1, 8)
    assert windowed.choose(q, k, k) == "math"                 # band masks rule out flash


def test_device_self_checks_pass_on_the_cpu_and_catch_a_wrong_kernel(monkeypatch) -> None:
    from bench import selfcheck

    checks = selfcheck.run_checks(torch.device("cpu"), torch.float32)
    assert checks and all(c["ok"] for c in checks), checks
    # A core that hands the CP rank the wrong (reversed) keys must fail its check.
    monkeypatch.setattr(AttentionCore, "_full_kv", lambda self, t: torch.cat([t.flip(2)] * self.cp, dim=2)
                        if self.cp > 1 else t)
    broken = selfcheck.run_checks(torch.device("cpu"), torch.float32)
    assert any(c["ok"] is False and "cp 2" in c["name"] for c in broken)
