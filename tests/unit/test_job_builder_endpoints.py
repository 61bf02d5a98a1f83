"""Turn pods and the endpoint map (OperatorSettings.openai_endpoints): the map goes in as JSON without any key, and
the pod gets one optional secretKeyRef, for its own task's model's endpoint, in its own namespace."""

from __future__ import annotations

import json
from typing import Any

import pytest
from unicore.errors import ConfigError
from unicore.providers.endpoints import parse_endpoints
from unicore_operator.job_builder import build_turn_job_spec
from unicore_operator.settings import OperatorSettings, load_settings

ENDPOINTS = [
    {"models": ["llama-*"], "baseUrl": "http://vllm-llama.models.svc:8000/v1",
     "apiKeySecret": {"name": "vllm-key", "key": "token"}},
    {"models": ["gpt-*", "o3"], "baseUrl": "https://api.openai.com/v1",
     "apiKeySecret": {"name": "openai", "key": "api-key"}, "rpm": 500},
    {"models": ["qwen-*"], "baseUrl": "http://qwen:8000/v1"},
    {"models": ["team-*"], "baseUrl": "https://team.example/v1", "apiKeyEnv": "TEAM_KEY"},
]
SETTINGS = OperatorSettings(redis_url="redis://redis:6379/0", openai_endpoints=json.dumps(ENDPOINTS))


def task(model: str, namespace: str = "team-a") -> dict[str, Any]:
    return {
        "apiVersion": "unicore.dev/v1alpha1",
        "kind": "AgentTask",
        "metadata": {"name": "demo", "namespace": namespace, "uid": "uid-1", "labels": {}},
        "spec": {"prompt": "hi", "model": model},
    }


def env_list(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job["spec"]["template"]["spec"]["containers"][0]["env"])


def key_refs(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e["valueFrom"]["secretKeyRef"] for e in env_list(job)
            if "secretKeyRef" in e.get("valueFrom", {}) and e["name"] != "REDIS_URL"}


def test_the_pod_gets_the_map_and_only_its_models_key() -> None:
    job = build_turn_job_spec(task("openai:gpt-4o"), 1, SETTINGS)
    assert key_refs(job) == {"UNICORE_OPENAI_KEY_1": {"name": "openai", "key": "api-key", "optional": True}}
    env = {e["name"]: e for e in env_list(job)}
    pod_map = parse_endpoints(env["UNICORE_OPENAI_ENDPOINTS"]["value"])
    assert [e.api_key_env for e in pod_map.endpoints] == ["UNICORE_OPENAI_KEY_0", "UNICORE_OPENAI_KEY_1", None,
                                                          "TEAM_KEY"]
    assert pod_map.lookup("gpt-4o") is not None and pod_map.lookup("gpt-4o")[1].rpm == 500  # type: ignore[index]
    llama = build_turn_job_spec(task("openai:llama-3-8b"), 1, SETTINGS)
    assert key_refs(llama) == {"UNICORE_OPENAI_KEY_0": {"name": "vllm-key", "key": "token", "optional": True}}


def test_no_key_ref_for_keyless_unmatched_or_other_providers() -> None:
    for model in ("openai:qwen-7b", "openai:mistral", "openai:team-x", "bedrock:claude-sonnet-4", "scripted"):
        job = build_turn_job_spec(task(model), 1, SETTINGS)
        assert key_refs(job) == {}, model
        assert "UNICORE_OPENAI_ENDPOINTS" in {e["name"] for e in env_list(job)}


def test_the_job_holds_no_key_value_and_stays_the_same_for_the_same_task() -> None:
    job = build_turn_job_spec(task("openai:gpt-4o"), 2, SETTINGS)
    assert job == build_turn_job_spec(task("openai:gpt-4o"), 2, SETTINGS)
    for entry in env_list(job):
        assert "sk-" not in json.dumps(entry)
    # the Secret is referenced by name only: the API server resolves it in the Job's (the task's) namespace
    assert job["metadata"]["namespace"] == "team-a"


def test_without_a_map_the_pod_env_is_unchanged() -> None:
    plain = OperatorSettings(redis_url="redis://redis:6379/0")
    names = {e["name"] for e in env_list(build_turn_job_spec(task("openai:gpt-4o"), 1, plain))}
    assert not {n for n in names if n.startswith("UNICORE_OPENAI")}


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"UNICORE_OPENAI_ENDPOINTS": "[{"}, "UNICORE_OPENAI_ENDPOINTS: Value error, not valid JSON"),
        ({"UNICORE_OPENAI_ENDPOINTS": '[{"models": ["a"], "baseUrl": "ftp://x"}]'},
         "UNICORE_OPENAI_ENDPOINTS: Value error, endpoint 0 baseUrl: 'ftp://x' is not an http"),
        ({"UNICORE_OPENAI_ENDPOINTS": json.dumps(ENDPOINTS),
          "UNICORE_AGENT_EXTRA_ENV": '{"UNICORE_OPENAI_KEY_0": "sk-plain"}'},
         "UNICORE_AGENT_EXTRA_ENV sets ['UNICORE_OPENAI_KEY_0']"),
        ({"UNICORE_OPENAI_ENDPOINTS": json.dumps(ENDPOINTS), "UNICORE_AGENT_EXTRA_ENV": '{"TEAM_KEY": "x"}'},
         "UNICORE_AGENT_EXTRA_ENV sets ['TEAM_KEY']"),
        ({"UNICORE_AGENT_EXTRA_ENV": '{"UNICORE_OPENAI_ENDPOINTS": "[]"}'}, "are set by the operator itself"),
    ],
)
def test_bad_operator_settings_are_one_line(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({"REDIS_URL": "redis://r", **environ})
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert "sk-plain" not in str(caught.value)
