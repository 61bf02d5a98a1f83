"""Waiting for a GPU (issue 10 #16), on the real control plane: the wait shows as Pending with the scheduler's
reason, and does not count against the turn timeout (the pod's deadline runs from the pod's start)."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.operator_harness import OperatorProcess, Tasks, install_agent_rbac, long_script, task_events
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

TURN_TIMEOUT = 20


@pytest.fixture
def operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    install_agent_rbac(crd.kubeconfig, k8s_namespace)
    proc = OperatorProcess(crd.kubeconfig, redis_url, k8s_namespace, tmp_path / "operator.log",
                           UNICORE_WATCHDOG_INTERVAL_SECONDS="1", UNICORE_PENDING_TIMEOUT_SECONDS="120",
                           UNICORE_WATCHDOG_GRACE_SECONDS="5", UNICORE_DEFAULT_GPUS="1").start()
    yield proc
    proc.stop()
    print(f"--- operator log ({proc.log_path}):\n{proc.log(200)}")


def gpu_hog(tasks: Tasks) -> None:
    """A pod holding all 4 GPUs of the GPU node."""
    tasks.core.create_namespaced_pod(tasks.namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpu-hog"},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                 "containers": [{"name": "hog", "image": "busybox", "command": ["sleep", "600"],
                                 "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}})
    wait_for(lambda: tasks.core.read_namespaced_pod("gpu-hog", tasks.namespace).status.phase == "Running",
             timeout=60, what="the GPU hog to run")


def test_a_turn_that_waits_for_a_gpu_is_pending_and_still_gets_its_whole_turn(
    operator: OperatorProcess, tasks: Tasks,
) -> None:
    gpu_hog(tasks)
    tasks.create("patient", {"prompt": "go", "model": "scripted", "script": long_script("patient", 4),
                             "limits": {"turnTimeoutSeconds": TURN_TIMEOUT}})
    [job] = wait_for(lambda: tasks.jobs(), timeout=60, what="the turn Job")

    def waiting() -> dict[str, Any] | None:
        status = (tasks.get("patient") or {}).get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
        if status.get("phase") == "Pending" and ready.get("reason") == "Unschedulable":
            return status
        return None

    status = wait_for(waiting, timeout=15, what="phase Pending with the scheduler's reason (not Running)")
    assert status["message"].startswith("turn Job patient-t1 is waiting to be scheduled: Unschedulable: "), status
    assert "Insufficient nvidia.com/gpu" in status["message"], status["message"]
    assert status["activeJob"] == "patient-t1"

    def job_age() -> float:
        return (datetime.datetime.now(datetime.UTC) - job.metadata.creation_timestamp).total_seconds()

    # wait longer than the whole turn timeout, then free the GPUs: the turn still gets its 20 s
    wait_for(lambda: job_age() > TURN_TIMEOUT + 5, timeout=60, what="the wait to outlast the turn timeout")
    assert tasks.phase("patient") == "Pending"
    tasks.core.delete_namespaced_pod("gpu-hog", tasks.namespace)
    wait_for(lambda: tasks.phase("patient") in ("Running", "Idle"), timeout=60, what="the turn to start")

    def settled() -> dict[str, Any] | None:
        current = (tasks.get("patient") or {}).get("status") or {}
        return current if current.get("phase") in ("Idle", "Failed") else None

    status = wait_for(settled, timeout=90, what="the turn to finish")
    assert status["phase"] == "Idle" and status["turns"] == 1 and status["failedAttempts"] == 0, status
    assert status["lastResponse"] == "Slow answer."
    assert [j.metadata.name for j in tasks.jobs()] == ["patient-t1"]
    assert not task_events(tasks, "patient", "TurnFailed") and not task_events(tasks, "patient", "PodReaped")


def test_a_turn_that_runs_past_its_timeout_is_stopped_counting_from_its_pods_start(
    operator: OperatorProcess, tasks: Tasks,
) -> None:
    """The turn timeout is still enforced: by the kubelet on a real node (the pod's activeDeadlineSeconds), and by
    the watchdog (here, where the local pod runner does not enforce a pod's deadline)."""
    tasks.create("slowpoke", {"prompt": "go", "model": "scripted", "gpus": 0, "script": long_script("slowpoke", 600),
                              "limits": {"turnTimeoutSeconds": 10}})
    [event] = wait_for(lambda: task_events(tasks, "slowpoke", "PodReaped"), timeout=90,
                       what="the turn to be stopped for its timeout")
    assert "deadline_exceeded" in event.message and "past its turn timeout" in event.message, event.message
    assert "activeDeadlineSeconds=10 from the pod's start" in event.message, event.message
