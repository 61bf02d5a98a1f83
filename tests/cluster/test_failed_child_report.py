"""A child that goes Failed tells its parent (issue 10, item 14): the parent's model learns which child failed and
why, and the parent is not left Idle and Ready with a report missing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.cluster.operator_harness import OperatorProcess, Tasks, install_agent_rbac, stored_messages
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture
def strict_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Any:
    install_agent_rbac(crd.kubeconfig, k8s_namespace)
    proc = OperatorProcess(crd.kubeconfig, redis_url, k8s_namespace, tmp_path / "operator.log",
                           UNICORE_MAX_TURN_RETRIES="0").start()
    yield proc
    proc.stop()
    print(f"--- operator log ({proc.log_path}):\n{proc.log(60)}")


def test_a_failed_child_reports_its_failure_to_the_parent(
    strict_operator: OperatorProcess, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    script = {"default": "ok", "tasks": {"boss": [{"text": "waiting for my worker"}, {"echo": True}]}}
    root = tasks.create("boss", {"prompt": "delegate", "gpus": 0, "script": script})
    wait_for(lambda: tasks.phase("boss") == "Idle", timeout=90, what="the root's first turn")
    tasks.create("boss-w", {"prompt": "work", "gpus": 0, "model": "openai:no-endpoint",
                            "parentRef": {"name": "boss", "uid": root["metadata"]["uid"]}})
    wait_for(lambda: tasks.phase("boss-w") == "Failed", timeout=90, what="the child to fail")

    def told() -> list[str]:
        texts = [b["text"] for m in stored_messages(redis_client, f"{k8s_namespace}/boss") if m["role"] == "user"
                 for b in m["content"] if "text" in b]
        return [t for t in texts if t.startswith(f"[SYSTEM] Child task {k8s_namespace}/boss-w has FAILED")]

    wait_for(lambda: told() and tasks.phase("boss") == "Idle", timeout=90,
             what=f"the root to read the failure (phases {tasks.all_phases()})")
    assert len(told()) == 1, json.dumps(told())
    assert "OPENAI_BASE_URL" in told()[0] or "base" in told()[0].lower()  # why
    assert "has FAILED" in (tasks.get("boss") or {}).get("status", {}).get("lastResponse", "") or \
        "has FAILED" in redis_client.hget(f"uc:{{{k8s_namespace}/boss}}:task", "last_response")
