"""A turn pod on the real node reaches a real model server (issue 14): llama.cpp's llama-server with
Qwen2.5-Coder-1.5B (tests/model_server.py) listens on the node IP, the host operator maps the task's model to it with
``UNICORE_OPENAI_ENDPOINTS`` (as the chart's ``provider.openai.endpoints`` does), and the turn container (the agent
image under containerd) calls it, runs the tool the model asks for and streams the answer to the task's live stream.
A retried model call or turn is tolerated and said (tests/model_retries.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from unicore.store.tasks import TaskStore
from unicore.store.token_stream import read_after

from tests.cluster.operator_harness import (
    StartOperator,
    Tasks,
    operator_factory,
    stored_messages,
    task_events,
    turn_pod_logs,
)
from tests.model_retries import report_retries
from tests.model_server import TOOL_ALIAS, ModelServer
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node, pytest.mark.model, pytest.mark.timeout(1800)]


@pytest.fixture
def node_model_server(tool_model_server: ModelServer) -> ModelServer:
    """The session's 1.5B (it ends a turn after a tool result: docs/models.md), on the node IP where pods reach it."""
    if tool_model_server.host == "127.0.0.1":
        pytest.fail("no non-loopback IPv4 address for a model server the real node's pods reach")
    return tool_model_server


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path,
                   node_model_server: ModelServer) -> Iterator[StartOperator]:
    endpoints = [{"models": [TOOL_ALIAS], "baseUrl": node_model_server.base_url}]
    env = {"UNICORE_OPENAI_ENDPOINTS": json.dumps(endpoints), "UNICORE_DEFAULT_GPUS": "0",
           "UNICORE_MAX_TURN_RETRIES": "1",
           # a prompt of ~1,400 tokens takes tens of seconds on one busy core
           "UNICORE_AGENT_EXTRA_ENV": json.dumps({"UNICORE_OPENAI_TIMEOUT": "600"})}
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env=env, pod_logs=True) as start:
        yield start


def settled(tasks: Tasks, name: str) -> dict[str, Any] | None:
    status = (tasks.get(name) or {}).get("status") or {}
    return status if status.get("phase") in ("Idle", "Failed") else None


def test_a_turn_pod_on_the_real_node_calls_the_real_model_runs_its_tool_and_streams(
    start_operator: StartOperator, tasks: Tasks, crd: Any, k8s_namespace: str, redis_client: redis.Redis,
    node_model_server: ModelServer,
) -> None:
    start_operator()
    task_id = f"{k8s_namespace}/writer"
    tasks.create("writer", {
        "model": f"openai:{TOOL_ALIAS}", "limits": {"summarizeTurns": False, "maxIterations": 4},
        "prompt": "Call write_file once with path hello.txt and content 'Hello from a pod'. "
                  "When you get the tool result, reply with the text: File written.",
    })

    status = wait_for(lambda: settled(tasks, "writer"), timeout=1200, interval=1,
                      what=f"task writer to settle (llama-server log: {node_model_server.log_path})")
    # a model call's further tries and a second turn attempt (UNICORE_MAX_TURN_RETRIES=1) pass, and are said
    failed_turns = [f"TurnFailed: {event.message}" for event in task_events(tasks, "writer", "TurnFailed")]
    report_retries(TaskStore(redis_client), [task_id], also=failed_turns)
    assert status["phase"] == "Idle", status
    assert "file written" in str(status.get("lastResponse") or "").lower(), status

    # the turn ran in a real container under the node's kubelet (its log is kept after the pod is gone)
    assert [log for log in turn_pod_logs(crd, k8s_namespace) if "writer" in log.parent.parent.name], \
        turn_pod_logs(crd, k8s_namespace)

    messages = stored_messages(redis_client, task_id)
    uses = [block["toolUse"] for m in messages if m["role"] == "assistant" for block in m["content"]
            if "toolUse" in block]
    assert [u["name"] for u in uses][:1] == ["write_file"], uses
    assert uses[0]["input"]["path"] == "hello.txt", uses
    results = [block["toolResult"] for m in messages for block in m["content"] if "toolResult" in block]
    assert results and results[0]["status"] == "success", results

    # the model's answer came through the pod's stream (SSE deltas published as they arrived), in pieces
    streamed = read_after(TaskStore(redis_client), task_id, "0", wait_seconds=0)
    texts = [e for e in streamed if e.kind == "text"]
    assert len(texts) >= 2 and "turn_end" in [e.kind for e in streamed], [e.kind for e in streamed]
    assert "file written" in "".join(e.text for e in texts).lower()
