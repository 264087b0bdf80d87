"""Plain-text renderings of reports and tool results for chat replies (the CLI adds rich tables for tune)."""

from __future__ import annotations

from typing import Any

from agent.decide import mfu_text
from agent.planning import plan_lines
from agent.report import TuneReport, tool_error_lines


def report_text(report: TuneReport, *, previous: TuneReport | None = None) -> str:
    """A tune report as a chat reply: request, best, top layouts, why, and what changed since the last run."""
    if report.status == "clarification":
        return report.message or "Could you say more?"
    request = report.request or {}
    head = (f"{request.get('model')} on {request.get('num_gpus')} x {request.get('gpu')}, gbs {request.get('gbs')}, "
            f"seq {request.get('seq_len')}" + (f", {', '.join(request['constraints'])}"
                                               if request.get("constraints") else ""))
    lines = [head]
    if report.degraded:
        lines.append(f"(degraded: {report.degraded_reason})")
    lines += tool_error_lines(report)
    if report.best is None:
        lines.append(f"No layout fits: {report.message}")
        return "\n".join(lines)
    b = report.best
    modules = f", recomputes {' + '.join(b.recompute_modules)}" if b.recompute_modules else ""
    lines.append(f"Best: {b.layout}{modules}: {b.tokens_per_sec_per_gpu:,.0f} tok/s/GPU, {mfu_text(b.model_dump())}, "
                 f"{b.peak_memory_gib:.1f} GiB ({b.headroom_fraction:.0%} headroom), bottleneck {b.bottleneck}")
    if b.memory_warning:
        lines.append(f"  memory: {b.memory_warning}")
    for row in report.top5[1:]:
        lines.append(f"  #{row.rank} {row.layout}: {row.tokens_per_sec_per_gpu:,.0f} tok/s/GPU, "
                     f"{mfu_text(row.model_dump())}, {row.headroom_fraction:.0%} headroom, {row.bottleneck}")
    lines += [f"Why: {w}" for w in report.why[:1]]
    if report.decision:
        lines.append(f"Decision: {report.decision}")
    lines += [f"Plan: {line}" for line in plan_lines(report.plan)]
    if previous is not None and previous.best is not None and previous.request:
        lines.append(compare_text(previous, report))
    if report.explanation:      # as `tune` prints it: the policy's text (the LLM's, grounded) and its notes
        by = f"{report.policy} policy" + (f", {report.llm_endpoint}" if report.llm_endpoint else "")
        lines.append(f"Explanation ({by}): {report.explanation}")
    if report.assumptions:
        lines.append("Assumed: " + "; ".join(report.assumptions))
    lines += [f"Note: {note}" for note in report.notes]
    lines.append(f"({report.trials} trials, {report.rounds} rounds; {report.stop_reason})")
    return "\n".join(lines)


def compare_text(before: TuneReport, after: TuneReport) -> str:
    """Per-GPU and whole-job throughput of the new best against the previous one."""
    assert before.best is not None and after.best is not None and before.request and after.request
    per_gpu = after.best.tokens_per_sec_per_gpu / before.best.tokens_per_sec_per_gpu - 1
    job = (after.best.tokens_per_sec_per_gpu * after.request["num_gpus"]) / (
        before.best.tokens_per_sec_per_gpu * before.request["num_gpus"]) - 1
    return (f"Compared with before ({before.request['num_gpus']} x {before.request['gpu']}, best "
            f"{before.best.tokens_per_sec_per_gpu:,.0f} tok/s/GPU): {per_gpu:+.1%} per GPU, {job:+.1%} for the job.")


def memory_text(label: str, result: dict[str, Any]) -> str:
    """check_memory output as lines: verdict, then one line per pipeline stage (GiB)."""
    lines = [f"Memory of {label} {result.get('layout', '')}: peak {result['peak_gib']:.1f} of "
             f"{result['capacity_gib']:.1f} GiB on stage {result['peak_rank']} ({result['verdict']}, "
             f"{result['headroom_fraction']:.0%} headroom)"]
    terms = ("weights", "gradients", "optimizer", "fp8_copies", "activations", "transient", "overhead")
    for stage in result["stages"]:
        parts = ", ".join(f"{t} {stage[f'{t}_gib']:.1f}" for t in terms if stage.get(f"{t}_gib"))
        lines.append(f"  stage {stage['rank']}: {parts}; total {stage['total_gib']:.1f} GiB")
    return "\n".join(lines)
