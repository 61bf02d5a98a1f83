"""Command Jobs survive what goes wrong (issue 29), on the real node: the task gets exactly one result, with the
reason, when the Job is deleted while it runs, when its pod is deleted, and when the operator is SIGKILLed while the
Job runs and the Job ends before the operator is back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client
from kubernetes.stream import stream as exec_stream

from tests.cluster.operator_harness import StartOperator, Tasks, operator_factory, stored_messages
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[StartOperator]:
    env = {"UNICORE_DEFAULT_GPUS": "0", "UNICORE_RESYNC_SECONDS": "3"}
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env=env, pod_logs=True) as start:
        yield start


def submit(tasks: Tasks, crd: Any, name: str, command: str) -> None:
    script = {"default": "Done.", "tasks": {name: [
        {"tool_use": [{"name": "submit_job", "input": {"command": command, "timeout_seconds": 600}}]},
        {"text": "Waiting for the job."},
        {"echo": True},
    ]}}
    tasks.create(name, {"prompt": "go", "model": "scripted", "image": crd.real_node.busybox_image,
                        "tools": ["submit_job"], "script": script})


def results(client_: redis.Redis, task_id: str) -> list[str]:
    return [b["text"] for m in stored_messages(client_, task_id) if m["role"] == "user" for b in m["content"]
            if "text" in b and b["text"].startswith("Job ")]


def job_pod(tasks: Tasks, job: str, phase: str = "Running") -> Any:
    pods = [p for p in tasks.pods() if (p.metadata.labels or {}).get("job-name") == job and p.status.phase == phase]
    return pods[0] if pods else None


def settled_with_one_result(tasks: Tasks, client_: redis.Redis, task_id: str, name: str) -> list[str] | None:
    phase = ((tasks.get(name) or {}).get("status") or {}).get("phase")
    found = results(client_, task_id)
    return found if phase == "Idle" and found else None


def test_a_job_deleted_while_it_runs_gives_one_failed_result(
    start_operator: StartOperator, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    start_operator()
    submit(tasks, crd, "gone", "echo up; sleep 600")
    wait_for(lambda: job_pod(tasks, "gone-j1"), timeout=120, what="the job's pod running")
    tasks.batch.delete_namespaced_job("gone-j1", k8s_namespace, propagation_policy="Background")
    [result] = wait_for(lambda: settled_with_one_result(tasks, redis_client, f"{k8s_namespace}/gone", "gone"),
                        timeout=120, what="one result after the Job was deleted")
    assert "ended: failed" in result and "deleted before it ended" in result, result


def test_a_jobs_pod_deleted_gives_one_failed_result_with_the_reason(
    start_operator: StartOperator, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    start_operator()
    submit(tasks, crd, "evicted", "echo up; sleep 600")
    pod = wait_for(lambda: job_pod(tasks, "evicted-j1"), timeout=120, what="the job's pod running")
    tasks.core.delete_namespaced_pod(pod.metadata.name, k8s_namespace, grace_period_seconds=0)
    [result] = wait_for(lambda: settled_with_one_result(tasks, redis_client, f"{k8s_namespace}/evicted", "evicted"),
                        timeout=120, what="one result after the pod was deleted")
    assert "ended: failed" in result and "Reason: " in result, result


def test_an_operator_killed_while_the_job_runs_delivers_its_result_once_after_restart(
    start_operator: StartOperator, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
    tmp_path: Path,
) -> None:
    operator = start_operator()
    release = "/workspace/release"
    submit(tasks, crd, "orphan", f"echo started; while [ ! -e {release} ]; do sleep 0.1; done; echo finished")
    pod = wait_for(lambda: job_pod(tasks, "orphan-j1"), timeout=120, what="the job's pod running")
    operator.kill()  # SIGKILL: no clean-up
    # end the Job while no operator runs: the command waits for a file in its own workspace (an emptyDir here)
    core = client.CoreV1Api(crd.api_client())
    exec_stream(core.connect_get_namespaced_pod_exec, pod.metadata.name, k8s_namespace,
                command=["touch", release], stderr=True, stdin=False, stdout=True, tty=False)
    wait_for(lambda: [j for j in tasks.jobs() if j.metadata.name == "orphan-j1" and j.status.succeeded],
             timeout=120, what="the Job Complete while the operator is down")
    assert results(redis_client, f"{k8s_namespace}/orphan") == []
    start_operator()
    [result] = wait_for(lambda: settled_with_one_result(tasks, redis_client, f"{k8s_namespace}/orphan", "orphan"),
                        timeout=120, what="the result delivered once by the restarted operator")
    assert "ended: succeeded, exit code 0" in result and "started\nfinished" in result, result
