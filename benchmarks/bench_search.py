"""Search throughput on the two acceptance cases: candidates enumerated, screened and projected per second.

Run: ``python benchmarks/bench_search.py [--sample N] [--workers W]``.  Rates come from
timing each stage on its own (enumeration over the whole space, the memory screen and the
projection over evenly spaced samples); the last line of each case is the end-to-end
``run_search`` time (wall and CPU), with how many layouts it screened, projected and pruned.
The acceptance targets are 10 s (Llama 3.1 405B on 16384 H100) and 2 s (Mixtral 8x22B on 64 MI300X).
"""

from __future__ import annotations

import argparse
import time

from projection.device_profile import default_profile
from projection.engine import project
from projection.hardware import load_hardware
from projection.layout import parallel_dims
from projection.memory import project_memory
from projection.model_spec import load_model
from projection.training_config import Cluster
from tools.candidate_columns import enumerate_candidates
from tools.constraints import Constraints
from tools.search import SearchRequest, run_search

CASES = (
    ("llama3.1-405b", "h100-sxm", 16384, 2048, 8192, 10.0),
    ("mixtral-8x22b", "mi300x", 64, 128, 8192, 2.0),  # gbs/seq as the Primus MI300X Mixtral 8x22B recipe
)


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}/s" if seconds > 0 else "inf"


def bench(model_id: str, gpu: str, n: int, gbs: int, seq: int, target_s: float, sample: int,
          workers: int | None) -> None:
    model, hardware = load_model(model_id), load_hardware(gpu)
    cluster = Cluster(gpu=hardware.id, num_gpus=n)
    profile = default_profile(hardware)
    t = time.perf_counter()
    configs = list(enumerate_candidates(model, hardware, cluster, Constraints(), gbs, seq))
    enum_s = time.perf_counter() - t
    step = max(1, len(configs) // sample)
    screened = configs[::step]
    t = time.perf_counter()
    fitting = [c for c in screened
               if project_memory(model, hardware, c, parallel_dims(c, cluster), profile).verdict != "out of memory"]
    screen_s = time.perf_counter() - t
    projected = fitting[::max(1, len(fitting) // max(1, sample // 4))]
    t = time.perf_counter()
    for c in projected:
        project(model, cluster, c, hardware=hardware, profile=profile, check=False)
    project_s = time.perf_counter() - t
    print(f"{model_id} on {n} x {gpu} (gbs {gbs}, seq {seq}): {len(configs)} legal layouts")
    print(f"  enumerate {_rate(len(configs), enum_s)}  screen {_rate(len(screened), screen_s)}  "
          f"project {_rate(len(projected), project_s)}")
    wall, cpu = time.perf_counter(), time.process_time()
    result = run_search(SearchRequest(model=model_id, gpu=gpu, num_gpus=n, gbs=gbs, seq_len=seq), workers=workers)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    verdict = "OK" if wall <= target_s else "over"
    print(f"  run_search: {wall:.2f} s wall ({cpu:.2f} s CPU in this process; target {target_s:.0f} s: {verdict}); "
          f"screened out {result.screened_out}, projected {result.projected}, pruned {result.pruned}; "
          f"best {result.ranked[0].layout if result.ranked else result.message}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=2000, help="layouts per rate sample")
    parser.add_argument("--workers", type=int, default=None, help="search processes (default: auto)")
    args = parser.parse_args()
    for case in CASES:
        bench(*case, sample=args.sample, workers=args.workers)


if __name__ == "__main__":
    main()
