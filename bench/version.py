"""Version of the benchmark code: a hash of every ``bench/*.py`` (standard library only).

The measurement cache key and every measurement/results file carry it, so a changed
benchmark never reuses a result timed by older code.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

_BENCH_DIR = Path(__file__).resolve().parent


def code_version() -> str:
    """First 16 hex digits of SHA-256 over the names and bytes of ``bench/*.py``, in name order."""
    digest = hashlib.sha256()
    for path in sorted(_BENCH_DIR.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]
