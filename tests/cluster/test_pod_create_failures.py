"""Turn Jobs that cannot create their pod (issue 10 #19), on the real control plane: the Job controller's
FailedCreate Event reaches the AgentTask's status (message and Ready reason) within seconds, and after the retry
budget the attempt counts as a failed turn."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.operator_harness import (
    StartOperator,
    Tasks,
    install_agent_rbac,
    kubectl,
    operator_factory,
    task_events,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[StartOperator]:
    """The operator, without installing the agents' ServiceAccount (each test sets the namespace up itself)."""
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env={"UNICORE_DEFAULT_GPUS": "0"},
                          agent_rbac=False, log_lines=200) as start:
        yield start


def ready(tasks: Tasks, name: str) -> dict[str, Any]:
    status = (tasks.get(name) or {}).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})


def says_why(tasks: Tasks, name: str, words: str) -> dict[str, Any] | None:
    """The status, once its message and Ready condition quote the FailedCreate Event's ``words``."""
    status = (tasks.get(name) or {}).get("status") or {}
    condition = ready(tasks, name)
    if words in str(status.get("message")) and condition.get("reason") == "FailedCreate" and words in str(
            condition.get("message")):
        return status
    return None


def test_a_namespace_without_the_agent_service_account(
    start_operator: StartOperator, tasks: Tasks,
) -> None:
    start_operator()
    tasks.create("nosa", {"prompt": "hi", "model": "scripted", "script": {"default": "ok"}})
    wait_for(lambda: tasks.jobs(), timeout=60, what="the turn Job")
    created = time.monotonic()
    status = wait_for(lambda: says_why(tasks, "nosa", 'serviceaccount "unicore-agent" not found'), timeout=10,
                      what="the status to say the pod cannot be created (no ServiceAccount)")
    assert time.monotonic() - created <= 10
    assert status["phase"] == "Pending" and status["activeJob"] == "nosa-t1", status
    assert status["message"].startswith("turn Job nosa-t1 cannot create its pod: FailedCreate: "), status["message"]


def test_a_resource_quota_of_zero_pods_then_the_task_fails_after_the_retry_budget(
    start_operator: StartOperator, tasks: Tasks, crd: Any, k8s_namespace: str,
) -> None:
    install_agent_rbac(crd.kubeconfig, k8s_namespace)
    kubectl(crd.kubeconfig, "create", "quota", "no-pods", "--hard=pods=0", "-n", k8s_namespace)
    start_operator(UNICORE_POD_CREATE_RETRY_SECONDS="4", UNICORE_MAX_TURN_RETRIES="0")
    tasks.create("quota", {"prompt": "hi", "model": "scripted", "script": {"default": "ok"}})
    wait_for(lambda: tasks.jobs(), timeout=60, what="the turn Job")
    status = wait_for(lambda: says_why(tasks, "quota", "exceeded quota: no-pods"), timeout=10,
                      what="the status to say the pod cannot be created (ResourceQuota)")
    assert status["phase"] == "Pending", status

    def failed() -> dict[str, Any] | None:
        current = (tasks.get("quota") or {}).get("status") or {}
        return current if current.get("phase") == "Failed" else None

    status = wait_for(failed, timeout=60, what="phase Failed once the retry budget is spent")
    assert "FailedCreate" in status["message"] and "exceeded quota: no-pods" in status["message"], status
    assert ready(tasks, "quota")["reason"] == "Failed"
    [event] = wait_for(lambda: task_events(tasks, "quota", "TurnFailed"), timeout=30, what="a TurnFailed Event")
    assert "quota-t1 failed (FailedCreate: " in event.message, event.message
    wait_for(lambda: not tasks.jobs(), timeout=60, what="the Job that could not create its pod to be deleted")
