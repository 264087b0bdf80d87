"""Time `simulate_pipeline` on the sizes the layout search calls it with.

Run: PYTHONPATH=. python3 benchmarks/bench_pipeline.py
Targets (CPython, warm op-graph cache): < 1 ms for 1f1b pp=8, m=64 and
< 5 ms for interleaved pp=16, vpp=4, m=128. Per call: with the steady-state
fast path, and the full simulation (fast paths off); the result memo is
cleared before every call.
"""

from __future__ import annotations

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
    main()
