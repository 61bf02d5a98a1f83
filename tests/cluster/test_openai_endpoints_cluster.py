"""The endpoint map on the real control plane: an operator with UNICORE_OPENAI_ENDPOINTS runs turn pods that reach
their own model's endpoint with the key from the Secret in the task's namespace (the local pod runner resolves the
secretKeyRef as a kubelet does), the Job holds no key value, and a model whose key Secret is missing in the namespace
fails with the provider's one-line reason as its last error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from unicore.store.reads import last_error

from tests.chat_endpoint import Endpoint
from tests.cluster.operator_harness import StartOperator, Tasks, kubectl, operator_factory
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture
def servers() -> Iterator[dict[str, Endpoint]]:
    found = {"vllm": Endpoint("vllm", "llama-3-8b", "key-of-vllm"),
             "hosted": Endpoint("hosted", "gpt-4o", "key-hosted")}
    for server in found.values():
        server.start()
    yield found
    for server in found.values():
        server.stop()


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path,
                   servers: dict[str, Endpoint]) -> Iterator[StartOperator]:
    endpoints = [
        {"models": ["llama-*"], "baseUrl": servers["vllm"].base_url,
         "apiKeySecret": {"name": "vllm-key", "key": "token"}},
        {"models": ["gpt-*"], "baseUrl": servers["hosted"].base_url,
         "apiKeySecret": {"name": "hosted-key", "key": "api-key"}},
        {"models": ["elsewhere-*"], "baseUrl": servers["hosted"].base_url,
         "apiKeySecret": {"name": "not-in-this-namespace", "key": "api-key"}},
    ]
    env = {"UNICORE_OPENAI_ENDPOINTS": json.dumps(endpoints), "UNICORE_DEFAULT_GPUS": "0",
           "UNICORE_MAX_TURN_RETRIES": "0", "UNICORE_AGENT_EXTRA_ENV": '{"UNICORE_OPENAI_MAX_ATTEMPTS": "1"}'}
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env=env, pod_logs=True) as start:
        yield start


def settled(tasks: Tasks, name: str) -> dict[str, Any] | None:
    status = (tasks.get(name) or {}).get("status") or {}
    return status if status.get("phase") in ("Idle", "Failed") else None


def test_each_task_reaches_its_models_endpoint_with_its_namespaces_key(
    start_operator: StartOperator, tasks: Tasks, crd: Any, k8s_namespace: str, servers: dict[str, Endpoint],
    redis_client: redis.Redis,
) -> None:
    for secret, key, value in (("vllm-key", "token", "key-of-vllm"), ("hosted-key", "api-key", "key-hosted")):
        kubectl(crd.kubeconfig, "-n", k8s_namespace, "create", "secret", "generic", secret,
                f"--from-literal={key}={value}")
    start_operator()
    no_summary = {"summarizeTurns": False}
    tasks.create("local", {"prompt": "hi", "model": "openai:llama-3-8b", "limits": no_summary})
    tasks.create("hosted", {"prompt": "hi", "model": "openai:gpt-4o", "limits": no_summary})
    tasks.create("elsewhere", {"prompt": "hi", "model": "openai:elsewhere-1", "limits": no_summary})

    local = wait_for(lambda: settled(tasks, "local"), timeout=120, what="task local to settle")
    hosted = wait_for(lambda: settled(tasks, "hosted"), timeout=120, what="task hosted to settle")
    assert (local["phase"], local["lastResponse"]) == ("Idle", "answered by vllm"), local
    assert (hosted["phase"], hosted["lastResponse"]) == ("Idle", "answered by hosted"), hosted
    for server in servers.values():
        assert server.seen == [{"path": "/v1/chat/completions", "auth": f"Bearer {server.key}", "model": server.model}]

    failed = wait_for(lambda: settled(tasks, "elsewhere"), timeout=120, what="task elsewhere to settle")
    assert failed["phase"] == "Failed", failed
    # the reason is the task's last error (the task API's summary, a parent's failure report, the pod's log)
    reason = last_error(redis_client, f"{k8s_namespace}/elsewhere") or ""
    assert "UNICORE_OPENAI_KEY_2 is not set" in reason and "'not-in-this-namespace'" in reason, reason
    assert len(servers["hosted"].seen) == 1  # no request went out without its key

    for job in tasks.jobs():
        env = job.spec.template.spec.containers[0].env
        text = json.dumps([item.to_dict() for item in env], default=str)
        assert "key-of-vllm" not in text and "key-hosted" not in text
    refs = {job.metadata.labels["unicore.dev/task"]: [
        (item.name, item.value_from.secret_key_ref.name) for item in job.spec.template.spec.containers[0].env
        if item.value_from is not None and item.value_from.secret_key_ref is not None and item.name != "REDIS_URL"]
        for job in tasks.jobs()}
    assert refs == {"local": [("UNICORE_OPENAI_KEY_0", "vllm-key")], "hosted": [("UNICORE_OPENAI_KEY_1", "hosted-key")],
                    "elsewhere": [("UNICORE_OPENAI_KEY_2", "not-in-this-namespace")]}
