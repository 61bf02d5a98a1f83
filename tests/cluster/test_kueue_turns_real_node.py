"""UniCore under Kueue for real (issue 29): Kueue v0.17's manager (tests/cluster/kueue_fixture.py) admits the turn
Jobs and command Jobs of tasks whose ``spec.queueName`` is its LocalQueue, against a ClusterQueue of 2 GPUs, on the
real node with a host operator.

- four tasks asking 1 GPU per turn: never more than two turn Jobs run at once (a watch of the turn Jobs), the others
  wait as Queued (their status says so), and all four answer, each once;
- a command Job asking 2 GPUs waits in the queue while two turns hold the quota (the task WaitingForJobs, no turn
  pod of it, its job shown Queued), then runs once they end; its result reaches the task once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client, watch
from unicore.store.gates import open_gate
from unicore_devcluster import kueue as kq

from tests.cluster.operator_harness import StartOperator, Tasks, operator_factory, stored_messages
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

ENV = {"UNICORE_DEFAULT_GPUS": "0", "UNICORE_WATCHDOG_INTERVAL_SECONDS": "1", "UNICORE_PENDING_TIMEOUT_SECONDS": "300"}


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[StartOperator]:
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env=ENV, pod_logs=True) as start:
        yield start


class RunningTurnJobs:
    """Watches the namespace's turn Jobs and notes the most that ran (not suspended, not finished) at once."""

    def __init__(self, cluster: Any, namespace: str, label: str = "unicore.dev/turn") -> None:
        self.batch = client.BatchV1Api(cluster.api_client())
        self.namespace, self.label = namespace, label
        self.running: set[str] = set()
        self.most = 0
        self.watch = watch.Watch()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for event in self.watch.stream(self.batch.list_namespaced_job, self.namespace, label_selector=self.label,
                                           timeout_seconds=0):
                job = event["object"]
                done = any(c.type in ("Complete", "Failed") and c.status == "True" for c in job.status.conditions or [])
                if event["type"] != "DELETED" and not job.spec.suspend and not done:
                    self.running.add(job.metadata.name)
                else:
                    self.running.discard(job.metadata.name)
                self.most = max(self.most, len(self.running))
        except Exception:  # noqa: BLE001 - the stream ends with the test; a real miss shows in the assertions
            return

    def stop(self) -> None:
        self.watch.stop()


def status(tasks: Tasks, name: str) -> dict[str, Any]:
    return dict((tasks.get(name) or {}).get("status") or {})


def answers(client_: redis.Redis, task_id: str) -> list[str]:
    return [block["text"] for m in stored_messages(client_, task_id) if m["role"] == "assistant"
            for block in m["content"] if "text" in block]


def test_four_one_gpu_turns_share_two_gpus_through_kueue(
    start_operator: StartOperator, tasks: Tasks, kueue: kq.KueueManager, crd: Any, redis_client: redis.Redis,
    k8s_namespace: str,
) -> None:
    kueue.ensure_queues(k8s_namespace, gpus=2)
    start_operator()
    watcher = RunningTurnJobs(crd, k8s_namespace)
    names = [f"q{i}" for i in range(1, 5)]
    try:
        for name in names:
            tasks.create(name, {"prompt": "work", "model": "scripted", "gpus": 1, "queueName": kq.LOCAL_QUEUE,
                                "script": {"tasks": {name: [{"gate": "go", "timeout": 240, "text": f"done {name}"}]}}})
        wait_for(lambda: len(watcher.running) == 2 and sum(
            "queued" in str(status(tasks, n).get("message", "")).lower() for n in names) == 2,
            timeout=180, interval=0.2, what="two turns running and two Queued")
        for name in names:
            open_gate(redis_client, f"{k8s_namespace}/{name}", "go")
        wait_for(lambda: all(status(tasks, n).get("phase") == "Idle" for n in names), timeout=240,
                 what="all four tasks Idle")
    finally:
        watcher.stop()
    assert watcher.most == 2, watcher.most
    for name in names:
        assert answers(redis_client, f"{k8s_namespace}/{name}") == [f"done {name}"]


def test_a_two_gpu_command_job_waits_for_the_quota_then_runs_once(
    start_operator: StartOperator, tasks: Tasks, kueue: kq.KueueManager, crd: Any, redis_client: redis.Redis,
    k8s_namespace: str,
) -> None:
    kueue.ensure_queues(k8s_namespace, gpus=2)
    start_operator()
    for holder in ("h1", "h2"):
        tasks.create(holder, {"prompt": "hold", "model": "scripted", "gpus": 1, "queueName": kq.LOCAL_QUEUE,
                              "script": {"tasks": {holder: [{"gate": "go", "timeout": 240, "text": "held"}]}}})
    wait_for(lambda: all(redis_client.exists(f"uc:{{{k8s_namespace}/{h}}}:lease") for h in ("h1", "h2")),
             timeout=180, what="both holders' turns running (2 GPUs of quota taken)")
    job = {"name": "submit_job", "input": {"command": "echo trained", "gpus": 2, "timeout_seconds": 120}}
    tasks.create("big", {"prompt": "train", "model": "scripted", "gpus": 0, "queueName": kq.LOCAL_QUEUE,
                         "image": crd.real_node.busybox_image, "tools": ["submit_job"], "limits": {"maxJobGPUs": 2},
                         "script": {"tasks": {"big": [{"tool_use": [job]}, {"text": "waiting"}, {"echo": True}]}}})

    def queued_job() -> bool:
        st = status(tasks, "big")
        return st.get("phase") == "WaitingForJobs" and [j.get("state") for j in st.get("jobs") or []] == ["Queued"]

    wait_for(queued_job, timeout=180, interval=0.2, what="the 2-GPU job Queued while the task waits")
    turn_pods = [p for p in tasks.pods() if (p.metadata.labels or {}).get("unicore.dev/task") == "big"
                 and (p.metadata.labels or {}).get("unicore.dev/turn") and p.status.phase in ("Pending", "Running")]
    assert turn_pods == []  # the task waits with no pod
    [command_job] = [j for j in tasks.jobs() if j.metadata.name == "big-j1"]
    assert command_job.spec.suspend is True  # held by the queue: no GPU quota left
    for holder in ("h1", "h2"):
        open_gate(redis_client, f"{k8s_namespace}/{holder}", "go")
    done = wait_for(lambda: status(tasks, "big").get("phase") == "Idle" and status(tasks, "big"), timeout=240,
                    what="the job admitted, run, and its result answered")
    results = [b["text"] for m in stored_messages(redis_client, f"{k8s_namespace}/big") if m["role"] == "user"
               for b in m["content"] if "text" in b and b["text"].startswith("Job big-j1 ")]
    assert len(results) == 1 and "ended: succeeded, exit code 0" in results[0] and "trained" in results[0], results
    assert [j.get("state") for j in done.get("jobs") or []] == ["Succeeded"]
