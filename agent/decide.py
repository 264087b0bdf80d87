"""Decisions under uncertainty: near-ties from the 80% intervals, benchmark choices, and labelled MFU.

Every projected throughput carries an 80% interval (``tokens_per_sec_per_gpu_low/high``, from
:mod:`projection.uncertainty`).  A layout whose interval reaches the best's lower end is a
*near-tie*: the projection cannot tell the two apart, so the report says what separates them
and, offline, that a benchmark would settle it; with measured-mode results for the near-tied
layouts, the fastest measured one is chosen.

MFU is model FLOPs (``6·N_active·tokens`` plus attention, :mod:`projection.flops`; recomputed
forward work is hardware FLOPs and is not counted) per second over a peak; it is labelled
against the peak of the GEMM precision the layout runs (FP8 peak for an FP8 recipe) and against
the BF16 peak, so an FP8 layout never shows "MFU 97%" against the wrong denominator.
"""

from __future__ import annotations

from typing import Any

from projection.errors import ProjtuneError
from projection.hardware import load_hardware

_DIFF_KEYS = ("tp", "pp", "vpp", "pp_first_stage_layers", "pp_last_stage_layers", "pp_layout", "cp", "ep", "etp", "dp",
              "mbs", "precision", "recompute", "recompute_num_layers", "recompute_modules", "zero", "fsdp_size",
              "moe_dispatcher", "pp_schedule")
MAX_NEAR_TIES = 4


def differences(a: dict[str, Any], b: dict[str, Any]) -> str:
    """What layout ``b`` changes relative to ``a`` ('tp 2->4, mbs 1->2'), or 'nothing'."""
    def value(config: dict[str, Any], key: str) -> Any:
        v = config.get(key)
        if key == "recompute_modules":
            return "+".join(v) if config.get("recompute") == "selective" and v else "none"
        return v
    diffs = [f"{k} {value(a, k)}->{value(b, k)}" for k in _DIFF_KEYS if value(a, k) != value(b, k)]
    return ", ".join(diffs) if diffs else "nothing"


def _low(t: dict[str, Any]) -> float:
    return t.get("tokens_per_sec_per_gpu_low") or t["tokens_per_sec_per_gpu"]


def _high(t: dict[str, Any]) -> float:
    return t.get("tokens_per_sec_per_gpu_high") or t["tokens_per_sec_per_gpu"]


def near_ties(best_first: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The layouts after the best whose 80% interval overlaps the best's (at most MAX_NEAR_TIES)."""
    if not best_first:
        return []
    best = best_first[0]
    out = []
    for rank, t in enumerate(best_first[1:], start=2):
        if _high(t) >= _low(best):
            gap = 1.0 - t["tokens_per_sec_per_gpu"] / best["tokens_per_sec_per_gpu"]
            out.append({"rank": rank, "trial": t["id"], "layout": t["layout"], "config": t["config"],
                        "tokens_per_sec_per_gpu": t["tokens_per_sec_per_gpu"],
                        "interval": [_low(t), _high(t)], "gap": gap,
                        "differs": differences(best["config"], t["config"])})
        if len(out) >= MAX_NEAR_TIES:
            break
    return out


def measured_tps(benchmark: dict[str, Any]) -> float | None:
    """Tokens/s/GPU of a measured-mode result (the restored projection of the measured layers), if any."""
    if not benchmark.get("available"):
        return None
    projection = (benchmark.get("results") or {}).get("projection") or {}
    value = projection.get("tokens_per_sec_per_gpu")
    return float(value) if value else None


def benchmark_choice(best_first: list[dict[str, Any]], ties: list[dict[str, Any]],
                     benchmarks: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """Reorder the best and its benchmarked near-ties by measured throughput (the best must be measured too)."""
    if not ties or not best_first:
        return best_first, None
    measured = {b["trial"]: v for b in benchmarks if (v := measured_tps(b)) is not None}
    tied = {n["trial"] for n in ties}
    group = [t for t in best_first if (t["id"] == best_first[0]["id"] or t["id"] in tied) and t["id"] in measured]
    if best_first[0]["id"] not in measured or len(group) < 2:
        return best_first, None
    chosen = sorted(group, key=lambda t: -measured[t["id"]])
    rest = [t for t in best_first if t["id"] not in {g["id"] for g in group}]
    line = ("near-tie settled by benchmark: " + ", ".join(f"{t['layout']} {measured[t['id']]:,.0f} tokens/s/GPU "
                                                          "measured" for t in chosen))
    return chosen + rest, line


def band_note(best: dict[str, Any]) -> str:
    """Why the best's 80% interval is wide ("" inside the evidence), and what would narrow it."""
    reasons = best.get("band_reasons") or ()
    if not reasons:
        return ""
    return ("; the 80% interval of #1 is wide: " + "; ".join(reasons) + " (a measured run of this job, even on a "
            "few GPUs for a few steps, would narrow it: `projtune eval` or measured mode)")


def decision_text(best_first: list[dict[str, Any]], ties: list[dict[str, Any]], benchmarked: str | None) -> str:
    """One sentence on how sure the pick is (the near-tie, what separates it, what would settle it, and why the
    interval is wide when the job lies outside the development evidence)."""
    if not best_first:
        return ""
    return _decision(best_first, ties, benchmarked) + band_note(best_first[0])


def _decision(best_first: list[dict[str, Any]], ties: list[dict[str, Any]], benchmarked: str | None) -> str:
    if benchmarked:
        return benchmarked
    if not ties:
        if len(best_first) < 2:
            return "clear: the only layout scored"
        second = best_first[1]
        gap = 1.0 - second["tokens_per_sec_per_gpu"] / best_first[0]["tokens_per_sec_per_gpu"]
        return f"clear: #2 is {_gap(gap)} and outside the 80% interval of #1"
    parts = [f"#{n['rank']} ({_gap(n['gap'])}; differs in {n['differs']})" for n in ties]
    return ("near-tie: the 80% intervals of #1 and " + "; ".join(parts) + " overlap, so the projection cannot "
            "separate them; a benchmark of these layouts (measured mode, `projtune bench run`) would settle it")


def _gap(gap: float) -> str:
    """'3.1% slower', or for a tie the simpler layout won: '0.1% faster, a tie: the simpler layout ranks first'."""
    if gap >= 5e-4:
        return f"{gap:.1%} slower"
    if gap > -5e-4:
        return "the same projected throughput"
    return f"{-gap:.1%} faster, within the tie tolerance, so the simpler layout ranks first"


def mfu_labels(gpu: str, precision: str, mfu_bf16: float) -> dict[str, Any]:
    """MFU against the peak of the GEMM precision used, and against the BF16 peak (both 0..1)."""
    hardware = load_hardware(gpu)
    try:
        bf16 = hardware.peak_flops_for("bf16")
        used = hardware.peak_flops_for(precision)
    except ProjtuneError:  # a precision the catalog has no peak for: only the BF16 figure is meaningful
        return {"mfu_bf16": mfu_bf16, "mfu_gemm": mfu_bf16, "gemm_precision": "bf16"}
    gemm = "bf16" if used == bf16 and precision in ("bf16", "fp16") else precision
    return {"mfu_bf16": mfu_bf16, "mfu_gemm": mfu_bf16 * bf16 / used, "gemm_precision": gemm}


def mfu_text(row: dict[str, Any]) -> str:
    """'MFU 41.0% of the fp8 peak (82.0% of the BF16 peak)' or 'MFU 41.0% of the BF16 peak'."""
    if row.get("gemm_precision") in (None, "bf16", "fp16"):
        return f"MFU {row['mfu']:.1%} of the BF16 peak (model FLOPs)"
    return (f"MFU {row['mfu_gemm']:.1%} of the {row['gemm_precision']} peak, {row['mfu']:.1%} of the BF16 peak "
            "(model FLOPs)")
