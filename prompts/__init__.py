"""Prompts of the tuning agent, one markdown file per prompt, versioned with the code.

Each file starts with a header line ``<!-- prompt: NAME, version: N -->``.  Placeholders are
``{{name}}`` (double braces, so JSON examples in a prompt need no escaping).
"""

from __future__ import annotations

from prompts.loader import UnknownPromptError, load_prompt, prompt_names, prompt_version, render_prompt

__all__ = ["UnknownPromptError", "load_prompt", "prompt_names", "prompt_version", "render_prompt"]
