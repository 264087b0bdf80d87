"""`projtune eval`, `projtune calibrate` and `projtune sweeps import|validate`: thin commands over evals/."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from projtune.errors import USAGE_EXIT, fail, user_errors
from tools.json_out import json_text

if TYPE_CHECKING:
    from evals.eval_run import EvalResult

PathsArg = Annotated[list[Path], typer.Argument(help="Sweep files or folders (searched for *.yaml).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]

sweeps_app = typer.Typer(help="Measured sweep files: import training logs, validate files.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add the eval, calibrate and sweeps commands to the projtune app."""
    app.command("eval")(eval_command)
    app.command("calibrate")(calibrate_command)
    app.add_typer(sweeps_app, name="sweeps")


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


@user_errors
def eval_command(
    paths: PathsArg,
    as_json: JsonOpt = False,
    report: Annotated[Path | None, typer.Option("--report", help="Write report.md and PNG plots here.")] = None,
    sweep: Annotated[list[str] | None, typer.Option("--sweep", help="Sweep name or pattern (repeatable).")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="Only sweeps on this hardware id (or family).")] = None,
    agent: Annotated[bool, typer.Option("--agent", help="Ask the tuner to pick each rankable sweep's best.")] = False,
    profile: Annotated[Path | None, typer.Option(
        "--profile", help="Device profile file for all runs, or a folder of <hardware id|family>.yaml.")] = None,
    fill_unknown: Annotated[bool, typer.Option(
        "--fill-unknown", help="Fill incomplete runs' missing keys with the best legal values.")] = False,
    measured: Annotated[Path | None, typer.Option(
        "--measured", help="Folder of measurement files: measured mode for runs whose model and per-GPU slice "
                           "were measured; other runs are skipped with the reason.")] = None,
    anchor_one: Annotated[bool, typer.Option(
        "--anchor-one", help="Score anchored projections: each run with one other run of its sweep as anchor, and "
                             "each scaling series restored from its smallest-scale run (projection/anchor.py).")
    ] = False,
    bands_out: Annotated[Path | None, typer.Option(
        "--bands-out", help="With --anchor-one: write the anchored-band table "
                            "(projection/catalog/uncertainty/anchored_bands.yaml) from every pair's residual.")] = None,
) -> None:
    """Project every measured run and score the projections (APE, ranking, memory, OOM, baselines)."""
    from evals.eval_run import EvalOptions, evaluate

    options = EvalOptions(sweeps=tuple(sweep or ()), gpu=gpu, profile=profile, fill_unknown=fill_unknown,
                          agent=agent, measured=measured)
    if bands_out is not None and not anchor_one:
        fail("--bands-out needs --anchor-one (it writes the anchored-band table)")
    if anchor_one:
        _anchor_one(paths, options, as_json, bands_out)
        return
    if measured is not None:
        from bench.measured_set import MeasurementSet

        plumbing = MeasurementSet(measured).plumbing
        if plumbing:
            _stderr_console().print(f"[yellow]warning[/]: {len(plumbing)} measurement file(s) in {measured} are NOT "
                                    "REPRESENTATIVE (CPU plumbing / shrunk shapes): the scores test the code path only")
    result = evaluate(paths, options) if as_json else _evaluate_with_progress(paths, options)
    if not result.sweeps:         # nothing scored: one line, no empty summary table or JSON, no report folder
        fail("no sweep to evaluate" + (f": {result.load_issues[0]}" if result.load_issues else ""))
    if report is not None:
        written = write_report_atomically(result, report)
        _stderr_console().print(f"report: {written[0]} and {len(written) - 1} plots")
    if as_json:
        typer.echo(json_text(result.to_dict()))
    else:
        _print_eval(result)


def _anchor_one(paths: list[Path], options: Any, as_json: bool, bands_out: Path | None) -> None:
    """`projtune eval --anchor-one`: anchored vs unanchored, in-sweep and restore from the smallest scale, with
    leave-one-source-out profiles (held-out, the main figure) and with the shipped ones (in-sample)."""
    from evals.anchor_eval import evaluate_anchored

    result = evaluate_anchored(paths, options, progress=None if as_json else _stderr_console().print)
    if not result.runs:
        fail("no scored run to anchor: give sweep files with complete runs that measured a throughput")
    data = result.to_dict()
    if bands_out is not None:
        from projection.uncertainty import build_anchored_table, write_anchored_table

        main = result.main
        table = build_anchored_table([(cls, ratio) for _, cls, ratio in main.residuals()],
                                     coverage=main.band_spreads.get("same-scale", 0.8),
                                     scale_out_coverage=main.band_spreads.get("scale-out"),
                                     weights=tuple(main.weights.values()),
                                     written=f"projtune eval {' '.join(map(str, paths))} --anchor-one "
                                             f"({main.setting} profiles)")
        _stderr_console().print(f"anchored bands: {write_anchored_table(table, bands_out)}")
    if as_json:
        typer.echo(json_text(data))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for name, setting in data["settings"].items():
        label = ("leave-one-source-out profiles: the job's source not fitted (main)" if name == "held-out"
                 else "shipped profiles, fitted on these sweeps (in-sample)")
        weights = ", ".join(f"{g} {w['weight']:.2f} ({w['pairs']} pairs)" for g, w in setting["shared_weights"].items())
        table = Table(title=f"Anchored projections, {label}: {data['series']} series, {data['scaling_series']} span "
                            f"2+ scales; shared-error weights {weights}")
        for col in ("evaluation", "pairs", "targets", "MAPE anchored", "MAPE unanchored (same pairs)", "coverage",
                    "top-1 anchored", "top-1 unanchored"):
            table.add_column(col)
        for row_label, key in (("in-sweep (one other run)", "in_sweep"),
                               ("restore from smallest scale", "restore_from_smallest")):
            row = setting[key]
            table.add_row(row_label, str(row["pairs"]), str(row["targets"]), _pct(row["mape_anchored"]),
                          f"{_pct(row['mape_unanchored'])} ({_pct(row['mape_unanchored_pairs'])})",
                          _pct(row["coverage_anchored"]), _pct(row.get("top1_anchored")),
                          _pct(row.get("top1_unanchored")))
        console.print(table)
        floor = setting["in_sweep"].get("mape_one_factor_floor")
        if floor is not None:
            console.print(f"in-sweep MAPE with the best single factor per sweep chosen in hindsight (no shared "
                          f"correction beats it): {_pct(floor)}")
    for key in ("in_sweep", "restore_from_smallest"):
        per = Table(title=f"{key} by source ({data['main_setting']})")
        for col in ("source", "pairs", "MAPE anchored", "MAPE unanchored", "coverage"):
            per.add_column(col)
        for name, row in data["by_source"][key].items():
            per.add_row(name, str(row["pairs"]), _pct(row["mape_anchored"]), _pct(row["mape_unanchored_pairs"]),
                        _pct(row["coverage_anchored"]))
        console.print(per)


def _report_file(relative: Path) -> bool:
    """Whether a file inside a --report folder is one an earlier report wrote (report.md, PNG plots)."""
    return relative.name == "report.md" or relative.suffix == ".png"


def write_report_atomically(result: EvalResult, folder: Path) -> list[Path]:
    """Write the report into a fresh sibling folder and swap it in whole (projtune/atomic_output.py): a kill
    leaves the old report or the complete new one; a folder holding other files is refused."""
    from evals.report import write_report
    from projtune.atomic_output import replace_dir

    def fill(staging: Path) -> list[Path]:
        return [p.relative_to(staging) for p in write_report(result, staging)]

    return [folder / p for p in replace_dir(folder, fill, owned=_report_file, what="--report folder")]


def _evaluate_with_progress(paths: list[Path], options: Any) -> EvalResult:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from evals.eval_run import evaluate

    console = _stderr_console()
    if not console.is_terminal:   # a bar on a pipe or file would only leave a blank line on stderr
        return evaluate(paths, options)
    columns = (TextColumn("projecting runs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("eval", total=None)
        return evaluate(paths, options, progress=lambda done, total: bar.update(task, completed=done, total=total))


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.1%}" if signed else f"{value:.1%}"


def _num(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _print_eval(result: EvalResult) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    s = result.summary()
    head = Table(title="Eval summary", show_header=False)
    for label, value in (
        ("runs scored / total", f"{s['runs_scored']} / {s['runs']} ({s['runs_skipped']} skipped, "
                                f"{s['runs_incomplete']} incomplete, {s['runs_filled']} filled)"),
        ("MAPE / median APE", f"{_pct(s['mape'])} / {_pct(s['median_ape'])}"),
        ("bias (+ = optimistic)", _pct(s["bias"], signed=True)),
        ("memory MAPE", f"{_pct(s['memory_mape'])} on {s['memory_runs']} runs"),
        ("OOM recall", f"{_pct(s['oom_recall'])} of {s['oom_runs']} measured OOM runs"),
        ("rankable sweeps", str(s["rankable_sweeps"])),
        ("Kendall tau / Spearman", f"{_num(s['kendall_tau_mean'])} / {_num(s['spearman_mean'])}"),
        ("top-1 rate / mean regret", f"{_pct(s['top1_rate'])} / {_pct(s['regret_mean'])}"),
        ("80% band coverage", _pct(s["interval_coverage"])),
    ):
        head.add_row(label, value)
    for name, g in (s.get("interval_by_novelty") or {}).items():
        head.add_row(f"  band, {name}", f"{_pct(g['coverage'])} of {g['runs']} runs, median width "
                                        f"{_pct(g['median_width'])}")
    if s["agent"]:
        head.add_row("agent top-1 / regret", f"{_pct(s['agent']['top1_rate'])} / {_pct(s['agent']['regret_mean'])}")
    for name, b in s["baselines"].items():
        head.add_row(f"baseline {name}", f"{_pct(b['mape'])} vs ours {_pct(b['ours_mape_same_runs'])} "
                                         f"on {b['runs']} runs")
    console.print(head)
    data = result.to_dict()
    groups = Table(title="By GPU")
    for col in ("gpu", "runs", "MAPE", "bias"):
        groups.add_column(col)
    for name, g in data["by_gpu"].items():
        groups.add_row(name, str(g["runs"]), _pct(g["mape"]), _pct(g["bias"], signed=True))
    console.print(groups)
    ranked = Table(title="Rankable sweeps")
    ranked.add_column("sweep", overflow="fold")
    for col in ("runs", "MAPE", "tau", "top-1", "regret", "agent"):
        ranked.add_column(col, justify="right")
    for sw in result.sweeps:
        if sw.rank_metric is not None:
            ranked.add_row(sw.name, f"{sw.runs_scored}/{sw.runs}", _pct(sw.mape), _num(sw.kendall_tau),
                           "yes" if sw.top1 else "no", _pct(sw.regret), _pct(sw.agent["regret"]) if sw.agent else "-")
    console.print(ranked)
    _print_skipped(console, result)
    err = _stderr_console()
    for issue in result.load_issues:
        err.print(f"[yellow]load issue[/]: {issue}", highlight=False)


def _print_skipped(console: Any, result: EvalResult) -> None:
    """List runs skipped for a reason other than missing keys; count the incomplete ones."""
    from rich.table import Table

    incomplete = [r for r in result.runs if r.skipped and r.skipped.startswith("incomplete: missing")]
    other = [r for r in result.runs if r.skipped and r not in incomplete]
    if other:
        table = Table(title="Skipped runs")
        table.add_column("sweep", overflow="fold")
        table.add_column("run", justify="right")
        table.add_column("reason", overflow="fold")
        for run in other:
            table.add_row(run.sweep, str(run.index), run.skipped)
        console.print(table)
    if incomplete:
        console.print(f"{len(incomplete)} incomplete runs skipped (missing keys; --fill-unknown fills them)")


# ---- calibrate ----------------------------------------------------------------------------------

@user_errors
def calibrate_command(
    paths: PathsArg,
    gpu: Annotated[str | None, typer.Option("--gpu", help="Fit on this hardware id's runs.")] = None,
    family: Annotated[str | None, typer.Option("--family", help="Fit on a whole family's runs.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Profile file to write (default: stdout).")] = None,
    cross_validate: Annotated[bool, typer.Option(
        "--cross-validate", help="Leave-one-source-out error (each file is a source).")] = False,
    bands_out: Annotated[Path | None, typer.Option(
        "--bands-out", help="With --cross-validate: write the 80%-interval table "
        "(projection/catalog/uncertainty/bands.yaml) from the held-out residuals.")] = None,
    group_by: Annotated[list[str] | None, typer.Option(
        "--group-by", help="With --cross-validate: hold out one group at a time: source (default), source-family "
        "(evals/source_families.yaml), framework or gpu-family (repeatable; folds training on the same runs share "
        "a fit). --bands-out runs all four.")] = None,
    hold_out: Annotated[list[str] | None, typer.Option(
        "--hold-out", help="With --cross-validate: only hold out the sources whose file name contains this "
        "(repeatable); each fold still fits on every other source. A quick check; figures cover those "
        "sources.")] = None,
    fit_all: Annotated[bool, typer.Option("--all", help="Fit every family with enough runs.")] = False,
    out_dir: Annotated[Path | None, typer.Option("--out-dir", help="With --all: folder for <family>.yaml.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Fit a device profile's free parameters to measured runs (or cross-validate the fit)."""
    from evals import calibrate
    from evals.record_issues import left_out_text
    from evals.sweep_file import load_sweep_files
    from projection.errors import clip

    loaded = load_sweep_files(paths)
    err = _stderr_console()
    if loaded.errors:
        # A fit on part of the data would silently ship different profiles (and a different held-out figure).
        fail(f"{len(loaded.errors)} sweep file(s) did not load, so nothing was fitted: {loaded.errors[0]}"
             + (f" (and {len(loaded.errors) - 1} more)" if len(loaded.errors) > 1 else "")
             + "; fix or remove them and run again")
    if not loaded.sweeps:
        fail(f"no sweep in {', '.join(map(str, paths))}: give sweep files or folders of them "
             "(../shared/specs/sweep-format.md)")
    note = None if as_json else (lambda text: err.print(text, highlight=False))
    _refuse_unused({"--gpu": gpu, "--family": family, "--out": out, "--all": fit_all, "--out-dir": out_dir},
                   "--cross-validate", cross_validate)
    _refuse_unused({"--gpu": gpu, "--family": family, "--out": out}, "--all", fit_all)
    _refuse_unused({"--out-dir": out_dir}, "a fit of one --gpu/--family (it goes with --all)", not fit_all)
    _refuse_unused({"--bands-out": bands_out}, "a fit (it goes with --cross-validate)", not cross_validate)
    if cross_validate:
        _print_cross_validation(calibrate.cross_validate(loaded.sweeps, progress=note, bands_out=bands_out,
                                                         hold_out=hold_out, group_by=group_by or ["source"]),
                                as_json)
        return
    if group_by:
        fail("--group-by goes with --cross-validate (the groups to hold out)")
    if hold_out:
        fail("--hold-out goes with --cross-validate (the sources to hold out)")
    if fit_all:
        if out_dir is None:
            fail("--all needs --out-dir (e.g. projection/catalog/profiles)")
        _print_fit_all(calibrate.calibrate_all(loaded.sweeps, out_dir, progress=note), out_dir, as_json)
        return
    if gpu is None and family is None:
        fail("give --gpu ID or --family NAME (or --all / --cross-validate)")
    runs, left_out = calibrate.fit_runs(loaded.sweeps, gpu=gpu, family=family)
    if not runs:
        from evals.eval_run import hardware_hint

        hints = "".join(hardware_hint(name, loaded.sweeps, kinds=(kind,))
                        for name, kind in ((gpu, "id"), (family, "family")) if name is not None)
        fail(f"no complete scored runs of {gpu or family} in the given files"
             + (f" whose records describe them ({left_out_text(left_out)})" if left_out else hints))
    if note:
        note(f"fitting {gpu or family} on {len(runs)} complete runs")
        if left_out:
            note(left_out_text(left_out))
    result = calibrate.fit_profile(runs, calibrate.start_profile(gpu, family, runs))
    if out is not None:
        calibrate.write_profile(result, out)
    elif not as_json:
        from projection.device_profile import dump_profile

        typer.echo(dump_profile(result.profile), nl=False)
    summary = _fit_summary(result, out)
    if as_json:
        typer.echo(json_text(summary))
    else:
        err.print(f"{summary['hardware_id']}: {summary['runs']} runs, MAPE {_pct(result.mape_before)} -> "
                  f"{_pct(result.mape_after)}" + (f"; wrote {out}" if out else ""), highlight=False)


def _refuse_unused(flags: dict[str, Any], mode: str, active: bool) -> None:
    """Fail when ``mode`` is active and any of ``flags`` was given: it would be ignored silently."""
    given = [flag for flag, value in flags.items() if value not in (None, False)]
    if active and given:
        fail(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} not used with {mode}; drop "
             f"{'it' if len(given) == 1 else 'them'}")


def _fit_summary(result: Any, path: Path | None) -> dict[str, Any]:
    from evals.calibrate import FITTABLE

    return {"hardware_id": result.profile.hardware_id, "runs": result.runs, "mape_before": result.mape_before,
            "mape_after": result.mape_after, "fitted": list(result.fitted),
            "parameters": {n: getattr(result.profile, n) for n in FITTABLE},
            "fitted_on": list(result.profile.fitted_on), "path": str(path) if path else None}


def _print_fit_all(results: dict[str, Any], out_dir: Path, as_json: bool) -> None:
    from evals.calibrate import FitResult

    data = {f: (_fit_summary(r, out_dir / f"{f}.yaml") if isinstance(r, FitResult) else {"skipped": r})
            for f, r in results.items()}
    if as_json:
        typer.echo(json_text(data))
        return
    for family, item in data.items():
        if "skipped" in item:
            typer.echo(f"{family}: {item['skipped']}")
        else:
            typer.echo(f"{family}: {item['runs']} runs, MAPE {_pct(item['mape_before'])} -> "
                       f"{_pct(item['mape_after'])}, wrote {item['path']}")


def _print_cross_validation(cv: dict[str, Any], as_json: bool) -> None:
    from dataclasses import asdict

    if as_json:
        typer.echo(json_text({"sources": [asdict(r) for r in cv["sources"]], "overall": cv["overall"]}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Leave-one-source-out MAPE on held-out runs")
    table.add_column("source (file)", no_wrap=True)
    for col in ("scored runs", "families", "shipped", "fit on rest"):
        table.add_column(col, justify="left" if col == "families" else "right")
    for row in cv["sources"]:
        table.add_row(Path(row.source).stem, str(row.runs) if row.runs_scored == row.runs else
                      f"{row.runs_scored} of {row.runs}", ",".join(row.families), _pct(row.mape_default),
                      _pct(row.mape_cv))
    o = cv["overall"]
    table.add_row("these sources" if o.get("partial") else "overall", str(o["runs"]), "", _pct(o["mape_default"]),
                  _pct(o["mape_cv"]), style="bold")
    Console().print(table)
    if o.get("partial"):
        for item in o["residuals"]:
            typer.echo(f"  {item['measured_over_projected']:.3f} measured/projected  {item['sweep']} #{item['run']}")
    for vendor, item in (o.get("by_vendor") or {}).items():
        typer.echo(f"held-out {vendor.upper()} runs: {item['runs']}, MAPE {_pct(item['mape_cv'])}")
    if o.get("mape_cv_described") is not None:
        typer.echo(f"without the runs evals/data/CHECKS.md says their records cannot describe: "
                   f"{o['runs_described']} runs, MAPE {_pct(o['mape_cv_described'])}"
                   f" (the {o.get('runs_left_out_of_fits', 0)} such runs are scored above but no fold fits on them)")
    if o.get("interval_coverage_cv") is not None:
        typer.echo(f"80%-interval coverage of held-out runs (bands built without their source): "
                   f"{_pct(o['interval_coverage_cv'])}")
    for grouping, entry in (o.get("grouped") or {}).items():
        _print_grouping(grouping, entry)


def _band_text(figures: dict[str, Any]) -> str:
    if not figures.get("runs"):
        return "no runs"
    return f"{_pct(figures['coverage'])} covered, median width {_pct(figures['median_width'])} ({figures['runs']} runs)"


def _print_grouping(grouping: str, entry: dict[str, Any]) -> None:
    """One grouping's held-out MAPE and 80%-band figures (evals.band_build.grouped_summary)."""
    groups = ", ".join(f"{g} {_pct(v['mape'])} ({v['runs']})" for g, v in entry["per_group"].items())
    typer.echo(f"leave-one-{grouping}-out: MAPE {_pct(entry['mape'])} over {entry['runs']} runs; {groups}")
    for name, label in (("nested_band", "band rebuilt without the group"), ("shipped_band", "shipped band")):
        figures = entry.get(name)
        if figures:
            typer.echo(f"  80% {label}: all {_band_text(figures)}; flagged novel {_band_text(figures['flagged'])}; "
                       f"inside the evidence {_band_text(figures['inside'])}")
            for key, item in figures["by_reason"].items():
                typer.echo(f"    novelty {key}: {_band_text(item)}")


# ---- sweeps import / validate -------------------------------------------------------------------

@sweeps_app.command("import")
@user_errors
def import_command(
    logs: Annotated[list[Path], typer.Argument(help="Megatron-LM / Primus or torchtitan log files, one run each.")],
    model: Annotated[str | None, typer.Option("--model", help="Catalog model id (overrides the logs).")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="Hardware id (needed if the logs name none).")] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", help="GPU count (if the logs do not show it).")] = None,
    name: Annotated[str | None, typer.Option("--name", help="Sweep name.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Sweep file to write (default: stdout).")] = None,
) -> None:
    """Turn training logs into one sweep of a sweep file (one run per log)."""
    from evals.log_import import LogImportError, import_logs, render_yaml

    try:
        text = render_yaml(import_logs(logs, model=model, gpu=gpu, num_gpus=gpus, sweep_name=name))
    except LogImportError as err:
        fail(str(err))
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)


@sweeps_app.command("anchors")
@user_errors
def anchors_command(
    files: Annotated[list[str], typer.Argument(help="Training logs, sweep files [#SWEEP[#RUN]], `projtune bench run` "
                                                    "measurements, or folders of them.")],
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU type of logs that name none (Megatron-LM).")] = None,
) -> None:
    """Print the anchors (measured runs) these files hold, as the JSON list the tools' `anchors` argument takes."""
    from evals.anchor_read import read_anchors

    typer.echo(json_text([a.model_dump(mode="json") for a in read_anchors(files, default_gpu=gpu)]))


MAX_ISSUES_SHOWN = 50
"""Most issues `sweeps validate` prints (each cut to 400 characters); the rest are counted."""


@sweeps_app.command("validate")
@user_errors
def validate_command(
    paths: PathsArg,
    check: Annotated[bool, typer.Option("--check", help="Also list values that disagree with each other, the "
                                        "model or the GPU (python -m evals.data_checks); they never fail the run.")]
    = False,
) -> None:
    """Load sweep files and print every issue (exit 2 if there is any)."""
    from evals.sweep_file import load_sweep_files
    from projection.errors import clip

    loaded = load_sweep_files(paths)
    runs = sum(len(s.runs) for s in loaded.sweeps)
    for issue in loaded.errors[:MAX_ISSUES_SHOWN]:
        typer.echo(clip(issue.message, 400))
    if len(loaded.errors) > MAX_ISSUES_SHOWN:
        typer.echo(f"... {len(loaded.errors) - MAX_ISSUES_SHOWN} more issues cut (fix these first)")
    summary = f"{len(loaded.sweeps)} sweeps, {runs} runs, {len(loaded.errors)} issues"
    if check:
        from evals.data_checks import check_consistency

        findings = check_consistency(loaded.sweeps)
        for finding in findings:
            typer.echo(f"suspicious: {finding}")
        summary += f", {len(findings)} suspicious values (compare them with their sources)"
    typer.echo(summary, err=True)
    if loaded.errors:
        raise typer.Exit(USAGE_EXIT)
