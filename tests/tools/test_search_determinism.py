"""A search reports the same counts in every run: whatever the hash seed and the number of workers.

The projected/pruned split used to depend on how many processes the search picked (one on a
loaded machine, two on an idle one: ``tools.search_core.default_workers`` reads the load average)
and on the order the workers' parts came back; the serial decisions are now replayed over the
workers' projections (tools/search_core.py ``_evaluate``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_SCRIPT = """
import json
from tools.constraints import Constraints
from tools.search import SearchRequest, run_search
request = SearchRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=8, gbs=32, seq_len=4096, top_k=5,
                        constraints=Constraints(precision="bf16", pp="<=2"))
out = {}
for workers in (None, 1, 2):
    r = run_search(request, workers=workers)
    out[str(workers)] = [r.enumerated, r.screened_out, r.projected, r.pruned,
                         [c.layout for c in r.ranked], [c.layout for c in r.pareto]]
print(json.dumps(out))
"""


def _run(seed: str) -> dict[str, list[object]]:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_counts_do_not_depend_on_hash_seed_or_workers() -> None:
    first, second = _run("1"), _run("2")
    assert first == second
    # default, serial and two workers agree too (the worker count used to change the split)
    assert first["None"] == first["1"] == first["2"]
    enumerated, screened_out, projected, pruned = first["1"][:4]
    assert projected > 0 and pruned > 0 and screened_out + projected + pruned <= enumerated
