"""One failure per turn attempt (issue 10 #13), on a real Redis: a killed turn is counted once, whether the
operator's Job path (the Job's Failed status) or the watchdog (the dead holder's lease) records it first. And the
operator's compare-and-delete of a dead turn's lease (#18).

The turn's lease is taken by the real runtime (``TaskStore.acquire_lease`` with the holder id a turn pod uses), the
Job path records through ``RedisState.account_job_end`` (what ``reconcile.job_changed`` calls), and the watchdog
runs its real read (``read_states``), its pure ``scan`` and the reaper's Redis step on the same server. Nothing
here calls the Kubernetes API.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from kubernetes import client as k8s
from unicore.api.schema import TaskSpec
from unicore.errors import LeaseLost
from unicore.store.tasks import TaskStore
from unicore_operator.redis_state import RedisState
from unicore_operator.settings import OperatorSettings
from unicore_operator.watchdog.reaper import Reaper
from unicore_operator.watchdog.redis_state import read_states
from unicore_operator.watchdog.scan import ReapReason, Snapshot, Thresholds, plan_redis_reads, scan
from unicore_operator.watchdog.snapshot import with_redis
from unicore_operator.watchdog.views import agent_task_view, job_view, pod_view

NS = "team"
TASK_ID = f"{NS}/demo"
T = Thresholds(heartbeat_timeout=120, pending_timeout=300, max_reaps=3, deadline_grace=30, absence_grace=30)


@pytest.fixture
def state(redis_url: str) -> Any:
    return RedisState(redis_url)


@pytest.fixture
def store(redis_url: str) -> TaskStore:
    store = TaskStore(redis.Redis.from_url(redis_url, decode_responses=True))
    store.create_task(TaskSpec(id=TASK_ID, prompt=None))
    return store


@pytest.fixture
def reaper(state: RedisState, store: TaskStore, redis_url: str) -> Reaper:
    ctx = SimpleNamespace(redis=state, store=store, settings=OperatorSettings(redis_url=redis_url),
                          kube=SimpleNamespace(api=k8s.ApiClient()))
    return Reaper(ctx, max_reaps=T.max_reaps)


def crashed_turn(store: TaskStore, job: str, turn: int) -> dict[str, Any]:
    """A turn process of Job ``job`` took the lease and died (SIGKILL: no release). Returns its pod's body."""
    pod = f"{job}-abcde"
    store.acquire_lease(TASK_ID, holder=f"{pod}:4242")
    return {"metadata": {"namespace": NS, "name": pod, "labels": {"job-name": job, "unicore.dev/turn": str(turn)}},
            "status": {"phase": "Failed"}}


def failed_job(job: str, turn: int) -> dict[str, Any]:
    return {"metadata": {"namespace": NS, "name": job, "uid": f"uid-{job}",
                         "annotations": {"unicore.dev/task-id": TASK_ID},
                         "labels": {"unicore.dev/turn": str(turn)}},
            "spec": {},
            "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}}


def watchdog_reaps(reaper: Reaper, client: redis.Redis, failed_attempts: int, job: dict[str, Any],
                   pod: dict[str, Any]) -> None:
    """One watchdog scan (real Redis read, pure scan) a minute later, and the reaper's Redis step."""
    task = agent_task_view({"metadata": {"namespace": NS, "name": "demo"},
                      "status": {"phase": "Running", "failedAttempts": failed_attempts}})
    snapshot = Snapshot(tasks={TASK_ID: task}, jobs=[job_view(job)], pods=[pod_view(pod)])
    now = time.time() + 60
    read = read_states(client, plan_redis_reads(snapshot, now, T), now, T)
    [action] = scan(with_redis(snapshot, read.states, read.beating), now, T)
    assert action.reason is ReapReason.LEASE_HOLDER_GONE
    reaper._reap_task_state(action)


def failures(client: redis.Redis) -> int:
    return int(client.hget(f"uc:{{{TASK_ID}}}:operator", "failed") or 0)


def test_two_crashes_count_two_failures_not_four(
    reaper: Reaper, state: RedisState, store: TaskStore, redis_client: redis.Redis,
) -> None:
    for n, job_name in enumerate(["demo-t1", "demo-t1-r1"], start=1):
        pod = crashed_turn(store, job_name, 1)
        # the operator sees the Job fail first and records it (reconcile.job_changed)
        assert state.account_job_end(TASK_ID, job_name, 1, "failed", "BackoffLimitExceeded", 0.0) == n
        # then the watchdog finds the dead holder's lease: the same attempt, not a new failure
        watchdog_reaps(reaper, redis_client, n, failed_job(job_name, 1), pod)
        assert failures(redis_client) == n
        assert not redis_client.exists(f"uc:{{{TASK_ID}}}:lease")  # the dead holder's lease is released
    last = str(redis_client.hget(f"uc:{{{TASK_ID}}}:operator", "last_failure"))
    assert "reaped" not in last, last  # not failed by the reap limit (UNICORE_MAX_REAPS=3)
    # the next attempt of turn 1 gets a new Job name: two ended Jobs of turn 1, none of turn 0
    assert redis_client.hget(f"uc:{{{TASK_ID}}}:operator", "ended:1") == "2"
    assert redis_client.hget(f"uc:{{{TASK_ID}}}:operator", "ended:0") is None


def test_the_watchdog_first_then_the_jobs_failure_counts_once(
    reaper: Reaper, state: RedisState, store: TaskStore, redis_client: redis.Redis,
) -> None:
    pod = crashed_turn(store, "demo-t1", 1)
    watchdog_reaps(reaper, redis_client, 0, failed_job("demo-t1", 1), pod)
    assert failures(redis_client) == 1
    # the Job's own failure, seen after the reap: counted already (-2: its Event is still posted once), then -1
    assert state.account_job_end(TASK_ID, "demo-t1", 1, "failed", "BackoffLimitExceeded", 0.0) == -2
    assert state.account_job_end(TASK_ID, "demo-t1", 1, "failed", "BackoffLimitExceeded", 0.0) == -1
    assert failures(redis_client) == 1


def test_the_lease_of_an_ended_pod_is_broken_only_while_that_pod_holds_it(
    state: RedisState, store: TaskStore, redis_client: redis.Redis,
) -> None:
    """Issue 10 #18: compare-and-delete of a dead turn's lease (``RedisState.break_lease``)."""
    lease = store.acquire_lease(TASK_ID, holder="demo-t1-abcde:4242")
    assert not state.break_lease(TASK_ID, "demo-t1-abcd")  # another pod (a prefix of the holder's name)
    assert not state.break_lease(TASK_ID, "demo-t1-r1-fghij")
    assert store.lease_holder(TASK_ID) == "demo-t1-abcde:4242"
    assert state.break_lease(TASK_ID, "demo-t1-abcde")
    assert store.lease_holder(TASK_ID) is None
    record = redis_client.hgetall(f"uc:{{{TASK_ID}}}:task")
    assert record["status"] == "idle" and record["lease_holder"] == ""
    with pytest.raises(LeaseLost):  # a process that outlived its pod writes nothing
        store.renew_lease(lease)
    # the next turn's lease is not touched by a late event of the old pod
    store.acquire_lease(TASK_ID, holder="demo-t1-r1-fghij:7")
    assert not state.break_lease(TASK_ID, "demo-t1-abcde")
    assert store.lease_holder(TASK_ID) == "demo-t1-r1-fghij:7"


def test_the_snapshot_names_ended_jobs_whose_end_is_not_recorded(state: RedisState, store: TaskStore) -> None:
    """Issue 10 #15: reconcile asks, in its one Redis read, which ended Jobs of its index are not recorded yet (their
    Job event came while Redis was unreachable), and records those."""
    state.account_job_end(TASK_ID, "demo-t1", 1, "failed", "BackoffLimitExceeded", 0.0)

    async def read() -> tuple[str, ...]:
        snap = await state.snapshot(TASK_ID, ["demo-t1", "demo-t1-r1"])
        assert snap.exists and snap.failed_attempts == 1
        return snap.unrecorded_jobs

    assert asyncio.run(read()) == ("demo-t1-r1",)
