"""The endpoint map of OpenAI-compatible models (unicore.providers.endpoints): matching precedence, bad input in one
line, settings per model, and what resolve_model builds from it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from unicore.api.pod_env import OPENAI_ENDPOINTS as ENDPOINTS_ENV
from unicore.errors import ConfigError
from unicore.providers.endpoints import (
    EndpointMap,
    openai_settings_for,
    parse_endpoints,
    specificity,
)
from unicore.providers.openai_compat import OpenAICompatModel
from unicore.providers.registry import resolve_model

MAP = [
    {"models": ["llama-*"], "baseUrl": "http://vllm-llama:8000/v1"},
    {"models": ["llama-3-70b"], "baseUrl": "http://big:8000/v1/"},
    {"models": ["llama-3-*"], "baseUrl": "http://llama3:8000/v1"},
    {"models": ["*"], "baseUrl": "https://api.example.com/v1", "apiKeySecret": {"name": "hosted", "key": "api-key"},
     "rpm": 60, "tpm": 1000, "timeout": 30},
]


def base_url(endpoints: EndpointMap, name: str) -> str | None:
    found = endpoints.lookup(name)
    return None if found is None else found[1].base_url


def test_the_exact_name_wins_over_every_glob() -> None:
    endpoints = parse_endpoints(json.dumps(MAP))
    assert base_url(endpoints, "llama-3-70b") == "http://big:8000/v1"  # trailing slash dropped


def test_the_glob_with_more_literal_characters_wins_whatever_the_order() -> None:
    endpoints = parse_endpoints(json.dumps(MAP))
    assert base_url(endpoints, "llama-3-8b") == "http://llama3:8000/v1"
    assert base_url(endpoints, "llama-2-7b") == "http://vllm-llama:8000/v1"
    assert base_url(endpoints, "gpt-4o") == "https://api.example.com/v1"
    reversed_map = parse_endpoints(list(reversed(MAP)))
    assert base_url(reversed_map, "llama-3-8b") == "http://llama3:8000/v1"


def test_equally_specific_globs_go_to_the_first_listed() -> None:
    first = {"models": ["a*"], "baseUrl": "http://first"}
    second = {"models": ["*a"], "baseUrl": "http://second"}
    assert base_url(parse_endpoints([first, second]), "aa") == "http://first"
    assert base_url(parse_endpoints([second, first]), "aa") == "http://second"


def test_globs_are_case_sensitive_and_no_match_is_none() -> None:
    endpoints = parse_endpoints([{"models": ["Qwen/*"], "baseUrl": "http://q"}])
    assert base_url(endpoints, "Qwen/Qwen2.5-7B") == "http://q"
    assert endpoints.lookup("qwen/qwen2.5") is None
    assert specificity("Qwen/[Qq]wen*", "Qwen/qwen") == (0, 8)
    assert specificity("x", "x") == (1, 0) and specificity("x", "y") is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{not json", f"{ENDPOINTS_ENV}: not valid JSON"),
        ('{"models": ["a"]}', "must be a JSON list of endpoints"),
        ([{"baseUrl": "http://x"}], "endpoint 0 models: Field required"),
        ([{"models": [], "baseUrl": "http://x"}], "endpoint 0 models:"),
        ([{"models": ["a b"], "baseUrl": "http://x"}], "contains whitespace"),
        ([{"models": ["a"], "baseUrl": "vllm:8000"}], "endpoint 0 baseUrl: 'vllm:8000' is not an http:// or https://"),
        ([{"models": ["a"], "baseUrl": "http://x"}, {"models": ["a"], "baseUrl": "http://y"}],
         "model 'a' is listed by endpoint 0 and endpoint 1"),
        ([{"models": ["a"], "baseUrl": "http://x", "apiKey": "sk-secret"}], "an API key never goes into the endpoint"),
        ([{"models": ["a"], "baseUrl": "http://x", "apiKeySecret": {"name": "Bad_Name", "key": "k"}}],
         "endpoint 0 apiKeySecret.name:"),
        ([{"models": ["a"], "baseUrl": "http://x", "apiKeySecret": {"name": "s"}}], "apiKeySecret.key: Field required"),
        ([{"models": ["a"], "baseUrl": "http://x", "rpm": -1}], "endpoint 0 rpm:"),
        ([{"models": ["a"], "baseUrl": "http://x", "colour": "red"}], "endpoint 0 colour: Extra inputs"),
        ([{"models": ["a"], "baseUrl": "http://x", "apiKeyEnv": "K"},
          {"models": ["b"], "baseUrl": "http://y", "apiKeyEnv": "K"}], "the same apiKeyEnv"),
    ],
)
def test_bad_input_is_one_line_naming_the_entry(value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_endpoints(value)
    text = str(caught.value)
    assert message in text and "\n" not in text
    assert "sk-secret" not in text


def test_pods_get_key_variables_and_the_json_never_holds_a_key() -> None:
    endpoints = parse_endpoints(MAP + [{"models": ["own"], "baseUrl": "http://o", "apiKeyEnv": "MY_KEY"}])
    pods = endpoints.for_pods()
    assert [e.api_key_env for e in pods.endpoints] == [None, None, None, "UNICORE_OPENAI_KEY_3", "MY_KEY"]
    again = parse_endpoints(pods.to_json())
    assert again == pods
    assert json.loads(pods.to_json())[3]["apiKeySecret"] == {"name": "hosted", "key": "api-key"}


def env(**extra: str) -> dict[str, str]:
    pods = parse_endpoints(MAP).for_pods()
    return {ENDPOINTS_ENV: pods.to_json(), **extra}


def test_settings_come_from_the_models_endpoint_with_its_key_and_limits() -> None:
    settings = openai_settings_for("gpt-4o", env(UNICORE_OPENAI_KEY_3="sk-hosted", OPENAI_API_KEY="sk-default"))
    assert settings.base_url == "https://api.example.com/v1" and settings.api_key == "sk-hosted"
    assert (settings.limits.max_requests, settings.limits.max_tokens, settings.timeout) == (60, 1000, 30)
    local = openai_settings_for("llama-3-8b", env(UNICORE_OPENAI_KEY_3="sk-hosted", OPENAI_API_KEY="sk-default",
                                                   UNICORE_OPENAI_TIMEOUT="12", UNICORE_OPENAI_MAX_ATTEMPTS="2"))
    assert local.base_url == "http://llama3:8000/v1"
    assert local.api_key is None  # the default endpoint's key is not sent to another endpoint
    assert local.timeout == 12 and local.retry.max_attempts == 2  # what the entry leaves out: the provider's own


def test_text_tool_calls_is_a_per_endpoint_setting_over_the_providers_default() -> None:
    entries = [{"models": ["qwen-*"], "baseUrl": "http://llama:8080/v1"},
               {"models": ["gpt-*"], "baseUrl": "https://api.example.com/v1", "textToolCalls": False}]
    mapped = {ENDPOINTS_ENV: parse_endpoints(entries).for_pods().to_json()}
    assert openai_settings_for("qwen-7b", mapped).text_tool_calls is True  # the provider's default: on
    assert openai_settings_for("gpt-4o", mapped).text_tool_calls is False
    everywhere_off = {**mapped, "UNICORE_OPENAI_TEXT_TOOL_CALLS": "0"}
    assert openai_settings_for("qwen-7b", everywhere_off).text_tool_calls is False
    assert openai_settings_for("gpt-4o", {**mapped, ENDPOINTS_ENV: parse_endpoints(
        [{**entries[1], "textToolCalls": True}]).to_json(), "UNICORE_OPENAI_TEXT_TOOL_CALLS": "0"}).text_tool_calls


def test_a_missing_key_names_the_variable_and_the_secret_never_a_value() -> None:
    with pytest.raises(ConfigError) as caught:
        openai_settings_for("gpt-4o", env(OPENAI_API_KEY="sk-default"))
    text = str(caught.value)
    assert "UNICORE_OPENAI_KEY_3 is not set" in text and "'hosted'" in text and "'api-key'" in text
    assert "sk-default" not in text and "\n" not in text


def test_no_entry_uses_the_default_endpoint_and_without_one_names_the_models() -> None:
    only_llama = {ENDPOINTS_ENV: json.dumps(MAP[:3])}
    fallback = openai_settings_for("gpt-4o", {**only_llama, "OPENAI_BASE_URL": "http://default/v1",
                                               "OPENAI_API_KEY": "sk-d"})
    assert (fallback.base_url, fallback.api_key) == ("http://default/v1", "sk-d")
    with pytest.raises(ConfigError, match=r"no OpenAI-compatible endpoint serves model 'gpt-4o': "
                                          r"UNICORE_OPENAI_ENDPOINTS lists llama-\*, llama-3-70b, llama-3-\*"):
        openai_settings_for("gpt-4o", only_llama)
    with pytest.raises(ConfigError, match="needs OPENAI_BASE_URL"):
        openai_settings_for("gpt-4o", {})  # no map, no default: today's message


def test_resolve_model_builds_the_endpoints_model(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in env(UNICORE_OPENAI_KEY_3="sk-hosted").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://default/v1")
    big = resolve_model("openai:llama-3-70b")
    hosted = resolve_model("openai:gpt-4o")
    assert isinstance(big, OpenAICompatModel) and isinstance(hosted, OpenAICompatModel)
    assert big.settings.base_url == "http://big:8000/v1" and big.name == "llama-3-70b"
    assert (hosted.settings.base_url, hosted.settings.api_key) == ("https://api.example.com/v1", "sk-hosted")
    monkeypatch.setenv(ENDPOINTS_ENV, "[]")
    assert resolve_model("openai:gpt-4o").settings.base_url == "http://default/v1"  # type: ignore[attr-defined]
    monkeypatch.setenv(ENDPOINTS_ENV, "[{")
    with pytest.raises(ConfigError, match="UNICORE_OPENAI_ENDPOINTS: not valid JSON"):
        resolve_model("openai:gpt-4o")
