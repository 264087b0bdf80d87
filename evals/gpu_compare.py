"""Restore and compare: project the development runs from the device script's results.

From one ``gpu_results.json`` (``benchmarks/gpu_check.py``) this

1. builds the measurement files and fits a device profile to the microbenchmarks;
2. projects every complete H200 development run (``evals/data``: ``mlperf-training-v4-v5.0.yaml``
   and ``torchtitan.yaml``) four ways: analytic with the shipped profile, analytic with the
   fitted profile, measured mode with the shipped profile, measured mode with the fitted
   profile; next to the run's measured value, with the APE of each and their MAPE;
3. does the same for H100 runs of the same per-GPU slices as a TRANSFER (not a measurement):
   measured mode with compute carried from H200 to H100 by the analytic ratio (fitted H200
   profile against the shipped H100 one), and the shipped H100 profile scaled by the fitted /
   shipped H200 efficiencies;
4. lists every benchmarked layer (measured vs analytic times, attention backend, precision,
   achieved TFLOP/s) and the fitted efficiencies next to the shipped H200 profile.

A results file from a CPU or ``--quick`` run is labelled ``CPU PLUMBING`` everywhere: its
numbers test the code path, never the model.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from bench.analytic import analytic_layout
from bench.device import device_profile, profile_yaml, rms_log_error
from bench.device_results import load_results, measurements, provenance, runtime_of, sweep_points
from bench.measurement import Measurement, write_measurement
from bench.restore import project_measured
from evals.gpu_plan import DATA_DIR, DEV_FILES, PLAN_FILE, SLICE_KEYS, TRANSFER_GPUS
from projection.device_profile import DeviceProfile
from projection.engine import project
from projection.errors import ProjtuneError
from projection.job import resolve_device

EFFICIENCIES = ("gemm_efficiency", "low_precision_gemm_efficiency", "attention_efficiency", "moe_efficiency",
                "memory_efficiency", "kernel_overhead_s")
COLUMNS = ("analytic_shipped", "analytic_fitted", "measured_shipped", "measured_fitted")
TRANSFER_COLUMNS = ("analytic_shipped", "measured_transfer", "analytic_transferred_profile")
PLUMBING = "CPU PLUMBING (not GPU results)"


def transferred_profile(target: DeviceProfile, fitted: DeviceProfile, shipped: DeviceProfile) -> DeviceProfile:
    """``target`` with each efficiency scaled by fitted / shipped of the measured GPU (capped at 1)."""
    update = {}
    for name in EFFICIENCIES:
        base, new, old = getattr(target, name), getattr(fitted, name), getattr(shipped, name)
        if old > 0:
            value = base * new / old
            update[name] = min(1.0, value) if name.endswith("efficiency") else value
    return target.model_copy(update=update | {"fit_note": f"transfer of {fitted.hardware_id} fit (not a measurement)"})


def _slug(case_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in case_id)


def _ape(projected: float | None, measured: float | None) -> float | None:
    if projected is None or measured is None or measured == 0 or not math.isfinite(projected):
        return None
    return abs(projected - measured) / abs(measured)


def _mape(rows: list[dict[str, Any]], column: str) -> float | None:
    values = [r["ape"][column] for r in rows if r["ape"].get(column) is not None]
    return statistics.fmean(values) if values else None


def _dev_runs(data_dir: Path, gpu: str) -> list[tuple[Any, Any, Any]]:
    """(sweep, run, specs) of complete, projectable runs on ``gpu``."""
    from evals.runner import run_specs
    from evals.sweep_file import load_sweep_files

    loaded = load_sweep_files([data_dir / n for n in DEV_FILES if (data_dir / n).is_file()])
    out = []
    for sweep in loaded.sweeps:
        if sweep.sweep.cluster.gpu != gpu:
            continue
        for run in sweep.runs:
            if run.broken is not None or run.missing_keys or run.metric is None or run.run is None:
                continue
            try:
                out.append((sweep, run, run_specs(sweep, run)))
            except ProjtuneError:
                continue
    return out


def _metric(sweep: Any, specs: Any, projection: Any, metric: str) -> float:
    from evals.runner import projected_metrics

    return projected_metrics(sweep, specs, projection)[metric]


def _case_for(specs: Any, pairs: list[tuple[dict[str, Any], Measurement]]) -> tuple[dict[str, Any], Measurement] | None:
    key = tuple(getattr(specs.config, k) for k in SLICE_KEYS)
    for case, m in pairs:
        cfg = m.reduction.target_config
        if case["model"] == specs.model.name and tuple(getattr(cfg, k) for k in SLICE_KEYS) == key:
            return case, m
    return None


def _safe(fn: Any) -> tuple[Any, str | None]:
    try:
        return fn(), None
    except ProjtuneError as err:
        return None, str(err)


def _run_rows(runs: list[tuple[Any, Any, Any]], pairs: list[tuple[dict[str, Any], Measurement]],
              profiles: dict[str, DeviceProfile], *, transfer: bool, fitted_bench: DeviceProfile
              ) -> list[dict[str, Any]]:
    rows = []
    for sweep, run, specs in runs:
        found = _case_for(specs, pairs)
        if found is None:
            continue
        case, m = found
        measured = run.run.measured.model_dump(exclude_none=True).get(run.metric)
        values: dict[str, float | None] = {}
        warnings: list[str] = []
        errors: dict[str, str] = {}

        def analytic(profile: DeviceProfile) -> float:
            return _metric(sweep, specs, project(specs.model, specs.cluster, specs.config, hardware=specs.hardware,
                                                 profile=profile), run.metric)

        def measured_mode(profile: DeviceProfile, bench_profile: DeviceProfile | None) -> float:
            restored = project_measured(m, specs.model, specs.cluster, specs.config, hardware=specs.hardware,
                                        profile=profile, bench_profile=bench_profile)
            warnings.extend(w for w in restored.warnings if w not in warnings)
            return _metric(sweep, specs, restored.projection, run.metric)

        jobs = ({"analytic_shipped": lambda: analytic(profiles["target_shipped"]),
                 "measured_transfer": lambda: measured_mode(profiles["target_shipped"], fitted_bench),
                 "analytic_transferred_profile": lambda: analytic(profiles["target_transferred"])}
                if transfer else
                {"analytic_shipped": lambda: analytic(profiles["shipped"]),
                 "analytic_fitted": lambda: analytic(profiles["fitted"]),
                 "measured_shipped": lambda: measured_mode(profiles["shipped"], None),
                 "measured_fitted": lambda: measured_mode(profiles["fitted"], profiles["fitted"])})
        for name, job in jobs.items():
            values[name], err = _safe(job)
            if err:
                errors[name] = err
        rows.append({"run": f"{sweep.name}#{run.index}", "gpu": specs.hardware.id, "case": case["id"],
                     "metric": run.metric, "measured": measured, "projected": values,
                     "ape": {k: _ape(v, measured) for k, v in values.items()}, "warnings": warnings,
                     "errors": errors})
    return rows


def _layer_rows(pairs: list[tuple[dict[str, Any], Measurement]], shipped: DeviceProfile, fitted: DeviceProfile
                ) -> list[dict[str, Any]]:
    rows = []
    for case, m in pairs:
        red = m.reduction
        cluster = red.target_cluster.model_copy(update={"gpu": red.bench_cluster.gpu})
        views = {name: analytic_layout(red.target_model, cluster, red.target_config, profile=p)
                 for name, p in (("shipped", shipped), ("fitted", fitted))}
        for t in m.layers:
            row = {"case": case["id"], "kind": t.kind, "window": t.window, "attention_backend": t.attention_backend,
                   "gemm_precision": t.gemm_precision, "expert_gemm": t.expert_gemm,
                   "forward_tflops": t.forward_tflops, "backward_tflops": t.backward_tflops,
                   "attention_tflops": t.attention_tflops,
                   "measured_ms": {"fwd": t.forward_ms, "bwd": t.backward_input_ms + t.backward_weight_ms,
                                   "attention_fwd": t.attention_forward_ms, "optimizer": t.optimizer_ms}}
            for name, view in views.items():
                c = view.costs[t.key]
                row[f"analytic_{name}_ms"] = {"fwd": c.fwd_s * 1e3, "bwd": (c.bwd_input_s + c.bwd_weight_s) * 1e3,
                                              "attention_fwd": c.attention_fwd_s * 1e3}
            rows.append(row)
    return rows


def compare(results_path: Path, *, plan_path: Path = PLAN_FILE, data_dir: Path = DATA_DIR,
            out_dir: Path | None = None) -> dict[str, Any]:
    """The whole comparison as a JSON-able dict (and the files under ``out_dir`` when given)."""
    results = load_results(results_path)
    plan = json.loads(plan_path.read_text())
    info = runtime_of(results)
    representative = bool(results.get("representative"))
    label = "GPU measurement" if representative else PLUMBING
    hardware, shipped = resolve_device(info.hardware_id or plan.get("local_gpu", "h200"))
    points = sweep_points(results)
    fitted = (device_profile(points, hardware, shipped, device_name=info.device_name, representative=representative)
              if points else shipped)
    pairs = measurements(results, plan)
    files = []
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        for case, m in pairs:
            path = out_dir / f"measurement-{_slug(case['id'])}.json"
            write_measurement(m, path)
            files.append(str(path))
        prof = out_dir / f"profile-{hardware.id}{'' if representative else '-cpu-plumbing'}.yaml"
        prof.write_text(profile_yaml(fitted, points, hardware))
        files.append(str(prof))
    local_runs = _dev_runs(data_dir, hardware.id)
    rows = _run_rows(local_runs, pairs, {"shipped": shipped, "fitted": fitted}, transfer=False, fitted_bench=fitted)
    transfer_rows = []
    for gpu in TRANSFER_GPUS:
        target, target_shipped = resolve_device(gpu)
        transfer_rows += _run_rows(_dev_runs(data_dir, target.id), pairs,
                                   {"target_shipped": target_shipped,
                                    "target_transferred": transferred_profile(target_shipped, fitted, shipped)},
                                   transfer=True, fitted_bench=fitted)
    out = {
        "label": label, "representative": representative, "provenance": provenance(results),
        "hardware": hardware.id, "files": files,
        "efficiencies": {n: {"shipped": getattr(shipped, n), "fitted": getattr(fitted, n)} for n in EFFICIENCIES},
        "profile_fit": {"points": len(points), "rms_log_error_fitted": rms_log_error(points, hardware, fitted),
                        "rms_log_error_shipped": rms_log_error(points, hardware, shipped), "note": fitted.fit_note},
        "attention_backends": sorted({p.backend for p in points if p.backend}
                                     | {t.attention_backend for _, m in pairs for t in m.layers
                                        if t.attention_backend}),
        "attention_micro": [{"name": p["name"], "backend": p.get("info", {}).get("backend", p.get("backend", "")),
                             "ms": p["measured_s"] * 1e3, "error": p.get("info", {}).get("error", "")}
                            for p in results.get("micro", []) if p["kind"].startswith("attention")],
        "runs": rows, "mape": {c: _mape(rows, c) for c in COLUMNS},
        "transfer": {"note": "H100 runs from the H200 measurements and fit: a transfer, not a measurement",
                     "runs": transfer_rows, "mape": {c: _mape(transfer_rows, c) for c in TRANSFER_COLUMNS}},
        "layers": _layer_rows(pairs, shipped, fitted),
        "cases_measured": [c["id"] for c, _ in pairs],
        "cases_missing": [c["id"] for c in plan["cases"] if c["id"] not in {p[0]["id"] for p in pairs}],
        "not_checked_on_one_gpu": ["TP all-reduce, EP all-to-all and DP collectives (analytic)",
                                   "CP ring exchange (analytic; the CP rank's attention compute is timed)",
                                   "PP schedule, bubbles and p2p (simulated)"],
    }
    if out_dir is not None:
        (out_dir / "compare.json").write_text(json.dumps(out, indent=1) + "\n")
        (out_dir / "compare.md").write_text(markdown(out))
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.4g}"


def _runs_table(runs: list[dict[str, Any]], mape: dict[str, float | None], columns: tuple[str, ...]) -> list[str]:
    """Markdown table lines: one row per run (projected value and its APE per column), then the MAPE row."""
    lines = ["| run | metric | measured | " + " | ".join(columns) + " |", "|---|---|---|" + "---|" * len(columns)]
    for r in runs:
        cells = [f"{_num(r['projected'].get(c))} ({_pct(r['ape'].get(c))})" for c in columns]
        lines.append(f"| {r['run']} | {r['metric']} | {_num(r['measured'])} | " + " | ".join(cells) + " |")
    lines.append("| **MAPE** | | | " + " | ".join(_pct(mape[c]) for c in columns) + " |")
    return lines


def markdown(out: dict[str, Any]) -> str:
    """The comparison as a Markdown report."""
    lines = [f"# Measured mode vs analytic vs measured: {out['label']}", ""]
    if not out["representative"]:
        lines += [f"**{PLUMBING}**: the device script ran on a CPU and/or with --quick tiny shapes. These figures "
                  "exercise the code path only; they say nothing about accuracy.", ""]
    prov = out["provenance"]
    lines += [f"Device: {prov.get('device_name')}, driver {prov.get('driver', '-')}, torch {prov.get('torch')}, "
              f"CUDA {prov.get('cuda', '-')}, {prov.get('date')}; code {prov.get('code_version')}; "
              f"command `{prov.get('command')}`", "",
              f"Attention backends: {', '.join(out['attention_backends']) or '-'}", "",
              "Attention microbenchmarks (each backend pinned): "
              + "; ".join(f"{a['name']}: " + (f"{a['ms']:.3f} ms" if a["ms"] > 0 else f"n/a ({a['error'][:60]})")
                          for a in out["attention_micro"]), "",
              "## H200 development runs", "", *_runs_table(out["runs"], out["mape"], COLUMNS)]
    t = out["transfer"]
    lines += ["", f"## H100 runs: {t['note']}", "", *_runs_table(t["runs"], t["mape"], TRANSFER_COLUMNS)]
    lines += ["", "## Fitted efficiencies (microbenchmarks) vs the shipped profile", "",
              "| parameter | shipped | fitted |",
              "|---|---|---|"]
    lines += [f"| {n} | {v['shipped']:.4g} | {v['fitted']:.4g} |" for n, v in out["efficiencies"].items()]
    fit = out["profile_fit"]
    lines += ["", f"{fit['points']} points; rms log error {fit['rms_log_error_fitted']:.3f} fitted, "
              f"{fit['rms_log_error_shipped']:.3f} shipped.", "", "## Layers (one micro-batch, one GPU, ms)", "",
              "| case | kind | backend | gemm | fwd meas / shipped / fitted | bwd meas / shipped / fitted "
              "| fwd TFLOP/s |",
              "|---|---|---|---|---|---|---|"]
    for r in out["layers"]:
        m, s, f = r["measured_ms"], r["analytic_shipped_ms"], r["analytic_fitted_ms"]
        lines.append(f"| {r['case']} | {r['kind']}/w{r['window']} | {r['attention_backend']} | {r['gemm_precision']} "
                     f"| {m['fwd']:.3f} / {s['fwd']:.3f} / {f['fwd']:.3f} | {m['bwd']:.3f} / {s['bwd']:.3f} / "
                     f"{f['bwd']:.3f} | {r['forward_tflops']:.1f} |")
    lines += ["", "Not checked on one GPU: " + "; ".join(out["not_checked_on_one_gpu"]) + ".", ""]
    if out["cases_missing"]:
        lines += ["Cases without a complete measurement: " + ", ".join(out["cases_missing"]), ""]
    return "\n".join(lines)
