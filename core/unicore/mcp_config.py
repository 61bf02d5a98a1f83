"""MCP server definitions (docs/mcp.md): the shape of an ``MCPServer`` (``unicore.dev/v1alpha1``) and the
resolved list a turn gets in ``UNICORE_MCP_SERVERS``.

An MCPServer document (a local-mode YAML file, or the namespaced resource on Kubernetes: crds/mcpserver.yaml)::

    apiVersion: unicore.dev/v1alpha1
    kind: MCPServer
    metadata: {name: time}
    spec:
      command: python                 # stdio, local mode only: command + args + env
      args: [-m, mcp_server_time]
      # url: https://mcp.example.com/mcp   # or streamable HTTP, with headers / headersFromEnv / headersFrom
      timeoutSeconds: 30              # connecting, listing the tools, and each call (default 30)
      toolTimeoutSeconds: {slow_tool: 300}   # per tool, over timeoutSeconds

``headersFrom: [{name: Authorization, secretKeyRef: {name, key}}]`` (cluster) takes each header's value from a key
of a Secret in the task's namespace: the operator (``unicore_operator.mcp_servers``) passes them to the pod as
secretKeyRef variables and writes ``headersFromEnv: {<header>: <variable>}`` into the resolved definition, so no
value is ever in a Job and the operator reads no Secret. Local mode has no Secrets: ``headers`` (literal) or
``headersFromEnv`` (variables of the ``unicore`` command's environment). The resolved form (``ResolvedMCPServer``)
is ``{name, spec}`` with no ``headersFrom``. Every model forbids unknown fields, and every error is one line
(``one_line``).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from unicore.api import pod_env
from unicore.api.contract import API_VERSION
from unicore.api.contract import MCP_SERVER_KIND as KIND
from unicore.api.schema import validate_mcp_server_name
from unicore.errors import ConfigError

SEPARATOR = "__"  # the model sees a server's tool as <server>__<tool> (tools.mcp_tools.offered_names)
DEFAULT_TIMEOUT_SECONDS = 30.0
MAX_TIMEOUT_SECONDS = 3600.0
HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token (RFC 9110)
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SECRET_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
SECRET_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")

Seconds = Annotated[float, Field(gt=0, le=MAX_TIMEOUT_SECONDS, allow_inf_nan=False)]


class CamelModel(BaseModel):
    """camelCase in documents (``timeoutSeconds``), snake_case in Python; unknown fields are errors."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class SecretKeySelector(CamelModel):
    """A key of a Secret in the task's namespace."""

    name: str
    key: str

    @field_validator("name")
    @classmethod
    def _dns_name(cls, value: str) -> str:
        if len(value) > 253 or not SECRET_NAME_RE.match(value):
            raise ValueError(f"invalid Secret name {value[:80]!r}")
        return value

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        if len(value) > 253 or not SECRET_KEY_RE.match(value):
            raise ValueError(f"invalid Secret key {value[:80]!r}")
        return value


class HeaderFromSecret(CamelModel):
    """One ``headersFrom`` entry (cluster mode): header ``name`` gets the value of a Secret's key."""

    name: str
    secret_key_ref: SecretKeySelector

    @field_validator("name")
    @classmethod
    def _header_name(cls, value: str) -> str:
        if not HEADER_NAME_RE.match(value):
            raise ValueError(f"invalid header name {value[:80]!r}")
        return value


class MCPServerSpec(CamelModel):
    url: str | None = None  # streamable HTTP
    command: str | None = None  # stdio (local mode only)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    headers_from_env: dict[str, str] = Field(default_factory=dict)
    headers_from: list[HeaderFromSecret] | None = None
    timeout_seconds: Seconds = DEFAULT_TIMEOUT_SECONDS
    tool_timeout_seconds: dict[str, Seconds] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url must be an http:// or https:// URL with a host, not {value[:120]!r}")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("command must not be empty")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [name for name in value if not ENV_NAME_RE.match(name)]
        if bad:
            raise ValueError(f"invalid environment variable name(s): {', '.join(map(repr, bad))}")
        return value

    @field_validator("headers", "headers_from_env")
    @classmethod
    def _header_names(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [name for name in value if not HEADER_NAME_RE.match(name)]
        if bad:
            raise ValueError(f"invalid header name(s): {', '.join(map(repr, bad))}")
        if any("\r" in text or "\n" in text for text in value.values()):
            raise ValueError("a header value must not hold a line break")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerSpec:
        if (self.url is None) == (self.command is None):
            raise ValueError("give exactly one of url (streamable HTTP) or command (stdio)")
        if self.url is not None and (self.args or self.env):
            raise ValueError("args and env go with command (stdio), not with url")
        if self.command is not None and (self.headers or self.headers_from_env or self.headers_from):
            raise ValueError("headers go with url (streamable HTTP), not with command")
        bad = [name for name, var in self.headers_from_env.items() if not ENV_NAME_RE.match(var)]
        if bad:
            raise ValueError(f"headersFromEnv: invalid variable name for header(s) {', '.join(map(repr, bad))}")
        return self

    @property
    def transport(self) -> Literal["http", "stdio"]:
        return "http" if self.url is not None else "stdio"

    def call_timeout(self, tool: str) -> float:
        """How long one call of ``tool`` (its name on the server) may take."""
        return self.tool_timeout_seconds.get(tool, self.timeout_seconds)


class ObjectMeta(CamelModel):
    name: str
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    _check_name = field_validator("name")(lambda cls, v: validate_mcp_server_name(v))  # type: ignore[misc]


class MCPServer(CamelModel):
    """One MCPServer document."""

    api_version: str
    kind: str
    metadata: ObjectMeta
    spec: MCPServerSpec

    @field_validator("api_version")
    @classmethod
    def _api_version(cls, value: str) -> str:
        if value != API_VERSION:
            raise ValueError(f"must be {API_VERSION!r}")
        return value

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if value != KIND:
            raise ValueError(f"must be {KIND!r}")
        return value


class ResolvedMCPServer(CamelModel):
    """One entry of ``UNICORE_MCP_SERVERS``: a server's name and its spec with ``headersFrom`` resolved."""

    name: str
    spec: MCPServerSpec

    _check_name = field_validator("name")(lambda cls, v: validate_mcp_server_name(v))  # type: ignore[misc]

    @model_validator(mode="after")
    def _resolved(self) -> ResolvedMCPServer:
        if self.spec.headers_from is not None:
            raise ValueError("headersFrom is not resolved (the operator passes the Secret's keys as headersFromEnv)")
        return self

    def dump(self) -> dict[str, Any]:
        """The camelCase JSON form (what ``UNICORE_MCP_SERVERS`` and ``TaskSpec.mcp_definitions`` hold)."""
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=True)


def one_line(error: ValidationError, *, prefix: str = "") -> str:
    """A pydantic error as one line: ``where: what; where: what`` (the values given are never repeated: they may be
    header values)."""
    problems = []
    for item in error.errors():
        where = ".".join(to_camel(part) if isinstance(part, str) else str(part) for part in item["loc"])
        message = str(item["msg"]).removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown field"
        problems.append(f"{where}: {message}" if where else message)
    return prefix + "; ".join(problems)


def parse_document(data: Any, where: str, *, local: bool) -> MCPServer:
    """An MCPServer document (plain JSON values); ConfigError (one line) when it is not one. ``local``: local mode,
    where ``headersFrom`` (a Kubernetes Secret) cannot be resolved, so it is an error."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: an MCPServer document is a mapping with apiVersion, kind, metadata and spec")
    try:
        server = MCPServer.model_validate(data)
    except ValidationError as exc:
        name = data.get("metadata", {}).get("name") if isinstance(data.get("metadata"), dict) else None
        label = f"{where}: MCPServer {name!r}: " if isinstance(name, str) else f"{where}: "
        raise ConfigError(one_line(exc, prefix=label)) from None
    if local and server.spec.headers_from is not None:
        raise ConfigError(f"{where}: MCPServer {server.metadata.name!r}: headersFrom names a Kubernetes Secret, "
                          "which local mode does not have: use headers or headersFromEnv")
    return server


def resolved(server: MCPServer) -> ResolvedMCPServer:
    """The resolved definition of a document without ``headersFrom`` (local mode's documents)."""
    return ResolvedMCPServer(name=server.metadata.name, spec=server.spec)


def parse_resolved(text: str, *, local: bool) -> dict[str, ResolvedMCPServer]:
    """``UNICORE_MCP_SERVERS`` (a JSON list of resolved definitions) by name; "" = none. ConfigError (one line) for
    a bad value; ``local`` False (a turn pod): stdio servers are refused (they run only in local mode)."""
    if not text.strip():
        return {}
    variable = pod_env.MCP_SERVERS
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{variable} is not JSON: {exc}") from None
    if not isinstance(raw, list):
        raise ConfigError(f"{variable} must be a JSON list of MCP server definitions")
    servers: dict[str, ResolvedMCPServer] = {}
    for position, item in enumerate(raw):
        try:
            server = ResolvedMCPServer.model_validate(item)
        except ValidationError as exc:
            raise ConfigError(one_line(exc, prefix=f"{variable}[{position}]: ")) from None
        if server.name in servers:
            raise ConfigError(f"{variable}: MCP server {server.name!r} is defined twice")
        if not local and server.spec.transport == "stdio":
            raise ConfigError(f"{variable}: MCP server {server.name!r} is a stdio server (command), which runs only in "
                              "local mode; use a url")
        servers[server.name] = server
    return servers


def dump_resolved(servers: list[ResolvedMCPServer]) -> str:
    """The ``UNICORE_MCP_SERVERS`` value for ``servers``."""
    return json.dumps([server.dump() for server in servers], separators=(",", ":"))


__all__ = [
    "API_VERSION", "DEFAULT_TIMEOUT_SECONDS", "KIND", "MAX_TIMEOUT_SECONDS", "MCPServer", "MCPServerSpec",
    "HeaderFromSecret", "ObjectMeta", "ResolvedMCPServer", "SEPARATOR", "SecretKeySelector", "dump_resolved",
    "one_line", "parse_document",
    "parse_resolved", "resolved",
]
