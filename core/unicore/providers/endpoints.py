"""Several OpenAI-compatible endpoints: which base URL (and which API key) serves which ``openai:NAME`` model.

One install can use a vLLM pool per model and a hosted API: ``UNICORE_OPENAI_ENDPOINTS`` is a JSON list of entries

    [{"models": ["llama-3-70b", "llama-*"], "baseUrl": "http://vllm-llama.models.svc:8000/v1"},
     {"models": ["gpt-*"], "baseUrl": "https://api.openai.com/v1",
      "apiKeySecret": {"name": "openai-key", "key": "api-key"}, "apiKeyEnv": "UNICORE_OPENAI_KEY_1", "rpm": 500,
      "textToolCalls": false}]

``models`` holds exact names or globs (``*``, ``?``, ``[...]``, matched case-sensitively). A model name resolves to
the most specific entry: an exact name first, then the glob with the most literal characters, then the entry listed
first. A name that matches no entry uses the single endpoint of ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` (no default
and no entry: a ConfigError naming the configured models).

API keys never appear in the map: an entry names the environment variable that holds its key (``apiKeyEnv``). On
Kubernetes the operator takes the same map with ``apiKeySecret`` (a Secret in the task's namespace, name and key) and
gives a turn pod the map plus one ``secretKeyRef`` (``optional: true``) for the endpoint of its own task's model, in
``UNICORE_OPENAI_KEY_<entry index>`` unless the entry names its ``apiKeyEnv``. A Secret that does not exist in the
namespace leaves the variable unset, and :func:`openai_settings_for` says so in one line (docs/install.md).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from unicore.api import pod_env
from unicore.errors import ConfigError
from unicore.settings import EnvSettings

_SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GLOB_CHARS = frozenset("*?[")
_CLASS = re.compile(r"\[[^\]]*\]")


class SecretKeyRef(BaseModel):
    """A key of a Secret in the task's namespace (the endpoint's API key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    key: str

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if len(value) > 253 or not _SECRET_NAME.match(value):
            raise ValueError(f"{value!r} is not a Secret name (a DNS-1123 subdomain)")
        return value

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        if len(value) > 253 or not _SECRET_KEY.match(value):
            raise ValueError(f"{value!r} is not a Secret key (letters, digits, '-', '_' and '.')")
        return value


class Endpoint(BaseModel):
    """One OpenAI-compatible endpoint and the model names it serves."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)

    models: tuple[str, ...] = Field(min_length=1)
    base_url: str
    api_key_secret: SecretKeyRef | None = None
    api_key_env: str | None = None
    rpm: int | None = Field(None, ge=0)
    tpm: int | None = Field(None, ge=0)
    timeout: float | None = Field(None, gt=0, allow_inf_nan=False)
    # run tool calls these models write as text (unicore.providers.text_tool_calls); unset: the provider's own
    # UNICORE_OPENAI_TEXT_TOOL_CALLS (on). Off for servers whose parser always fills tool_calls.
    text_tool_calls: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_key_values(cls, data: Any) -> Any:
        if isinstance(data, dict) and ({"apiKey", "api_key"} & set(data)):
            raise ValueError("an API key never goes into the endpoint map: name its Secret (apiKeySecret) "
                             "or environment variable (apiKeyEnv)")
        return data

    @field_validator("models")
    @classmethod
    def _models(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not name or name != name.strip() or any(c.isspace() for c in name):
                raise ValueError(f"model name or glob {name!r} is empty or contains whitespace")
        if len(set(value)) != len(value):
            raise ValueError(f"a model name is listed twice in {list(value)}")
        return value

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http:// or https:// URL (e.g. http://vllm.models.svc:8000/v1)")
        return value

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

    def describe(self) -> str:
        return f"{self.base_url} (models {', '.join(self.models)})"


def specificity(pattern: str, name: str) -> tuple[int, int] | None:
    """How closely ``pattern`` matches ``name``: (1, 0) for the exact name, (0, literal characters) for a glob that
    matches it, None when it does not match."""
    if not _GLOB_CHARS & set(pattern):
        return (1, 0) if pattern == name else None
    if not fnmatch.fnmatchcase(name, pattern):
        return None
    literal = _CLASS.sub("", pattern).replace("*", "").replace("?", "")
    return (0, len(literal))


class EndpointMap(BaseModel):
    """The endpoints in the order they are listed; :meth:`lookup` finds a model's."""

    model_config = ConfigDict(frozen=True)

    endpoints: tuple[Endpoint, ...] = ()

    @model_validator(mode="after")
    def _each_pattern_once(self) -> EndpointMap:
        owner: dict[str, int] = {}
        for index, endpoint in enumerate(self.endpoints):
            for pattern in endpoint.models:
                if pattern in owner:
                    raise ValueError(f"model {pattern!r} is listed by endpoint {owner[pattern]} and endpoint {index}")
                owner[pattern] = index
        envs = [e.api_key_env for e in self.endpoints if e.api_key_env]
        if len(set(envs)) != len(envs):
            raise ValueError(f"two endpoints name the same apiKeyEnv ({sorted(envs)})")
        return self

    def __bool__(self) -> bool:
        return bool(self.endpoints)

    def lookup(self, name: str) -> tuple[int, Endpoint] | None:
        """(index, endpoint) of the most specific entry for model ``name``: the exact name, else the glob with the
        most literal characters, else the first listed; None when none matches."""
        best: tuple[tuple[int, int], int] | None = None
        for index, endpoint in enumerate(self.endpoints):
            for pattern in endpoint.models:
                score = specificity(pattern, name)
                if score is not None and (best is None or score > best[0]):
                    best = (score, index)
        return None if best is None else (best[1], self.endpoints[best[1]])

    def models(self) -> list[str]:
        return [pattern for endpoint in self.endpoints for pattern in endpoint.models]

    def key_env(self, index: int) -> str | None:
        """The variable that holds entry ``index``'s key in a turn pod (None: the endpoint takes no key)."""
        endpoint = self.endpoints[index]
        if endpoint.api_key_env:
            return endpoint.api_key_env
        return f"{pod_env.OPENAI_KEY_PREFIX}{index}" if endpoint.api_key_secret else None

    def for_pods(self) -> EndpointMap:
        """The map as a turn pod gets it: every entry with a Secret names the variable its key arrives in."""
        return EndpointMap(endpoints=tuple(
            e.model_copy(update={"api_key_env": self.key_env(i)}) for i, e in enumerate(self.endpoints)))

    def to_json(self) -> str:
        return json.dumps([e.model_dump(by_alias=True, exclude_none=True) for e in self.endpoints],
                          separators=(",", ":"))


def parse_endpoints(value: object, *, source: str = pod_env.OPENAI_ENDPOINTS) -> EndpointMap:
    """A JSON text (or an already decoded list) -> EndpointMap; a one-line ConfigError naming ``source`` and the
    entry for bad input (``source=""``: no prefix). Empty text = no endpoints."""
    source = f"{source}: " if source else ""
    if isinstance(value, EndpointMap):
        return value
    if isinstance(value, str):
        if not value.strip():
            return EndpointMap()
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{source}not valid JSON ({exc.msg} at character {exc.pos})") from None
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        entries = list(value)
    else:
        raise ConfigError(f"{source}must be a JSON list of endpoints, e.g. "
                          '[{"models": ["llama-*"], "baseUrl": "http://vllm:8000/v1"}]')
    try:
        return EndpointMap(endpoints=tuple(entries))
    except ValidationError as exc:
        raise ConfigError(f"{source}{_one_line(exc)}") from None


def _one_line(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        loc = [part for part in err["loc"] if part != "endpoints"]
        where = ""
        if loc and isinstance(loc[0], int):
            where = f"endpoint {loc[0]}"
            loc = loc[1:]
        field = ".".join(str(part) for part in loc)
        message = str(err["msg"]).removeprefix("Value error, ")
        problems.append(" ".join(part for part in (where, f"{field}:" if field else "", message) if part))
    return "; ".join(problems)


class EndpointEnvironment(EnvSettings):
    """The runtime's variable for the endpoint map (the keys are read from the variables the entries name)."""

    what: ClassVar[str] = "OpenAI-compatible endpoint map"

    endpoints: str = Field("", validation_alias=pod_env.OPENAI_ENDPOINTS)

    def endpoint_map(self) -> EndpointMap:
        return parse_endpoints(self.endpoints)


def openai_settings_for(name: str, env: Mapping[str, str] | None = None) -> Any:
    """The ``OpenAISettings`` of model ``openai:<name>``: its endpoint's from the map, else the default endpoint
    (``OPENAI_BASE_URL``); ConfigError when neither serves it or its key is missing. Everything an entry does not set
    (retries, the provider's other knobs) comes from the provider's own variables."""
    from unicore.providers.openai_compat import OpenAIEnvironment  # the provider owns its settings

    environ = os.environ if env is None else env
    endpoints = EndpointEnvironment.from_env(environ).endpoint_map()
    found = endpoints.lookup(name)
    provider_env = OpenAIEnvironment.from_env(environ)
    if found is None:
        if endpoints and not (provider_env.base_url or "").strip():
            raise ConfigError(
                f"no OpenAI-compatible endpoint serves model {name!r}: {pod_env.OPENAI_ENDPOINTS} lists "
                f"{', '.join(endpoints.models())} and OPENAI_BASE_URL (the default endpoint) is not set")
        return provider_env.settings()
    index, endpoint = found
    update: dict[str, Any] = {"base_url": endpoint.base_url, "api_key": None}
    key_env = endpoints.key_env(index)
    if key_env:
        key = (environ.get(key_env) or "").strip()
        if not key:
            raise ConfigError(_missing_key(name, endpoint, key_env))
        update["api_key"] = key
    for field in ("rpm", "tpm", "timeout", "text_tool_calls"):
        if getattr(endpoint, field) is not None:
            update[field] = getattr(endpoint, field)
    return provider_env.model_copy(update=update).settings()


def _missing_key(name: str, endpoint: Endpoint, key_env: str) -> str:
    text = f"model {name!r} uses the OpenAI-compatible endpoint {endpoint.base_url}, whose API key {key_env} is not set"
    secret = endpoint.api_key_secret
    if secret is not None:
        text += (f": on Kubernetes it comes from key {secret.key!r} of the Secret {secret.name!r} in the task's "
                 "namespace (missing there? the operator copies no keys between namespaces), and a turn pod gets "
                 "only its own task's model's key")
    return text
