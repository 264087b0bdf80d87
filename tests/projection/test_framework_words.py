"""Framework words: every name, launch name and alias resolves to its record; the table is built once."""

from __future__ import annotations

import pytest

from projection.errors import UnknownNameError
from projection.framework import RECORDS, framework_words, resolve_framework


def test_every_word_resolves_to_its_record_case_and_spaces_folded() -> None:
    for word, name in framework_words().items():
        assert resolve_framework(word) is RECORDS[name]
        assert resolve_framework(f"  {word.upper().replace('-', ' ')} ") is RECORDS[name]
    assert resolve_framework("maxtext").name == "jax" and resolve_framework(None).name == "megatron"


def test_a_caller_changing_its_copy_changes_nothing() -> None:
    words = framework_words()
    words.clear()
    assert framework_words() and resolve_framework("titan").name == "torchtitan"


def test_an_unknown_word_names_the_nearest() -> None:
    with pytest.raises(UnknownNameError, match="megatron"):
        resolve_framework("megatorn")
