"""Write an eval report: `report.md` with the summary and tables, and PNG plots (matplotlib, Agg).

Plots: `projected_vs_measured.png` (log-log per primary metric, coloured by GPU family,
with y = x, a +-10% band and each run's projected 80% interval as a vertical bar, dotted where novelty
widened it), `error_histogram.png` (signed throughput error, positive =
projection optimistic) and `ranks/<sweep>.png` (measured vs projected throughput of each
run of a rankable sweep).
"""

from __future__ import annotations

import datetime
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from evals.eval_run import EvalResult
from evals.scoring import RunScore, SweepScore, inside, rank_runs, throughput

METRIC_LABELS = {
    "iteration_time_s": "iteration time (s)",
    "tokens_per_sec_per_gpu": "tokens/s per GPU",
    "model_tflops_per_gpu": "model TFLOP/s per GPU",
    "mfu": "MFU (fraction)",
}
FAMILY_COLORS = {
    "ampere": "#1f77b4", "hopper": "#2ca02c", "blackwell": "#d62728", "blackwell-ultra": "#9467bd",
    "cdna3": "#ff7f0e", "cdna4": "#8c564b", None: "#7f7f7f",
}
_BAND = 0.10


def write_report(result: EvalResult, out_dir: Path) -> list[Path]:
    """Write report.md and the plots under `out_dir`; return the written paths."""
    import matplotlib

    matplotlib.use("Agg")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [plot_projected_vs_measured(result.runs, out_dir / "projected_vs_measured.png"),
               plot_error_histogram(result.runs, out_dir / "error_histogram.png")]
    rank_dir = out_dir / "ranks"
    ranks = [plot_sweep_ranks(s, [r for r in result.runs if r.sweep == s.name], rank_dir / f"{_slug(s.name)}.png")
             for s in result.sweeps if s.rank_metric is not None]
    report = out_dir / "report.md"
    report.write_text(render_markdown(result, ranks, out_dir), encoding="utf-8")
    return [report, *written, *ranks]


# ---- markdown ---------------------------------------------------------------------------------

def _fmt(value: Any, kind: Literal["num", "pct", "signed"] = "num") -> str:
    """Format a table cell: '-' for None, yes/no, numbers as 3 digits or percents."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return {"pct": f"{value:.1%}", "signed": f"{value:+.1%}", "num": f"{value:.3g}"}[kind]
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


_SUMMARY_PERCENT = {"mape", "mape_complete", "mape_filled", "median_ape", "memory_mape", "oom_recall",
                    "oom_false_alarm_rate", "top1_rate", "regret_mean"}


def render_markdown(result: EvalResult, rank_plots: Sequence[Path], out_dir: Path) -> str:
    """Return the text of report.md."""
    summary = result.summary()
    data = result.to_dict()
    rows = [[k, _fmt(v, "signed" if k == "bias" else "pct" if k in _SUMMARY_PERCENT else "num")]
            for k, v in summary.items() if k not in ("agent", "baselines", "interval_by_file", "interval_by_novelty")]
    parts = [
        "# projtune eval report", "",
        f"{datetime.date.today().isoformat()}: {summary['runs_scored']} of {summary['runs']} runs scored "
        f"from {summary['sweeps']} sweeps in {summary['files']} files. Errors are fractions of the measured "
        "value on each run's primary metric; bias is signed on throughput (positive: projection optimistic).",
        "", "## Summary", "", _table(["metric", "value"], rows), "",
    ]
    if summary["agent"]:
        agent = summary["agent"]
        parts += ["## Agent", "", _table(["sweeps", "top-1 rate", "mean regret"], [[
            str(agent["sweeps"]), _fmt(agent["top1_rate"], "pct"), _fmt(agent["regret_mean"], "pct")]]), ""]
    if summary["baselines"]:
        parts += ["## Baselines (same runs)", "", _table(["tool", "runs", "tool MAPE", "our MAPE"], [
            [name, str(b["runs"]), _fmt(b["mape"], "pct"), _fmt(b["ours_mape_same_runs"], "pct")]
            for name, b in summary["baselines"].items()]), ""]
    for title, key in (("By GPU", "by_gpu"), ("By family", "by_family")):
        parts += [f"## {title}", "", _table([key.removeprefix("by_"), "runs", "MAPE", "bias"], [
            [name, str(g["runs"]), _fmt(g["mape"], "pct"), _fmt(g["bias"], "signed")]
            for name, g in data[key].items()]), ""]
    parts += _band_sections(summary, result.runs)
    parts += ["## Plots", "", "![projected vs measured](projected_vs_measured.png)", "",
              "![signed error histogram](error_histogram.png)", ""]
    parts += ["## Sweeps", "", _sweep_table(result.sweeps, rank_plots, out_dir), ""]
    parts += ["## Skipped runs", "", _skipped_table(result.runs), ""]
    if result.load_issues:
        parts += ["## Load issues", "", *[f"- {issue}" for issue in result.load_issues], ""]
    return "\n".join(parts)


def _band_sections(summary: dict[str, Any], runs: Sequence[RunScore]) -> list[str]:
    """The 80% band's coverage per file and per novelty reason, and each widened run with its reasons."""
    parts: list[str] = []
    for title, key, label in (("80% band by file", "interval_by_file", "file"),
                              ("80% band by novelty reason", "interval_by_novelty", "novelty")):
        groups = summary.get(key) or {}
        if groups:
            parts += [f"## {title}", "", _table([label, "runs", "coverage", "median width"], [
                [Path(name).name if label == "file" else name, str(g["runs"]), _fmt(g["coverage"], "pct"),
                 _fmt(g["median_width"], "pct")] for name, g in groups.items()]), ""]
    widened = [r for r in runs if r.band_reasons and r.projected is not None]
    if widened:
        parts += ["## Widened bands", "", _table(["sweep", "run", "band (measured / projected)", "inside", "why"], [
            [r.sweep, str(r.index), f"{r.projected_low:.3g}-{r.projected_high:.3g} ({r.measured:.3g} / "
             f"{r.projected:.3g})", _fmt(inside(r)), "; ".join(r.band_reasons)] for r in widened]), ""]
    return parts


def _sweep_table(sweeps: Sequence[SweepScore], rank_plots: Sequence[Path], out_dir: Path) -> str:
    plots = {p.stem: p.relative_to(out_dir).as_posix() for p in rank_plots}
    rows = []
    for s in sweeps:
        plot = plots.get(_slug(s.name))
        rows.append([
            f"[{s.name}]({plot})" if plot else s.name, s.gpu, str(s.num_gpus), f"{s.runs_scored}/{s.runs}",
            _fmt(s.mape, "pct"), _fmt(s.kendall_tau), _fmt(s.spearman), _fmt(s.top1), _fmt(s.regret, "pct"),
            _fmt(s.agent["regret"], "pct") if s.agent else "-",
        ])
    return _table(["sweep", "gpu", "GPUs", "scored", "MAPE", "Kendall tau", "Spearman", "top-1", "regret",
                   "agent regret"], rows)


def _skipped_table(runs: Sequence[RunScore]) -> str:
    reasons = Counter(_reason_kind(r.skipped) for r in runs if r.skipped)
    if not reasons:
        return "None."
    return _table(["reason", "runs"], [[reason, str(n)] for reason, n in reasons.most_common()])


def _reason_kind(reason: str | None) -> str:
    """Group skip reasons: drop run-specific detail after the first colon-separated clause."""
    text = str(reason)
    if text.startswith("incomplete: missing"):
        return text.split(" (use")[0]
    return text if len(text) <= 100 else text[:97] + "..."


# ---- plots ------------------------------------------------------------------------------------

def plot_projected_vs_measured(runs: Sequence[RunScore], path: Path) -> Path:
    """Plot projected vs measured on log-log axes, one panel per primary metric."""
    import matplotlib.pyplot as plt

    scored = [r for r in runs if r.ape is not None]
    metrics = [m for m in METRIC_LABELS if any(r.metric == m for r in scored)] or ["tokens_per_sec_per_gpu"]
    cols = min(2, len(metrics))
    rows = -(-len(metrics) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 5.4 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics, strict=False):
        points = [r for r in scored if r.metric == metric]
        for family in FAMILY_COLORS:
            mine = [r for r in points if r.family == family]
            for filled in (False, True):
                sel = [r for r in mine if r.filled == filled]
                if sel:
                    color = FAMILY_COLORS[family]
                    ax.scatter([r.measured for r in sel], [r.projected for r in sel], s=28, alpha=0.8,
                               facecolors="none" if filled else color, edgecolors=color,
                               label=f"{family or 'unknown'}{' (filled)' if filled else ''} ({len(sel)})")
        _interval_bars(ax, points)
        _identity_band(ax, points)
        _log_axes(ax)
        ax.set_title(f"{METRIC_LABELS[metric]}: {len(points)} runs")
        ax.set_xlabel(f"measured {METRIC_LABELS[metric]}")
        ax.set_ylabel(f"projected {METRIC_LABELS[metric]}")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=8, loc="lower right")
    for ax in list(axes.flat)[len(metrics):]:
        ax.set_visible(False)
    fig.suptitle("Projected vs measured (y = x, shaded: within +-10%; bars: 80% band, dotted where widened)")
    fig.tight_layout()
    return _save(fig, path)


def _log_axes(ax: Any) -> None:
    """Log scales with plain tick labels (1000, not 10^3); minor labels only within about a decade."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    low, high = ax.get_xlim()
    narrow = high / low < 30
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(plain if narrow else NullFormatter())
        if narrow:  # 125 and 150 too, so a range like 40-170 has labels above 100
            axis.set_minor_locator(LogLocator(base=10, subs=(1.25, 1.5, 2, 3, 4, 5, 6, 7, 8, 9)))


def _interval_bars(ax: Any, points: Sequence[RunScore]) -> None:
    """Each run's projected 80% interval as a vertical bar at its measured value: solid inside the evidence,
    dotted where novelty widened it (``RunScore.band_reasons``)."""
    for widened in (False, True):
        sel = [r for r in points if r.projected_low is not None and r.projected_high is not None
               and bool(r.band_reasons) == widened]
        if not sel:
            continue
        ax.vlines([r.measured for r in sel], [r.projected_low for r in sel], [r.projected_high for r in sel],
                  colors=[FAMILY_COLORS.get(r.family, FAMILY_COLORS[None]) for r in sel], alpha=0.45, lw=1,
                  linestyles="dotted" if widened else "solid",
                  label=f"80% band{', widened: novel' if widened else ''} ({len(sel)})")


def _identity_band(ax: Any, points: Sequence[RunScore]) -> None:
    values = [v for r in points for v in (r.measured, r.projected) if v]
    if not values:
        return
    low, high = min(values) / 1.3, max(values) * 1.3
    xs = [low, high]
    ax.plot(xs, xs, color="black", lw=1, label="y = x")
    ax.fill_between(xs, [x * (1 - _BAND) for x in xs], [x * (1 + _BAND) for x in xs], color="gray", alpha=0.2,
                    label="+-10%")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)


def plot_error_histogram(runs: Sequence[RunScore], path: Path) -> Path:
    """Plot the histogram of signed throughput errors, stacked by GPU family."""
    import matplotlib.pyplot as plt
    import numpy as np

    scored = [r for r in runs if r.signed_error is not None]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    if scored:
        errors = [100 * r.signed_error for r in scored]  # type: ignore[operator]
        bins = np.linspace(min(-50.0, min(errors)), max(50.0, max(errors)), 41)
        families = [f for f in FAMILY_COLORS if any(r.family == f for r in scored)]
        stacks = [[100 * r.signed_error for r in scored if r.family == f] for f in families]  # type: ignore[operator]
        ax.hist(stacks, bins=bins, stacked=True, color=[FAMILY_COLORS[f] for f in families],
                label=[f"{f or 'unknown'} ({len(s)})" for f, s in zip(families, stacks, strict=True)])
        median = float(np.median(errors))
        ax.axvline(0, color="black", lw=1)
        ax.axvline(median, color="black", lw=1, ls="--", label=f"median {median:+.1f}%")
        ax.legend(fontsize=8)
    ax.set_title(f"Signed error of projected throughput ({len(scored)} runs)")
    ax.set_xlabel("(projected - measured) / measured throughput, %  (positive: projection optimistic)")
    ax.set_ylabel("runs")
    fig.tight_layout()
    return _save(fig, path)


def plot_sweep_ranks(sweep: SweepScore, runs: Sequence[RunScore], path: Path) -> Path:
    """Plot measured vs projected throughput per run of one sweep, best runs marked."""
    import matplotlib.pyplot as plt
    import numpy as np

    metric, ranked = rank_runs(runs)
    assert metric is not None, "only rankable sweeps are plotted"
    measured = [throughput(metric, r.measured) for r in ranked]  # type: ignore[arg-type]
    projected = [throughput(metric, r.projected) for r in ranked]  # type: ignore[arg-type]
    unit = "1 / iteration time (1/s)" if metric == "iteration_time_s" else METRIC_LABELS[metric]
    labels = _run_labels(ranked)
    x = np.arange(len(ranked))
    fig, ax = plt.subplots(figsize=(min(24.0, max(7.0, 1.7 * len(ranked) + 3)), 5.2))
    ax.bar(x - 0.2, measured, 0.4, label="measured", color="#4c72b0")
    ax.bar(x + 0.2, projected, 0.4, label="projected", color="#dd8452")
    top = max(max(measured), max(projected))
    best_m, best_p = int(np.argmax(measured)), int(np.argmax(projected))
    marks = [(best_m - 0.2, measured[best_m], "*", "measured best"),
             (best_p + 0.2, projected[best_p], "v", "projected best")]
    if sweep.agent is not None and sweep.agent.get("index") is not None:   # "no pick" has no marker
        chosen = [r.index for r in ranked].index(sweep.agent["index"])
        marks.append((chosen, max(measured[chosen], projected[chosen]) + 0.07 * top, "D",
                      f"agent pick ({sweep.agent['source']})"))
    for position, height, marker, label in marks:
        ax.plot(position, height + 0.05 * top, marker=marker, color="black", ls="none", ms=8, label=label)
    ax.set_ylim(0, top * 1.25)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel(unit)
    tau = "-" if sweep.kendall_tau is None else f"{sweep.kendall_tau:.2f}"
    ax.set_title(f"{sweep.name}\nKendall tau {tau}, top-1 {'yes' if sweep.top1 else 'no'}, "
                 f"regret {sweep.regret:.1%}", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return _save(fig, path)


def _run_labels(runs: Sequence[RunScore]) -> list[str]:
    """Label each run by its index and the config keys that differ within the sweep, one per line."""
    configs = [{**(r.fill or {}), **r.config} for r in runs]
    keys = sorted({k for c in configs for k in c if any(c.get(k) != o.get(k) for o in configs)})
    return ["\n".join([f"run {run.index}", *(f"{k}={_short(config.get(k))}" for k in keys)])
            for run, config in zip(runs, configs, strict=True)]


def _short(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)
