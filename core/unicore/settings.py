"""The runtime's environment variables as pydantic-settings models (the operator's are in its ``settings`` module).

Every field names its variable as its ``validation_alias`` (:meth:`EnvSettings.env_var`); names are matched exactly
(case-sensitive) and an empty value counts as unset, as the hand-written ``os.environ`` reads did. Only
:meth:`EnvSettings.from_env` reads the environment: constructing a model directly (as tests do) takes the given
values and the defaults. A bad value raises a one-line ConfigError naming the variable.

- :class:`RuntimeSettings`: the CLI and the turn process (built once by ``unicore-turn`` and passed to
  ``run_turn``; library helpers that are called without one read just their own field at call time);
- :class:`RedisClientSettings`: the Redis client's retry budget and socket timeout (read when a client is built, by
  the operator too);
- the providers' variables: ``OpenAIEnvironment`` in ``unicore.providers.openai_compat`` and
  ``BedrockEnvironment`` in ``unicore.providers.bedrock``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import AliasChoices, AliasPath, BeforeValidator, Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources.utils import parse_env_vars

from unicore.api import pod_env
from unicore.errors import ConfigError

FALSE_WORDS = frozenset({"0", "false", "no", "off"})
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})


def _flag(value: object) -> object:
    """``0``/``false``/``no``/``off`` are off and ``1``/``true``/``yes``/``on`` on (any case); anything else is an
    error."""
    if isinstance(value, str):
        word = value.strip().lower()
        if word in FALSE_WORDS:
            return False
        if word in TRUE_WORDS:
            return True
        raise ValueError("expected 0/1, true/false, yes/no or on/off")
    return value


def _is_blank(value: object) -> bool:
    return isinstance(value, str) and not value.strip()


def _default_if_blank(cls: type[BaseSettings], value: object, info: ValidationInfo) -> object:
    """A value of only spaces counts as unset (an empty one already does: ``env_ignore_empty``)."""
    if _is_blank(value) and info.field_name is not None:
        return cls.model_fields[info.field_name].get_default(call_default_factory=True)
    return value


Flag = Annotated[bool, BeforeValidator(_flag)]


def _alias_names(alias: str | AliasPath | AliasChoices | None) -> list[str]:
    """The variable names of a field's ``validation_alias``, first choice first."""
    if alias is None:
        return []
    if isinstance(alias, str):
        return [alias]
    if isinstance(alias, AliasPath):
        return [str(alias.path[0])]
    return [name for choice in alias.choices for name in _alias_names(choice)]


class KeywordOnlySettings(BaseSettings):
    """A settings model that takes its values from keyword arguments only: its ``from_env``/``load_settings`` reads
    the environment (or the mapping it is given) itself. Shared by the runtime's and the operator's settings."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


class EnvSettings(KeywordOnlySettings):
    """Base of the runtime's settings models: see the module docstring."""

    model_config = SettingsConfigDict(
        frozen=True, extra="ignore", populate_by_name=True, case_sensitive=True, env_ignore_empty=True
    )
    # What the error message calls these settings.
    what: ClassVar[str] = "settings"

    @classmethod
    def env_var(cls, field: str) -> str:
        """The environment variable that sets ``field`` (the first, when several do)."""
        names = _alias_names(cls.model_fields[field].validation_alias)
        if not names:
            raise KeyError(f"{cls.__name__}.{field} is not set by an environment variable")
        return names[0]

    @classmethod
    def variables(cls) -> dict[str, str]:
        """Every variable these settings read -> its field."""
        found: dict[str, str] = {}
        for name, info in cls.model_fields.items():
            found.update(dict.fromkeys(_alias_names(info.validation_alias), name))
        return found

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, only: Collection[str] | None = None) -> Self:
        """The settings from ``environ`` (default ``os.environ``); ``only``: read just these fields (the others keep
        their defaults, so a bad value elsewhere does not matter). ConfigError for a bad value."""
        source = EnvSettingsSource(cls)
        if environ is not None:
            source.env_vars = parse_env_vars(
                environ, source.case_sensitive, source.env_ignore_empty, source.env_parse_none_str
            )
        values: dict[str, Any] = source()
        if only is not None:
            wanted = {var for var, field in cls.variables().items() if field in only}
            values = {key: value for key, value in values.items() if key in wanted}
        try:
            return cls(**values)
        except ValidationError as exc:
            raw = dict(values)
            problems = []
            for err in exc.errors():
                var = str(err["loc"][0]) if err["loc"] else "?"
                if var in cls.model_fields:
                    var = cls.env_var(var)
                shown = f"{var}={raw[var]!r}" if var in raw else var
                problems.append(f"{shown}: {err['msg']}")
            raise ConfigError(f"invalid {cls.what}: {'; '.join(problems)}") from None


class RuntimeSettings(EnvSettings):
    """The CLI's and the turn process's variables (README "Configuration", docs/CONTRACT.md "Python seams")."""

    what: ClassVar[str] = "runtime settings"

    redis_url: str | None = Field(None, validation_alias=pod_env.REDIS_URL)  # None: the embedded Redis (CLI)
    task_id: str | None = Field(None, validation_alias=pod_env.TASK_ID)  # unicore-turn's default task
    spawner: Literal["local", "kubernetes"] = Field("local", validation_alias=pod_env.SPAWNER)
    namespace: str | None = Field(None, validation_alias=pod_env.NAMESPACE)  # kubernetes spawner
    # The tree's workspace folder (a turn pod's /workspace); None = <home>/workspaces/<root task>.
    workspace: Path | None = Field(None, validation_alias=pod_env.WORKSPACE)
    # The embedded Redis, local logs and workspaces.
    home: Path = Field(default_factory=lambda: Path.home() / ".unicore", validation_alias="UNICORE_HOME")
    # A step (model call, tool call, drain) running longer than this counts as hung (unicore.turn.progress).
    stall_seconds: float = Field(900.0, gt=0, allow_inf_nan=False, validation_alias=pod_env.STALL_SECONDS)
    # 0 turns the end-of-turn summary off for every task (else spec.limits.summarizeTurns decides).
    summarize_turns: Flag = Field(True, validation_alias="UNICORE_SUMMARIZE_TURNS")
    # Custom tools: a comma list of package.module:ATTR (unicore.tools.registry).
    extra_tools: str = Field("", validation_alias="UNICORE_EXTRA_TOOLS")
    # run_command: the workbench's exec server socket (set by the Job builder), else local mode runs commands in a
    # bubblewrap sandbox over the workspace; UNICORE_COMMAND_SANDBOX=0 (or `unicore run --no-sandbox`): plain
    # subprocesses that can reach everything the user can (said loudly at start).
    exec_socket: str | None = Field(None, validation_alias=pod_env.EXEC_SOCKET)
    command_sandbox: Flag = Field(True, validation_alias="UNICORE_COMMAND_SANDBOX")
    # The MCP servers a turn may connect to: a JSON list of resolved definitions (unicore.mcp_config; the operator
    # fills it from MCPServer resources, the local supervisor from the tree's `unicore run --mcp-server` files).
    # Kept as text: parsed, with errors that never repeat header values, when a task uses MCP servers.
    mcp_servers: str = Field("", validation_alias=pod_env.MCP_SERVERS)
    # A warm turn pod (``unicore-turn --warm``, set by the operator's warm Job builder): its pool, its template's
    # hash, and how long it waits for a turn before it exits unused.
    warm_pool: str | None = Field(None, validation_alias=pod_env.WARM_POOL)
    warm_template: str = Field("", validation_alias=pod_env.WARM_TEMPLATE)
    warm_max_wait_seconds: float = Field(1800.0, gt=0, allow_inf_nan=False,
                                         validation_alias=pod_env.WARM_MAX_WAIT_SECONDS)
    # The log level of console entrypoints; None = the entrypoint's default (the CLI WARNING, others INFO).
    log_level: str | None = Field(None, validation_alias="UNICORE_LOG_LEVEL")
    # The live token stream of a task (unicore.store.token_stream): about this many entries are kept (0 = publish
    # nothing), and it expires this long after its last entry.
    live_stream_entries: int = Field(2000, ge=0, le=1_000_000, validation_alias="UNICORE_LIVE_STREAM_ENTRIES")
    live_stream_ttl_seconds: float = Field(3600.0, gt=0, allow_inf_nan=False,
                                           validation_alias="UNICORE_LIVE_STREAM_TTL_SECONDS")

    @field_validator("stall_seconds", "workspace", "log_level", "live_stream_entries", "live_stream_ttl_seconds",
                     mode="before")
    @classmethod
    def _blank(cls, value: object, info: ValidationInfo) -> object:
        return _default_if_blank(cls, value, info)

    @field_validator("home", mode="after")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()

    @field_validator("extra_tools", mode="after")
    @classmethod
    def _strip(cls, value: str) -> str:
        return value.strip()


class RedisClientSettings(EnvSettings):
    """The Redis client's knobs (``unicore.store.client``), read each time a client is built."""

    what: ClassVar[str] = "Redis client settings"

    # How long a command keeps retrying through connection errors and timeouts; 0 = no retries.
    retry_seconds: float = Field(30.0, ge=0, validation_alias="UNICORE_REDIS_RETRY_SECONDS")
    # The socket read timeout; 0 = none.
    socket_timeout: float = Field(15.0, ge=0, validation_alias="UNICORE_REDIS_SOCKET_TIMEOUT")

    @field_validator("retry_seconds", "socket_timeout", mode="before")
    @classmethod
    def _blank(cls, value: object, info: ValidationInfo) -> object:
        return _default_if_blank(cls, value, info)
