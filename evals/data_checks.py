"""Plausibility checks of measured sweep data: values that disagree with each other.

`check_consistency` is pure: it takes loaded sweeps and returns findings, it never
edits data. A finding is a value to compare with its cited source by hand. Checks:

- throughput metrics against each other, through FLOP per token (6*N*T plus attention,
  N estimated from the HF fields of the model; estimate for checking only, the
  projection engine has its own exact parameter counter);
- MFU against model TFLOP/s; throughput and memory against the GPU's peak and capacity;
- layout arithmetic: TP*PP*CP | num_gpus, gbs | mbs*dp, EP within the DP*CP*TP group,
  FSDP group | DP*CP, heads | TP, "GA=n" notes against gbs/(mbs*dp);
- notes that contradict config keys (dropless vs token-drop);
- a run measured as running whose recorded layout needs more than twice the GPU's memory by
  the projection's memory model (a memory-saving setting, e.g. recompute, is missing).

FLOP checks need the model's HF fields; a sweep whose model is a catalog id gets the
other checks only.

Run `python -m evals.data_checks PATH...` to print the findings.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any

from evals.runner import RunSpecs, run_specs
from evals.sweep_file import LoadedRun, LoadedSweep, Measured, Run, load_sweep_files
from projection.device_profile import default_profile
from projection.errors import ProjtuneError
from projection.layout import ParallelDims, parallel_dims
from projection.memory import GIB, project_memory
from projection.memory_verdict import passes_screen

# Dense (no sparsity) peak TFLOP/s per GPU by number format, from the vendors' datasheets
# (NVIDIA A100/H100/H200/HGX B200/B300/GB200/GB300 NVL72, AMD Instinct MI300X/MI325X/
# MI355X). Approximate: used only to flag impossible values; the hardware catalog holds
# the numbers the projection uses. The 96 GB / 500 W H100 gets the SXM peak, as
# torchtitan's MFU does.
_HOPPER = {"bf16": 989.0, "fp8": 1979.0}
_MI300 = {"bf16": 1307.4, "fp8": 2614.9}
_PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "a100-40gb": {"bf16": 312.0}, "a100-80gb": {"bf16": 312.0},
    "h100-sxm": _HOPPER, "h100-96gb-500w": _HOPPER, "h200": _HOPPER, "h800": _HOPPER,
    "b200": {"bf16": 2250.0, "fp8": 4500.0, "nvfp4": 9000.0},
    "b300": {"bf16": 2250.0, "fp8": 4500.0, "nvfp4": 13500.0},
    "gb200": {"bf16": 2500.0, "fp8": 5000.0, "nvfp4": 10000.0},
    "gb300": {"bf16": 2500.0, "fp8": 5000.0, "nvfp4": 15000.0},
    "mi300x": _MI300, "mi325x": _MI300,
    "mi355x": {"bf16": 2516.6, "fp8": 5033.2, "nvfp4": 10066.3},
}
# Nominal HBM per GPU (GB as marketed = GiB of the HBM stacks); a measured peak above it
# cannot be right.
_HBM_GIB: dict[str, float] = {
    "a100-40gb": 40, "a100-80gb": 80, "h100-sxm": 80, "h100-96gb-500w": 96, "h200": 141,
    "h800": 80, "b200": 192, "b300": 288, "gb200": 192, "gb300": 288, "mi300x": 192,
    "mi325x": 256, "mi355x": 288,
}
_FORMAT = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp8-blockwise": "fp8",
           "mxfp8": "fp8", "nvfp4": "nvfp4"}
_Hit = tuple[str, Any, str]  # (key, value, why it looks wrong)
_FLOPS_TOLERANCE = 0.10   # slack on the FLOP/token bounds (rounded sources, estimate error)
_MATCH_TOLERANCE = 0.03   # two printed values that should be equal up to rounding
_MEMORY_IMPOSSIBLE = 2.0  # projected peak / HBM above which a run that ran must be recorded wrong


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One suspicious value; `run_index` is None for a sweep-level finding."""

    file: str
    sweep: str
    run_index: int | None
    key: str
    value: Any
    message: str

    def __str__(self) -> str:
        run = "" if self.run_index is None else f" run {self.run_index}"
        return f"{self.file}: sweep '{self.sweep}'{run}: {self.key}={self.value}: {self.message}"


# ---- FLOP per token (estimate for checking only) ----------------------------------------

def _field(model: dict[str, Any], *names: str, default: Any = None) -> Any:
    return next((model[n] for n in names if model.get(n) is not None), default)


def _attention_shape(model: dict[str, Any]) -> tuple[int, int, int, int]:
    """Return (params per layer, heads, qk head dim, v head dim) of the attention block."""
    h = _field(model, "hidden_size", "n_embd", "d_model")
    heads = _field(model, "num_attention_heads", "n_head", "n_heads")
    if "kv_lora_rank" in model:  # MLA, DeepSeek-V2 (arXiv 2405.04434) Sec. 2.1
        nope, rope, v = model["qk_nope_head_dim"], model["qk_rope_head_dim"], model["v_head_dim"]
        q_rank, kv_rank = model.get("q_lora_rank"), model["kv_lora_rank"]
        q = h * q_rank + q_rank * heads * (nope + rope) if q_rank else h * heads * (nope + rope)
        kv = h * (kv_rank + rope) + kv_rank * heads * (nope + v)
        return q + kv + heads * v * h, heads, nope + rope, v
    kv_heads = _field(model, "num_key_value_heads", default=heads)
    hd = _field(model, "head_dim", default=h // heads)
    return 2 * h * heads * hd + 2 * h * kv_heads * hd, heads, hd, hd


def estimate_active_params(model: dict[str, Any]) -> tuple[float, float]:
    """Return (active non-embedding parameters, output-layer parameters V*h).

    Active = attention + the MLP a token passes through (top-k routed + shared experts
    + router in MoE layers). Biases and norms are left out (well under 1%).
    """
    model_type = model["model_type"]
    h = _field(model, "hidden_size", "n_embd", "d_model")
    layers = _field(model, "num_hidden_layers", "n_layer", "n_layers")
    attention, _, _, _ = _attention_shape(model)
    ffn = _field(model, "intermediate_size", "n_inner", default=_field(
        model, "expansion_ratio", default=4) * h)
    mats = 2 if model_type in ("gpt2", "mpt", "nemotron") else 3  # plain vs gated MLP
    num_experts = _field(model, "num_local_experts", "num_experts", "n_routed_experts", default=0)
    if num_experts:
        expert_ffn = _field(model, "moe_intermediate_size", default=ffn)
        per_token = model["num_experts_per_tok"] + _field(model, "n_shared_experts", default=0)
        moe_layer = mats * h * expert_ffn * per_token + h * num_experts
        dense = _field(model, "first_k_dense_replace", default=0)
        mlp = dense * mats * h * ffn + (layers - dense) * moe_layer
    else:
        mlp = layers * mats * h * ffn
    return float(layers * attention + mlp), float(model["vocab_size"] * h)


def attention_flop_per_token(model: dict[str, Any], seq_len: int) -> float:
    """Return attention-score FLOP per token, forward + backward, without causal masking."""
    _, heads, qk_dim, v_dim = _attention_shape(model)
    layers = _field(model, "num_hidden_layers", "n_layer", "n_layers")
    per_layer = 6 * heads * (qk_dim + v_dim)  # QK^T and AV: 2 FLOP/MAC x (fwd + 2 bwd)
    if model["model_type"] == "gpt_oss" and model.get("sliding_window"):
        window = min(seq_len, model["sliding_window"])  # every other layer is windowed
        return per_layer * (layers // 2 * window + (layers - layers // 2) * seq_len)
    return float(per_layer * layers * seq_len)


def flop_per_token_bounds(
    model: dict[str, Any], seq_len: int | None, *, finetune: str | None, recompute: str | None
) -> tuple[float, float | None]:
    """Return (low, high) training FLOP per token any common model-FLOP formula gives.

    Low is 6*N (4*N for LoRA: no weight gradients), no attention; high adds non-causal
    attention and, with full recompute, an extra forward (SC21 Eq. 3 counts it).
    """
    params, output_layer = estimate_active_params(model)
    low = (4 if finetune == "lora" else 6) * (params + output_layer)
    if seq_len is None:
        return low, None
    high = (low + attention_flop_per_token(model, seq_len)) * (4 / 3 if recompute == "full" else 1)
    return low, high


# ---- checks ------------------------------------------------------------------------------

def check_consistency(loaded_sweeps: list[LoadedSweep]) -> list[Finding]:
    """Return every suspicious value of the given sweeps (pure; broken runs are skipped)."""
    findings: list[Finding] = []
    for loaded in loaded_sweeps:
        for run in loaded.runs:
            if run.run is None:
                continue
            messages = [*_layout(loaded, run), *_notes(loaded, run, run.run),
                        *_metrics(loaded, run, run.run.measured), *_memory(loaded, run, run.run.measured)]
            findings += [
                Finding(file=loaded.file, sweep=loaded.name, run_index=run.index,
                        key=key, value=value, message=message)
                for key, value, message in messages
            ]
    return findings


def _known(run: LoadedRun, key: str, default: int = 1) -> int | None:
    """Return a layout degree, its format default if absent, None if listed as unknown."""
    return None if key in run.missing_keys else run.config.get(key, default)


def _layout(loaded: LoadedSweep, run: LoadedRun) -> list[_Hit]:
    out: list[_Hit] = []
    num_gpus = loaded.sweep.cluster.num_gpus
    tp, pp, cp = (_known(run, k) for k in ("tp", "pp", "cp"))
    if tp is None or pp is None or cp is None:
        return out
    if num_gpus % (tp * pp * cp):
        out.append(("tp*pp*cp", tp * pp * cp, f"does not divide num_gpus={num_gpus} "
                    f"(tp={tp}, pp={pp}, cp={cp})"))
        return out
    dp = num_gpus // (tp * pp * cp)
    mbs, gbs = run.config.get("mbs"), run.config.get("gbs")
    if gbs and gbs % ((mbs or 1) * dp):
        out.append(("gbs", gbs, f"not divisible by mbs*dp = {mbs or '?'}*{dp} "
                    f"(dp = {num_gpus}/({tp}*{pp}*{cp}); gbs/dp = {gbs / dp:g})"))
    ep, etp = run.config.get("ep", 1), run.config.get("etp", 1)
    if (num_gpus // pp) % (ep * etp):
        out.append(("ep", ep, f"ep*etp = {ep}*{etp} does not divide num_gpus/pp = {num_gpus // pp}"))
    fsdp = run.config.get("fsdp_size")
    if fsdp and (dp * cp) % fsdp:
        out.append(("fsdp_size", fsdp, f"does not divide dp*cp = {dp}*{cp}"))
    model = loaded.sweep.model
    if isinstance(model, dict):
        heads = _field(model, "num_attention_heads", "n_head", "n_heads")
        kv_heads = _field(model, "num_key_value_heads", default=heads)
        if heads and heads % tp:
            out.append(("tp", tp, f"does not divide num_attention_heads={heads}"))
        elif kv_heads and kv_heads % tp and tp % kv_heads:
            out.append(("tp", tp, f"and num_key_value_heads={kv_heads}: neither divides the other"))
    return out


def _notes(loaded: LoadedSweep, run: LoadedRun, valid: Run) -> list[_Hit]:
    out: list[_Hit] = []
    notes = f"{loaded.sweep.notes or ''} {valid.notes or ''}"
    stated = re.findall(r"\bGA=(\d+)", notes)
    tp, pp, cp = (_known(run, k) for k in ("tp", "pp", "cp"))
    mbs, gbs = run.config.get("mbs"), run.config.get("gbs")
    if stated and tp and pp and cp and mbs and gbs:
        dp = loaded.sweep.cluster.num_gpus / (tp * pp * cp)
        derived = gbs / (mbs * dp)
        if int(stated[-1]) != derived:
            out.append(("GA", int(stated[-1]), f"notes say GA={stated[-1]} but gbs/(mbs*dp) = "
                        f"{gbs}/({mbs}*{dp:g}) = {derived:g}"))
    routing = run.config.get("moe_routing")
    if "dropless" in notes and routing not in (None, "dropless"):
        out.append(("moe_routing", routing, "notes say dropless"))
    return out


def _metrics(loaded: LoadedSweep, run: LoadedRun, m: Measured) -> list[_Hit]:
    out: list[_Hit] = []
    config, gpu = run.config, loaded.sweep.cluster.gpu
    peaks = _PEAK_TFLOPS[gpu]
    fmt = _FORMAT.get(config.get("precision", ""), "")
    peak = peaks.get(fmt) or max(peaks.values())
    if m.model_tflops_per_gpu and m.model_tflops_per_gpu > peak:
        out.append(("model_tflops_per_gpu", m.model_tflops_per_gpu,
                    f"above the {fmt or 'highest'} dense peak of {gpu} ({peak:g} TFLOP/s)"))
    if m.peak_memory_gib and m.peak_memory_gib > _HBM_GIB[gpu]:
        out.append(("peak_memory_gib", m.peak_memory_gib, f"above the {_HBM_GIB[gpu]} GiB of {gpu}"))
    # MFU denominators differ by source (BF16 peak even for FP8 runs, or the FP8 peak).
    mfu_peaks = sorted({peaks["bf16"], peaks.get(fmt, peaks["bf16"])}) if fmt else sorted(
        set(peaks.values()))
    if m.mfu and m.model_tflops_per_gpu:
        ratios = [m.model_tflops_per_gpu / (m.mfu * p) for p in mfu_peaks]
        if all(abs(r - 1) > _MATCH_TOLERANCE for r in ratios):
            out.append(("mfu", m.mfu, f"model_tflops_per_gpu={m.model_tflops_per_gpu:g} is "
                        f"{', '.join(f'{r:.2f}' for r in ratios)} x mfu*peak "
                        f"(peaks {', '.join(f'{p:g}' for p in mfu_peaks)})"))
    out += _throughput(loaded, run.config, m, mfu_peaks)
    return out


def _memory(loaded: LoadedSweep, run: LoadedRun, m: Measured) -> list[_Hit]:
    """Flag a run that ran although its recorded layout cannot fit, even with a 2x memory-model error.

    The projection's memory model is within 1% of the five measured peaks of the development set
    (10% at most), so a layout it puts at more than twice the memory the framework can use
    probably did not run as recorded.  A suspicion to check against the source, like every finding.
    """
    if not run.complete or m.oom or run.metric is None:  # only a run with a throughput surely ran
        return []
    try:
        specs = run_specs(loaded, run)
        dims = parallel_dims(specs.config, specs.cluster)
        memory = project_memory(specs.model, specs.hardware, specs.config, dims, default_profile(specs.hardware))
    except (ProjtuneError, ValueError):
        return []
    if memory.peak_bytes <= _MEMORY_IMPOSSIBLE * memory.capacity_bytes:
        return []
    config = specs.config
    return [("memory", round(memory.peak_bytes / GIB), f"GiB per GPU needed by the recorded layout (recompute "
             f"{config.recompute}, zero {config.zero}, mbs {config.mbs}) vs {memory.capacity_bytes / GIB:.0f} GiB "
             f"on {specs.hardware.id}, yet it ran; {_memory_fix(specs, dims)}")]


def _memory_fix(specs: RunSpecs, dims: ParallelDims) -> str:
    """Name the smallest recorded-setting change that makes the layout fit (what the record probably lacks)."""
    changes: list[dict[str, Any]] = []
    if specs.config.zero == 0 and dims.dp * dims.cp > 1:
        changes.append({"zero": 1})
    if specs.config.recompute != "full":
        changes.append({"recompute": "full"})
    if len(changes) == 2:
        changes.append({**changes[0], **changes[1]})
    for change in changes:
        config = specs.config.model_copy(update=change)
        memory = project_memory(specs.model, specs.hardware, config, dims, default_profile(specs.hardware))
        if passes_screen(memory.peak_bytes, memory.capacity_bytes, 0.0, memory.margins):  # the screen, no headroom
            what = " and ".join(f"{k} {v}" for k, v in change.items())
            return f"with {what} it needs {memory.peak_bytes / GIB:.0f} GiB, so the record probably lacks that"
    return "neither zero 1 nor full recompute makes it fit: the record lacks something else (offload, a layout key)"


def _throughput(
    loaded: LoadedSweep, config: dict[str, Any], m: Measured, mfu_peaks: list[float]
) -> list[_Hit]:
    """Compare the FLOP/token each metric pair implies with the model's FLOP/token bounds."""
    num_gpus = loaded.sweep.cluster.num_gpus
    tokens = config["gbs"] * config["seq_len"] if {"gbs", "seq_len"} <= config.keys() else None
    tokens_per_s_gpu = m.tokens_per_sec_per_gpu
    if tokens_per_s_gpu is None and m.iteration_time_s and tokens:
        tokens_per_s_gpu = tokens / (m.iteration_time_s * num_gpus)
    out: list[_Hit] = []
    if m.tokens_per_sec_per_gpu and m.iteration_time_s and tokens:
        expected = tokens / (m.iteration_time_s * num_gpus)
        if abs(m.tokens_per_sec_per_gpu / expected - 1) > _MATCH_TOLERANCE:
            out.append(("tokens_per_sec_per_gpu", m.tokens_per_sec_per_gpu,
                        f"gbs*seq_len/(iteration_time_s*num_gpus) = {expected:.0f}"))
    model = loaded.sweep.model
    if tokens_per_s_gpu is None or not isinstance(model, dict):
        return out
    low, high = flop_per_token_bounds(model, config.get("seq_len"), finetune=config.get(
        "finetune"), recompute=config.get("recompute"))
    implied: list[tuple[str, float, list[float]]] = []
    if m.model_tflops_per_gpu:
        implied.append(("model_tflops_per_gpu", m.model_tflops_per_gpu,
                        [m.model_tflops_per_gpu * 1e12 / tokens_per_s_gpu]))
    if m.mfu:
        implied.append(("mfu", m.mfu, [m.mfu * p * 1e12 / tokens_per_s_gpu for p in mfu_peaks]))
    for key, value, flops in implied:
        ok = [f for f in flops if low * (1 - _FLOPS_TOLERANCE) <= f
              and (high is None or f <= high * (1 + _FLOPS_TOLERANCE))]
        if not ok:
            bound = f"{low / 1e9:.1f}..{high / 1e9:.1f}" if high else f">= {low / 1e9:.1f}"
            out.append((key, value, f"implies {', '.join(f'{f / 1e9:.1f}' for f in flops)} "
                        f"GFLOP/token vs {bound} expected from the model (6*N + attention)"))
    return out


def main(argv: list[str]) -> int:
    """Print load issues and findings for the given files or directories."""
    if not argv:
        print("usage: python -m evals.data_checks PATH...", file=sys.stderr)
        return 2
    result = load_sweep_files(argv)
    for issue in result.errors:
        print(f"ISSUE {issue}")
    findings = check_consistency(result.sweeps)
    for finding in findings:
        print(finding)
    print(f"{len(result.sweeps)} sweeps, {len(result.errors)} load issues, {len(findings)} findings")
    return 1 if result.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
