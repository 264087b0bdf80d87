"""Time `simulate_pipeline` on the sizes the layout search calls it with, and cold deep-pipeline projections.

Run: PYTHONPATH=. python3 benchmarks/bench_pipeline.py [--cold [--runs N] [--baseline DIR]]
Warm (default): targets (CPython, warm op-graph cache) < 1 ms for 1f1b pp=8, m=64 and
< 5 ms for interleaved pp=16, vpp=4, m=128. Per call: with the steady-state
fast path, and the full simulation (fast paths off); the result memo is
cleared before every call.

--cold: deep-pipeline projections (PP 16-64, VPP, recompute none / selective / full) each timed as the first
`projection.engine.project` call of a fresh Python process, after its imports and after `load_model` /
`load_hardware` (so every memo cache is empty, the catalog files of the projection path included; the spec
loaders' own files are read before the clock starts).  Each case runs in three modes, N processes each,
alternating: ``fast`` (production: for a long 1f1b / interleaved step the one-pass simulation with its
steady-state shortcut, else the compiled-plan shortcut, else the one-pass simulation), ``one-pass`` (the
one-pass simulation and no shortcut: the plain simulator a cold projection runs without one) and ``exact``
(fast paths off: the compiled op graph, the reference the tests compare against); with ``--baseline DIR``
(``git archive <commit> | tar -x -C DIR``) that commit's production path as a fourth.  Printed: medians of the
call's CPU time (process_time) and wall time, and of the pipeline simulation's CPU time; every mode must give
the same step time.  Targets: the 1T-parameter PP-64 full-recompute case <= 40 ms, and ``fast`` no slower than
``one-pass`` on any case.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from projection import fast_paths
from projection.pipeline import Schedule, StageTimes, simulate_pipeline
from projection.pipeline_plan import _compile_plan
from projection.pipeline_steady import _RESULT_CACHE

CASES: list[tuple[Schedule, int, int, int]] = [
    ("1f1b", 8, 1, 64),
    ("interleaved", 16, 4, 128),
    ("zero-bubble", 8, 1, 64),
    ("zbv", 16, 2, 128),
    ("gpipe", 8, 1, 64),
    ("interleaved", 16, 4, 2048),
    ("interleaved", 32, 4, 2048),
]


def _stages(pp: int, vpp: int) -> list[StageTimes]:
    return [
        StageTimes(
            forward_s=(1e-3 * (1 + 0.1 * r),) * vpp,
            backward_input_s=(1e-3,) * vpp,
            backward_weight_s=(1e-3,) * vpp,
        )
        for r in range(pp)
    ]


# name -> (model, num_gpus, tp, pp, vpp, gbs, seq_len, recompute); GPUs: a100-80gb.  "megatron-1t" is the 1T
# GPT of Narayanan et al. 2021 (arXiv 2104.04473, Table 1: 128 layers, hidden 25600, 160 heads; trained there
# at TP 8 x PP 64 on 3072 A100 with batch 3072, seq 2048), the 1T case Calculon also models.
MEGATRON_1T = {"model_type": "gpt2", "hidden_size": 25600, "intermediate_size": 102400, "num_hidden_layers": 128,
               "num_attention_heads": 160, "vocab_size": 51200, "max_position_embeddings": 2048}
COLD_CASES: dict[str, tuple[str, int, int, int, int, int, int, str]] = {
    "1T PP64 full": ("megatron-1t", 3072, 8, 64, 1, 3072, 2048, "full"),
    "1T PP64 none": ("megatron-1t", 3072, 8, 64, 1, 3072, 2048, "none"),
    "1T PP32 VPP4 full": ("megatron-1t", 3072, 8, 32, 4, 3072, 2048, "full"),
    "1T PP32 selective": ("megatron-1t", 1536, 8, 32, 1, 1536, 2048, "selective"),
    "gpt3-175b PP16 full": ("gpt3-175b", 1024, 8, 16, 1, 1536, 2048, "full"),
    "gpt3-175b PP16 VPP2 none": ("gpt3-175b", 1024, 8, 16, 2, 1536, 2048, "none"),
    "405B PP16 VPP4 none": ("llama3.1-405b", 2048, 8, 16, 4, 1024, 8192, "none"),
    "405B PP32 full": ("llama3.1-405b", 2048, 8, 32, 1, 1024, 8192, "full"),
}
COLD_MODES = ("fast", "one-pass", "exact")


def _cold_child(case: str, mode: str) -> None:
    """One cold projection in this (fresh) process: print its CPU and wall time and the pipeline's, as JSON."""
    import functools

    from projection import engine
    from projection.hardware import load_hardware
    from projection.model_spec import load_model
    from projection.training_config import Cluster, TrainingConfig

    name, gpus, tp, pp, vpp, gbs, seq, recompute = COLD_CASES[case]
    model = load_model(MEGATRON_1T if name == "megatron-1t" else name)
    hardware = load_hardware("a100-80gb")
    config = TrainingConfig(tp=tp, pp=pp, vpp=vpp, mbs=1, gbs=gbs, seq_len=seq, precision="bf16",
                            recompute=recompute, sequence_parallel=True, zero=1)
    if mode == "one-pass":
        from projection import pipeline_direct, pipeline_steady

        pipeline_steady._simulate_direct = functools.partial(pipeline_direct.simulate_direct, shortcut=False)
        pipeline_steady._steady_makespan = lambda *args: None   # no compiled-plan shortcut either
    spent = [0.0]
    simulate = engine.simulate_pipeline

    def timed(*args: object, **kwargs: object) -> object:
        start = time.process_time()
        result = simulate(*args, **kwargs)
        spent[0] += time.process_time() - start
        return result

    engine.simulate_pipeline = timed
    cpu, wall = time.process_time(), time.perf_counter()
    if mode == "exact":
        with fast_paths.disabled():
            result = engine.project(model, Cluster(gpu="a100-80gb", num_gpus=gpus), config, hardware=hardware)
    else:
        result = engine.project(model, Cluster(gpu="a100-80gb", num_gpus=gpus), config, hardware=hardware)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(json.dumps({"cpu_ms": 1e3 * cpu, "wall_ms": 1e3 * wall, "pipeline_ms": 1e3 * spent[0],
                      "m": result.dims.num_microbatches, "step_s": result.iteration_time_s}))


def cold(runs: int, baseline: str | None) -> None:
    """Print, per case and mode, the medians of ``runs`` cold projections (fresh processes, modes alternating).

    ``baseline``: a checkout of another commit (e.g. ``git archive <commit> | tar -x -C DIR``): its production
    path runs as one more mode, ``baseline``, alternating with the others in the same run."""
    print(f"cold projections, medians of {runs} fresh processes per mode (CPU ms / wall ms / pipeline CPU ms):")
    modes = COLD_MODES + (("baseline",) if baseline else ())
    for case in COLD_CASES:
        samples: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
        for _ in range(runs):
            for mode in modes:
                env = {**os.environ, "PYTHONPATH": baseline} if mode == "baseline" else None
                out = subprocess.run([sys.executable, __file__, "--cold-child", case,
                                      "fast" if mode == "baseline" else mode], check=True,
                                     capture_output=True, text=True, env=env).stdout
                samples[mode].append(json.loads(out))
        steps = {row["step_s"] for rows in samples.values() for row in rows}
        assert len(steps) == 1, f"{case}: the modes disagree: {steps}"   # same bits in every mode
        line = []
        for mode in modes:
            rows = samples[mode]
            line.append(f"{mode} {statistics.median(r['cpu_ms'] for r in rows):6.1f} / "
                        f"{statistics.median(r['wall_ms'] for r in rows):6.1f} / "
                        f"{statistics.median(r['pipeline_ms'] for r in rows):6.1f}")
        print(f"  {case:26s} m={samples['fast'][0]['m']:<5d} " + " | ".join(line))


def main() -> None:
    """Print build time and per-call time for each case."""
    for schedule, pp, vpp, m in CASES:
        stages = _stages(pp, vpp)
        _compile_plan.cache_clear()
        start = time.perf_counter()
        simulate_pipeline(stages, num_microbatches=m, schedule=schedule)
        build_ms = (time.perf_counter() - start) * 1e3
        for p2p_s in (0.0, 1e-5):
            num_calls = max(3, int(2e5 // (m * pp * vpp)))
            timings = []
            for disabled in (False, True):
                simulate_pipeline(stages, num_microbatches=m, schedule=schedule, p2p_s=p2p_s)  # plans built
                start = time.perf_counter()
                for _ in range(num_calls):
                    _RESULT_CACHE.clear()   # time the simulation, not the result memo
                    if disabled:
                        with fast_paths.disabled():
                            simulate_pipeline(stages, num_microbatches=m, schedule=schedule, p2p_s=p2p_s)
                    else:
                        simulate_pipeline(stages, num_microbatches=m, schedule=schedule, p2p_s=p2p_s)
                timings.append((time.perf_counter() - start) / num_calls * 1e3)
            print(f"{schedule:12s} pp={pp:<3d} vpp={vpp} m={m:<5d} p2p_s={p2p_s:g}: {timings[0]:8.3f} ms/call "
                  f"(full simulation {timings[1]:8.3f} ms; first call with graph build {build_ms:8.1f} ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", action="store_true", help="cold deep-pipeline projections instead")
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per case and mode (--cold)")
    parser.add_argument("--baseline", help="--cold: a checkout of another commit, timed as one more mode")
    parser.add_argument("--cold-child", nargs=2, metavar=("CASE", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cold_child:
        _cold_child(*args.cold_child)
    elif args.cold:
        cold(args.runs, args.baseline)
    else:
        main()
