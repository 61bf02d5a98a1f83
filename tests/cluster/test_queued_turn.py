"""A turn Job held suspended by a queue controller (issue 12 #3), on the real local control plane with the real node:
the released turn runs as a real container.

Kueue cannot be built here (the module proxy refuses ``sigs.k8s.io/kueue``), so the test does what Kueue does to a
Job: a MutatingAdmissionPolicy (GA in Kubernetes 1.36, CEL in the API server, no webhook server) sets
``spec.suspend: true`` on every Job created with the label ``kueue.x-k8s.io/queue-name`` in the test's namespace,
as Kueue's mutating webhook does, and the test releases the Job by setting ``spec.suspend: false``, as Kueue does
when the LocalQueue admits the workload. The operator itself creates the Job not suspended and never touches
``spec.suspend``.

- held for longer than the Pending threshold (several watchdog scans past it): not reaped; the task is Pending with
  Ready reason ``Queued`` naming the Job and the queue; once released, the turn runs once;
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
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.operator_harness import StartOperator, Tasks, operator_factory, stored_messages, task_events
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

QUEUE = "team-a"
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
def kueue_webhook(crd: Any, k8s_namespace: str) -> Iterator[None]:
    """What Kueue's mutating webhook does to a Job with a queue label: suspend it at creation (this namespace only)."""
    api = crd.api_client()
    custom = client.CustomObjectsApi(api)
    group, version = "admissionregistration.k8s.io", "v1"
    name = f"kueue-suspend-{k8s_namespace}"
    policy = {
        "apiVersion": f"{group}/{version}", "kind": "MutatingAdmissionPolicy", "metadata": {"name": name},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": ["batch"], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": ["jobs"]}]},
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "ApplyConfiguration",
                           "applyConfiguration": {"expression": "Object{spec: Object.spec{suspend: true}}"}}],
        },
    }
    binding = {
        "apiVersion": f"{group}/{version}", "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name, "matchResources": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": k8s_namespace}},
            "objectSelector": {"matchExpressions": [{"key": "kueue.x-k8s.io/queue-name", "operator": "Exists"}]},
        }},
    }
    custom.create_cluster_custom_object(group, version, "mutatingadmissionpolicies", policy)
    custom.create_cluster_custom_object(group, version, "mutatingadmissionpolicybindings", binding)
    batch = client.BatchV1Api(api)
    probe = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "probe-",
                                                                    "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
             "spec": {"template": {"spec": {"restartPolicy": "Never",
                                            "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}}}}

    def suspends() -> bool:  # the API server's policy cache catches up within a second or so
        created = batch.create_namespaced_job(k8s_namespace, probe, dry_run="All")
        return bool(created.spec.suspend)

    wait_for(suspends, timeout=30, interval=0.2, what="the policy to suspend a labelled Job at creation")
    try:
        yield
    finally:
        custom.delete_cluster_custom_object(group, version, "mutatingadmissionpolicybindings", name)
        custom.delete_cluster_custom_object(group, version, "mutatingadmissionpolicies", name)
        api.close()


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path, port: int, kueue_webhook: None,
                   ) -> Iterator[StartOperator]:
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
) -> None:
    start_operator()
    tasks.create("patient", {"prompt": "go", "model": "scripted", "queueName": QUEUE,
                             "script": {"tasks": {"patient": [{"text": ANSWER}]}}})
    [job] = wait_for(lambda: tasks.jobs(), timeout=60, what="the turn Job")
    assert job.metadata.name == "patient-t1" and job.spec.suspend is True  # held as Kueue holds it
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

    # Kueue admits the workload: it sets spec.suspend false; the Job controller starts the pod, the turn runs
    tasks.batch.patch_namespaced_job("patient-t1", k8s_namespace, {"spec": {"suspend": False}})

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
    tasks.create("impatient", {"prompt": "go", "model": "scripted", "queueName": QUEUE,
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
