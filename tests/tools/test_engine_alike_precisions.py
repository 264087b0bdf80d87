"""Search shares one evaluation among FP8 recipes the engine models alike (tools.search_core.ENGINE_ALIKE_PRECISIONS).

The engine prices per-tensor FP8's casts (amax read, scale kernels) apart from the block recipes' (issue 11), so the
set may never join fp8 with a block recipe; the vacuous loop over the (empty) set that stood here is gone.
"""

from __future__ import annotations

import pytest

from projection.engine import project
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from tools.search_core import ENGINE_ALIKE_PRECISIONS


@pytest.mark.parametrize("model_id", ["llama3-70b", "mixtral-8x7b"])
def test_per_tensor_fp8_is_not_priced_like_the_block_recipes(model_id: str) -> None:
    model = load_model(model_id)
    cluster = Cluster(gpu="b200", num_gpus=64)
    base = {"tp": 2, "pp": 2, "ep": 8 if model.is_moe else 1, "mbs": 1, "gbs": 256, "seq_len": 4096}
    times = {p: project(model, cluster, TrainingConfig(**base, precision=p)).iteration_time_s
             for p in ("fp8", "fp8-blockwise", "mxfp8")}
    assert times["fp8"] != times["fp8-blockwise"] and times["fp8"] != times["mxfp8"], times
    assert not ({"fp8"} < ENGINE_ALIKE_PRECISIONS)
