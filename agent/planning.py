"""Job planning from the winner's projection and its 80% interval: time per billion tokens, a token
budget's days and GPU-hours, and the smallest GPU count that meets a deadline.

Units: tokens are counted in decimal (``15T`` = 15e12 tokens, ``300B`` = 3e11), durations take
``s``, ``m``, ``h``, ``d`` or ``w`` (``30d`` = 30 days).  Throughput ``T`` tokens/s/GPU on ``N``
GPUs trains ``T*N`` tokens/s; the interval ends give the band (the slow end is the interval's low).

The smallest GPU count keeps the winner's model-parallel shape (tp, pp, vpp, cp, ep, etp, mbs,
recompute, precision) and changes only the data-parallel degree, to counts where the global batch
still divides (gbs % (mbs*dp) == 0) and the expert groups still fold (ep*etp divides tp*cp*dp);
each count is projected with the ``project`` tool, and the first whose *low* end meets the deadline
(and whose memory is not over) is the answer, so the answer holds at the pessimistic end of the band.
"""

from __future__ import annotations

import re
from typing import Any

from agent.text.request import network_fields
from agent.toolbox import Toolbox, ToolFailed
from projection.errors import ProjtuneError
from projection.memory_verdict import passes_screen
from tools.constraints import Constraints

_TOKEN_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
MAX_PLAN_PROJECTIONS = 32


class PlanInputError(ProjtuneError):
    """A token budget or deadline that cannot be read; ``field`` names it (the tools' structured error)."""

    def __init__(self, message: str, field: str) -> None:
        self.field = field
        super().__init__(message)


def parse_tokens(text: str | float | int) -> float:
    """'15T' -> 1.5e13 tokens (decimal suffixes K, M, B/G, T; a plain number is tokens)."""
    if isinstance(text, int | float):
        return float(text)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmbgt]?)\s*(?:tokens?)?\s*", str(text), re.I)
    if not m or float(m.group(1)) <= 0:
        raise PlanInputError(f"tokens {text!r} (--tokens): expected a positive number with an optional suffix K, M, "
                             "B or T (e.g. 15T = 15e12 tokens)", field="tokens")
    return float(m.group(1)) * _TOKEN_SUFFIX[m.group(2).lower()]


def parse_duration(text: str | float | int) -> float:
    """'30d' -> 2,592,000 seconds (suffix s, m, h, d or w; a plain number is days)."""
    if isinstance(text, int | float):
        return float(text) * 86400.0
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", str(text), re.I)
    if not m or float(m.group(1)) <= 0:
        raise PlanInputError(f"deadline {text!r} (--deadline): expected a positive duration like 30d, 12h or 2w "
                             "(suffix s, m, h, d, w; no suffix = days)", field="deadline")
    return float(m.group(1)) * _SECONDS[(m.group(2) or "d").lower()]


def _band(best: dict[str, Any]) -> tuple[float, float, float]:
    tps = best["tokens_per_sec_per_gpu"]
    return tps, best.get("tokens_per_sec_per_gpu_low") or tps, best.get("tokens_per_sec_per_gpu_high") or tps


def job_plan(best: dict[str, Any], request: dict[str, Any], *, tokens: float | None = None,
             deadline_s: float | None = None) -> dict[str, Any]:
    """The plan block of a report (see the module docstring); figures with their (slow, fast) band."""
    n = int(request["num_gpus"])
    tps, low, high = _band(best)
    plan: dict[str, Any] = {
        "num_gpus": n,
        "hours_per_billion_tokens": 1e9 / (tps * n) / 3600,
        "hours_per_billion_tokens_band": [1e9 / (high * n) / 3600, 1e9 / (low * n) / 3600],
    }
    if tokens:
        plan.update(tokens=tokens, days=tokens / (tps * n) / 86400,
                    days_band=[tokens / (high * n) / 86400, tokens / (low * n) / 86400],
                    gpu_hours=tokens / tps / 3600, gpu_hours_band=[tokens / high / 3600, tokens / low / 3600])
    if deadline_s:
        plan["deadline_days"] = deadline_s / 86400
        if not tokens:
            plan["min_gpus_note"] = "a deadline needs a token budget (--tokens) to size the job"
        else:
            plan.update(_smallest_count(best, request, tokens, deadline_s))
    return plan


def _counts(config: dict[str, Any], gbs: int) -> list[tuple[int, int]]:
    """(GPU count, mbs) pairs that keep the layout's model-parallel shape: mp * dp, the micro-batch halved
    where needed so the global batch still divides (gbs % (mbs*dp) == 0), expert groups still folding."""
    tp, pp, cp = config.get("tp", 1), config.get("pp", 1), config.get("cp", 1)
    mbs, ep, etp = config.get("mbs", 1), config.get("ep", 1), config.get("etp", 1)
    out = []
    for dp in range(1, gbs + 1):
        if gbs % dp or (tp * cp * dp) % (ep * etp):
            continue
        m = mbs
        while m > 1 and gbs % (m * dp):
            m //= 2
        if gbs % (m * dp) == 0:
            out.append((tp * pp * cp * dp, m))
    return out


def _smallest_count(best: dict[str, Any], request: dict[str, Any], tokens: float, deadline_s: float
                    ) -> dict[str, Any]:
    config = {k: v for k, v in best["config"].items() if k not in ("dp",)}
    needed = tokens / deadline_s                       # tokens/s the whole job must sustain
    counts = _counts(config, int(config.get("gbs", request["gbs"])))
    tried = 0
    tps = best["tokens_per_sec_per_gpu"]
    min_headroom = Constraints.parse(request.get("constraints") or []).min_headroom
    for count, mbs in counts:
        if tried >= MAX_PLAN_PROJECTIONS:
            break
        if count * tps * 1.5 < needed:                 # far short even at better per-GPU throughput: skip
            continue
        tools = Toolbox(model=request["model"], gpu=request["gpu"], num_gpus=count,
                        gpus_per_node=request["gpus_per_node"], profile_path=request.get("profile_path"),
                        network=network_fields(request))
        try:
            p = tools.project({**config, "mbs": mbs})
        except ToolFailed:   # a probe: this count cannot take the winner's shape (not a run error)
            tried += 1
            continue
        tried += 1
        if not passes_screen(p.memory.peak_gib, p.memory.capacity_gib, min_headroom):
            continue
        slow = p.tokens_per_sec_per_gpu_low or p.tokens_per_sec_per_gpu
        if slow * count >= needed:
            return {"min_gpus": count, "min_gpus_layout": p.layout,
                    "min_gpus_days_band": [tokens / ((p.tokens_per_sec_per_gpu_high or
                                                      p.tokens_per_sec_per_gpu) * count) / 86400,
                                           tokens / (slow * count) / 86400],
                    "min_gpus_note": (f"smallest count with the winner's model-parallel shape whose slow end of the "
                                      f"80% interval meets {deadline_s / 86400:g} days ({tried} counts projected)")}
    largest = counts[-1][0] if counts else request["num_gpus"]
    return {"min_gpus": None,
            "min_gpus_note": (f"no GPU count up to {largest} with the winner's shape and gbs "
                              f"{config.get('gbs', request['gbs'])} meets {deadline_s / 86400:g} days at the slow end "
                              "of the interval; a larger global batch or another layout would be needed")}


def plan_lines(plan: dict[str, Any]) -> list[str]:
    """The plan as short lines for the text answer."""
    if not plan:
        return []
    from agent.sizing import sizing_lines     # here: agent.sizing imports the request module, as this one does

    lines_first = sizing_lines(plan["sizing"]) if plan.get("sizing") else []
    lo, hi = plan["hours_per_billion_tokens_band"]
    lines = [f"time per billion tokens: {plan['hours_per_billion_tokens']:.2f} h on {plan['num_gpus']} GPUs "
             f"(80% interval {lo:.2f}-{hi:.2f} h)"]
    if "days" in plan:
        d_lo, d_hi = plan["days_band"]
        g_lo, g_hi = plan["gpu_hours_band"]
        lines.append(f"{plan['tokens']:.3g} tokens: {plan['days']:.1f} days ({d_lo:.1f}-{d_hi:.1f}), "
                     f"{plan['gpu_hours']:,.0f} GPU-hours ({g_lo:,.0f}-{g_hi:,.0f})")
    if "deadline_days" in plan:
        if plan.get("min_gpus"):
            b_lo, b_hi = plan["min_gpus_days_band"]
            lines.append(f"deadline {plan['deadline_days']:g} days: smallest GPU count {plan['min_gpus']} "
                         f"({plan['min_gpus_layout']}, {b_lo:.1f}-{b_hi:.1f} days)")
        else:
            lines.append(f"deadline {plan['deadline_days']:g} days: {plan.get('min_gpus_note', '')}")
    return lines_first + lines
