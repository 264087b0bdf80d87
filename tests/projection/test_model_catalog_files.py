"""The model catalog files: each parses, cites its source and carries the required config fields."""

from __future__ import annotations

from importlib import resources
from typing import Any

import pytest
import yaml

from source_tree import fresh_python_stdout

# The ids the project requires (the evals and sweep files refer to them).
REQUIRED_IDS = {
    "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3.1-8b",
    "llama3.1-70b", "llama3.1-405b", "mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b",
    "qwen3-235b-a22b", "gpt-oss-20b", "gpt-oss-120b", "deepseek-v3", "gpt3-175b",
    "nemotron4-15b", "nemotron4-340b",
}
MODEL_TYPES = {"llama", "qwen3", "qwen3_moe", "mixtral", "gpt2", "mpt", "nemotron", "gpt_oss", "deepseek_v3"}
TOP_LEVEL_KEYS = {"id", "display_name", "aliases", "source", "published_params_billion", "params_source", "config"}
OPTIONAL_TOP_LEVEL_KEYS = {"notes"}
REQUIRED_CONFIG_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
# Fields each MoE / MLA model_type needs beyond the dense ones (Hugging Face config names).
TYPE_FIELDS = {
    "mixtral": ("num_local_experts", "num_experts_per_tok", "intermediate_size"),
    "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "head_dim"),
    "gpt_oss": ("num_local_experts", "num_experts_per_tok", "head_dim", "sliding_window", "layer_types"),
    "deepseek_v3": (
        "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
        "first_k_dense_replace", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
        "v_head_dim",
    ),
}
# Published totals, each with its source; the catalog must agree within 0.5%.
PUBLISHED_BILLION = {
    "llama3-70b": 70.6,  # Hugging Face model page (70,553,706,496 parameters)
    "mixtral-8x22b": 140.6,  # released checkpoint (140,620,634,112); Mistral says 141B
    "qwen3-235b-a22b": 235.0,  # Qwen3-235B-A22B model card
    "deepseek-v3": 671.0,  # arXiv 2412.19437, without the 14B MTP module
}
RELATIVE_TOLERANCE = 0.005


def _load_all() -> dict[str, dict[str, Any]]:
    folder = resources.files("projection") / "catalog" / "models"
    entries: dict[str, dict[str, Any]] = {}
    for item in sorted(folder.iterdir(), key=lambda path: path.name):
        if item.name.endswith(".yaml"):
            entries[item.name.removesuffix(".yaml")] = yaml.safe_load(item.read_text(encoding="utf-8"))
    return entries


ENTRIES = _load_all()


def test_catalog_has_every_required_id() -> None:
    assert REQUIRED_IDS <= set(ENTRIES)


@pytest.mark.parametrize(("stem", "entry"), sorted(ENTRIES.items()), ids=sorted(ENTRIES))
def test_file_parses_with_source_and_params(stem: str, entry: dict[str, Any]) -> None:
    assert entry["id"] == stem
    assert TOP_LEVEL_KEYS <= set(entry) <= TOP_LEVEL_KEYS | OPTIONAL_TOP_LEVEL_KEYS
    assert entry["source"].strip()
    assert entry["params_source"].strip()
    assert isinstance(entry["published_params_billion"], (int, float))
    assert entry["published_params_billion"] > 0
    assert isinstance(entry["aliases"], list)


@pytest.mark.parametrize(("stem", "entry"), sorted(ENTRIES.items()), ids=sorted(ENTRIES))
def test_config_has_required_fields(stem: str, entry: dict[str, Any]) -> None:
    config = entry["config"]
    assert config["model_type"] in MODEL_TYPES
    for field in (*REQUIRED_CONFIG_FIELDS, *TYPE_FIELDS.get(config["model_type"], ())):
        assert field in config, f"{stem}: missing {field}"
    for field in REQUIRED_CONFIG_FIELDS:
        assert isinstance(config[field], int)
        assert config[field] > 0
    heads = config["num_attention_heads"]
    assert heads % config.get("num_key_value_heads", heads) == 0


@pytest.mark.parametrize("entry", [e for e in ENTRIES.values() if "layer_types" in e["config"]], ids=lambda e: e["id"])
def test_layer_types_cover_every_layer(entry: dict[str, Any]) -> None:
    config = entry["config"]
    assert len(config["layer_types"]) == config["num_hidden_layers"]
    assert set(config["layer_types"]) <= {"sliding_attention", "full_attention"}


def test_names_are_unique_across_files() -> None:
    seen: dict[str, str] = {}
    for stem, entry in ENTRIES.items():
        for name in (entry["id"], *entry["aliases"]):
            key = str(name).lower()
            assert seen.setdefault(key, stem) == stem, f"'{name}' names both {seen[key]} and {stem}"


@pytest.mark.parametrize(("model_id", "billion"), sorted(PUBLISHED_BILLION.items()))
def test_published_totals(model_id: str, billion: float) -> None:
    assert ENTRIES[model_id]["published_params_billion"] == pytest.approx(billion, rel=RELATIVE_TOLERANCE)


def test_an_id_reads_its_own_file_alone() -> None:
    code = ("from projection import model_spec as m; assert m.load_model('Mixtral-8x22B').name == 'mixtral-8x22b'; "
            "print(m._catalog.cache_info().currsize, m._entry_in_file.cache_info().currsize)")
    assert fresh_python_stdout(code).split() == ["0", "1"]     # no full catalog read, one file
