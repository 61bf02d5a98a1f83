"""Turn failures on the real control plane (issue 10): a killed turn counts once and recovers.

The killed-turn tests run on the real node (containerd + kubelet, the agent image): the turn's container is
SIGKILLed from outside Kubernetes (``ctr tasks kill`` on the node's containerd; the pod named in its lease holder id
``<pod name>:<pid>``), the way an OOM kill or a node problem ends a turn: no release, no clean-up; what the kubelet
reports of it is what the operator acts on. The Job that ends while Redis is down is about the operator's records,
not the container: it runs on the pod runner (turn pods as host processes), whose turn process is SIGKILLed
through the host pid in its holder id.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from unicore.store.gates import open_gate

from tests.cluster.operator_harness import GATE, StartOperator, Tasks, gated_script, operator_factory, task_events
from tests.cluster.real_node import kill_pod_container
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

WATCHDOG_ENV = {
    "UNICORE_WATCHDOG_INTERVAL_SECONDS": "1",
    "UNICORE_PENDING_TIMEOUT_SECONDS": "60",
    "UNICORE_HEARTBEAT_TIMEOUT_SECONDS": "25",
    "UNICORE_WATCHDOG_GRACE_SECONDS": "5",
    "UNICORE_MAX_REAPS": "2",
    "UNICORE_DEFAULT_GPUS": "0",
}


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[StartOperator]:
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env=WATCHDOG_ENV, pod_logs=True) as start:
        yield start


def lease(client: redis.Redis, task_id: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in client.hgetall(f"uc:{{{task_id}}}:lease").items()}


def settled(tasks: Tasks, name: str) -> dict[str, Any] | None:
    """The task's status once it is Idle or Failed."""
    status = (tasks.get(name) or {}).get("status") or {}
    return status if status.get("phase") in ("Idle", "Failed") else None


def kill_turn_container(
    crd: Any, tasks: Tasks, client: redis.Redis, task_id: str, older_than: float = 0.0,
) -> dict[str, str]:
    """SIGKILL the container of the turn holding the task's lease (real node) once its lease is ``older_than``
    seconds old."""

    def held() -> dict[str, str] | None:
        current = lease(client, task_id)
        if current.get("holder") and time.time() - float(current.get("acquired_at") or "inf") > older_than:
            return current
        return None

    holder = wait_for(held, timeout=90, what=f"a turn holding {task_id}'s lease for {older_than}s")
    kill_pod_container(crd, tasks.core, tasks.namespace, holder["holder"].rsplit(":", 1)[0])
    return holder


@pytest.mark.real_node
def test_a_killed_turn_counts_as_one_failure_and_the_task_recovers(
    start_operator: StartOperator, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    """Issue 10 #13: the Job's failure and the watchdog's reap of the dead holder's lease are one attempt. With
    UNICORE_MAX_REAPS=2, counting it twice fails the task; counted once, the turn is retried and answers."""
    start_operator()
    task_id = f"{k8s_namespace}/crashy"
    # its model call lasts until the gate opens, once the retried turn holds the lease
    tasks.create("crashy", {"prompt": "go", "model": "scripted", "script": gated_script("crashy")})
    # older than the watchdog's grace, so the watchdog may reap the dead holder's lease too
    kill_turn_container(crd, tasks, redis_client, task_id, older_than=6)
    wait_for(lambda: settled(tasks, "crashy")  # (Failed: the crash counted twice, asserted below)
             or lease(redis_client, task_id).get("holder", "").startswith("crashy-t1-r1-"), timeout=90,
             what="the retried turn (Job crashy-t1-r1) to hold the lease")
    open_gate(redis_client, task_id, GATE)

    status = wait_for(lambda: settled(tasks, "crashy"), timeout=120, what="the task to settle after the crash")
    assert status["phase"] == "Idle" and status["turns"] == 1, status
    assert status["lastResponse"] == "Slow answer."
    jobs = sorted(job.metadata.name for job in tasks.jobs())
    assert jobs == ["crashy-t1", "crashy-t1-r1"], jobs


@pytest.mark.real_node
def test_a_killed_turns_lease_is_broken_at_once_and_every_ended_job_posts_an_event(
    start_operator: StartOperator, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    """Issue 10 #18: the operator saw the pod fail, so it breaks the dead turn's lease (TTL 30 s, renewed every 10 s:
    at least 20 s left at the kill) and the turn is retried within seconds. The watchdog is kept out of it (a grace
    of 120 s). A failed Job posts TurnFailed; a turn Job deleted while it runs posts TurnJobDeleted."""
    start_operator(UNICORE_WATCHDOG_GRACE_SECONDS="120")
    task_id = f"{k8s_namespace}/quick"
    # its model call lasts until the gate opens, once the retried Job was deleted while it ran
    tasks.create("quick", {"prompt": "go", "model": "scripted", "script": gated_script("quick")})
    killed = kill_turn_container(crd, tasks, redis_client, task_id)
    killed_at = time.monotonic()
    wait_for(lambda: lease(redis_client, task_id).get("holder") != killed["holder"], timeout=12,
             what="the dead turn's lease to be broken (not left to its TTL)")
    retry = wait_for(lambda: lease(redis_client, task_id).get("holder", "").startswith("quick-t1-r1-"),
                     timeout=max(1.0, 15 - (time.monotonic() - killed_at)),
                     what="the retried turn (Job quick-t1-r1) to hold the lease within 15 s of the kill")
    assert retry
    [failed] = wait_for(lambda: task_events(tasks, "quick", "TurnFailed"), timeout=30, what="a TurnFailed Event")
    assert "quick-t1 failed" in failed.message, failed.message

    tasks.batch.delete_namespaced_job("quick-t1-r1", k8s_namespace, propagation_policy="Background")
    [deleted] = wait_for(lambda: task_events(tasks, "quick", "TurnJobDeleted"), timeout=30,
                         what="a TurnJobDeleted Event")
    assert "quick-t1-r1 was deleted before it finished" in deleted.message, deleted.message
    open_gate(redis_client, task_id, GATE)

    status = wait_for(lambda: settled(tasks, "quick"), timeout=120, what="the task to settle")
    assert status["phase"] == "Idle" and status["turns"] == 1 and status["lastResponse"] == "Slow answer.", status
    assert len(task_events(tasks, "quick", "TurnFailed")) == 1


class RedisOutage:
    """Make the test's Redis refuse every client but this one (a password, then every other connection dropped),
    as an unreachable Redis does, and end that again; the data stays."""

    PASSWORD = "redis-is-down"

    def __init__(self, url: str) -> None:
        self.admin = redis.Redis.from_url(url, single_connection_client=True)
        self.admin.ping()

    def __enter__(self) -> RedisOutage:
        self.admin.config_set("requirepass", self.PASSWORD)
        self.admin.client_kill_filter(_type="normal", skipme=True)
        return self

    def __exit__(self, *_: object) -> None:
        self.admin.config_set("requirepass", "")
        self.admin.close()


def test_a_job_that_ends_while_redis_is_down_is_counted_when_redis_is_back(
    start_operator: StartOperator, tasks: Tasks, redis_client: redis.Redis, redis_url: str, k8s_namespace: str,
) -> None:
    """Issue 10 #15: the turn's Job fails while Redis is unreachable, so its Job event cannot be recorded. Once
    Redis is back, reconcile records the failure from the Job index (TurnFailed) and runs the next attempt
    (``-r1``), instead of creating the same Job name again, taking its 409 for "running" and sitting there."""
    # the operator's Redis calls give up after 2 s (not the default 30 s): the outage outlasts them
    operator = start_operator(UNICORE_WATCHDOG_GRACE_SECONDS="120", UNICORE_REDIS_RETRY_SECONDS="2")
    task_id = f"{k8s_namespace}/outage"
    # its model call lasts until the gate opens, once Redis is back and the failure recorded
    tasks.create("outage", {"prompt": "go", "model": "scripted", "script": gated_script("outage")})
    holder = wait_for(lambda: lease(redis_client, task_id).get("holder"), timeout=90, what="the turn to run")
    with RedisOutage(redis_url):  # its exit ends the outage, also when a wait below fails
        os.kill(int(holder.rsplit(":", 1)[1]), signal.SIGKILL)

        def job_failed() -> bool:
            job = tasks.batch.read_namespaced_job("outage-t1", k8s_namespace)
            return any(c.type == "Failed" and c.status == "True" for c in job.status.conditions or [])

        wait_for(job_failed, timeout=60, what="Job outage-t1 to fail")
        wait_for(lambda: "could not record the end of turn Job" in operator.log(400)
                 or "turn_job_event" in operator.log(400), timeout=30,
                 what="the operator to have handled the Job's failure while Redis was down")
    [failed] = wait_for(lambda: task_events(tasks, "outage", "TurnFailed"), timeout=60,
                        what="the failure recorded once Redis is back (Event TurnFailed)")
    assert "outage-t1 failed" in failed.message, failed.message
    open_gate(redis_client, task_id, GATE)

    status = wait_for(lambda: settled(tasks, "outage"), timeout=120, what=f"the task to settle ({tasks.get('outage')})")
    assert status["phase"] == "Idle" and status["turns"] == 1 and status["lastResponse"] == "Slow answer.", status
    assert sorted(job.metadata.name for job in tasks.jobs()) == ["outage-t1", "outage-t1-r1"]
