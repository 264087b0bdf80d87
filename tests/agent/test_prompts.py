"""Prompts are files, versioned, loaded by name; unknown names fail clearly."""

from __future__ import annotations

import pytest

import prompts
from prompts.loader import UnknownPromptError, load_prompt, prompt_names, prompt_version, render_prompt


def test_every_prompt_has_a_version_line() -> None:
    assert {"propose", "explain", "parse"} <= set(prompt_names())
    for name in prompt_names():
        assert load_prompt(name).startswith(f"<!-- prompt: {name}, version: ")
        assert prompt_version(name) >= 1


def test_render_fills_placeholders_and_drops_the_header() -> None:
    text = render_prompt("parse", text="tune X", models="a, b", gpus="c")
    assert "Request: tune X" in text and "{{" not in text and not text.startswith("<!--")


def test_unknown_prompt_names_the_known_ones() -> None:
    with pytest.raises(UnknownPromptError, match="unknown prompt 'nope' \\(known: explain, parse, propose"):
        load_prompt("nope")


@pytest.mark.skipif(getattr(prompts, "__file__", None) is None,
                    reason="stale editable install maps 'prompts' as a namespace package; re-run pip install -e .")
def test_package_exports_the_loader() -> None:
    assert prompts.load_prompt is load_prompt and prompts.render_prompt is render_prompt
