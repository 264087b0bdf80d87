"""One record per training framework: everything the projection knows about a framework, in one place.

A *recipe framework* is the sweep format's ``framework`` key (:data:`projection.vocabulary.Framework`,
``TrainingConfig.framework``).  Its :class:`FrameworkRecord` holds

- ``profile``: the fitted multipliers (:class:`projection.framework_profile.FrameworkProfile`, loaded from
  ``projection/catalog/frameworks/<profile_name>.yaml``; Megatron-core stacks without their own file share
  megatron's, and their error band too);
- ``memory``: bytes per parameter and allocator behaviour (:class:`projection.memory_frameworks.MemoryTraits`);
- ``workload``: which framework-specific code paths the workload model prices (:class:`WorkloadTraits`, named
  booleans, each cited next to the cost it switches in :mod:`projection.workload`);
- ``launch``: the launch framework (exporter and rule set, :data:`projection.vocabulary.LaunchFramework`) that
  runs it, None when projtune cannot export to it; ``megatron_core``: it builds Megatron-core's model and runs
  Megatron-LM's argument checks (tools/framework_rules.py applies those rules);
- ``aliases``: other words a request may use for it.

A job resolves its record once (:func:`projection.job.resolve_job`); a launch name (``search --framework
torchtitan``) maps to its record with :func:`record_of_launch`, and the launch name of a layout is derived
from its record.  This module and :mod:`projection.vocabulary` are the only places that spell framework
names (``tests/projection/test_vocabulary.py`` checks it).  The exporters and launch rule sets live in
``tools/`` (a higher layer) and are looked up there by ``launch``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from projection.errors import UnknownNameError
from projection.framework_profile import FrameworkProfile, load_framework_profile
from projection.memory_frameworks import AUTOMODEL, DEEPSPEED, JAX_XLA, MEGATRON, TORCHTITAN, MemoryTraits
from projection.vocabulary import FRAMEWORKS, LAUNCH_FRAMEWORKS, Framework, LaunchFramework

DEFAULT_FRAMEWORK: Framework = "megatron"
"""The framework of a layout that names none: Megatron-core, what every public recipe here is built on."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadTraits:
    """Framework-specific code paths the workload model prices (:mod:`projection.workload`, where each is cited).

    All False is the Megatron-core-without-TE-grouped-MLP path (the reference the device profiles are fitted on).
    """

    einsum_token_drop_dispatch: bool = False
    """Token-drop MoE dispatches and combines with one-hot einsums (MaxText ``dense_matmul``)."""
    ragged_worst_case_buffer: bool = False
    """Dropless EP all-to-all receives into a worst-case, fully permuted buffer (MaxText ``sparse_matmul``)."""
    deepep_worst_case_buffer: bool = False
    """The DeepEP dispatcher receives into a static worst-case buffer (MaxText's Primus-Turbo DeepEP patch)."""
    ring_sdpa_context_parallel: bool = False
    """CP is PyTorch's ring attention: one SDPA call per ring step merged unfused in fp32 (torchtitan)."""
    repeats_kv_heads: bool = False
    """K/V heads are repeated to the query heads before attention (torchtitan's ``repeat_kv``)."""
    te_grouped_mlp: bool = False
    """MoE experts run Megatron-core's TEGroupedMLP: one cuBLAS GEMM per local expert on TE's streams, expert
    biases applied unfused after FC2, eager clamps before a clamped gated activation."""
    te_quantised_tp_gather: bool = False
    """Sequence-parallel all-gathers of a GEMM input move the quantised FP8 bytes (TE's fused LayerNorm-linear)."""
    te_fp8_quantizers: bool = False
    """FP8 GEMM inputs are quantised by Transformer Engine's quantizers, which keep no transposed per-tensor FP8 copy
    on a chip whose FP8 GEMMs take non-TN layouts (projection.workload.cast_bytes_per_element)."""


TE_MEGATRON_CORE = WorkloadTraits(te_grouped_mlp=True, te_quantised_tp_gather=True, te_fp8_quantizers=True)


@dataclass(frozen=True, kw_only=True)
class FrameworkRecord:
    """One recipe framework: its profile, memory and workload traits, launch framework and aliases."""

    name: Framework
    memory: MemoryTraits
    workload: WorkloadTraits = WorkloadTraits()
    launch: LaunchFramework | None = None
    megatron_core: bool = False
    trains_lora: bool = False
    """Its launch framework trains LoRA adapters: Megatron-Bridge (src/megatron/bridge/peft/lora.py,
    ConfigContainer.peft) and torchtitan 0.3.0 (components/lora.py LoRAConverter); Megatron-LM's pretrain_gpt.py
    (and Primus' Megatron backend that runs it) and MaxText's base.yml train none."""
    profile_name: str = ""
    """The framework whose profile file (when this one has none) and error band it shares; empty: its own."""
    aliases: tuple[str, ...] = ()

    @cached_property
    def profile(self) -> FrameworkProfile:
        """The shipped framework profile: its own file, else ``profile_name``'s, else multiplier defaults."""
        return load_framework_profile((self.name, self.band_name), self.name)

    @property
    def band_name(self) -> str:
        """The framework name an error band is keyed by (Megatron-core stacks share ``megatron``)."""
        return self.profile_name or self.name

    @property
    def words(self) -> tuple[str, ...]:
        """Every word that names this framework: its name, its launch name, its aliases."""
        return tuple(dict.fromkeys((self.name, *((self.launch,) if self.launch else ()), *self.aliases)))


# Memory traits: projection/memory_frameworks.py (cited there); workload traits: projection/workload.py (cited
# next to each cost).  Primus is left out of te_grouped_mlp: its Primus-Turbo grouped GEMM, when enabled, is one
# kernel, and its rows do not say which ran (projection/workload.py).
RECORDS: dict[Framework, FrameworkRecord] = {r.name: r for r in (
    FrameworkRecord(name="megatron", memory=MEGATRON, workload=TE_MEGATRON_CORE, launch="megatron",
                    megatron_core=True, aliases=("megatron-lm", "megatron-core", "mcore")),
    FrameworkRecord(name="nemo", memory=MEGATRON, workload=TE_MEGATRON_CORE, launch="megatron-bridge",
                    megatron_core=True, trains_lora=True, profile_name="megatron"),
    FrameworkRecord(name="primus", memory=MEGATRON, launch="primus", megatron_core=True, profile_name="megatron"),
    FrameworkRecord(name="torchtitan", memory=TORCHTITAN, launch="torchtitan", aliases=("titan",), trains_lora=True,
                    workload=WorkloadTraits(ring_sdpa_context_parallel=True, repeats_kv_heads=True)),
    FrameworkRecord(name="llm-foundry", memory=TORCHTITAN),
    # DeepSpeed's unfused attention is its default attention backend (catalog/frameworks/deepspeed.yaml).
    FrameworkRecord(name="deepspeed", memory=DEEPSPEED),
    FrameworkRecord(name="megatron-deepspeed", memory=DEEPSPEED),
    FrameworkRecord(name="automodel", memory=AUTOMODEL),
    FrameworkRecord(name="jax", memory=JAX_XLA, launch="maxtext", workload=WorkloadTraits(
        einsum_token_drop_dispatch=True, ragged_worst_case_buffer=True, deepep_worst_case_buffer=True)),
)}
"""The records, one per :data:`projection.vocabulary.FRAMEWORKS` value (tests/projection/test_vocabulary.py)."""


def framework_record(name: str | None) -> FrameworkRecord:
    """The record of a recipe framework (megatron's when none is named).

    Raises:
        UnknownNameError: ``name`` is not a recipe framework; the message names the nearest.
    """
    record = RECORDS.get(name or DEFAULT_FRAMEWORK)   # type: ignore[call-overload]
    if record is None:
        raise UnknownNameError(kind="framework", name=str(name), choices=list(FRAMEWORKS))
    return record


def framework_profile(name: str | None) -> FrameworkProfile:
    """The shipped profile of a recipe framework (megatron's when none is named)."""
    return framework_record(name).profile


def memory_traits(name: str | None) -> MemoryTraits:
    """The memory traits of a recipe framework (Megatron-core's when none is named)."""
    return framework_record(name).memory


def record_of_launch(launch: str) -> FrameworkRecord:
    """The recipe framework a launch framework runs (``maxtext`` -> ``jax``, ``megatron-bridge`` -> ``nemo``).

    Raises:
        UnknownNameError: ``launch`` is not a launch framework; the message names the nearest.
    """
    record = _BY_LAUNCH.get(launch)
    if record is None:
        raise UnknownNameError(kind="framework", name=launch, choices=list(LAUNCH_FRAMEWORKS))
    return record


def framework_words() -> dict[str, Framework]:
    """Every word that names a framework (names, launch names, aliases) -> its recipe framework (a copy)."""
    return dict(_WORDS)


def resolve_framework(word: str | None) -> FrameworkRecord:
    """The record a user's framework word names: a recipe name (``jax``), a launch name (``maxtext``) or an alias
    (``titan``), case and spaces folded; megatron's when None.

    Raises:
        UnknownNameError: no framework has that name; the message names the nearest.
    """
    if word is None:
        return framework_record(None)
    key = "-".join(word.strip().lower().split())
    if key not in _WORDS:
        raise UnknownNameError(kind="framework", name=word, choices=list(_WORDS))
    return RECORDS[_WORDS[key]]


_BY_LAUNCH: dict[str, FrameworkRecord] = {r.launch: r for r in RECORDS.values() if r.launch is not None}
_WORDS: dict[str, Framework] = {word: r.name for r in RECORDS.values() for word in r.words}
"""Every word that names a framework -> its recipe framework, built once: the search resolves the framework per
enumerated layout (tools/switch_rules.py), 75,000 times in an offline tune, at ~10 µs a rebuild."""
