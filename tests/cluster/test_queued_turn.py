"""A turn Job held by its queue (issue 12 #3), now by Kueue v0.17's real manager (issue 29 #5;
tests/cluster/kueue_fixture.py), on the real local control plane with the real node: the released turn runs as a
real container.

The task asks for 1 GPU in LocalQueue ``gpu-queue`` while its ClusterQueue has a quota of 0 GPUs: Kueue's webhook
suspends the turn Job at creation (the operator creates it not suspended and never touches ``spec.suspend``) and
Kueue holds its Workload; raising the quota to 1 GPU makes Kueue admit it and release the Job.

- held for longer than the Pending threshold (several watchdog scans past it): not reaped; the task is Pending with
  Ready reason ``Queued`` naming the Job and the queue; once admitted, the turn runs once;
- with ``UNICORE_ADMISSION_TIMEOUT_SECONDS``: a Job held longer is reaped as ``admission_timeout`` (a failed
  attempt) and the task's next Job is held again.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from unicore_devcluster import kueue as kq

from tests.cluster.operator_harness import StartOperator, Tasks, operator_factory, stored_messages, task_events
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

QUEUE = kq.LOCAL_QUEUE
PENDING = 6.0  # the watchdog's Pending threshold here: a held Job outlives it several times over
WATCHDOG_ENV = {
    "UNICORE_WATCHDOG_INTERVAL_SECONDS": "1",
    "UNICORE_PENDING_TIMEOUT_SECONDS": f"{PENDING:g}",
    "UNICORE_HEARTBEAT_TIMEOUT_SECONDS": "25",
    "UNICORE_WATCHDOG_GRACE_SECONDS": "2",
    "UNICORE_MAX_REAPS": "5",
    "UNICORE_DEFAULT_GPUS": "0",
}
ANSWER = "Answered after admission."


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path, port: int,
                   kueue: kq.KueueManager) -> Iterator[StartOperator]:
    kueue.ensure_queues(k8s_namespace, gpus=0)  # no GPU quota: a 1-GPU turn Job waits in the queue
    env = {"UNICORE_HTTP_PORT": str(port), **WATCHDOG_ENV}
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env=env, pod_logs=True) as start:
        yield start


def last_scan(port: int) -> float:
    """When the watchdog's last scan ended (its gauge; 0 before the first)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "unicore_watchdog_last_scan_timestamp_seconds":
                return float(sample.value)
    return 0.0


def ready_of(status: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})


def queued_status(tasks: Tasks, name: str) -> dict[str, Any] | None:
    status = (tasks.get(name) or {}).get("status") or {}
    return status if status.get("phase") == "Pending" and ready_of(status).get("reason") == "Queued" else None


def test_a_turn_job_held_by_its_queue_past_the_pending_threshold_is_not_reaped_and_runs_once_released(
    start_operator: StartOperator, tasks: Tasks, port: int, redis_client: redis.Redis, k8s_namespace: str,
    kueue: kq.KueueManager,
) -> None:
    start_operator()
    tasks.create("patient", {"prompt": "go", "model": "scripted", "queueName": QUEUE, "gpus": 1,
                             "script": {"tasks": {"patient": [{"text": ANSWER}]}}})
    [job] = wait_for(lambda: tasks.jobs(), timeout=60, what="the turn Job")
    assert job.metadata.name == "patient-t1" and job.spec.suspend is True  # suspended by Kueue's webhook
    assert job.metadata.labels["kueue.x-k8s.io/queue-name"] == QUEUE

    status = wait_for(lambda: queued_status(tasks, "patient"), timeout=30, what="phase Pending, Ready reason Queued")
    expected = f"turn Job patient-t1 is queued: Queued: the Job is suspended until LocalQueue {QUEUE} admits it"
    assert status["message"] == expected and ready_of(status)["message"] == expected, status
    assert status["activeJob"] == "patient-t1" and status["failedAttempts"] == 0

    # Several watchdog scans after the Job has been held longer than the Pending threshold (+ the grace): none reaps
    past = job.metadata.creation_timestamp.timestamp() + PENDING + 2
    wait_for(lambda: last_scan(port) > past + 3, timeout=60, interval=0.2,
             what="three watchdog scans past the Pending threshold")
    [still] = tasks.jobs()
    assert (still.metadata.uid, still.spec.suspend) == (job.metadata.uid, True)
    assert still.metadata.deletion_timestamp is None and not tasks.pods()
    assert queued_status(tasks, "patient") is not None
    assert not task_events(tasks, "patient", "PodReaped")

    # the quota grows to 1 GPU: Kueue admits the workload and sets spec.suspend false; the turn runs
    kueue.ensure_queues(k8s_namespace, gpus=1)

    def settled() -> dict[str, Any] | None:
        current = (tasks.get("patient") or {}).get("status") or {}
        return current if current.get("phase") in ("Idle", "Failed") else None

    done = wait_for(settled, timeout=120, what="the released turn to finish")
    assert done["phase"] == "Idle" and done["turns"] == 1 and done["failedAttempts"] == 0, done
    assert done["lastResponse"] == ANSWER
    [ran] = tasks.jobs()
    assert (ran.metadata.uid, ran.status.succeeded) == (job.metadata.uid, 1)
    answers = [m for m in stored_messages(redis_client, f"{k8s_namespace}/patient") if m["role"] == "assistant"]
    assert [block.get("text") for m in answers for block in m["content"]] == [ANSWER]
    assert not task_events(tasks, "patient", "PodReaped") and not task_events(tasks, "patient", "TurnFailed")
    assert len(task_events(tasks, "patient", "TurnStarted")) == 1


def test_a_turn_job_held_past_the_admission_timeout_is_reaped_as_a_failed_attempt(
    start_operator: StartOperator, tasks: Tasks, k8s_namespace: str,
) -> None:
    start_operator(UNICORE_ADMISSION_TIMEOUT_SECONDS="4")
    tasks.create("impatient", {"prompt": "go", "model": "scripted", "queueName": QUEUE, "gpus": 1,
                               "script": {"tasks": {"impatient": [{"text": ANSWER}]}}})
    [event] = wait_for(lambda: task_events(tasks, "impatient", "PodReaped"), timeout=60,
                       what="the held Job to be reaped for its admission timeout")
    assert event.message.startswith("admission_timeout: turn Job impatient-t1 was held suspended for "), event.message
    assert f"without being admitted by LocalQueue {QUEUE} (admission timeout 4s)" in event.message

    def requeued() -> dict[str, Any] | None:  # the attempt counted, the next Job is held by the queue again
        status = queued_status(tasks, "impatient")
        return status if status and status["failedAttempts"] >= 1 and status["activeJob"] != "impatient-t1" else None

    status = wait_for(requeued, timeout=60, what="the next attempt's Job, queued again")
    assert status["activeJob"].startswith("impatient-t1-r"), status
    assert all(job.spec.suspend for job in tasks.jobs() if job.metadata.deletion_timestamp is None)
