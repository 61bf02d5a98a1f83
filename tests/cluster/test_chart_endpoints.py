"""`helm template` of provider.openai.endpoints: the chart renders the endpoint map into the operator's
UNICORE_OPENAI_ENDPOINTS, which the operator's own settings read back, and the turn pods it then builds reference each
key Secret by name in their own namespace. Cluster marker: the helm binary comes with the control-plane binaries;
no server is started."""

from __future__ import annotations

import json
from typing import Any

import pytest
from unicore_operator.job_builder import build_turn_job_spec
from unicore_operator.settings import load_settings

from tests.cluster.test_chart_render import CHART, KUBE_VERSION, env_of, find, helm, one, render

pytestmark = pytest.mark.cluster

ENDPOINTS = [
    {"models": ["llama-*", "llama-3-70b"], "baseUrl": "http://vllm-llama.models.svc:8000/v1",
     "apiKeySecret": {"name": "vllm-key", "key": "token"}},
    {"models": ["gpt-*"], "baseUrl": "https://api.openai.com/v1",
     "apiKeySecret": {"name": "openai-key", "key": "api-key"}, "rpm": 500, "timeout": 120},
    {"models": ["qwen-*"], "baseUrl": "http://qwen.models.svc:9000/v1"},
]
ARGS = ["--set-json", f"provider.openai.endpoints={json.dumps(ENDPOINTS)}",
        "--set", "rbac.clusterWide=true", "--set", "agent.extraNamespaces={team-a}"]


def operator_environ(objs: list[dict[str, Any]]) -> dict[str, str]:
    env = env_of(one(objs, "Deployment", "unicore-operator"))
    return {name: value for name, value in env.items() if isinstance(value, str)} | {"REDIS_URL": "redis://r"}


def test_lint_with_endpoints() -> None:
    helm("lint", str(CHART), "--strict", "--namespace", "uc", "--kube-version", KUBE_VERSION, *ARGS)


def test_the_operator_reads_the_rendered_map_and_turn_pods_reference_the_key_secret() -> None:
    objs = render(*ARGS)
    settings = load_settings(operator_environ(objs))
    endpoints = settings.openai_endpoints
    assert [e.base_url for e in endpoints.endpoints] == [e["baseUrl"] for e in ENDPOINTS]
    found = endpoints.lookup("gpt-4o")
    assert found is not None and found[1].rpm == 500 and found[1].timeout == 120
    task = {"metadata": {"name": "t", "namespace": "team-a", "uid": "u", "labels": {}},
            "spec": {"prompt": "hi", "model": "openai:llama-3-70b"}}
    container = build_turn_job_spec(task, 1, settings)["spec"]["template"]["spec"]["containers"][0]
    refs = [e for e in container["env"] if e["name"].startswith("UNICORE_OPENAI_KEY_")]
    assert refs == [{"name": "UNICORE_OPENAI_KEY_0",
                     "valueFrom": {"secretKeyRef": {"name": "vllm-key", "key": "token", "optional": True}}}]
    # the chart makes no Secret of its own for endpoint keys: they are the admin's, per namespace
    assert not [s for s in find(objs, "Secret") if s["metadata"]["name"] in ("vllm-key", "openai-key")]


def test_turn_pods_may_reach_each_endpoints_port() -> None:
    objs = render(*ARGS)
    for namespace in ("uc", "team-a"):
        policies = [p for p in find(objs, "NetworkPolicy", namespace=namespace)
                    if "Egress" in p["spec"].get("policyTypes", [])]
        ports = {port["port"] for p in policies for rule in p["spec"].get("egress", [])
                 for port in rule.get("ports", [])}
        assert {8000, 443, 9000} <= ports, (namespace, ports)


def test_without_endpoints_the_map_is_empty() -> None:
    assert load_settings(operator_environ(render())).openai_endpoints.endpoints == ()


@pytest.mark.parametrize(
    "bad",
    [
        [{"models": ["a"], "baseUrl": "http://x", "apiKey": "sk-literal"}],  # keys go into Secrets
        [{"models": ["a"]}],
        [{"models": [], "baseUrl": "http://x"}],
        [{"models": ["a"], "baseUrl": "vllm:8000"}],
        [{"models": ["a"], "baseUrl": "http://x", "apiKeySecret": {"name": "s"}}],
    ],
)
def test_schema_rejects_bad_endpoints(bad: list[dict[str, Any]]) -> None:
    proc = helm("template", "uc", str(CHART), "--namespace", "uc", "--kube-version", KUBE_VERSION,
                "--set-json", f"provider.openai.endpoints={json.dumps(bad)}", check=False)
    assert proc.returncode != 0 and "endpoints" in proc.stderr, proc.stderr
