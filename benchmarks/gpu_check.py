"""Prepared GPU check of measured mode: device profile, layer benchmarks, and projections with and without them.

On one local GPU (H100/H200/MI300X/...): fits a device profile to GEMM/attention/copy
microbenchmarks, benchmarks one reduced llama3-8b layer and one reduced mixtral-8x7b layer
(real hidden sizes, seq 4096, mbs 1), prints measured vs analytic layer times, then the
projected tokens/s/GPU of llama3-8b on 8 GPUs (TP1) and mixtral-8x7b on 8 GPUs (EP8) from
the shipped profile, the fitted profile, and the measurements. Takes about a minute on an
H200; built to stay well under 5 minutes.

    python3 benchmarks/gpu_check.py [--gpu h200] [--out DIR]
    python3 benchmarks/gpu_check.py --allow-cpu      # tiny shapes on CPU (plumbing only)

Without a GPU (and without --allow-cpu) it prints one "no GPU" line and exits with code 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

NO_GPU_EXIT = 2
TARGETS = (  # (model, target GPUs, layout) -- the layouts the issue asks to project
    ("llama3-8b", 8, {"tp": 1, "gbs": 128, "zero": 1}),
    ("mixtral-8x7b", 8, {"ep": 8, "gbs": 128, "zero": 1}),
)


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allow-cpu", action="store_true", help="Run tiny shapes on the CPU when there is no GPU.")
    parser.add_argument("--gpu", help="Catalog id of the local GPU (default: detected from the device name).")
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--out", type=Path, help="Folder for the measurement files and the fitted profile.")
    return parser.parse_args(argv)


def _row(label: str, values: list[float]) -> str:
    return f"  {label:<28}" + "".join(f"{v:>12.3f}" for v in values)


def _compare_layers(measurement, shipped, fitted) -> None:
    """Measured vs analytic (shipped and fitted profile) times of each benchmarked layer, ms."""
    from bench.analytic import analytic_layout

    red = measurement.reduction
    views = {name: analytic_layout(red.model, red.bench_cluster, red.bench_config, profile=p)
             for name, p in (("analytic, shipped profile", shipped), ("analytic, fitted profile", fitted))}
    print("  " + " " * 28 + "".join(f"{h:>12}" for h in ("fwd", "bwd B+W", "attn fwd", "experts fwd", "optimizer")))
    for t in measurement.layers:
        print(f" {t.kind} layer (window {t.window}), bench layout, one micro-batch [ms]:")
        print(_row("measured", [t.forward_ms, t.backward_input_ms + t.backward_weight_ms, t.attention_forward_ms,
                                t.expert_forward_ms, t.optimizer_ms]))
        for name, view in views.items():
            c, x = view.costs[t.key], view.experts[t.key]
            print(_row(name, [1e3 * v for v in (c.fwd_s, c.bwd_input_s + c.bwd_weight_s, c.attention_fwd_s, x.fwd_s,
                                                 view.optimizer_s(t.key))]))
        if t.peak_memory_bytes is not None:
            print(f"  peak memory {t.peak_memory_bytes / 2**30:.2f} GiB")


def _projections(measurement, model, cluster, config, shipped, fitted) -> None:
    from bench.restore import project_measured
    from projection.engine import project

    rows = [
        ("analytic, shipped profile", project(model, cluster, config, profile=shipped)),
        ("analytic, fitted profile", project(model, cluster, config, profile=fitted)),
        *((f"measured, {name} profile", project_measured(measurement, model, cluster, config, profile=p).projection)
          for name, p in (("shipped", shipped), ("fitted", fitted))),
    ]
    for name, p in rows:
        b = p.breakdown
        print(f"  {name:<28}{p.tokens_per_s_per_gpu:>10,.0f} tok/s/GPU  MFU {p.mfu:6.1%}  "
              f"iter {p.iteration_time_s:.3f} s  (compute {b.compute_s:.3f}, ep {b.ep_comm_s:.3f}, "
              f"dp {b.dp_comm_s:.3f}, bubble {b.pp_bubble_s:.3f})")


def main(argv: list[str] | None = None) -> int:
    """Run the check; returns the exit code."""
    args = _args(argv)
    import torch

    gpu = torch.cuda.is_available() and torch.cuda.device_count() > 0
    if not gpu and not args.allow_cpu:
        print("no GPU: torch sees no CUDA/ROCm device, nothing to check "
              "(--allow-cpu runs tiny shapes on the CPU as a plumbing check)")
        return NO_GPU_EXIT

    from bench.device import device_profile, profile_yaml, run_sweep
    from bench.measurement import write_measurement
    from bench.runner import BenchOptions, run_measurement
    from bench.runtime import runtime_info
    from projection.device_profile import default_profile
    from projection.hardware import load_hardware
    from projection.model_spec import load_model
    from projection.training_config import Cluster, TrainingConfig

    start = time.perf_counter()
    info = runtime_info("cuda" if gpu else "cpu")
    hardware_id = args.gpu or info.hardware_id or "h100-sxm"
    hardware = load_hardware(hardware_id)
    print(f"device: {info.device_name} -> {hardware.id}"
          + ("" if args.gpu or info.hardware_id else " (not recognised; using h100-sxm, pass --gpu)")
          + f"; torch {info.torch_version}, runtime {info.runtime_version or '-'}, driver {info.driver_version or '-'}")
    if not gpu:
        print("CPU run with tiny shapes: NOT REPRESENTATIVE, plumbing check only")

    shipped = default_profile(hardware)
    points = run_sweep(device="cuda" if gpu else "cpu", tiny=not gpu, warmup=3 if gpu else 1, iters=10 if gpu else 2)
    fitted = device_profile(points, hardware, shipped, device_name=info.device_name, representative=gpu)
    print(f"\nfitted profile: {fitted.fit_note}")
    for name in ("gemm_efficiency", "low_precision_gemm_efficiency", "attention_efficiency", "memory_efficiency",
                 "kernel_overhead_s", "comm_efficiency"):
        print(f"  {name:<32} shipped {getattr(shipped, name):<10.4g} fitted {getattr(fitted, name):.4g}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"profile-{hardware.id}.yaml").write_text(profile_yaml(fitted, points, hardware))

    options = BenchOptions(device="cuda" if gpu else "cpu", max_hidden=None if gpu else 64,
                           max_tokens=None if gpu else 64, warmup=5 if gpu else 1, iters=args.iters if gpu else 2,
                           use_cache=False, collective_timeout_s=240.0)
    local = max(1, min(8, torch.cuda.device_count())) if gpu else 1
    for model_id, num_gpus, layout in TARGETS:
        model = load_model(model_id)
        cluster = Cluster(gpu=hardware.id, num_gpus=num_gpus)
        config = TrainingConfig(seq_len=args.seq_len, mbs=1, **layout)
        t0 = time.perf_counter()
        measurement = run_measurement(model, cluster, config, local_gpus=local, options=options)
        removed = ", ".join(f"{f.axis} {f.target}->{f.bench}" for f in measurement.reduction.removed) or "nothing"
        print(f"\n== {model_id} on {num_gpus} x {hardware.id} {layout}: bench on {local} GPU(s), removed {removed} "
              f"({time.perf_counter() - t0:.1f} s)")
        _compare_layers(measurement, shipped, fitted)
        print(" projection of the target:")
        _projections(measurement, model, cluster, config, shipped, fitted)
        if args.out:
            write_measurement(measurement, args.out / f"measurement-{model_id}-{hardware.id}.json")
    print(f"\ndone in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
