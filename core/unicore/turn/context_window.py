"""The model's context window and when a turn compacts its history (``unicore.turn.compaction``).

``ContextSettings`` (pydantic-settings, read by ``unicore-turn`` and ``run_turn``):

- ``UNICORE_CONTEXT_WINDOWS``: a JSON object, model name or glob -> window in tokens (``{"openai:qwen*": 32768,
  "claude-*": 200000}``); a key matches the task's model spec (``openai:NAME``) or the bare name; the most specific
  glob wins (the scripted model's rule: exact, then more literal characters);
- ``UNICORE_CONTEXT_WINDOW_TOKENS``: the window of every other model;
- ``UNICORE_COMPACT_AT`` (default 0.75): a request whose estimated input tokens pass this share of the window is
  compacted first.

Precedence for one model: the map, then the model's own ``context_window`` (the scripted model's script sets it:
``context_window: 2000``), then ``UNICORE_CONTEXT_WINDOW_TOKENS``, then the built-in default by model name
(``DEFAULTS``), then by provider.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any, ClassVar

from pydantic import Field, ValidationInfo, field_validator

from unicore.glob_order import specificity
from unicore.settings import EnvSettings, _default_if_blank

# Built-in windows by model-name glob (matched against the name without its provider), then by provider. A
# convenience: a deployment that knows better sets UNICORE_CONTEXT_WINDOWS.
DEFAULTS: dict[str, int] = {
    "*claude*": 200_000,
    "*nova-premier*": 1_000_000,
    "*nova-pro*": 300_000,
    "*nova-lite*": 300_000,
    "*nova-micro*": 128_000,
    "*llama3-1*": 128_000,
    "*llama3-3*": 128_000,
    "*llama3-8b*": 8_192,
    "*llama3-70b*": 8_192,
    "*mistral-large*": 32_000,
    "*deepseek*": 128_000,
    "*gpt-4o*": 128_000,
    "*gpt-4.1*": 1_000_000,
    "*qwen2.5*": 32_768,
}
PROVIDER_DEFAULTS: dict[str, int] = {"bedrock": 200_000, "openai": 32_768, "scripted": 1_000_000}
FALLBACK_WINDOW = 32_768
MIN_WINDOW = 256  # below this no request (system prompt + one message) fits


class ContextSettings(EnvSettings):
    """The context-window variables (module docstring)."""

    what: ClassVar[str] = "context window settings"

    window_tokens: int | None = Field(None, ge=MIN_WINDOW, validation_alias="UNICORE_CONTEXT_WINDOW_TOKENS")
    # A JSON object kept as text (pydantic-settings would decode a dict field itself, failing without the variable's
    # name); parsed and checked by the validator, read through ``windows``.
    windows_json: str = Field("", validation_alias="UNICORE_CONTEXT_WINDOWS")
    compact_at: float = Field(0.75, gt=0.05, le=1.0, allow_inf_nan=False, validation_alias="UNICORE_COMPACT_AT")

    @field_validator("window_tokens", "compact_at", mode="before")
    @classmethod
    def _blank(cls, value: object, info: ValidationInfo) -> object:
        return _default_if_blank(cls, value, info)

    @field_validator("windows_json", mode="after")
    @classmethod
    def _check_map(cls, value: str) -> str:
        _parse_windows(value)
        return value

    @property
    def windows(self) -> dict[str, int]:
        return _parse_windows(self.windows_json)

    def window_for(self, model_spec: str, own_window: int | None = None) -> int:
        """The context window of ``model_spec`` (``provider:name`` or ``scripted``); ``own_window``: what the model
        itself declares (the scripted model's ``context_window``)."""
        provider, _, name = model_spec.partition(":")
        picked = _most_specific(self.windows, (model_spec, name or provider))
        if picked is not None:
            return self.windows[picked]
        if own_window:
            return own_window
        if self.window_tokens:
            return self.window_tokens
        if provider != "scripted":
            by_name = _most_specific(DEFAULTS, (name or provider,))
            if by_name is not None:
                return DEFAULTS[by_name]
        return PROVIDER_DEFAULTS.get(provider, FALLBACK_WINDOW)

    def limit_for(self, model_spec: str, own_window: int | None = None) -> tuple[int, int]:
        """(window, the estimated input tokens a request may have before it is compacted)."""
        window = self.window_for(model_spec, own_window)
        return window, int(window * self.compact_at)


def _parse_windows(text: str) -> dict[str, int]:
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise ValueError('expected a JSON object such as {"openai:qwen*": 32768}')
    bad = [str(k) for k, v in data.items() if isinstance(v, bool) or not isinstance(v, int) or v < MIN_WINDOW]
    if bad:
        raise ValueError(f"windows must be whole numbers of at least {MIN_WINDOW} tokens: {', '.join(bad)}")
    return {str(k): int(v) for k, v in data.items()}


def _most_specific(patterns: dict[str, Any], names: tuple[str, ...]) -> str | None:
    matching = [p for p in patterns if any(fnmatch.fnmatchcase(n, p) for n in names)]
    return min(matching, key=specificity, default=None)


__all__ = ["ContextSettings", "DEFAULTS", "PROVIDER_DEFAULTS"]
