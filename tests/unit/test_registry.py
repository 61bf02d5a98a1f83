"""Model specs: parsing (used by CRD / CLI validation) and resolution to Model objects."""

from __future__ import annotations

import re
from pathlib import Path

import boto3
import pytest
from unicore.errors import ConfigError
from unicore.providers.base import Model, ModelRequest
from unicore.providers.bedrock import BedrockModel, BedrockSettings
from unicore.providers.openai_compat import OpenAICompatModel, OpenAISettings
from unicore.providers.registry import (
    MODEL_SPEC_PATTERN,
    ModelSpec,
    ProviderSettings,
    parse_model_spec,
    resolve_model,
)


@pytest.mark.parametrize(
    ("spec", "provider", "name"),
    [
        ("scripted", "scripted", ""),
        ("scripted:examples/demo.yaml", "scripted", "examples/demo.yaml"),
        (" bedrock:claude-sonnet-4 ", "bedrock", "claude-sonnet-4"),
        (
            "bedrock:us.anthropic.claude-sonnet-4-20250514-v1:0",
            "bedrock",
            "us.anthropic.claude-sonnet-4-20250514-v1:0",
        ),
        (
            "bedrock:arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc",
            "bedrock",
            "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc",
        ),
        ("openai:Qwen/Qwen2.5-7B-Instruct", "openai", "Qwen/Qwen2.5-7B-Instruct"),
        ("Bedrock:nova-pro", "bedrock", "nova-pro"),
    ],
)
def test_parse_valid_specs(spec: str, provider: str, name: str) -> None:
    parsed = parse_model_spec(spec)
    assert parsed == ModelSpec(provider=provider, name=name)  # type: ignore[arg-type]
    assert re.match(MODEL_SPEC_PATTERN, str(parsed))  # the CRD pattern accepts what the parser accepts


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty model spec"),
        ("   ", "empty model spec"),
        ("bedrock", "needs a model name"),
        ("bedrock:", "needs a model name"),
        ("openai:  ", "needs a model name"),
        ("scripted:", "empty script path"),
        ("gpt-4o", "did you mean bedrock:gpt-4o"),
        ("anthropic:claude", "unknown model provider"),
        ("bedrock:claude sonnet", "whitespace"),
    ],
)
def test_parse_invalid_specs(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_model_spec(spec)
    assert message in str(info.value)
    if "provider" in message or "empty model spec" in message:
        assert "scripted:PATH" in str(info.value) and "bedrock:NAME" in str(info.value)
        assert "openai:NAME" in str(info.value)


def test_crd_pattern_rejects_what_the_parser_rejects() -> None:
    for bad in ("", "bedrock", "bedrock:", "gpt-4o", "anthropic:claude", "bedrock:a b"):
        assert not re.match(MODEL_SPEC_PATTERN, bad), bad


def test_scripted_from_task_record_and_from_file(tmp_path: Path) -> None:
    model = resolve_model("scripted", script={"default": "Bye.", "tasks": {"demo": [{"text": "Hi."}]}})
    assert isinstance(model, Model) and model.provider == "scripted"
    request = ModelRequest(task_id="demo", messages=[{"role": "user", "content": [{"text": "x"}]}])
    assert model.converse(request).content == [{"text": "Hi."}]

    path = tmp_path / "script.yaml"
    path.write_text('default: "From the file."\n')
    from_file = resolve_model(f"scripted:{path}")
    assert from_file.converse(request).content == [{"text": "From the file."}]

    with pytest.raises(ConfigError, match="does not exist"):
        resolve_model(f"scripted:{tmp_path / 'missing.yaml'}")
    with pytest.raises(ConfigError):
        resolve_model("scripted", script={"tasks": "not a mapping"})


def test_bedrock_and_openai_resolution() -> None:
    runtime = boto3.client(
        "bedrock-runtime", region_name="ap-southeast-2", aws_access_key_id="A", aws_secret_access_key="B"
    )
    bedrock_settings = BedrockSettings(
        region="ap-southeast-2", discover_models=False, client_factory=lambda s: runtime
    )
    model = resolve_model("bedrock:claude-sonnet-4", settings=bedrock_settings)
    assert isinstance(model, BedrockModel) and isinstance(model, Model)
    assert model.name == "apac.anthropic.claude-sonnet-4-20250514-v1:0"
    assert model.runner.coordinator is None  # without Redis: retries only, no shared throttling

    openai_settings = OpenAISettings(base_url="http://127.0.0.1:9/v1")
    both = ProviderSettings(bedrock=bedrock_settings, openai=openai_settings)
    model = resolve_model("openai:llama-3.1-8b", settings=both)
    assert isinstance(model, OpenAICompatModel) and model.name == "llama-3.1-8b"
    assert model.settings.base_url == "http://127.0.0.1:9/v1"
    assert resolve_model("bedrock:nova-pro", settings=both).name == "amazon.nova-pro-v1:0"

    with pytest.raises(ConfigError, match="unknown Bedrock model 'gpt-17'"):
        resolve_model("bedrock:gpt-17", settings=bedrock_settings)


def test_openai_without_base_url_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_BASE_URL"):
        resolve_model("openai:some-model")
