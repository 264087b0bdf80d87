"""Development runs whose record cannot describe the run, and the fit evidence that leaves them out.

Each entry names a run (sweep name, run index) and the ``evals/data/CHECKS.md`` entry that says why its
record lacks a setting the time model reads (a memory saver the layout cannot run without, a preset NVIDIA
withdrew, the same layout at half the throughput of its neighbouring releases).  The records are copies of
``../shared/data/sweeps`` and are not changed.

Such a run is still *scored* everywhere (the eval, every leave-one-source-out figure, the pooled MAPE), but
it is not *evidence* for a fit: a least-squares fit on a record that describes a different run moves the
shared device and framework parameters to explain the missing setting, and every other run on that silicon
inherits the distortion.  Example (CHECKS.md 29, until entry 39 recorded their ``packed_document_tokens``): the
NeMo 24.07 SFT/LoRA rows attend per ~250-token SQuAD document, but were priced as one causal 4096-token sequence;
fitted on, they made the GH100 group's attention look faster, which the held-out H200 and MI300X MLPerf LoRA
rows (one 8192-token document each) inherited as an 8-12% optimistic projection.  ``projtune calibrate``
(``--all``, ``--gpu``, ``--cross-validate``) fits on :func:`fit_evidence` and says how many runs it left out
and why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from evals.fit import FitRun

DOCUMENTED_RECORD_ISSUES: dict[tuple[str, int], str] = {
    ("megatron-bridge-26.02.01-llama3-70b-gb300-64g-gbs256-s8k", 0): "CHECKS.md 17: PP/VP cells lost",
    ("megatron-bridge-26.02.01-llama3-70b-gb300-64g-gbs256-s8k", 1):
        "CHECKS.md 17: VP lost (printed PP 4, VP n/a, MBS 2; the r0.3.0 preset runs VP 5, MBS 1)",
    ("megatron-bridge-25.11-gpt-oss-120b-b200-64g-gbs512-s4k", 0):
        "CHECKS.md 36: printed EP 8; the 25.11 preset and its throughput are EP 64's",
    **{(name, 0): "CHECKS.md 11: half the throughput of the same layout in the neighbouring releases"
       for name in ("megatron-bridge-25.11-qwen3-30b-a3b-b200-8g-gbs512-s4k",
                    "megatron-bridge-25.11-qwen3-30b-a3b-h100-sxm-16g-gbs512-s4k",
                    "megatron-bridge-26.02-qwen3-30b-a3b-b200-8g-gbs512-s4k",
                    "megatron-bridge-26.02-qwen3-30b-a3b-h100-sxm-16g-gbs1024-s4k")},
    **{(name, 0): "CHECKS.md 24: ran the VP 4 + moe_a2a_overlap preset NVIDIA withdrew on B300 as slower"
       for name in ("megatron-bridge-26.02-qwen3-235b-a22b-b300-256g-gbs8192-s4k",
                    "megatron-bridge-26.02.01-qwen3-235b-a22b-b300-256g-gbs8192-s4k")},
}
"""(sweep name, run index) -> "CHECKS.md <entry>: why the record cannot describe the run"."""


def documented_issue(item: FitRun) -> str | None:
    """The CHECKS.md entry that says why a run's record cannot describe the run (None for most runs)."""
    return DOCUMENTED_RECORD_ISSUES.get((item.sweep.sweep.name, item.run.index))


def checks_entry(item: FitRun) -> str | None:
    """The CHECKS.md entry number of a run's documented record issue ("15"), or None."""
    why = documented_issue(item)
    return why.split(":", 1)[0].removeprefix("CHECKS.md ") if why else None


def fit_evidence(runs: Sequence[FitRun]) -> tuple[list[FitRun], list[FitRun]]:
    """Split ``runs`` into (fitted on, left out): the left-out runs are those with a documented record issue."""
    kept = [r for r in runs if documented_issue(r) is None]
    return kept, [r for r in runs if documented_issue(r) is not None]


def left_out_text(left_out: Sequence[FitRun]) -> str:
    """One line naming how many runs a fit left out, per CHECKS.md entry ("" when none)."""
    if not left_out:
        return ""
    entries = Counter(checks_entry(r) for r in left_out)
    listed = ", ".join(f"{n} (entry {e})" for e, n in sorted(entries.items(), key=lambda kv: int(kv[0])))
    return (f"left {len(left_out)} runs out of the fit, still scored: their records cannot describe the run "
            f"(evals/data/CHECKS.md): {listed}")
