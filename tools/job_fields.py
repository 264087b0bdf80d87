"""The fields every job-shaped tool input starts with: which model, on which GPUs, over which network.

One definition serves :class:`tools.schemas.JobInput` (the layout tools) and :class:`tools.search_request.SearchRequest`
(the search), in a module of its own so the search request need not import every tool schema.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from projection.job import DEFAULT_GPUS_PER_NODE
from projection.training_config import HostOpSeconds, NicGbps, NicsPerNode, NvlinkDomain

MODEL_HELP = ("Catalog model id (see list_models, e.g. 'llama3-70b', 'mixtral-8x7b') or Hugging Face config.json "
              "fields.")
GPU_HELP = "Hardware catalog id (see list_hardware), e.g. 'h100-sxm', 'h200', 'mi300x'."


class JobFields(BaseModel):
    """Which model on which GPUs: GPU count, node size and the cluster's network overrides."""

    model_config = ConfigDict(extra="forbid")
    model: str | dict[str, Any] = Field(description=MODEL_HELP)
    gpu: str = Field(description=GPU_HELP)
    num_gpus: int = Field(ge=1, description="GPUs in the job.")
    gpus_per_node: int = Field(default=DEFAULT_GPUS_PER_NODE, ge=1, description="GPUs per node.")
    nics_per_node: NicsPerNode = None
    nic_gbps: NicGbps = None
    nvlink_domain: NvlinkDomain = None
    host_op_s: HostOpSeconds = None
