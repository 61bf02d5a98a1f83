"""Several OpenAI-compatible endpoints in real turns: two models of one install reach two different real HTTP servers
(stdlib http.server, each in its own thread, each answering only its own API key and model), a third name goes to the
default endpoint (OPENAI_BASE_URL), and a model whose key is missing fails its turn with a one-line reason. The map
and keys arrive as a turn pod gets them (UNICORE_OPENAI_ENDPOINTS from the operator, UNICORE_OPENAI_KEY_<i>)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from unicore.api.schema import TaskSpec
from unicore.providers.endpoints import parse_endpoints
from unicore.store.tasks import TaskStore
from unicore.turn.run import run_turn

from tests.chat_endpoint import Endpoint


@pytest.fixture
def endpoints(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Endpoint]]:
    servers = {
        "vllm": Endpoint("vllm", "llama-3-8b", "key-of-vllm"),
        "hosted": Endpoint("hosted", "gpt-4o", "key-of-hosted"),
        "default": Endpoint("default", "mistral-7b", "key-of-default"),
    }
    for server in servers.values():
        server.start()
    operator_map = parse_endpoints([
        {"models": ["llama-*"], "baseUrl": servers["vllm"].base_url, "apiKeySecret": {"name": "vllm", "key": "k"}},
        {"models": ["gpt-*"], "baseUrl": servers["hosted"].base_url, "apiKeySecret": {"name": "hosted", "key": "k"}},
        {"models": ["keyless-*"], "baseUrl": servers["hosted"].base_url, "apiKeySecret": {"name": "gone", "key": "k"}},
    ])
    monkeypatch.setenv("UNICORE_OPENAI_ENDPOINTS", operator_map.for_pods().to_json())  # what the operator gives pods
    monkeypatch.setenv("UNICORE_OPENAI_KEY_0", "key-of-vllm")
    monkeypatch.setenv("UNICORE_OPENAI_KEY_1", "key-of-hosted")
    monkeypatch.delenv("UNICORE_OPENAI_KEY_2", raising=False)  # its Secret is missing in this namespace
    monkeypatch.setenv("OPENAI_BASE_URL", servers["default"].base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "key-of-default")
    monkeypatch.setenv("UNICORE_OPENAI_MAX_ATTEMPTS", "1")
    try:
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def test_each_model_reaches_its_own_endpoint_with_its_own_key(
    endpoints: dict[str, Endpoint], redis_client: redis.Redis
) -> None:
    store = TaskStore(redis_client)
    for task_id, model in (("a", "openai:llama-3-8b"), ("b", "openai:gpt-4o"), ("c", "openai:mistral-7b")):
        store.create_task(TaskSpec(id=task_id, prompt="hello", model=model))
        outcome = run_turn(task_id, redis=redis_client, summarize=False)
        assert outcome.exit_code == 0, outcome.error
    finals = {task_id: store.messages(task_id)[-1].content[0]["text"] for task_id in "abc"}
    assert finals == {"a": "answered by vllm", "b": "answered by hosted", "c": "answered by default"}
    for server in endpoints.values():
        assert server.seen == [{"path": "/v1/chat/completions", "auth": f"Bearer {server.key}", "model": server.model}]


def test_a_model_whose_key_is_missing_fails_its_turn_saying_which_secret(
    endpoints: dict[str, Endpoint], redis_client: redis.Redis
) -> None:
    store = TaskStore(redis_client)
    store.create_task(TaskSpec(id="k", prompt="hello", model="openai:keyless-1"))
    outcome = run_turn("k", redis=redis_client, summarize=False)
    assert outcome.exit_code != 0
    assert "UNICORE_OPENAI_KEY_2 is not set" in outcome.error and "'gone'" in outcome.error
    assert all(not server.seen for server in endpoints.values())  # no request went out, no key was sent elsewhere
