"""Command Jobs on the real node (issue 29): a task hands a command to the cluster as its own Job (submit_job), waits
with no turn pod (WaitingForJobs), and each Job's result comes back once, with its exit code and the end of its log;
what the Job wrote into the workspace claim is there for the next turn (read_file)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client

from tests.cluster.operator_harness import StartOperator, Tasks, operator_factory, stored_messages, task_events
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

CLAIM = "unicore-workspace"
TRAIN = "echo epoch-1; echo epoch-2; echo 'loss=0.25' > metrics.txt"
# Each turn a result wakes reads metrics.txt and answers with what it read: the two results may come in one turn or
# in two (the Jobs end when they end), and the file is there once the first Job's result came.
READ_AND_ECHO = [{"tool_use": [{"name": "read_file", "input": {"path": "metrics.txt"}}]}, {"echo_results": True}]
SCRIPT = {"default": "Done.", "tasks": {"trainer": [
    {"tool_use": [{"name": "submit_job", "input": {"command": TRAIN, "gpus": 1, "timeout_seconds": 120}},
                  {"name": "submit_job", "input": {"command": "echo boom >&2; exit 3", "timeout_seconds": 120}}]},
    {"text": "Submitted two jobs; waiting for them."},
    *READ_AND_ECHO, *READ_AND_ECHO,
]}}


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[StartOperator]:
    core = client.CoreV1Api(crd.api_client())
    core.create_namespaced_persistent_volume_claim(k8s_namespace, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    })
    env = {"UNICORE_WORKSPACE_CLAIM": CLAIM, "UNICORE_DEFAULT_GPUS": "0", "UNICORE_WATCHDOG_INTERVAL_SECONDS": "1"}
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env=env, pod_logs=True) as start:
        yield start


def phase(tasks: Tasks, name: str) -> str:
    return str(((tasks.get(name) or {}).get("status") or {}).get("phase") or "")


def job_results(client_: redis.Redis, task_id: str) -> list[str]:
    return [block["text"] for m in stored_messages(client_, task_id) if m["role"] == "user"
            for block in m["content"] if "text" in block and block["text"].startswith("Job ")]


def test_a_task_waits_for_its_command_jobs_with_no_pod_and_gets_each_result_once(
    start_operator: StartOperator, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    start_operator()
    task_id = f"{k8s_namespace}/trainer"
    tasks.create("trainer", {"prompt": "train", "model": "scripted", "image": crd.real_node.busybox_image,
                             "tools": ["submit_job", "job_status", "read_file"], "script": SCRIPT})
    seen_waiting = wait_for(
        lambda: phase(tasks, "trainer") == "WaitingForJobs"
        and not [p for p in tasks.pods() if p.metadata.labels.get("unicore.dev/turn")
                 and p.status.phase in ("Pending", "Running")],
        timeout=120, interval=0.2, what="the task waiting for its jobs with no turn pod")
    assert seen_waiting
    done = wait_for(lambda: phase(tasks, "trainer") == "Idle" and len(job_results(redis_client, task_id)) == 2
                    and (tasks.get("trainer") or {})["status"], timeout=240, what="both results and the task Idle")
    results = job_results(redis_client, task_id)
    ok = next(r for r in results if r.startswith("Job trainer-j1 "))
    failed = next(r for r in results if r.startswith("Job trainer-j2 "))
    assert "ended: succeeded, exit code 0" in ok and "epoch-1\nepoch-2" in ok, ok
    assert "ended: failed, exit code 3" in failed and "boom" in failed, failed
    answers = [block["text"] for m in stored_messages(redis_client, task_id) if m["role"] == "assistant"
               for block in m["content"] if "text" in block]
    assert any("loss=0.25" in text for text in answers), answers  # a later turn read what the Job wrote
    assert done.get("phase") == "Idle"
    jobs = {j.metadata.name: j for j in tasks.jobs() if j.metadata.labels.get("unicore.dev/command-job")}
    assert set(jobs) == {"trainer-j1", "trainer-j2"}
    pod = jobs["trainer-j1"].spec.template.spec
    assert pod.automount_service_account_token is False
    assert pod.containers[0].resources.limits == {"nvidia.com/gpu": "1"}
    assert len(task_events(tasks, "trainer", "JobEnded")) == 2


def test_suspending_the_task_cancels_its_running_job(
    start_operator: StartOperator, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    start_operator()
    task_id = f"{k8s_namespace}/sleeper"
    script = {"default": "Done.", "tasks": {"sleeper": [
        {"tool_use": [{"name": "submit_job", "input": {"command": "echo up; sleep 600", "timeout_seconds": 900}}]},
        {"text": "Waiting for the job."},
    ]}}
    tasks.create("sleeper", {"prompt": "go", "model": "scripted", "image": crd.real_node.busybox_image,
                             "tools": ["submit_job"], "script": script})
    wait_for(lambda: [p for p in tasks.pods() if p.metadata.labels.get("job-name") == "sleeper-j1"
                      and p.status.phase == "Running"], timeout=120, what="the job's pod running")
    tasks.patch("sleeper", {"suspend": True})
    inbox = wait_for(lambda: [raw for raw in redis_client.lrange(f"uc:{{{task_id}}}:inbox", 0, -1)
                              if "cancelled" in raw], timeout=60, what="the cancelled result in the inbox")
    assert "Job sleeper-j1" in inbox[0] and "suspended or stopped" in inbox[0]
    wait_for(lambda: not [j for j in tasks.jobs() if j.metadata.name == "sleeper-j1"], timeout=60,
             what="the Job deleted")
    # The reconcile that deletes the Job writes the phase after it: wait for it rather than read it at once.
    wait_for(lambda: phase(tasks, "sleeper") == "Suspended", timeout=60, interval=0.2, what="the task Suspended")
