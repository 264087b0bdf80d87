"""The search freezes its objects for its duration and leaves a caller's frozen heap frozen (issue 31)."""

from __future__ import annotations

import gc

from projection import module_heap
from tools.constraints import Constraints
from tools.search import SearchRequest, run_search

REQUEST = SearchRequest(model="llama3-8b", gpu="h100-sxm", num_gpus=8, gbs=32, seq_len=4096, top_k=3,
                        constraints=Constraints(precision="bf16", pp="<=2"))


def test_a_search_unfreezes_only_what_it_froze(monkeypatch) -> None:
    monkeypatch.setattr(module_heap, "_frozen", False)
    gc.unfreeze()
    try:
        run_search(REQUEST, workers=1)
        assert gc.get_freeze_count() == 0          # nothing was frozen before: all moved back
        module_heap.freeze_heap()                  # e.g. the agent's modules (projection/module_heap.py)
        before = gc.get_freeze_count()
        run_search(REQUEST, workers=1)
        assert gc.get_freeze_count() >= before     # an unfreeze would have moved the caller's objects back
    finally:
        gc.unfreeze()
