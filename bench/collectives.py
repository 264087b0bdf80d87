"""TP all-reduce and EP all-to-all timed over the local GPUs with ``torch.distributed``.

One process per rank is started with ``torch.multiprocessing`` (spawn); NCCL (RCCL on ROCm)
on GPUs, gloo on CPU. Each collective runs on the first ``group_size`` ranks; a timing is
the mean per call over the timed iterations on the slowest rank (all-reduce MAX). The
parent waits at most ``timeout_s`` and terminates the workers after that.
"""

from __future__ import annotations

import datetime
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bench.measurement import CollectiveTiming
from projection.errors import ProjtuneError

Op = Literal["all_reduce", "all_to_all"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveSpec:
    """One collective to time: op, ranks taking part, bytes per rank."""

    op: Op
    group_size: int
    message_bytes: float


def _buffer(spec: CollectiveSpec, device: torch.device) -> torch.Tensor:
    """A buffer of about ``message_bytes`` (bf16 on GPUs, fp32 on gloo), divisible by the group size."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    element_bytes = torch.empty((), dtype=dtype).element_size()
    elements = max(spec.group_size, int(spec.message_bytes) // element_bytes)
    elements = -(-elements // spec.group_size) * spec.group_size
    return torch.ones(elements, device=device, dtype=dtype)


def _run_one(spec: CollectiveSpec, group: dist.ProcessGroup | None, device: torch.device, warmup: int,
             iters: int) -> tuple[float, int]:
    buf = _buffer(spec, device)
    out = torch.empty_like(buf)

    def call() -> None:
        if spec.op == "all_reduce":
            dist.all_reduce(buf, group=group)
        else:
            dist.all_to_all_single(out, buf, group=group)

    for _ in range(warmup):
        call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iters):
        call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=device)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX, group=group)
    return float(seconds.item()), buf.numel() * buf.element_size()


def _worker(rank: int, world: int, store_file: str, backend: str, specs: list[dict], warmup: int, iters: int,
            out_file: str) -> None:
    """Body of one spawned rank (module level so that spawn can import it)."""
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{store_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    results = []
    for raw in specs:
        spec = CollectiveSpec(**raw)
        ranks = list(range(spec.group_size))
        group = None if spec.group_size == world else dist.new_group(ranks)
        if rank in ranks:
            seconds, nbytes = _run_one(spec, group, device, warmup, iters)
            results.append({"seconds": seconds, "bytes": nbytes})
    dist.barrier()
    if rank == 0:
        Path(out_file).write_text(json.dumps(results))
    dist.destroy_process_group()


def default_backend() -> str:
    """NCCL/RCCL when GPUs are visible, else gloo."""
    return "nccl" if torch.cuda.is_available() else "gloo"


def measure_collectives(specs: list[CollectiveSpec], *, backend: str | None = None, warmup: int = 3,
                        iters: int = 10, timeout_s: float = 120.0) -> list[CollectiveTiming]:
    """Time each collective over ``max(group_size)`` spawned ranks.

    Raises:
        ProjtuneError: more ranks than GPUs, a worker failed, or the run exceeded ``timeout_s``.
    """
    if not specs:
        return []
    backend = backend or default_backend()
    world = max(s.group_size for s in specs)
    if backend == "nccl" and world > torch.cuda.device_count():
        raise ProjtuneError(f"collectives need {world} GPUs, {torch.cuda.device_count()} visible")
    with tempfile.TemporaryDirectory(prefix="projtune-coll-") as tmp:
        out_file = str(Path(tmp) / "result.json")
        args = (world, str(Path(tmp) / "store"), backend, [asdict(s) for s in specs], warmup, iters, out_file)
        context = mp.start_processes(_worker, args=args, nprocs=world, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout_s
        try:
            while not context.join(timeout=max(0.1, min(1.0, deadline - time.monotonic()))):
                if time.monotonic() > deadline:
                    raise ProjtuneError(f"collective benchmark did not finish within {timeout_s:.0f} s")
        except mp.ProcessRaisedException as err:
            raise ProjtuneError(f"collective benchmark failed: {str(err).strip().splitlines()[-1]}") from err
        except mp.ProcessExitedException as err:
            raise ProjtuneError(f"collective benchmark worker died: {err}") from err
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.terminate()
                    process.join(timeout=5)
        results = json.loads(Path(out_file).read_text())
    return [CollectiveTiming(op=s.op, group_size=s.group_size, message_bytes=r["bytes"], time_ms=r["seconds"] * 1e3,
                             backend=backend) for s, r in zip(specs, results, strict=True)]
