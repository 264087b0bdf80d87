"""Time one projection of a llama3.1-405b layout on 16,384 H100s (target: <= 2 ms per call).

Usage: python benchmarks/bench_projection.py [--repeat N]
Prints the mean and best wall time per `project` call after one warm-up call (which fills
the catalog and per-model caches, as a search or agent session would).
"""

from __future__ import annotations

import argparse
import time

from projection.engine import project
from projection.hardware import load_hardware
from projection.memory import project_memory  # noqa: F401  (imported for parity with search's screen)
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    model = load_model("llama3.1-405b")
    hardware = load_hardware("h100-sxm")
    cluster = Cluster(gpu="h100-sxm", num_gpus=16384)
    config = TrainingConfig(tp=8, pp=16, vpp=4, cp=1, mbs=1, gbs=2048, seq_len=8192, precision="bf16",
                            recompute="none", sequence_parallel=True, zero=1)
    project(model, cluster, config, hardware=hardware)  # warm-up: catalog and caches
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        result = project(model, cluster, config, hardware=hardware)
        times.append(time.perf_counter() - start)
    print(f"llama3.1-405b on 16384 x h100-sxm, TP8 PP16 VPP4 DP128, gbs 2048, {result.dims.num_microbatches} "
          f"micro-batches: mean {1e3 * sum(times) / len(times):.3f} ms, best {1e3 * min(times):.3f} ms "
          f"per projection ({args.repeat} calls); {result.tokens_per_s_per_gpu:.0f} tokens/s/GPU")


if __name__ == "__main__":
    main()
