"""Every ``PROJTUNE_*`` environment setting, in one pydantic-settings model; a flag given wins over its variable.

Why here: the lowest layer (projection < bench < tools < prompts < agent < evals < projtune,
tests/test_architecture.py) holds it because readers live in every layer above: ``bench``
(the measurement cache), ``tools`` (MCP token, tool deadline, profile folder), ``agent`` (home,
session lock, LLM endpoint).  The module imports nothing of the project and reads the environment
only when :func:`load_settings` is called (never at import), so tests may change variables freely.

Precedence: a flag (passed to :func:`load_settings` as a keyword, ``None`` meaning "not given") >
the environment variable > the default here.  A variable set to a value that is not valid is a
usage error (:class:`~projection.errors.ProjtuneError`, one line naming the variable, the value and
what is allowed), never a silent default; so is a ``PROJTUNE_*`` variable no field has (a misspelt name would
be ignored), with the nearest names.  An empty variable counts as unset.

The README's "Settings" table lists every field with its variable and flag (a test keeps them in step).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from projection.errors import ProjtuneError, unknown_name_message

ENV_PREFIX = "PROJTUNE_"

FLAGS: dict[str, str] = {
    "llm_base_url": "--llm-base-url (tune, chat)",
    "llm_api_key": "--llm-api-key (tune, chat)",
    "llm_model": "--llm-model (tune, chat)",
    "llm_timeout": "--llm-timeout (tune, chat)",
    "llm_deadline": "--llm-deadline (tune, chat)",
    "llm_context": "--llm-context (tune, chat)",
}
"""The CLI flag of each setting that has one (the README table shows the same)."""


class ProjtuneSettings(BaseSettings):
    """projtune's own settings (``PROJTUNE_<FIELD>``); generic variables such as ``OPENAI_API_KEY`` are never read."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, case_sensitive=False, extra="ignore",
                                      env_ignore_empty=True, validate_default=True)

    home: Path | None = Field(default=None, description="Folder of chat sessions and their locks "
                                                         "(default ~/.projtune).")
    session_lock_wait: float = Field(default=5.0, ge=0, le=3600, allow_inf_nan=False,
                                      description="Seconds a second `projtune chat` on the same session waits for "
                                                  "the first to close.")
    cache: Path | None = Field(default=None, description="Folder of the measured-mode cache "
                                                          "(default ~/.cache/projtune; measurements under bench/, "
                                                          "the anchored eval's fold fits under anchor-folds/).")
    profile_dir: Path | None = Field(default=None, description="Extra folder MCP/tool callers may name device "
                                                               "profiles in (beside the shipped ones).")
    mcp_token: SecretStr | None = Field(default=None, description="Bearer token `projtune mcp --http` requires on a "
                                                                  "non-loopback address.")
    tool_deadline: float = Field(default=120.0, gt=0, lt=86_400, allow_inf_nan=False,
                                 description="Seconds one MCP tool call may run before its work is cancelled.")
    llm_base_url: str | None = Field(default=None, description="OpenAI-compatible endpoint, e.g. "
                                                               "http://127.0.0.1:8080/v1. The LLM policy runs only "
                                                               "when this (or its flag) is set.")
    llm_api_key: SecretStr | None = Field(default=None, description="Key sent to that endpoint (local servers need "
                                                                    "none).")
    llm_model: str | None = Field(default=None, min_length=1, max_length=200,
                                  description="Model name sent to the endpoint (default gpt-4o-mini).")
    llm_timeout: float = Field(default=20.0, gt=0, le=3600, allow_inf_nan=False,
                               description="Wall-clock seconds of one LLM request: connecting, headers and body.")
    llm_deadline: float = Field(default=30.0, gt=0, le=3600, allow_inf_nan=False,
                                description="Seconds for all LLM requests of one tune (or chat turn); then the "
                                            "offline policy finishes and the answer says so.")
    llm_max_attempts: int = Field(default=4, ge=1, le=20, description="Attempts per LLM request (1 = no retry).")
    llm_retry_wait: float = Field(default=1.0, ge=0, le=60, allow_inf_nan=False,
                                  description="Backoff multiplier between LLM retries, seconds.")
    llm_context: int = Field(default=8192, ge=2048, le=1_048_576,
                             description="Context window of the endpoint's model, tokens: prompts are fitted "
                                         "below it (fewer tools, shorter history) and replies capped.")
    llm_stream: bool = Field(default=True, description="Stream replies (so an abandoned request is cancelled: the "
                                                       "server stops generating when the stream closes).")

    @field_validator("llm_base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.strip().lower().startswith(("http://", "https://")):
            raise ValueError("an http:// or https:// URL is allowed, e.g. http://127.0.0.1:8080/v1")
        return value.strip().rstrip("/") if value else value


def env_name(field: str) -> str:
    """The environment variable of a settings field, e.g. 'llm_base_url' -> 'PROJTUNE_LLM_BASE_URL'."""
    return ENV_PREFIX + field.upper()


def cache_folder(name: str) -> Path:
    """``$PROJTUNE_CACHE/<name>`` when set, else ``~/.cache/projtune/<name>``: the one place the cache root is
    resolved (measured mode's ``bench``, the anchored eval's ``anchor-folds``)."""
    root = load_settings().cache
    return (root.expanduser() if root else Path.home() / ".cache" / "projtune") / name


def load_settings(**flags: Any) -> ProjtuneSettings:
    """The settings: flags given (not None) over ``PROJTUNE_*`` variables over defaults.

    Raises:
        ProjtuneError: a variable or flag holds a value that is not allowed (one line: which, what, allowed).
    """
    given = {k: v for k, v in flags.items() if v is not None}
    unknown = sorted(set(given) - set(ProjtuneSettings.model_fields))
    if unknown:
        raise TypeError(f"unknown settings: {', '.join(unknown)}")
    known = sorted(env_name(field) for field in ProjtuneSettings.model_fields)
    stray = sorted(name for name in os.environ if name.upper().startswith(ENV_PREFIX) and name.upper() not in known)
    if stray:   # a misspelt name (..._LLM_BASEURL) would be ignored: the LLM never asked, and nothing said why
        raise ProjtuneError(unknown_name_message("setting", stray[0], known))
    try:
        return ProjtuneSettings(**given)
    except ValidationError as err:
        first = err.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "?"
        source = (FLAGS.get(field, "").split(" ")[0] or env_name(field)) if field in given else env_name(field)
        shown = "(hidden)" if "token" in field or "key" in field else repr(first.get("input"))
        info = ProjtuneSettings.model_fields.get(field)
        about = f"; {info.description}" if info is not None and info.description else ""
        raise ProjtuneError(f"{source}={shown} is not valid: {first['msg']}{about}") from None
