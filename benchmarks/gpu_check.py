"""Prepared device script of measured mode: one call times everything in ``benchmarks/gpu_plan.json``.

Imports only torch, the standard library and the torch-only modules of ``bench/``
(``attention``, ``fp8``, ``layers``, ``layer_timing``, ``microbench``, ``shapes``, ``version``),
so it runs on a bare GPU machine without pydantic, numpy, scipy or the project installed
(``tests/bench/test_gpu_check.py`` runs it with those imports blocked). It

1. detects the GPU (name, capability, SMs, memory, driver, torch/CUDA versions) and checks the
   benchmark kernels against references on random inputs (``bench.selfcheck``);
2. microbenchmarks the plan's GEMM shapes in 16-bit and FP8 (``torch._scaled_mm``), grouped
   expert GEMMs (``torch._grouped_mm``), attention forward and backward (the pinned backend is
   recorded) and HBM copies;
3. times one real layer of each kind of every plan case forward/backward at the TARGET's
   per-GPU shapes (TP/EP shards and the CP rank's queries on one GPU; FP8 GEMMs for FP8
   targets; frozen weights for LoRA), its attention core, routed experts, the AdamW step,
   the embedding and the LM head + loss;
4. writes everything to ``OUT/gpu_results.json`` after each step (a run cut short by its
   limit still returns what it measured; ``"complete": false`` says so) and prints a table.

The device profile is fitted and the development runs are projected afterwards, on any
machine with the project installed (no device time): ``python benchmarks/gpu_compare.py
OUT/gpu_results.json --out DIR``.

    python3 benchmarks/gpu_check.py --out "$OUT" [--budget-s 300]
    python3 benchmarks/gpu_check.py --cpu --quick --out DIR     # CPU dry run: tiny shapes, plumbing only

Without a GPU (and without --cpu) it prints one "no GPU" line and exits with code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NO_GPU_EXIT = 2
PLAN = ROOT / "benchmarks" / "gpu_plan.json"
RESULTS = "gpu_results.json"
QUICK_HIDDEN, QUICK_TOKENS = 64, 64
QUICK_DIVISOR = 64
QUICK_POINTS_PER_KIND = 3


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-check-out")),
                        help="Folder for gpu_results.json (default: $OUT).")
    parser.add_argument("--plan", type=Path, default=PLAN, help="Device plan (python -m evals.gpu_plan --write).")
    parser.add_argument("--budget-s", type=float, default=300.0,
                        help="Start no new step after this many seconds (default 300; the slowest case takes well "
                             "under a minute on an H200, so a run ends within ~6 min).")
    parser.add_argument("--cpu", action="store_true", help="Run on the CPU (with --quick: a plumbing dry run).")
    parser.add_argument("--quick", action="store_true", help="Tiny shapes and few iterations (plumbing only).")
    parser.add_argument("--iters", type=int, default=20, help="Timed iterations per layer (default 20).")
    parser.add_argument("--warmup", type=int, default=5, help="Warm-up iterations per layer (default 5).")
    parser.add_argument("--cases", action="append", default=[],
                        help="Only cases whose id contains this text (repeatable).")
    parser.add_argument("--no-flex", action="store_true", help="Sliding windows without FlexAttention.")
    parser.add_argument("--attention-backends", default="",
                        help="Comma-separated SDPA backends the layers try first (default flash,cudnn,efficient,math).")
    return parser.parse_args(argv)


def _nvidia_smi() -> dict[str, str]:
    """Driver, name, clocks, power limit, temperature (read only: the card's settings are left alone)."""
    if not shutil.which("nvidia-smi"):
        return {}
    found: dict[str, str] = {}
    for fields in ("driver_version,name", "clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu"):
        try:
            out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.SubprocessError):
            continue
        if out.returncode == 0 and out.stdout.strip():
            values = [v.strip() for v in out.stdout.splitlines()[0].split(",")]
            found |= dict(zip(fields.split(","), values, strict=False))
    return found


def runtime(torch: Any, gpu: bool) -> dict[str, Any]:
    """What ran: device, driver, torch, CUDA, Python, date, command."""
    from bench.version import code_version

    info: dict[str, Any] = {
        "device_type": "cuda" if gpu else "cpu", "torch": torch.__version__, "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None), "python": platform.python_version(),
        "host": platform.node(), "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv), "code_version": code_version(),
    }
    if gpu:
        props = torch.cuda.get_device_properties(0)
        info |= {"device_name": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
                 "multiprocessors": props.multi_processor_count, "memory_bytes": props.total_memory,
                 "num_devices": torch.cuda.device_count(), "nvidia_smi": _nvidia_smi()}
        info["driver"] = info["nvidia_smi"].get("driver_version")
    else:
        info |= {"device_name": f"cpu:{platform.processor() or platform.machine()}", "num_devices": 1,
                 "driver": None}
    return info


def _tiny_point(p: dict[str, Any]) -> dict[str, Any]:
    q = dict(p)
    for key in ("m", "n", "k"):
        if key in q:
            q[key] = max(16, -(-q[key] // QUICK_DIVISOR // 16) * 16)
    if q["kind"] == "grouped_gemm":
        q["groups"] = min(q["groups"], 4)
    if q["kind"].startswith("attention"):
        q |= {"heads": 4, "kv_heads": 2, "head_dim": 16, "seq": min(q["seq"] // QUICK_DIVISOR, 128)}
    if q["kind"] == "copy":
        q["num_bytes"] = float(2**20)
    return q


class Writer:
    """Keeps the results dict and rewrites OUT/gpu_results.json after each step."""

    def __init__(self, out: Path, results: dict[str, Any]) -> None:
        self.path = out / RESULTS
        out.mkdir(parents=True, exist_ok=True)
        self.results = results

    def flush(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.results, indent=1) + "\n")
        tmp.replace(self.path)


def run_micro(plan: dict[str, Any], torch: Any, device: Any, dtype: Any, quick: bool, deadline: float,
              writer: Writer) -> None:
    """Every microbenchmark point of the plan (skipped once the budget is spent)."""
    from bench.microbench import measure

    done = writer.results["micro"]
    per_kind: dict[str, int] = {}
    for p in plan["micro"]:
        per_kind[p["kind"]] = per_kind.get(p["kind"], 0) + 1
        if quick and per_kind[p["kind"]] > QUICK_POINTS_PER_KIND:
            continue
        point = _tiny_point(p) if quick else p
        if time.monotonic() > deadline:
            done.append(point | {"measured_s": 0.0, "info": {"error": "skipped: time budget spent"}})
            continue
        seconds, info = measure(point, device, dtype, warmup=1 if quick else 3, iters=2 if quick else 10)
        done.append(point | {"measured_s": seconds, "info": info})
    writer.flush()


def _run_dict(run: Any) -> dict[str, Any]:
    data = dataclasses.asdict(run)
    for name in ("forward_tflops", "attention_tflops"):
        if hasattr(run, name):
            data[name] = getattr(run, name)
    return data


def run_cases(plan: dict[str, Any], torch: Any, device: Any, dtype: Any, args: argparse.Namespace, deadline: float,
              writer: Writer) -> None:
    """One layer of each kind (and the head) per case, at the target's per-GPU shapes."""
    from bench.layer_timing import cpu_threads, time_head, time_layer
    from bench.shapes import HeadShape, LayerShape, shrink, shrink_head

    wanted = [w for w in args.cases if w]
    warmup, iters = (1, 2) if args.quick else (args.warmup, args.iters)
    for case in plan["cases"]:
        if wanted and not any(w in case["id"] for w in wanted):
            continue
        entry: dict[str, Any] = {"id": case["id"], "layers": [], "head": None, "errors": []}
        writer.results["cases"].append(entry)
        if time.monotonic() > deadline:
            entry["errors"].append("skipped: time budget spent")
            continue
        t0 = time.monotonic()
        for layer in case["layers"]:
            shape = LayerShape.from_dict(layer["shape"])
            flops = layer["flops_fwd"]
            if args.quick:
                shape, flops = shrink(shape, max_hidden=QUICK_HIDDEN, max_tokens=QUICK_TOKENS), None
            try:
                with cpu_threads(device.type):
                    run = time_layer(shape, device=device, dtype=dtype, warmup=warmup, iters=iters, fp8=case["fp8"],
                                     frozen=case["frozen"], flex=not args.no_flex, flops=flops)
                entry["layers"].append({"kind": layer["kind"], "shape": shape.to_dict(), "run": _run_dict(run)})
            except (RuntimeError, ValueError) as err:   # torch.cuda.OutOfMemoryError is a RuntimeError
                entry["errors"].append(f"layer {layer['kind']}: {type(err).__name__}: {str(err).splitlines()[0][:200]}")
            if device.type == "cuda":
                torch.cuda.empty_cache()
        head = HeadShape(**case["head"])
        if args.quick:
            head = shrink_head(head, max_hidden=QUICK_HIDDEN, max_tokens=QUICK_TOKENS)
        try:
            with cpu_threads(device.type):
                run = time_head(head, device=device, dtype=dtype, warmup=warmup, iters=iters, fp8=case["fp8"],
                                frozen=case["frozen"])
            entry["head"] = {"shape": head.to_dict(), "run": _run_dict(run)}
        except (RuntimeError, ValueError) as err:
            entry["errors"].append(f"head: {type(err).__name__}: {str(err).splitlines()[0][:200]}")
        entry["seconds"] = round(time.monotonic() - t0, 2)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        writer.flush()


def _table(results: dict[str, Any]) -> None:
    print(f"\n{results['runtime']['device_name']}  torch {results['runtime']['torch']}  "
          f"driver {results['runtime'].get('driver') or '-'}")
    micro = [p for p in results["micro"] if p["measured_s"] > 0]
    for kind in ("gemm", "gemm_fp8", "grouped_gemm"):
        rates = [2 * p["m"] * p["n"] * p["k"] * max(1, p.get("groups", 0)) / p["measured_s"] / 1e12
                 for p in micro if p["kind"] == kind]
        if rates:
            print(f"  {kind:<14} {len(rates):>3} shapes  TFLOP/s min {min(rates):8.1f}  max {max(rates):8.1f}")
    for p in micro:
        if p["kind"] == "copy":
            tbs = 2 * p["num_bytes"] / p["measured_s"] / 1e12
            print(f"  copy {p['num_bytes'] / 2**20:>7.0f} MiB   {tbs:6.2f} TB/s")
        if p["kind"].startswith("attention"):
            print(f"  {p['name']:<24} {p['measured_s'] * 1e3:8.3f} ms  backend {p['info'].get('backend', '-')}")
    print(f"  {'case / layer':<58}{'fwd ms':>9}{'bwd ms':>9}{'fwd TF/s':>9}{'attn':>7} {'gemm':<6} experts")
    for case in results["cases"]:
        for layer in case["layers"]:
            r = layer["run"]
            print(f"  {case['id'][:50]:<50} {str(layer['kind']):<7}{r['forward_s'] * 1e3:>9.3f}"
                  f"{r['backward_s'] * 1e3:>9.3f}{r['forward_tflops']:>9.1f}{r['attention_backend']:>7} "
                  f"{r['gemm_precision']:<6} {r['expert_gemm']}")
        for err in case["errors"]:
            print(f"  {case['id'][:50]:<50} ERROR {err}")
    print(f"complete: {results['complete']}  ({results['seconds']:.1f} s)  -> {RESULTS}")


def main(argv: list[str] | None = None) -> int:
    """Run the plan; returns the exit code."""
    args = _args(argv)
    start = time.monotonic()
    deadline = start + args.budget_s
    import torch

    gpu = not args.cpu and torch.cuda.is_available() and torch.cuda.device_count() > 0
    if not gpu and not args.cpu:
        print("no GPU: torch sees no CUDA/ROCm device, nothing to measure "
              "(--cpu --quick runs tiny shapes on the CPU as a plumbing dry run)")
        return NO_GPU_EXIT
    plan = json.loads(args.plan.read_text())
    if args.attention_backends:
        from bench.attention import set_gpu_order

        set_gpu_order([b for b in args.attention_backends.split(",") if b])
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    dtype = torch.bfloat16 if gpu else torch.float32
    results: dict[str, Any] = {
        "schema": 1, "kind": "projtune-gpu-check-results", "representative": bool(gpu and not args.quick),
        "quick": args.quick, "runtime": runtime(torch, gpu), "plan": str(args.plan.relative_to(ROOT))
        if args.plan.resolve().is_relative_to(ROOT) else str(args.plan),
        "options": {"warmup": args.warmup, "iters": args.iters, "budget_s": args.budget_s, "flex": not args.no_flex,
                    "cases": args.cases, "attention_backends": args.attention_backends},
        "checks": [], "micro": [], "cases": [], "complete": False, "seconds": 0.0,
    }
    if not results["representative"]:
        results["notes"] = "NOT REPRESENTATIVE: CPU and/or --quick plumbing run, not a GPU measurement"
        print(results["notes"])
    print(f"device: {results['runtime']['device_name']}; torch {torch.__version__}; plan {len(plan['micro'])} "
          f"micro points, {len(plan['cases'])} cases; budget {args.budget_s:.0f} s", flush=True)
    writer = Writer(args.out, results)
    writer.flush()
    from bench.selfcheck import run_checks

    results["checks"] = run_checks(device, dtype)
    failed = [c["name"] for c in results["checks"] if c.get("ok") is False]
    print(f"self-checks: {len(results['checks'])} run, failed: {', '.join(failed) or 'none'}", flush=True)
    writer.flush()
    run_micro(plan, torch, device, dtype, args.quick, deadline, writer)
    print(f"micro done ({time.monotonic() - start:.1f} s)", flush=True)
    run_cases(plan, torch, device, dtype, args, deadline, writer)
    if gpu:
        results["runtime"]["nvidia_smi_after"] = _nvidia_smi()   # clocks under load, for the notes
    results["seconds"] = round(time.monotonic() - start, 2)
    results["complete"] = all(not c["errors"] for c in results["cases"]) and all(
        "skipped" not in p["info"].get("error", "") for p in results["micro"])
    writer.flush()
    _table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
