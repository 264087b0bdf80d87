"""`projtune tune "REQUEST"` (one-shot) and `projtune chat` (multi-turn, persisted sessions): the tuning agent.

Progress goes to stderr (a status line on a terminal, one line per round otherwise); the answer
goes to stdout (tables, or one TuneReport JSON object with --json).  Exit codes of tune: 0 a
layout, 1 nothing fits, 2 a question back (unknown or missing names, empty request) or bad flags.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from projtune.anchor_input import AnchorOpt
from projtune.commands.search_cmd import DomainOpt, HostOpOpt, PackedOpt
from projtune.errors import USAGE_EXIT, fail, user_errors
from projection.errors import nearest
from projection.vocabulary import LAUNCH_FRAMEWORKS as FRAMEWORKS
from tools.json_out import json_text

OfflineOpt = Annotated[bool, typer.Option("--offline", help="Use the offline policy even if an LLM is configured.")]
RoundsOpt = Annotated[int | None, typer.Option("--rounds", min=1, max=20, help="Most proposal rounds (default 3).")]
FrameworkOpt = Annotated[str, typer.Option(
    "--framework", help="Launch framework: only layouts it can run are searched and its launch config is written: "
                        f"{' | '.join(FRAMEWORKS)} (a framework named in the request wins).")]
TuneFrameworkOpt = Annotated[str | None, typer.Option(
    "--framework", show_default="megatron",
    help="Launch framework: only layouts it can run are searched and its launch config is written: "
         f"{' | '.join(FRAMEWORKS)} (a framework named in the request wins; where they differ, the report's "
         "assumptions say so).")]
_FLAG_WINS = "; the report's assumptions say so where the request text names another)"
TuneNicsOpt = Annotated[int | None, typer.Option(
    "--nics", min=1, max=64, help="Scale-out NICs per node (default: the GPU's catalog node; wins over NICs per node "
                                  "the request text names" + _FLAG_WINS)]
TuneNicGbpsOpt = Annotated[float | None, typer.Option(
    "--nic-gbps", min=0.001, max=1e5, help="Line rate of one NIC, Gbit/s (default: the catalog's; wins over a NIC "
                                           "rate the request text names" + _FLAG_WINS)]
FLAG_OF_FIELD = {"nics_per_node": "--nics", "nic_gbps": "--nic-gbps", "nvlink_domain": "--nvlink-domain",
                 "packed_document_tokens": "--packed-document-tokens", "host_op_s": "--host-op-s"}
"""The request fields a `tune` flag sets (the flag wins over the request text, and the report says so)."""
BaseUrlOpt = Annotated[str | None, typer.Option("--llm-base-url", help="OpenAI-compatible endpoint; the LLM policy "
                                                   "runs only when this or PROJTUNE_LLM_BASE_URL is set "
                                                   "(OPENAI_* variables are never read).")]
ModelOpt = Annotated[str | None, typer.Option("--llm-model", help="Model name (env PROJTUNE_LLM_MODEL).")]
KeyOpt = Annotated[str | None, typer.Option("--llm-api-key", help="API key (env PROJTUNE_LLM_API_KEY).")]
TimeoutOpt = Annotated[float | None, typer.Option("--llm-timeout", help="Wall-clock seconds per LLM request "
                                                  "(env PROJTUNE_LLM_TIMEOUT, 20).")]
DeadlineOpt = Annotated[float | None, typer.Option("--llm-deadline", help="Seconds for all LLM requests of one tune "
                                                   "or chat turn (env PROJTUNE_LLM_DEADLINE, 30).")]
ContextOpt = Annotated[int | None, typer.Option("--llm-context", help="The model's context window in tokens: "
                                                "prompts are fitted below it (env PROJTUNE_LLM_CONTEXT, 8192).")]


class _Progress:
    """Progress on stderr without a refresh thread (so the layout search may still fork workers)."""

    def __init__(self, enabled: bool) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.enabled = enabled
        self.live = enabled and self.console.is_terminal
        self.round, self.scored, self.trials = 0, 0, 0
        self.search = ""
        self._last = 0.0
        self._status: Any = None

    def __enter__(self) -> _Progress:
        if self.live:
            from rich.live import Live

            self._status = Live("parsing the request", console=self.console, auto_refresh=False, transient=True,
                                redirect_stdout=False, redirect_stderr=False)
            self._status.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.stop()

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if event == "seed":                       # a new tuning run (chat: one per turn)
            self.round, self.scored, self.trials, self.search = 0, 0, 0, ""
        elif event == "round":
            self.round = data["round"]
        elif event == "trial":
            self.trials += 1
            self.scored += data.get("status") == "scored"
        elif event == "search":
            self.search = f", search {data['done']:,}/{data['total']:,} layouts"
        elif event == "reflect" and not self.live:
            stop = f": stop, {data['stop']}" if data.get("stop") else ""
            self.console.print(f"round {data['round']}: {self.scored} of {self.trials} trials scored{stop}")
        if self.live and (time.monotonic() - self._last > 0.1 or event != "search"):
            self._last = time.monotonic()
            self._status.update(f"[bold]tuning[/] round {self.round}: {self.scored} of {self.trials} trials scored"
                                f"{self.search}", refresh=True)


class _TrialLog:
    """``tune --log FILE``: one JSON line per trial, appended as the trial is scored (a kill keeps every line
    written; projtune/atomic_output.py), then the file replaced whole by the final history (same rows, in order)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.writer: Any = None
        self.written = 0

    def __enter__(self) -> _TrialLog:
        if self.path is not None:
            from projtune.atomic_output import JsonLines

            self.writer = JsonLines(self.path, json_text)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.writer is not None:
            self.writer.close()

    def wrap(self, progress: Any) -> Any:
        """The progress reporter that also logs each trial event's trial."""
        if self.writer is None:
            return progress

        def report(event: str, data: dict[str, Any]) -> None:
            if event == "trial" and isinstance(data.get("trial"), dict):
                from agent.run import trial_log_rows

                self.writer.write(trial_log_rows([data["trial"]])[0])
                self.written += 1
            progress(event, {k: v for k, v in data.items() if k != "trial"})

        return report

    def finish(self, rows: list[dict[str, Any]]) -> None:
        """Replace the streamed file by the final history (atomically: a temporary file renamed over it)."""
        if self.path is None:
            return
        import os

        staged = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        staged.write_text("".join(json_text(row) + "\n" for row in rows))
        os.replace(staged, self.path)


def _policy(offline: bool, base_url: str | None, model: str | None, api_key: str | None, timeout: float | None,
            deadline: float | None, context: int | None) -> Any:
    from agent.policies import make_policy

    return make_policy(offline=offline, llm_base_url=base_url, llm_model=model, llm_api_key=api_key,
                       llm_timeout=timeout, llm_deadline=deadline, llm_context=context)


def flag_vs_text_notes(parsed: Any, given: dict[str, Any], framework: str | None) -> list[str]:
    """One note per flag whose value differs from what the request text said (``given``: request field -> the
    flag's value; ``framework``: --framework when given), naming the value used: a flag wins over the text, a
    framework the text names wins over --framework.  Never a silent override."""
    from tools.framework_rules import launch_framework_of

    notes = []
    for field_name, value in given.items():
        said = getattr(parsed, field_name, None)
        if said is not None and said != value:
            notes.append(f"{FLAG_OF_FIELD.get(field_name, field_name)} {value:g} used; the request text said "
                         f"{said:g} ({field_name}; a flag wins over the request text)")
    named = parsed.framework if "framework" not in parsed.assumed else None
    if framework is not None and named is not None and (launch_framework_of(named) or named) != framework:
        notes.append(f"framework: {named} (named in the request) used, not --framework {framework} (a framework "
                     "named in the request wins over --framework)")
    return notes


def _request(policy: Any, text: str, constraints: list[str], top: int | None,
             flags: dict[str, Any] | None = None, plan: tuple[float | None, float | None] = (None, None),
             framework: str | None = None) -> tuple[Any, str | None]:
    """(the typed request with flags merged (the network, packed documents), or the Clarification to answer with;
    why the LLM's reading fell back, if it did).  ``plan`` = (--tokens, --deadline seconds): with both and no GPU
    count, the cluster is sized for them.  ``framework``: --framework when given.  A flag that differs from the
    request text is noted in the request's notes (:func:`flag_vs_text_notes`)."""
    from agent.text.constraints_text import merge_constraints
    from agent.text.request import Clarification, size_when_planned
    from agent.space import LayoutSpace
    from tools.constraints import Constraints

    read = policy.read(text)
    parsed = size_when_planned(read.result, text, *plan)
    if isinstance(parsed, Clarification):
        return parsed, read.degraded_reason
    Constraints.parse(constraints)   # a bad --constraint is a usage error (exit 2)
    update: dict[str, Any] = {"constraints": merge_constraints(parsed.constraints, constraints)}
    if top is not None:
        update["top_k"] = top
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    update.update(given)                                                      # flags win over the text
    notes = flag_vs_text_notes(parsed, given, framework)
    if notes:   # the parser's 'network: 4 NICs per node ... (as said)' gives way to the note of the flag that won
        overridden = any(n.startswith(("--nics ", "--nic-gbps ")) for n in notes)
        update["notes"] = [*(n for n in parsed.notes if not (overridden and n.startswith("network:"))), *notes]
    request = type(parsed).model_validate({**parsed.model_dump(), **update})
    LayoutSpace(request)                     # unknown names / bad constraints raise here (exit 2)
    return request, read.degraded_reason


def _print_report(report: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    probe = Console()
    out = probe if probe.is_terminal else Console(width=160)   # pipes and logs: keep table rows on one line
    r = report.request or {}
    out.print(f"[bold]{r.get('model')}[/] on {r.get('num_gpus')} x {r.get('gpu')} "
              f"({r.get('gpus_per_node')}/node), gbs {r.get('gbs')}, seq {r.get('seq_len')}"
              + (f", constraints: {', '.join(r['constraints'])}" if r.get("constraints") else ""))
    for line in report.assumptions:
        out.print(f"[dim]{line}[/]")
    if report.llm_endpoint:
        out.print(f"LLM: {report.llm_endpoint}", markup=False, highlight=False)
    if report.degraded:
        out.print(f"[yellow]degraded:[/] {report.degraded_reason}")
    from agent.report import tool_error_lines

    for line in tool_error_lines(report):
        out.print(line, style="red", markup=False, highlight=False)
    if report.best is None:
        out.print(f"[bold red]no layout:[/] {report.message}")
        return
    from agent.decide import mfu_text
    from agent.planning import plan_lines

    best = report.best
    out.print(f"[bold green]Best layout:[/] {escape(best.layout)}"
              + (f", recomputes {' + '.join(best.recompute_modules)}" if best.recompute_modules else ""))
    out.print(f"  {mfu_text(best.model_dump())}")
    if report.recompute:
        rc = report.recompute
        sel = rc.get("best_selective")
        out.print(f"  recompute: {rc['best']}; searched {len(rc['considered'])} variants ("
                  + "; ".join(rc["considered"]) + ")"
                  + (f"; best selective #{sel['rank']} {sel['recompute']} at {sel['tokens_per_sec_per_gpu']:,.0f} "
                     f"tok/s/GPU" if sel else f"; {rc.get('best_selective_note', '')}"),
                  markup=False, highlight=False)
    if best.memory_warning:
        out.print(f"  [yellow]memory:[/] {best.memory_warning}")
    table = Table(title="Ranked layouts (scored by the projection tools; 80% interval from projection/uncertainty)")
    for name in ("#", "layout", "tok/s/GPU", "80% interval", "MFU GEMM peak", "MFU BF16 peak", "peak GiB",
                 "headroom", "bottleneck", "from"):
        table.add_column(name, justify="left" if name in ("layout", "bottleneck", "from") else "right",
                         no_wrap=name != "layout")
    for row in report.top5:
        modules = f" [{'+'.join(row.recompute_modules)}]" if row.recompute_modules else ""
        band = (f"{row.tokens_per_sec_per_gpu_low:,.0f}-{row.tokens_per_sec_per_gpu_high:,.0f}"
                if row.tokens_per_sec_per_gpu_low else "-")
        table.add_row(str(row.rank), escape(row.layout + modules), f"{row.tokens_per_sec_per_gpu:,.0f}", band,
                      f"{row.mfu_gemm or row.mfu:.1%} ({row.gemm_precision or 'bf16'})", f"{row.mfu:.1%}",
                      f"{row.peak_memory_gib:.1f}", f"{row.headroom_fraction:.0%}", row.bottleneck, row.source)
    out.print(table)
    if report.anchoring:
        out.print(f"[bold]Anchored[/]: {report.anchoring['summary']}", markup=True, highlight=False)
    if best.band_reasons:
        out.print("[bold]Band[/]: the 80% interval of #1 is wide: " + escape("; ".join(best.band_reasons)),
                  highlight=False)
    if report.decision:
        out.print(f"[bold]Decision[/]: {report.decision}")
    _print_benchmark_plan(out, report.benchmark_plan)
    for line in plan_lines(report.plan):
        out.print(f"[bold]Plan[/]: {line}")
    out.print("[bold]Why it wins[/]")
    for line in report.why:
        out.print(f"  {line}")
    if report.explanation:
        out.print(f"[bold]Explanation[/] ({report.policy} policy)\n{report.explanation}")
    if report.launch_config and "text" in report.launch_config:
        out.print(f"[bold]Launch config[/] ({report.launch_config['framework']})")
        out.print(report.launch_config["text"], markup=False, highlight=False)
    for note in report.notes:
        out.print(f"[dim]note: {note}[/]")
    out.print(f"[dim]{report.trials} trials ({report.trials_scored} scored) in {report.rounds} rounds; "
              f"{report.stop_reason}[/]")


def _print_benchmark_plan(out: Any, plan: dict[str, Any] | None) -> None:
    """The benchmark plan of a near-tie: runs, launch commands, what they decide, how to give them back."""
    if not plan:
        return
    out.print(f"[bold]Benchmark plan[/] ({plan['reason']})", highlight=False)
    for i, run in enumerate(plan["runs"], start=1):
        out.print(f"  run {i}: {run['layout']} on {run['num_gpus']} GPUs ({run['num_layers']} layers) for "
                  f"'{run['target_layout']}': {run['reduction']}; about {run['expected_minutes']:.0f} min for "
                  f"30 steps ({run['projected_step_s']:.2f} s/step projected)", markup=False, highlight=False)
        out.print(f"    {run['framework']} launch: {run['launch_config'].get('filename') or ''}", markup=False,
                  highlight=False)
        out.print("    " + run["launch_config"]["text"].strip().replace("\n", "\n    "), markup=False, highlight=False)
    out.print(f"  decides: {plan['decides']}", markup=False, highlight=False)
    out.print(f"  then: {plan['then']}", markup=False, highlight=False)
    for line in plan["skipped"]:
        out.print(f"  [yellow]no 1-node run[/]: {line}", highlight=False)


@user_errors
def tune_command(
    request: Annotated[str, typer.Argument(help='What to tune, e.g. "tune Mixtral 8x7B for 64 MI300X".')] = "",
    offline: OfflineOpt = False,
    rounds: RoundsOpt = None,
    top: Annotated[int | None, typer.Option("--top", "-k", min=1, max=50, help="Layouts to rank (default 5).")] = None,
    constraint: Annotated[list[str] | None, typer.Option("--constraint", "-C", help="Axis rule, repeatable: "
                          "'tp<=8', 'precision=bf16', 'pp in 1,2,4', 'headroom>=10%'.")] = None,
    framework: TuneFrameworkOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the TuneReport as one JSON object.")] = False,
    log: Annotated[Path | None, typer.Option("--log", help="Write the trial history here (JSONL).")] = None,
    benchmark: Annotated[bool, typer.Option("--benchmark", help="Measure the top layouts on a local GPU.")] = False,
    tokens: Annotated[str | None, typer.Option("--tokens", help="Token budget to plan for: days and GPU-hours "
                                                "(e.g. 15T, 300B; decimal suffixes).")] = None,
    deadline: Annotated[str | None, typer.Option("--deadline", help="Deadline to plan for: the smallest GPU count "
                                                  "that meets it with --tokens (e.g. 30d, 12h, 2w).")] = None,
    llm_base_url: BaseUrlOpt = None, llm_model: ModelOpt = None, llm_api_key: KeyOpt = None,
    llm_timeout: TimeoutOpt = None, llm_deadline: DeadlineOpt = None, llm_context: ContextOpt = None,
    nics: TuneNicsOpt = None, nic_gbps: TuneNicGbpsOpt = None, nvlink_domain: DomainOpt = None,
    packed_document_tokens: PackedOpt = None,
    anchor: AnchorOpt = None,
    host_op_s: HostOpOpt = None,
) -> None:
    """Find the best training layout for a request: seed trials, proposals, projections, ranking, report."""
    from projection.module_heap import loading_modules

    with loading_modules():   # the agent, its tools and the engine, loaded for good (projection/module_heap.py)
        from agent.planning import parse_duration, parse_tokens
        from agent.report import TuneReport
        from agent.run import trial_log_rows, tune
        from agent.state import RunOptions
        from agent.text.request import Clarification

    framework_flag = framework
    framework = framework or "megatron"
    _check_framework(framework)
    budget_tokens = parse_tokens(tokens) if tokens else None
    deadline_s = parse_duration(deadline) if deadline else None
    policy = _policy(offline, llm_base_url, llm_model, llm_api_key, llm_timeout, llm_deadline, llm_context)
    with _Progress(enabled=True) as progress, _TrialLog(log) as trial_log:
        parsed, parse_fallback = _request(policy, request, constraint or [], top,
                                          {"nics_per_node": nics, "nic_gbps": nic_gbps, "nvlink_domain": nvlink_domain,
                                           "packed_document_tokens": packed_document_tokens,
                                           "host_op_s": host_op_s},
                                          (budget_tokens, deadline_s), framework_flag)
        if anchor and not isinstance(parsed, Clarification):
            from projtune.anchor_input import read_cli_anchors

            from tools.anchoring import check_anchor_gpu

            anchors = read_cli_anchors(anchor, gpu=parsed.gpu)
            for run in anchors:       # a wrong --anchor file is a usage error, before any trial runs
                check_anchor_gpu(run, parsed.gpu)
            parsed = parsed.model_copy(update={"anchors": [a.model_dump(mode="json") for a in anchors]})
        if isinstance(parsed, Clarification):
            answer = TuneReport(status="clarification", clarification=parsed.model_dump(), message=parsed.question,
                                policy=policy.name, llm_endpoint=getattr(policy, "endpoint", None),
                                degraded=bool(parse_fallback), degraded_reason=parse_fallback)
        else:
            outcome = tune(request=parsed, policy=policy, budget={"max_rounds": rounds} if rounds else None,
                           options=RunOptions(framework=framework, allow_benchmark=benchmark,
                                              progress=trial_log.wrap(progress), tokens=budget_tokens,
                                              deadline_s=deadline_s))
            answer = outcome.report
            trial_log.finish(trial_log_rows(outcome.trials))
    if as_json:
        typer.echo(json_text(answer.model_dump(mode="json")))
    elif answer.status == "clarification":
        if answer.degraded:
            print(f"degraded: {answer.degraded_reason}", file=sys.stderr)
        print(f"question: {answer.message}", file=sys.stderr)
    else:
        _print_report(answer)
    if answer.status == "clarification":
        raise typer.Exit(USAGE_EXIT)
    if answer.status == "no_fit":
        raise typer.Exit(1)


def _read_anchor_dicts(paths: list[str], gpu: str) -> list[dict[str, Any]]:
    """Chat's reader of the runs a user points at (evals/anchor_read.py), as AnchorRun dicts."""
    from projtune.anchor_input import read_cli_anchors

    return [a.model_dump(mode="json") for a in read_cli_anchors(paths, gpu=gpu)]


@user_errors
def chat_command(
    session: Annotated[str | None, typer.Option("--session", "-s", help="Session name: resume it, or start "
                                                   "it (default: a new timestamped session).")] = None,
    offline: OfflineOpt = False,
    rounds: RoundsOpt = None,
    framework: FrameworkOpt = "megatron",
    llm_base_url: BaseUrlOpt = None, llm_model: ModelOpt = None, llm_api_key: KeyOpt = None,
    llm_timeout: TimeoutOpt = None, llm_deadline: DeadlineOpt = None, llm_context: ContextOpt = None,
    list_all: Annotated[bool, typer.Option("--list", help="List the saved sessions and exit.")] = False,
) -> None:
    """Talk to the tuner: a request, then follow-ups ('what if I only have 32?', 'why not TP 8?', 'export it')."""
    from agent.text.followups import HELP
    from agent.text.session import ChatSession, list_sessions
    from agent.state import RunOptions

    if list_all:
        names = list_sessions()
        typer.echo("\n".join(names) if names else "no saved sessions")
        return
    _check_framework(framework)
    policy = _policy(offline, llm_base_url, llm_model, llm_api_key, llm_timeout, llm_deadline, llm_context)
    name = ChatSession.new_name(list_sessions()) if session is None else session   # "" is refused, not "new"
    interactive = sys.stdin.isatty()
    progress = _Progress(enabled=True)
    progress.live = False            # one line per round on stderr: a live status line would fight the prompt
    with ChatSession(name, policy, options=RunOptions(framework=framework, progress=progress,
                                                      read_anchors=_read_anchor_dicts),
                     budget={"max_rounds": rounds} if rounds else None) as chat:
        if chat.notice:
            print(f"warning: {chat.notice}", file=sys.stderr)
        saved = chat.values()
        if saved.get("turns"):
            last = saved.get("request") or {}
            about = f"; last request: {last.get('model')} on {last.get('num_gpus')} x {last.get('gpu')}" if last else ""
            print(f"resumed session {name} ({len(saved['turns'])} turns{about})", file=sys.stderr)
        else:
            llm = f", LLM {policy.endpoint}" if getattr(policy, "endpoint", None) else ""
            print(f"session {name} ({policy.name} policy{llm}); resume later with --session {name}. {HELP}",
                  file=sys.stderr)
        while True:
            if interactive:
                print("> ", end="", file=sys.stderr, flush=True)
            line = sys.stdin.readline()
            if not line:
                break
            text = line.strip()
            if text.lower() in ("exit", "quit", "bye", ":q"):
                break
            if not text:
                continue
            typer.echo(chat.ask(text))
            typer.echo("")


def register(app: typer.Typer) -> None:
    """Add `tune` and `chat` to the CLI."""
    app.command("tune")(tune_command)
    app.command("chat")(chat_command)


def _check_framework(framework: str) -> None:
    """`tune` / `chat` --framework: a launch framework, else one line with the nearest name."""
    if framework not in FRAMEWORKS:
        near = nearest(framework.lower(), list(FRAMEWORKS))
        fail(f"--framework: '{framework}' is not one of {', '.join(FRAMEWORKS)}"
             + (f"; did you mean '{near}'?" if near else ""))
