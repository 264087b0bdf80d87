"""`--anchor FILE` of project, memory, search and tune: read measured runs into anchors (evals/anchor_read.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

AnchorOpt = Annotated[list[str] | None, typer.Option(
    "--anchor", help="A measured run of this job that corrects the projection (repeatable): a Megatron-LM / Primus / "
                     "torchtitan training log, a sweep file [#SWEEP[#RUN]], a `projtune bench run` measurement "
                     ".json, or a folder of them. Same GPU type; the model or a reduced-layer proxy of it.")]


def read_cli_anchors(specs: list[str] | list[Path] | None, *, gpu: str) -> list[Any]:
    """The anchors of ``--anchor`` values ([] when none); a log that names no GPU is read as a run on ``gpu``
    (an anchor must be of the target's GPU type), and its label says so.

    Raises:
        ProjtuneError: a file that does not exist or cannot be read as a log, sweep or measurement.
    """
    if not specs:
        return []
    from evals.anchor_read import read_anchors

    return read_anchors([str(s) for s in specs], default_gpu=gpu)
