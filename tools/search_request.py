"""The typed input of a layout search (:func:`tools.search.run_search`), in its own module so that the
search and its "why is it empty" explanation (:mod:`tools.search_explain`) both import it without
importing each other."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from projection.anchor import AnchorRun
from projection.training_config import PackedDocumentTokens
from projection.vocabulary import LAUNCH_FRAMEWORKS, Finetune
from tools.constraints import Constraints
from tools.job_fields import JobFields


class SearchRequest(JobFields):
    """A layout search: which model on which GPUs, the batch, constraints, and how many results."""

    model: str | dict[str, Any] = Field(
        description="Catalog model id (e.g. 'llama3-70b') or Hugging Face config.json fields.")
    gpu: str = Field(description="Hardware catalog id, e.g. 'h100-sxm', 'mi300x'.")
    gbs: int = Field(ge=1, description="Global batch size, sequences per step.")
    seq_len: int = Field(ge=1, description="Sequence length, tokens.")
    constraints: Constraints = Field(default_factory=Constraints,
                                     description="Pins/bounds per axis, min_headroom, allow_fp8.")
    top_k: int = Field(default=5, ge=1, le=100, description="How many ranked layouts to return.")
    candidates: list[dict[str, Any]] | None = Field(
        default=None, description="Explicit candidate set (sweep-format config dicts): when given, only these "
                                  "are checked, screened and ranked; gbs, seq_len, finetune and "
                                  "packed_document_tokens fill missing keys.")
    profile_path: str | None = Field(default=None, description="Device profile file; default: the shipped one.")
    finetune: Finetune | None = Field(
        default=None, description="Fine-tuning job ('lora': frozen base weights; 'sft'); None = pre-training.")
    packed_document_tokens: PackedDocumentTokens = None
    framework: str | None = Field(
        default=None, description="The framework the layouts run on: its profile and memory traits price every "
        f"layout and only what it can launch is kept ({', '.join(LAUNCH_FRAMEWORKS)}, tools/framework_rules.py; "
        "recipe names such as jax, nemo, deepspeed and aliases are read too, projection/framework.py). Default: "
        "megatron's profile, no launch filter.")
    anchors: list[AnchorRun] = Field(
        default_factory=list, description="Measured runs of this job (same model or a reduced-layer proxy, same GPU "
        "type, any layout and scale), as data: every layout is corrected by them before ranking "
        "(projection/anchor.py).")
