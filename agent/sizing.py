"""Cluster sizing: how many GPUs train a token budget by a deadline, how long, and at what GPU-hour cost.

A request with a token budget and a deadline but no GPU count ("how many H100s to train Llama 3.1
405B on 15T tokens in 60 days") is sized before it is tuned:

1. a first guess from the model FLOPs, ``6 * active parameters * tokens`` (Kaplan et al. 2020), at
   :data:`GUESS_MFU` of the GPU's BF16 dense peak: only to place the counts, never an answer;
2. GPU counts around the guess (whole nodes x powers of two, :func:`count_ladder`) are each
   searched with the layout search tool (:func:`tools.search.run_search`), the framework's legal layouts
   only, with the batch the count gets (:func:`agent.batch_default.default_gbs`: the model's tokens per
   step, at least one sequence per 8 GPUs) capped at :data:`MAX_TOKENS_PER_STEP`;
3. each count's best layout gives days and GPU-hours with the projection's 80% interval; the answer is
   the smallest count whose *slow* end meets the deadline (the count is then tuned as any request).

Units: tokens decimal (15T = 15e12), days of 86,400 s, GPU-hours = tokens / (tokens/s/GPU) / 3600.
"""

from __future__ import annotations

from typing import Any

from agent.batch_default import default_gbs
from agent.text.request import TuneRequest, network_fields
from agent.sizing_guess import DAY_S, GUESS_MFU, MAX_COUNTS, count_ladder, first_guess
from projection.errors import ProjtuneError
from projection.job import resolve_device
from projection.model_spec import load_model
from projection.training_config import MAX_GPUS

MAX_TOKENS_PER_STEP = 64 * 1024 ** 2
"""Tokens-per-step limit of a sized job: about DeepSeek-V3's final batch, 15,360 x 4K = 62.9M tokens (DeepSeek-V3
report, section 4.2), the largest published; a count whose floor batch is larger gets the limit."""
SHOWN_BEYOND = 2       # counts projected past the chosen one, so the table shows what more GPUs buy


def _batch(request: TuneRequest, model: Any, count: int) -> int:
    """The count's global batch: the request's when the user gave one, else the default, within the limit."""
    if "gbs" not in request.assumed:
        return request.gbs
    gbs, _ = default_gbs(model, count, request.seq_len)
    cap = max(1, MAX_TOKENS_PER_STEP // request.seq_len)
    while gbs > cap and gbs % 2 == 0:
        gbs //= 2
    return gbs


def _row(request: TuneRequest, count: int, gbs: int, framework: str | None, tokens: float, deadline_days: float
         ) -> dict[str, Any]:
    from tools.constraints import Constraints
    from tools.search import SearchRequest, run_search

    result = run_search(SearchRequest(
        model=request.model, gpu=request.gpu, num_gpus=count, gpus_per_node=min(request.gpus_per_node, count),
        gbs=gbs, seq_len=request.seq_len, **network_fields(request), top_k=1,
        constraints=Constraints.parse(request.constraints), profile_path=request.profile_path,
        finetune=request.finetune, packed_document_tokens=request.packed_document_tokens, framework=framework))
    row: dict[str, Any] = {"num_gpus": count, "gbs": gbs, "tokens_per_step": gbs * request.seq_len}
    if not result.ranked:
        return {**row, "layout": None, "meets": False, "note": result.message or "no layout fits"}
    best = result.ranked[0]
    tps = best.tokens_per_sec_per_gpu
    low = best.tokens_per_sec_per_gpu_low or tps
    high = best.tokens_per_sec_per_gpu_high or tps
    days = [tokens / (rate * count) / DAY_S for rate in (tps, high, low)]
    return {**row, "layout": best.layout, "config": best.config, "tokens_per_sec_per_gpu": tps,
            "days": days[0], "days_band": [days[1], days[2]],
            "gpu_hours": tokens / tps / 3600, "gpu_hours_band": [tokens / high / 3600, tokens / low / 3600],
            "meets": days[2] <= deadline_days}


def size_request(request: TuneRequest, framework: str | None) -> TuneRequest:
    """The request with its GPU count (and batch) chosen for its token budget and deadline, and the table.

    Raises:
        ProjtuneError: the model, GPU or a search input is invalid (typed errors of the tools).
    """
    tokens, deadline = request.train_tokens, request.deadline_days
    if not request.size_cluster or tokens is None or deadline is None:
        return request
    model, (hardware, _) = load_model(request.model), resolve_device(request.gpu, request.profile_path)
    node = request.gpus_per_node
    guess = first_guess(model, hardware, tokens, deadline, node)
    counts = count_ladder(guess, node)
    rows: list[dict[str, Any]] = []
    beyond = 0
    while True:
        for count in counts:
            rows.append(_row(request, count, _batch(request, model, count), framework, tokens, deadline))
            beyond += any(r["meets"] for r in rows[:-1])
            if beyond >= SHOWN_BEYOND:
                break
        if any(r["meets"] for r in rows) or counts[-1] * 2 > MAX_GPUS or len(rows) >= 2 * MAX_COUNTS:
            break
        counts = [counts[-1] * 2]      # none met the deadline yet: double until one does (or the limit)
    met = [r for r in rows if r["meets"]]
    chosen = met[0] if met else max((r for r in rows if r["layout"]), key=lambda r: r["num_gpus"], default=None)
    if chosen is None:
        raise ProjtuneError(f"no layout of {request.model if isinstance(request.model, str) else 'the model'} fits "
                            f"on {', '.join(str(c) for c in counts)} x {request.gpu}: cannot size the cluster")
    why = (f"smallest count whose slow end of the 80% interval trains {tokens:.3g} tokens in {deadline:g} days"
           if met else f"no count up to {chosen['num_gpus']} meets {deadline:g} days at the slow end; the largest "
                       "projected is shown")
    sizing = {"tokens": tokens, "deadline_days": deadline, "first_guess": guess, "chosen": chosen["num_gpus"],
              "max_tokens_per_step": MAX_TOKENS_PER_STEP, "rows": rows, "note": why}
    notes = [*request.notes,
             f"GPU count sized: {chosen['num_gpus']} x {request.gpu} ({why}; {len(rows)} counts searched from a "
             f"first guess of {guess} at {GUESS_MFU:.0%} MFU; batch = the model's tokens per step, at least one "
             f"sequence per 8 GPUs, at most {MAX_TOKENS_PER_STEP / 1024 ** 2:.0f}M tokens per step)"]
    if "gbs" in request.assumed:       # the parse's batch note was for the first guess: say the chosen count's
        notes = [n for n in notes if not n.startswith("assumed gbs=")]
        notes.append(f"assumed gbs={chosen['gbs']} x seq_len {request.seq_len} = "
                     f"{chosen['tokens_per_step'] / 1024 ** 2:.1f}M tokens per step on {chosen['num_gpus']} GPUs "
                     f"(agent/batch_default.py); say 'gbs N' or '4M tokens per step' to change it")
    return request.model_copy(update={"num_gpus": chosen["num_gpus"], "gbs": chosen["gbs"], "sizing": sizing,
                                      "notes": notes})


def _hours(hours: float) -> str:
    return f"{hours / 1e6:.2f}M" if hours >= 1e6 else f"{hours:,.0f}"


def sizing_lines(sizing: dict[str, Any]) -> list[str]:
    """The sizing table as text lines: count -> batch -> days (band) -> GPU-hours (band)."""
    lines = [f"cluster sizing for {sizing['tokens']:.3g} tokens in {sizing['deadline_days']:g} days "
             f"({sizing['note']}):"]
    for r in sizing["rows"]:
        mark = "*" if r["num_gpus"] == sizing["chosen"] else " "
        if not r.get("layout"):
            lines.append(f" {mark} {r['num_gpus']:>7,} GPUs: {r.get('note', 'no layout fits')}")
            continue
        fast, slow = r["days_band"]
        g_lo, g_hi = r["gpu_hours_band"]
        lines.append(f" {mark} {r['num_gpus']:>7,} GPUs, {r['tokens_per_step'] / 1024 ** 2:5.1f}M tokens/step: "
                     f"{r['days']:6.1f} days ({fast:.1f}-{slow:.1f}), {_hours(r['gpu_hours'])} GPU-hours "
                     f"({_hours(g_lo)}-{_hours(g_hi)}){'  meets' if r['meets'] else ''}  [{r['layout']}]")
    return lines
