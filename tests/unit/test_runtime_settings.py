"""The runtime's environment variables: every one in the README's configuration table sets a settings field, every
settings field is documented there, and bad values are one-line ConfigErrors naming the variable."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from unicore.errors import ConfigError
from unicore.providers.bedrock import BedrockEnvironment, BedrockSettings
from unicore.providers.endpoints import EndpointEnvironment
from unicore.providers.openai_compat import OpenAIEnvironment, OpenAISettings
from unicore.settings import EnvSettings, RedisClientSettings, RuntimeSettings
from unicore.turn.context_window import ContextSettings

ROOT = Path(__file__).resolve().parents[2]
ENV_NAME = re.compile(r"`((?:UNICORE_|OPENAI_|AWS_)[A-Z0-9_]+|REDIS_URL)`")
RUNTIME_WHERE = ("runtime", "turn process")
MODELS: tuple[type[EnvSettings], ...] = (
    RuntimeSettings, RedisClientSettings, OpenAIEnvironment, EndpointEnvironment, BedrockEnvironment, ContextSettings)

# variable -> (a value to set, the value its field then has, which is not the default)
SAMPLES: dict[str, tuple[str, Any]] = {
    "REDIS_URL": ("redis://r:6379/1", "redis://r:6379/1"),
    "UNICORE_TASK_ID": ("ns/task", "ns/task"),
    "UNICORE_SPAWNER": ("kubernetes", "kubernetes"),
    "UNICORE_NAMESPACE": ("team", "team"),
    "UNICORE_WARM_POOL": ("writer", "writer"),
    "UNICORE_WARM_TEMPLATE": ("0123abcd", "0123abcd"),
    "UNICORE_WARM_MAX_WAIT_SECONDS": ("60", 60.0),
    "UNICORE_WORKSPACE": ("/workspace", Path("/workspace")),
    "UNICORE_HOME": ("/var/unicore", Path("/var/unicore")),
    "UNICORE_STALL_SECONDS": ("2.5", 2.5),
    "UNICORE_SUMMARIZE_TURNS": ("0", False),
    "UNICORE_EXTRA_TOOLS": (" my_tools:TOOLS ", "my_tools:TOOLS"),
    "UNICORE_EXEC_SOCKET": ("/unicore-exec/exec.sock", "/unicore-exec/exec.sock"),
    "UNICORE_COMMAND_SANDBOX": ("0", False),
    "UNICORE_LOG_LEVEL": ("DEBUG", "DEBUG"),
    "UNICORE_MCP_SERVERS": ('[{"name": "t", "spec": {"url": "http://t/mcp"}}]',
                            '[{"name": "t", "spec": {"url": "http://t/mcp"}}]'),
    "UNICORE_LIVE_STREAM_ENTRIES": ("0", 0),
    "UNICORE_LIVE_STREAM_TTL_SECONDS": ("60", 60.0),
    "UNICORE_REDIS_RETRY_SECONDS": ("7.5", 7.5),
    "UNICORE_REDIS_SOCKET_TIMEOUT": ("0", 0.0),
    "OPENAI_BASE_URL": ("http://vllm:8000/v1", "http://vllm:8000/v1"),
    "OPENAI_API_KEY": ("sk-x", "sk-x"),
    "UNICORE_OPENAI_TIMEOUT": ("30", 30.0),
    "UNICORE_OPENAI_MAX_ATTEMPTS": ("2", 2),
    "UNICORE_OPENAI_RPM": ("60", 60),
    "UNICORE_OPENAI_TPM": ("1000", 1000),
    "UNICORE_OPENAI_TEXT_TOOL_CALLS": ("0", False),
    "UNICORE_OPENAI_ENDPOINTS": ('[{"models": ["a"], "baseUrl": "http://a"}]', '[{"models": ["a"], "baseUrl": "http://a"}]'),
    "AWS_REGION": ("eu-west-1", "eu-west-1"),
    "AWS_DEFAULT_REGION": ("us-east-2", "us-east-2"),
    "AWS_PROFILE": ("dev", "dev"),
    "UNICORE_BEDROCK_ENDPOINT_URL": ("http://localhost:9", "http://localhost:9"),
    "UNICORE_BEDROCK_READ_TIMEOUT": ("30", 30.0),
    "UNICORE_BEDROCK_MAX_ATTEMPTS": ("3", 3),
    "UNICORE_BEDROCK_RPM": ("50", 50),
    "UNICORE_BEDROCK_TPM": ("100000", 100000),
    "UNICORE_BEDROCK_LIMITS": ('{"nova-pro": {"rpm": 5}}', {"nova-pro": {"rpm": 5}}),
    "UNICORE_BEDROCK_MODEL_CACHE_TTL": ("60", 60),
    "UNICORE_BEDROCK_DISCOVERY": ("no", False),
    "UNICORE_CONTEXT_WINDOW_TOKENS": ("8192", 8192),
    "UNICORE_CONTEXT_WINDOWS": ('{"openai:qwen*": 4096}', '{"openai:qwen*": 4096}'),
    "UNICORE_COMPACT_AT": ("0.5", 0.5),
}


def settings_vars() -> dict[str, tuple[type[EnvSettings], str]]:
    """Every variable a runtime settings model reads -> (the model, its field)."""
    found: dict[str, tuple[type[EnvSettings], str]] = {}
    for model in MODELS:
        for var, field in model.variables().items():
            assert var not in found, f"{var} is read by two settings models"
            found[var] = (model, field)
    return found


def readme_runtime_vars() -> set[str]:
    """The variables of the README's configuration table whose 'where' column names the runtime or turn process."""
    found: set[str] = set()
    for line in (ROOT / "README.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and any(where in cells[1] for where in RUNTIME_WHERE):
            found |= set(ENV_NAME.findall(cells[0]))
    return found


def test_the_readme_documents_exactly_the_settings_variables() -> None:
    readme = readme_runtime_vars()
    assert {"REDIS_URL", "UNICORE_STALL_SECONDS", "UNICORE_BEDROCK_LIMITS"} <= readme  # the parser found the rows
    assert readme == set(settings_vars())


def test_every_variable_has_a_sample() -> None:
    assert set(SAMPLES) == set(settings_vars())


@pytest.mark.parametrize("var", sorted(SAMPLES))
def test_each_variable_sets_its_field(var: str) -> None:
    model, field = settings_vars()[var]
    raw, expected = SAMPLES[var]
    assert getattr(model.from_env({}), field) != expected, f"the sample for {var} must differ from the default"
    assert getattr(model.from_env({var: raw}), field) == expected
    assert var in (model.env_var(field), "AWS_DEFAULT_REGION")


def test_defaults_and_empty_values() -> None:
    runtime = RuntimeSettings.from_env({})
    assert (runtime.spawner, runtime.stall_seconds, runtime.summarize_turns) == ("local", 900.0, True)
    assert runtime.home == Path.home() / ".unicore" and runtime.workspace is None and runtime.redis_url is None
    redis_settings = RedisClientSettings.from_env({})
    assert (redis_settings.retry_seconds, redis_settings.socket_timeout) == (30.0, 15.0)
    # empty (or blank) is unset, as with the hand-written reads
    assert RuntimeSettings.from_env({"UNICORE_STALL_SECONDS": " ", "UNICORE_HOME": "", "UNICORE_SPAWNER": ""}) == (
        runtime
    )
    assert RedisClientSettings.from_env({"UNICORE_REDIS_RETRY_SECONDS": ""}) == redis_settings
    assert BedrockSettings.from_env({"AWS_REGION": "", "AWS_DEFAULT_REGION": "eu-west-1"}).region == "eu-west-1"
    assert BedrockSettings.from_env({"AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "eu-west-1"}).region == (
        "us-east-1"
    )
    openai = OpenAISettings.from_env({"OPENAI_BASE_URL": "http://x/"})
    assert (openai.timeout, openai.retry.max_attempts, openai.limits.max_requests) == (600.0, 8, None)


def test_names_are_case_sensitive_and_other_variables_ignored() -> None:
    assert RuntimeSettings.from_env({"unicore_spawner": "bogus", "UNICORE_NO_SUCH": "1"}).spawner == "local"


def test_only_reads_just_the_named_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    bad_elsewhere = {"UNICORE_SPAWNER": "bogus", "UNICORE_HOME": "/h"}
    assert RuntimeSettings.from_env(bad_elsewhere, only={"home"}).home == Path("/h")
    monkeypatch.setenv("UNICORE_STALL_SECONDS", "5")
    assert RuntimeSettings.from_env().stall_seconds == 5.0  # the process environment by default
    assert RuntimeSettings.from_env({}).stall_seconds == 900.0  # only the given mapping otherwise


@pytest.mark.parametrize(
    ("model", "environ", "var"),
    [
        (RuntimeSettings, {"UNICORE_STALL_SECONDS": "soon"}, "UNICORE_STALL_SECONDS"),
        (RuntimeSettings, {"UNICORE_STALL_SECONDS": "inf"}, "UNICORE_STALL_SECONDS"),
        (RuntimeSettings, {"UNICORE_SPAWNER": "docker"}, "UNICORE_SPAWNER"),
        (RuntimeSettings, {"UNICORE_SUMMARIZE_TURNS": "maybe"}, "UNICORE_SUMMARIZE_TURNS"),
        (RedisClientSettings, {"UNICORE_REDIS_RETRY_SECONDS": "-1"}, "UNICORE_REDIS_RETRY_SECONDS"),
        (RedisClientSettings, {"UNICORE_REDIS_SOCKET_TIMEOUT": "x"}, "UNICORE_REDIS_SOCKET_TIMEOUT"),
        (OpenAIEnvironment, {"UNICORE_OPENAI_MAX_ATTEMPTS": "0"}, "UNICORE_OPENAI_MAX_ATTEMPTS"),
        (OpenAIEnvironment, {"UNICORE_OPENAI_RPM": "many"}, "UNICORE_OPENAI_RPM"),
        (BedrockEnvironment, {"UNICORE_BEDROCK_LIMITS": "{not json"}, "UNICORE_BEDROCK_LIMITS"),
        (BedrockEnvironment, {"UNICORE_BEDROCK_DISCOVERY": "perhaps"}, "UNICORE_BEDROCK_DISCOVERY"),
        (BedrockEnvironment, {"UNICORE_BEDROCK_READ_TIMEOUT": "0"}, "UNICORE_BEDROCK_READ_TIMEOUT"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(
    model: type[EnvSettings], environ: dict[str, str], var: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        model.from_env(environ)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("invalid ")
    assert f"{var}={environ[var]!r}: " in message


def test_provider_errors_are_one_line() -> None:
    with pytest.raises(ConfigError, match="OPENAI_BASE_URL") as missing:
        OpenAISettings.from_env({})
    with pytest.raises(ConfigError, match=re.escape("UNICORE_BEDROCK_LIMITS['x']: max_requests: ")) as limits:
        BedrockSettings.from_env({"UNICORE_BEDROCK_LIMITS": '{"x": {"rpm": -1}}'})
    assert "\n" not in str(missing.value) and "\n" not in str(limits.value)
