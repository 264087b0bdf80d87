"""Human-readable tables (rich) for projection and memory results."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tools.formatting import layout_text  # noqa: F401  (re-exported for the CLI commands)

console = Console()

_SHORT = {"weights_gib": "weights", "gradients_gib": "grads", "optimizer_gib": "optim", "fp8_copies_gib": "fp8",
          "activations_gib": "activ", "transient_gib": "buffers", "overhead_gib": "overhd", "total_gib": "total"}
_MEMORY_COLUMNS = ("weights_gib", "gradients_gib", "optimizer_gib", "fp8_copies_gib", "activations_gib",
                   "transient_gib", "overhead_gib", "total_gib")


def memory_table(data: dict[str, Any]) -> Table:
    """One row per pipeline stage, one column per memory term (GiB)."""
    table = Table(title=f"Memory per GPU (GiB), capacity {data['capacity_gib']:.1f}: {data['verdict']}")
    table.add_column("rank")
    for column in _MEMORY_COLUMNS:
        table.add_column(_SHORT.get(column, column.removesuffix("_gib")), justify="right")
    table.add_column("µb", justify="right")
    for stage in data["stages"]:
        table.add_row(str(stage["rank"]), *(f"{stage[c]:.1f}" for c in _MEMORY_COLUMNS),
                      f"{stage['microbatches_in_flight']:.2f}")
    return table


def breakdown_table(data: dict[str, Any]) -> Table:
    """The heaviest rank's memory terms (GiB), with their sum (= the peak)."""
    from projection.memory_report import TERM_NOTES

    table = Table(title=f"Heaviest pipeline rank: {data['heaviest_rank']} "
                        f"({data['heaviest_rank_layers']} layers), GiB per GPU")
    table.add_column("term")
    table.add_column("GiB", justify="right")
    table.add_column("what")
    for name, gib in data["peak_terms_gib"].items():
        table.add_row(name, f"{gib:.2f}", TERM_NOTES.get(name, ""))
    table.add_row("[bold]sum = peak[/]", f"[bold]{data['peak_terms_sum_gib']:.2f}[/]", "")
    return table


def print_memory(data: dict[str, Any]) -> None:
    """Print a memory report: per-rank table, the heaviest rank's breakdown, the verdict and its margins."""
    console.print(f"[bold]{data['model']}[/] on {data['num_gpus']} x {data['gpu']}")
    console.print(memory_table(data))
    if "peak_terms_gib" in data:
        console.print(breakdown_table(data))
        m = data["margins"]
        console.print(f"usable {data['usable_gib']:.1f} of {data['hbm_gib']:.1f} GiB HBM; fits up to "
                      f"{data['fits_limit_gib']:.1f} GiB (margin +{m['under']:.0%}), out of memory above "
                      f"{data['oom_limit_gib']:.1f} GiB (margin -{m['over']:.0%})")
    console.print(f"peak {data['peak_gib']:.1f} GiB on pipeline rank {data['peak_rank']} (the heaviest), "
                  f"headroom {data['headroom_fraction']:.1%}: {data['verdict']}")


def print_projection(data: dict[str, Any]) -> None:
    """Print a full projection: headline numbers, breakdown, memory."""
    console.print(f"[bold]{data['model']}[/] on {data['num_gpus']} x {data['gpu']}: {escape(layout_text(data['config']))}")
    head = Table(show_header=False, box=None)
    head.add_row("iteration time", f"{data['iteration_time_s']:.3f} s  ({data['num_microbatches']} micro-batches)")
    head.add_row("tokens/s/GPU", f"{data['tokens_per_sec_per_gpu']:,.0f}")
    if "tokens_per_sec_per_gpu_low" in data:
        head.add_row("80% interval", f"{data['tokens_per_sec_per_gpu_low']:,.0f} - "
                                     f"{data['tokens_per_sec_per_gpu_high']:,.0f} tokens/s/GPU")
        head.add_row("band", "wide: " + "; ".join(data["band_reasons"]) if data.get("band_reasons")
                     else "inside the development evidence (projection/evidence.py)")
    head.add_row("model TFLOP/s/GPU", f"{data['model_tflops_per_gpu']:.1f}  (formula {data['flops_formula']})")
    head.add_row("MFU", f"{data['mfu']:.1%}")
    head.add_row("bottleneck", data["bottleneck"])
    if (switches := data.get("switches")) is not None:
        overlap = ",".join(switches["comm_overlap"]) or "none"
        head.add_row("switches", f"overlap {overlap}; CUDA graphs {'on' if switches['cuda_graphs'] else 'off'}; "
                                 f"compile {'on' if switches['compile'] else 'off'}; attention "
                                 f"{switches['attention_backend']}; grads reduced in "
                                 f"{'fp32' if switches['grad_reduce_in_fp32'] else 'bf16'}")
    console.print(head)
    total = sum(data["breakdown_s"].values())
    breakdown = Table(title="Step time breakdown (critical pipeline rank)")
    breakdown.add_column("part")
    breakdown.add_column("seconds", justify="right")
    breakdown.add_column("share", justify="right")
    for name, seconds in data["breakdown_s"].items():
        breakdown.add_row(name.removesuffix("_s"), f"{seconds:.3f}", f"{seconds / total:.1%}")
    console.print(breakdown)
    console.print(memory_table(data["memory"]))
