"""Restore and compare (no device time): measurement files, fitted profile and the dev-run comparison.

    python benchmarks/gpu_compare.py RESULTS [--out DIR] [--plan benchmarks/gpu_plan.json] [--json]

RESULTS is the ``gpu_results.json`` that ``benchmarks/gpu_check.py`` wrote (or its folder).
Writes ``DIR/measurement-*.json``, ``DIR/profile-<gpu>.yaml``, ``DIR/compare.json`` and
``DIR/compare.md`` (see :mod:`evals.gpu_compare`). Results of a CPU or --quick run are labelled
CPU PLUMBING throughout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; 2 with one line on a bad input."""
    from evals.gpu_compare import compare, markdown
    from evals.gpu_plan import PLAN_FILE
    from projection.errors import ProjtuneError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plan", type=Path, default=PLAN_FILE)
    parser.add_argument("--json", action="store_true", help="Print the comparison as one JSON object.")
    args = parser.parse_args(argv)
    try:
        out = compare(args.results, plan_path=args.plan, out_dir=args.out)
    except ProjtuneError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(out) if args.json else markdown(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
