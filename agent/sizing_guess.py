"""The first guess of a cluster size and the GPU counts around it (agent/sizing.py projects them).

Kept apart from :mod:`agent.sizing` so the request parser can place its first count without importing the
sizing search (which imports the request model).
"""

from __future__ import annotations

import math
from typing import Any

from projection.params import active_params
from projection.training_config import MAX_GPUS

GUESS_MFU = 0.35
"""Model-FLOPs utilisation of the first guess only (large dense and MoE jobs publish 30-45% of the BF16 peak); the
counts it places are then projected."""
MAX_COUNTS = 8
DAY_S = 86400.0


def first_guess(model: Any, hardware: Any, tokens: float, deadline_days: float, node: int) -> int:
    """GPUs that would train ``tokens`` in ``deadline_days`` at :data:`GUESS_MFU` of the BF16 peak (whole nodes)."""
    flops = 6.0 * active_params(model) * tokens
    per_gpu = hardware.peak_flops_for("bf16") * GUESS_MFU
    gpus = flops / (per_gpu * deadline_days * DAY_S)
    return max(node, node * math.ceil(gpus / node))


def count_ladder(guess: int, node: int) -> list[int]:
    """Whole-node counts node x 2^k from about a quarter to four times ``guess`` (powers of two keep the default
    batch, a power-of-two token count, divisible by every data-parallel degree)."""
    counts = [node * 2 ** k for k in range(0, 40) if guess / 4 <= node * 2 ** k <= 4 * guess
              and node * 2 ** k <= MAX_GPUS]
    return counts[:MAX_COUNTS] or [guess]
