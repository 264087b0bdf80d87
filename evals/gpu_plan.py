"""The device plan: every shape the prepared GPU script times, computed here (with the project's deps).

The GPU machine may lack pydantic and the rest of the project's dependencies, so the
script (``benchmarks/gpu_check.py``) imports only torch, the standard library and the
torch-only parts of ``bench/`` (``attention``, ``fp8``, ``layers``, ``layer_timing``,
``microbench``, ``shapes``). What to time comes from this module as one JSON file,
``benchmarks/gpu_plan.json`` (``python -m evals.gpu_plan --write``; a test checks it is current):

- cases: one per distinct per-GPU slice of the H200 development runs (``evals/data``,
  complete runs of ``mlperf-training-v4-v5.0.yaml`` and ``torchtitan.yaml``) plus the
  layers the issue names (Llama 3.1 8B, Llama 2 70B TP-reduced, Mixtral 8x7B EP-reduced,
  DeepSeek-V3 with its experts per GPU kept), then the slices of the H100 development runs
  (timed on the H200 for the H100 transfer; last, so a short budget drops them first). Each
  case lists its layer kinds with the TARGET's per-GPU shapes (a TP8/EP8 shard runs on one
  GPU), the head shape, FP8 and frozen (LoRA) flags and the useful FLOPs of every layer;
- micro: GEMM shapes of those layers (16-bit and FP8), grouped expert GEMMs, attention
  forward and backward at the development sequence lengths, HBM copies.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.analytic import analytic_layout, layer_kinds
from bench.layer_timing import layer_flops
from bench.measured_set import SLICE_KEYS
from bench.reduction import reduce_layout
from bench.shapes import LayerShape, head_shape, layer_shape
from projection.errors import ProjtuneError
from projection.model_spec import ModelSpec, load_model
from projection.training_config import Cluster, TrainingConfig

PLAN_FILE = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_plan.json"
DATA_DIR = Path(__file__).resolve().parents[1] / "evals" / "data"
DEV_FILES = ("mlperf-training-v4-v5.0.yaml", "torchtitan.yaml")
LOCAL_GPU = "h200"
TRANSFER_GPUS = ("h100-sxm", "h100-96gb-500w")   # their dev runs' slices are timed on the H200 too (transfer)
# The layers the issue names, as (model, GPUs, layout): layouts of their published recipes.
ISSUE_CASES: tuple[tuple[str, int, dict[str, Any]], ...] = (
    ("llama3.1-8b", 32, {"tp": 1, "mbs": 2, "gbs": 64, "seq_len": 8192, "precision": "fp8"}),   # torchtitan H200 rows
    ("llama2-70b", 8, {"tp": 8, "mbs": 1, "gbs": 64, "seq_len": 4096, "sequence_parallel": True}),
    ("mixtral-8x7b", 64, {"tp": 1, "ep": 8, "pp": 4, "mbs": 1, "gbs": 256, "seq_len": 4096}),
    ("deepseek-v3", 256, {"tp": 1, "ep": 64, "pp": 4, "mbs": 1, "gbs": 256, "seq_len": 4096}),
)
MICRO_ATTENTION_SEQ = (2048, 4096, 8192)
MICRO_ATTENTION_BACKENDS = ("flash", "cudnn", "efficient")
COPY_BYTES = (2**28, 2**30)


def _slice(config: TrainingConfig) -> tuple[Any, ...]:
    return tuple(getattr(config, k) for k in SLICE_KEYS)


def dev_cases(data_dir: Path = DATA_DIR, gpus: tuple[str, ...] = (LOCAL_GPU, *TRANSFER_GPUS)
              ) -> list[dict[str, Any]]:
    """Complete, projectable runs on ``gpus`` of the development files, grouped by per-GPU slice
    (the local GPU's first, then the transfer GPUs')."""
    from evals.runner import run_specs
    from evals.sweep_file import load_sweep_files

    loaded = load_sweep_files([data_dir / name for name in DEV_FILES if (data_dir / name).is_file()])
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    order = {gpu: i for i, gpu in enumerate(gpus)}
    for sweep in sorted((s for s in loaded.sweeps if s.sweep.cluster.gpu in order),
                        key=lambda s: order[s.sweep.cluster.gpu]):
        for run in sweep.runs:
            if run.broken is not None or run.missing_keys or run.metric is None:
                continue
            try:
                specs = run_specs(sweep, run)
                reduce_layout(specs.model, specs.cluster, specs.config, 1)
            except ProjtuneError:
                continue
            key = (specs.model.name, *_slice(specs.config))
            role = "dev" if specs.hardware.id == gpus[0] else "transfer"
            case = groups.setdefault(key, {"model": specs.model, "cluster": specs.cluster, "config": specs.config,
                                           "runs": [], "role": role})
            case["runs"].append(f"{sweep.name}#{run.index}")
    return list(groups.values())


def _case(model: ModelSpec, cluster: Cluster, config: TrainingConfig, runs: list[str], *, role: str,
          with_flops: bool = True) -> dict[str, Any]:
    view = analytic_layout(model, cluster.model_copy(update={"gpu": LOCAL_GPU}), config)
    layers = []
    for kind, layer in layer_kinds(model).items():
        shape = layer_shape(model, config, view.dims, layer)
        layers.append({"kind": list(kind), "layer": layer, "shape": shape.to_dict(),
                       "flops_fwd": layer_flops(shape) if with_flops else None})
    slice_text = ",".join(f"{k}={getattr(config, k)}" for k in SLICE_KEYS if getattr(config, k) not in (None, False))
    return {
        "id": f"{model.name}:{slice_text}", "model": model.name, "role": role,
        "model_spec": model.model_dump(mode="json"),
        "cluster": cluster.model_dump(mode="json", exclude_none=True),
        "config": config.model_dump(mode="json", exclude_none=True),
        "runs": runs, "fp8": config.is_low_precision, "frozen": config.finetune == "lora",
        "layers": layers, "head": head_shape(model, config, view.dims).to_dict(),
    }


def _gemms(shape: LayerShape) -> list[tuple[str, int, int, int, int]]:
    """(op, groups, m, n, k) of the layer's GEMMs (groups = 0: a plain GEMM)."""
    t, h = shape.tokens, shape.hidden
    mats = 2 if shape.gated else 1
    out = []
    if shape.kv_lora_rank:
        out += [("q_up", 0, t, shape.heads * shape.head_dim, shape.q_lora_rank or h),
                ("kv_down", 0, t, shape.kv_lora_rank + shape.rope_dim, h)]
    else:
        out.append(("qkv", 0, t, (shape.heads + 2 * shape.kv_heads) * shape.head_dim, h))
    out.append(("proj", 0, t, h, shape.heads * shape.v_head_dim))
    if shape.moe:
        per = max(1, shape.routed_tokens // shape.local_experts)
        out += [("expert_fc1", shape.local_experts, per, mats * shape.moe_ffn, h),
                ("expert_fc2", shape.local_experts, per, h, shape.moe_ffn)]
    else:
        out += [("fc1", 0, t, mats * shape.ffn, h), ("fc2", 0, t, h, shape.ffn)]
    return out


def micro_points(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Microbenchmark points: the cases' GEMMs (16-bit and FP8), grouped GEMMs, attention, copies."""
    points: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for case in cases:
        for layer in case["layers"]:
            shape = LayerShape.from_dict(layer["shape"])
            for op, groups, m, n, k in _gemms(shape):
                kinds = ("grouped_gemm",) if groups else ("gemm", "gemm_fp8")
                for kind in kinds:
                    key = (kind, groups, m, n, k)
                    if key in seen:
                        continue
                    seen.add(key)
                    points.append({"kind": kind, "name": f"{case['model']} {op} T{shape.tokens}", "m": m, "n": n,
                                   "k": k, "groups": groups})
    for seq in MICRO_ATTENTION_SEQ:
        for kind in ("attention", "attention_bwd"):
            for backend in MICRO_ATTENTION_BACKENDS:   # each pinned: which kernel is fastest is itself a finding
                points.append({"kind": kind, "name": f"sdpa {kind} s{seq} {backend}", "batch": 1, "heads": 32,
                               "kv_heads": 8, "seq": seq, "head_dim": 128, "backend": backend})
    points += [{"kind": "copy", "name": f"copy {b >> 20} MiB", "num_bytes": float(b)} for b in COPY_BYTES]
    return points


def build_plan(data_dir: Path = DATA_DIR, *, with_flops: bool = True) -> dict[str, Any]:
    """The whole device plan (JSON-able)."""
    found = dev_cases(data_dir)
    cases = [_case(c["model"], c["cluster"], c["config"], c["runs"], role="dev", with_flops=with_flops)
             for c in found if c["role"] == "dev"]
    for model_id, gpus, layout in ISSUE_CASES:
        model = load_model(model_id)
        cases.append(_case(model, Cluster(gpu=LOCAL_GPU, num_gpus=gpus), TrainingConfig(**layout),
                           ["issue-17 named layer"], role="issue", with_flops=with_flops))
    # Transfer cases last: the device script runs them only while its time budget lasts.
    cases += [_case(c["model"], c["cluster"], c["config"], c["runs"], role="transfer", with_flops=with_flops)
              for c in found if c["role"] == "transfer"]
    return {"schema": 1, "local_gpu": LOCAL_GPU, "cases": cases,
            "micro": micro_points(cases)}


def main(argv: list[str] | None = None) -> int:
    """``python -m evals.gpu_plan [--write]``: print or write ``benchmarks/gpu_plan.json``."""
    parser = argparse.ArgumentParser(description="Build the device plan of benchmarks/gpu_check.py.")
    parser.add_argument("--write", action="store_true", help=f"Write {PLAN_FILE.name} (else print).")
    args = parser.parse_args(argv)
    text = json.dumps(build_plan(), indent=1, sort_keys=True) + "\n"
    if args.write:
        PLAN_FILE.write_text(text)
        print(f"wrote {PLAN_FILE}")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
