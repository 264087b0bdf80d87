"""Uneven pipeline splits: how many transformer layers each virtual pipeline stage holds.

Three ways a job states its split, each a framework's own (the layout's fields in
:class:`projection.training_config.TrainingConfig`):

- nothing: equal stages, or equal after counting the embedding and the loss as one layer each
  (Megatron-Bridge ``account_for_embedding/loss_in_pipeline_split``), else the remainder on the
  middle stages (:func:`default_counts`);
- ``pp_first_stage_layers`` / ``pp_last_stage_layers``: layers on the first / last pipeline *rank*,
  the rest spread evenly over the middle ranks, each rank's layers evenly over its ``vpp`` chunks
  (Megatron-LM ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``,
  ``megatron/core/transformer/transformer_block.py`` ``get_num_layers_to_build``);
- ``pp_layout``: a Megatron pipeline layout string (``--pipeline-model-parallel-layout``,
  ``megatron/core/transformer/pipeline_parallel_layer_layout.py``): virtual stages separated by
  ``|`` in virtual-stage order (stage ``chunk * pp + rank``), ``E`` embedding, ``t`` a transformer
  layer, ``m`` an MTP layer, ``L`` the loss; ``x*n`` and ``(...)*n`` repeat, commas are cosmetic.
  Megatron-Bridge's DeepSeek-V3 H100 preset ``Et|(tt|)*30mL`` is 32 virtual stages (pp 8 x vpp 4):
  one layer with the embedding, 30 of two, and a last one with MTP and the loss.

The embedding and the LM head + loss are priced on their own stages by the engine (the first and
the last virtual stage, projection/engine.py ``_stage_times``); a split that gives those stages fewer
layers balances them.  MTP layers (``m``) are not modelled: :class:`projection.model_spec.ModelSpec`
has no MTP module, so a projection of DeepSeek-V3 leaves MTP out whatever the layout says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

LAYOUT_CHARS = frozenset("EtmL")
_REPEAT_GROUP = re.compile(r"\(([^()]+)\)\*(\d+)")
_REPEAT_CHAR = re.compile(r"(.)\*(\d+)")
MAX_LAYOUT_CHARS = 4096          # input bound: the longest published layouts are ~150 characters


@dataclass(frozen=True, slots=True)
class PipelineSplit:
    """The split a layout states (hashable; None everywhere = the default split)."""

    first: int | None = None
    last: int | None = None
    layout: str | None = None

    @property
    def is_default(self) -> bool:
        """Whether the layout states no split of its own."""
        return self.first is None and self.last is None and self.layout is None


DEFAULT_SPLIT = PipelineSplit()


@lru_cache(maxsize=1024)
def parse_layout(layout: str) -> tuple[str, ...]:
    """The virtual stages of a Megatron layout string, each as its expanded characters (``"Ett"``).

    Raises:
        ValueError: a character other than E, t, m, L, ``|``, ``,``, ``*``, digits and parentheses, or a
            string that expands past :data:`MAX_LAYOUT_CHARS`.
    """
    text = layout.replace(",", "").replace(" ", "")
    for pattern in (_REPEAT_GROUP, _REPEAT_CHAR):   # Megatron unrolls groups, then single characters
        size = len(text) + sum(len(m.group(1)) * int(m.group(2)) for m in pattern.finditer(text))
        if size > MAX_LAYOUT_CHARS:
            raise ValueError(f"pipeline layout {layout!r} expands past {MAX_LAYOUT_CHARS} characters")
        text = pattern.sub(lambda m: m.group(1) * int(m.group(2)), text)
    bad = sorted({c for c in text if c not in LAYOUT_CHARS and c != "|"})
    if bad:
        raise ValueError(f"pipeline layout {layout!r}: unknown character(s) {bad} (allowed: E embedding, t layer, "
                         "m MTP layer, L loss, '|' between stages, x*n and (...)*n repeats, commas)")
    return tuple(text.split("|"))


def layout_violations(layout: str, num_layers: int, pp: int, vpp: int) -> list[str]:
    """Megatron's checks of a layout string against the model and the pipeline (``validate_layer_layout``)."""
    try:
        stages = parse_layout(layout)
    except ValueError as error:
        return [str(error)]
    reasons = []
    if len(stages) != pp * vpp:
        reasons.append(f"pp_layout has {len(stages)} stages but pp*vpp = {pp}*{vpp} = {pp * vpp} "
                       f"(give vpp = stages/pp)")
    flat = "".join(stages)
    if not flat.startswith("E") or flat.count("E") != 1:
        reasons.append("pp_layout must start with the embedding 'E', once")
    if not flat.endswith("L") or flat.count("L") != 1:
        reasons.append("pp_layout must end with the loss 'L', once")
    if (layers := flat.count("t")) != num_layers:
        reasons.append(f"pp_layout holds {layers} transformer layers 't' but the model has {num_layers}")
    return reasons


def default_counts(num_layers: int, stages: int) -> tuple[int, ...]:
    """Layers per virtual stage without a stated split: equal; or equal after counting embedding and loss as one
    layer each (the first and last stages one fewer); otherwise the remainder one each on the middle stages."""
    if num_layers % stages == 0:
        return (num_layers // stages,) * stages
    if stages > 1 and (num_layers + 2) % stages == 0:
        per = (num_layers + 2) // stages
        return (per - 1, *(per,) * (stages - 2), per - 1)
    base, extra = divmod(num_layers, stages)
    start = (stages - extra) // 2
    return tuple(base + (start <= i < start + extra) for i in range(stages))


def first_last_violations(num_layers: int, pp: int, vpp: int, first: int | None, last: int | None) -> list[str]:
    """Megatron's rules for ``--decoder-first/last-pipeline-num-layers`` (arguments.py, get_num_layers_to_build)."""
    if first is None and last is None:
        return []
    if pp < 2:
        return ["pp_first_stage_layers / pp_last_stage_layers need pp > 1"]
    given = [n for n in (first, last) if n is not None]
    middle_ranks = pp - len(given)
    rest = num_layers - sum(given)
    reasons = []
    if rest < 0 or (middle_ranks == 0 and rest != 0):
        reasons.append(f"first/last stage layers {first}/{last} do not add up to num_layers={num_layers} on pp={pp}")
    elif middle_ranks and rest % middle_ranks:
        reasons.append(f"the {rest} layers left after the first/last stages do not split evenly over "
                       f"{middle_ranks} middle pipeline ranks")
    elif middle_ranks and (rest // middle_ranks) % vpp:
        reasons.append(f"{rest // middle_ranks} layers per middle rank do not split into vpp={vpp} chunks")
    for name, n in (("pp_first_stage_layers", first), ("pp_last_stage_layers", last)):
        if n is not None and n % vpp:
            reasons.append(f"{name}={n} does not split into vpp={vpp} chunks")
    return reasons


def split_violations(num_layers: int, pp: int, vpp: int, split: PipelineSplit) -> list[str]:
    """Why ``split`` does not fit the model and the pipeline (empty when it does)."""
    if split.layout is not None:
        extra = (["pp_layout cannot be combined with pp_first_stage_layers / pp_last_stage_layers"]
                 if split.first is not None or split.last is not None else [])
        return extra + layout_violations(split.layout, num_layers, pp, vpp)
    return first_last_violations(num_layers, pp, vpp, split.first, split.last)


@lru_cache(maxsize=4096)
def stage_counts(num_layers: int, pp: int, vpp: int, split: PipelineSplit = DEFAULT_SPLIT) -> tuple[int, ...]:
    """Transformer layers of each virtual stage (``chunk * pp + rank``), pp*vpp of them.

    Assumes :func:`split_violations` is empty (legality checks it first).
    """
    stages = pp * vpp
    if split.layout is not None:
        return tuple(stage.count("t") for stage in parse_layout(split.layout))
    if split.is_default:
        return default_counts(num_layers, stages)
    given = [n for n in (split.first, split.last) if n is not None]
    middle_ranks = pp - len(given)
    middle = (num_layers - sum(given)) // middle_ranks if middle_ranks else 0
    per_rank = [middle] * pp
    if split.first is not None:
        per_rank[0] = split.first
    if split.last is not None:
        per_rank[-1] = split.last
    # virtual stage chunk*pp + rank holds 1/vpp of the rank's layers
    return tuple(per_rank[v % pp] // vpp for v in range(stages))


def stage_layers_of_rank(counts: tuple[int, ...], pp: int) -> tuple[int, ...]:
    """Layers each pipeline rank holds over its chunks."""
    return tuple(sum(counts[rank::pp]) for rank in range(pp))


def uneven_split(num_layers: int, pp: int, vpp: int) -> PipelineSplit | None:
    """The split the search tries where equal stages are impossible: the first and the last virtual stage carry
    fewer layers (they also run the embedding and the LM head + loss), every middle stage the same count.

    Middle stages get ``m = ceil((num_layers + 2) / (pp*vpp))`` layers (embedding and loss weighed as one layer
    each, rounded up), the first stage ``ceil(r/2)`` and the last ``floor(r/2)`` of the ``r`` left (the head is
    the heavier end); r must lie in [0, 2m].  With vpp 1 it is stated as Megatron's first/last stage layers
    (both at least 1); with vpp > 1 as a layout string (Megatron-Bridge's DeepSeek-V3 presets).  None when
    the split is even already or no such split exists.
    """
    stages = pp * vpp
    if pp < 2 or stages > num_layers or num_layers % stages == 0 or (num_layers + 2) % stages == 0:
        return None
    middle = -(-(num_layers + 2) // stages)
    rest = num_layers - (stages - 2) * middle
    if not 0 <= rest <= 2 * middle:
        return None
    first, last = rest - rest // 2, rest // 2
    if vpp == 1:
        return PipelineSplit(first=first, last=last) if last >= 1 else None
    return PipelineSplit(layout=render_layout(first, middle, stages - 2, last))


def render_layout(first: int, middle: int, repeats: int, last: int) -> str:
    """A Megatron layout string for stages (first, middle x repeats, last): ``Et*4|(t*4|)*14t|L``."""
    def layers(n: int) -> str:
        return "" if n == 0 else "t" if n == 1 else f"t*{n}"
    body = f"({layers(middle)}|)*{repeats}" if repeats and middle else "|" * repeats
    return f"E{layers(first)}|{body}{layers(last)}L"
