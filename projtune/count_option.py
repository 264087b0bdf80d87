"""Count flags (``--gpus``, ``--gbs``, ``--seq-len``, the parallel degrees) read with the one reader of counts.

``projection.quantities.read_size`` reads a count wherever it comes from (files, logs, requests), so a flag takes
the same forms: ``8192``, ``8,192``, ``8k`` (1024), ``2^13``, ``1e3``; a sign, ``8kk`` or a fraction is refused in
one line naming the flag.  Ranges (``tp >= 1``, ``gpus <= 131,072``) stay with the pydantic models the values go to.
Light on purpose: `projtune --help` builds these options and loads no reader.
"""

from __future__ import annotations

from collections.abc import Callable


def count_parser(flag: str) -> Callable[[str], int]:
    """A typer ``parser`` for the count flag ``flag``: text -> int, or ``ValueError`` (click's "Invalid value")."""

    def parse(text: str | int) -> int:
        from projection.quantities import read_size

        return read_size(text, flag, low=1)

    parse.__name__ = "INTEGER"     # the metavar typer shows in --help
    return parse
