"""Model specs -> Model objects.

Accepted specs (the task record's ``model`` field, ``--model``, the AgentTask ``spec.model``):

* ``scripted``            the deterministic scripted model, script taken from the task record
* ``scripted:PATH``       the scripted model with a YAML/JSON script file
* ``bedrock:NAME``        Amazon Bedrock: a short name (``claude-sonnet-4``), a model / inference-profile
  id, or an ARN
* ``openai:NAME``         an OpenAI-compatible endpoint, model NAME: the endpoint of the map
  ``UNICORE_OPENAI_ENDPOINTS`` that serves NAME (``unicore.providers.endpoints``), else ``OPENAI_BASE_URL``,
  ``OPENAI_API_KEY``

``parse_model_spec`` only checks the syntax (no network, no files): the CRD / CLI validation uses it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import redis
from pydantic import BaseModel, ConfigDict, Field

from unicore.errors import ConfigError
from unicore.providers.base import Model

Provider = Literal["scripted", "bedrock", "openai"]
PROVIDERS: tuple[str, ...] = ("scripted", "bedrock", "openai")
ACCEPTED = "scripted, scripted:PATH, bedrock:NAME (short name, model id or ARN), openai:NAME"

# The same rule as a regular expression, for the CRD's OpenAPI schema (``pattern``).
MODEL_SPEC_PATTERN = r"^(scripted(:.+)?|bedrock:[^\s]+|openai:[^\s]+)$"
_NAME = re.compile(r"^\S+$")


class ModelSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    provider: Provider
    name: str = ""  # scripted: the script path ("" = the task record's script)

    def __str__(self) -> str:
        return f"{self.provider}:{self.name}" if self.name else self.provider


class ProviderSettings(BaseModel):
    """Optional explicit provider settings (default: each provider reads its own from the environment)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    bedrock: Any | None = Field(default=None, description="unicore.providers.bedrock.BedrockSettings")
    openai: Any | None = Field(default=None, description="unicore.providers.openai_compat.OpenAISettings")


def parse_model_spec(spec: str) -> ModelSpec:
    """Check a model spec's syntax; raise ConfigError naming what is accepted."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"empty model spec: use one of {ACCEPTED}")
    text = spec.strip()
    provider, sep, name = text.partition(":")
    provider = provider.strip().lower()
    name = name.strip()
    if provider not in PROVIDERS:
        hint = f" (did you mean bedrock:{text}?)" if not sep else ""
        raise ConfigError(f"unknown model provider in {spec!r}{hint}: use one of {ACCEPTED}")
    if provider == "scripted":
        if sep and not name:
            raise ConfigError(f"model spec {spec!r} has an empty script path: use scripted or scripted:PATH")
        return ModelSpec(provider="scripted", name=name)
    if not name:
        raise ConfigError(f"model spec {spec!r} needs a model name: {provider}:NAME ({ACCEPTED})")
    if not _NAME.match(name):
        raise ConfigError(f"model name {name!r} in {spec!r} may not contain whitespace")
    return ModelSpec(provider=provider, name=name)  # type: ignore[arg-type]


def resolve_model(
    spec: str,
    *,
    redis: redis.Redis | None = None,
    script: dict[str, Any] | None = None,
    settings: ProviderSettings | Any | None = None,
) -> Model:
    """Build the Model for ``spec``. ``redis`` enables shared throttling, metrics and the model-name cache.

    ``settings`` may be a ProviderSettings, or directly a BedrockSettings / OpenAISettings for that provider.
    """
    parsed = parse_model_spec(spec)
    if parsed.provider == "scripted":
        from unicore.providers.scripted import ScriptedModel, load_script  # owned by the scripted provider

        if parsed.name:
            path = Path(parsed.name).expanduser()
            if not path.is_file():
                raise ConfigError(f"script file {parsed.name!r} (from model spec {spec!r}) does not exist")
            return ScriptedModel(load_script(path), name=str(parsed), redis_client=redis)
        # no script: only the default
        return ScriptedModel(load_script(script if script is not None else {}), redis_client=redis)
    if parsed.provider == "bedrock":
        from unicore.providers.bedrock import BedrockSettings, build_bedrock_model

        bedrock_settings = _pick(settings, "bedrock", BedrockSettings)
        return build_bedrock_model(parsed.name, settings=bedrock_settings, redis_client=redis)
    from unicore.providers.endpoints import openai_settings_for
    from unicore.providers.openai_compat import OpenAISettings, build_openai_model

    openai_settings = _pick(settings, "openai", OpenAISettings) or openai_settings_for(parsed.name)
    return build_openai_model(parsed.name, settings=openai_settings, redis_client=redis)


def _pick(settings: Any, field: str, kind: type) -> Any:
    if settings is None:
        return None
    if isinstance(settings, kind):
        return settings
    if isinstance(settings, ProviderSettings):
        return getattr(settings, field)
    return None
