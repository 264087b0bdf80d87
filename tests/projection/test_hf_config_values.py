"""HF config values read for what they mean (issue 29): string booleans, gated MLPs whatever the activation,
and network rates no projection can use."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from projection.errors import ModelSpecError
from projection.model_spec import model_from_hf_config
from projection.params import total_params
from projection.training_config import Cluster

LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}


@pytest.mark.parametrize(("value", "tied"), [(True, True), (False, False), ("false", False), ("False", False),
                                             ("true", True), (" TRUE ", True)])
def test_tie_word_embeddings_strings_are_booleans(value: object, tied: bool) -> None:
    assert model_from_hf_config({**LLAMA, "tie_word_embeddings": value}).tie_embeddings is tied


@pytest.mark.parametrize("value", ["no", "0", 1, [], "yes please"])
def test_other_boolean_values_are_refused(value: object) -> None:
    with pytest.raises(ModelSpecError, match="tie_word_embeddings"):
        model_from_hf_config({**LLAMA, "tie_word_embeddings": value})


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "qwen3"])
@pytest.mark.parametrize("act", ["gelu", "relu", "gelu_new", "relu2"])
def test_a_gated_model_type_keeps_its_gate_matrix_whatever_the_activation(model_type: str, act: str) -> None:
    silu = model_from_hf_config({**LLAMA, "model_type": model_type})
    other = model_from_hf_config({**LLAMA, "model_type": model_type, "hidden_act": act})
    assert other.gated_mlp and other.activation == act
    assert total_params(other) == total_params(silu)   # transformers' MLP has gate, up and down


@pytest.mark.parametrize("rate", [1e-310, 5e-324, 0.0, -1.0, float("inf"), float("nan")])
def test_denormal_and_non_finite_nic_rates_are_refused(rate: float) -> None:
    with pytest.raises(ValidationError):
        Cluster(gpu="h100-sxm", num_gpus=16, nic_gbps=rate)
