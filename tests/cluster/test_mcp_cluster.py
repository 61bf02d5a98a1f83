"""MCP tools on the real node (issue 17): a real third-party MCP server runs as a pod (mcp-server-time behind
mcp-proxy, the image of hack/images/Containerfile.mcp-time, deployed by examples/agents/mcp-time.yaml as a user
would), an MCPServer names it, and an AgentTask that lists it in ``spec.mcpServers`` has its turn pod (the agent
image under containerd) call the server's tool through the Service; the result lands in the task's history. A tool
outside the task's allow-list is never offered, and calling it gives the model an error result, not a failed turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.cluster.operator_harness import StartOperator, Tasks, kubectl, operator_factory, stored_messages
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

REPO = Path(__file__).resolve().parents[2]
SERVER_MANIFEST = REPO / "examples" / "agents" / "mcp-time.yaml"


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[StartOperator]:
    env = {"UNICORE_DEFAULT_GPUS": "0", "UNICORE_MAX_TURN_RETRIES": "0"}
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env=env, pod_logs=True) as start:
        yield start


def settled(tasks: Tasks, name: str) -> dict[str, Any] | None:
    status = (tasks.get(name) or {}).get("status") or {}
    return status if status.get("phase") in ("Idle", "Failed") else None


def tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [block["toolResult"] for m in messages for block in m["content"] if "toolResult" in block]


def server_ready(tasks: Tasks) -> bool:
    return any(p.status.phase == "Running" and all(c.ready for c in p.status.container_statuses or [])
               and (p.metadata.labels or {}).get("app.kubernetes.io/name") == "mcp-time" for p in tasks.pods())


def test_a_turn_pod_calls_a_real_mcp_server_running_as_a_pod(
    start_operator: StartOperator, tasks: Tasks, crd: Any, k8s_namespace: str, redis_client: redis.Redis,
) -> None:
    kubectl(crd.kubeconfig, "-n", k8s_namespace, "apply", "-f", str(SERVER_MANIFEST))
    wait_for(lambda: server_ready(tasks), timeout=180, interval=1, what="the mcp-time pod to be ready")
    start_operator()
    script = {"tasks": {"*": [
        {"tool_use": [{"name": "time__get_current_time", "input": {"timezone": "Asia/Tokyo"}}]},
        {"tool_use": [{"name": "time__convert_time", "input": {
            "source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}}]},
        {"echo_results": True},
    ]}}
    tasks.create("clock", {"prompt": "What time is it in Tokyo?", "model": "scripted", "script": script,
                           "limits": {"summarizeTurns": False},
                           "mcpServers": [{"name": "time", "tools": ["get_current_time"]}]})

    status = wait_for(lambda: settled(tasks, "clock"), timeout=300, interval=1, what="task clock to settle")
    assert status["phase"] == "Idle", status
    results = tool_results(stored_messages(redis_client, f"{k8s_namespace}/clock"))
    assert len(results) == 2, results
    first, second = results
    assert first["status"] == "success", first
    answer = json.loads(first["content"][0]["text"])  # what mcp-server-time returns
    assert answer["timezone"] == "Asia/Tokyo" and answer["datetime"].endswith("+09:00"), answer
    # convert_time is outside the allow-list: the server has it, the task may not use it
    assert second["status"] == "error", second
    assert "'convert_time' of MCP server 'time' is not in this task's allow-list" in second["content"][0]["text"]

    # the Job carried the server's definition, not any header value
    [job] = [j for j in tasks.jobs() if j.metadata.labels.get("unicore.dev/task") == "clock"]
    env = {e.name: e.value for e in job.spec.template.spec.containers[0].env}
    assert json.loads(env["UNICORE_MCP_SERVERS"]) == [
        {"name": "time", "spec": {"url": "http://mcp-time:8000/mcp", "timeoutSeconds": 20}}]
