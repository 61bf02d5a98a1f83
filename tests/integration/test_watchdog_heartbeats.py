"""The watchdog's O(stale) Redis read on real Redis: the turn's writes to ``uc:heartbeats`` (acquire, renew,
release, delete), and plan + read + scan giving the same reaps as reading every task, while reading only the stale,
missing and flagged ones."""

from __future__ import annotations

import time

import pytest
import redis
import unicore.store.task_leases as lease_module
from unicore.api.schema import TaskSpec
from unicore.errors import LeaseLost
from unicore.store import heartbeats
from unicore.store.heartbeats import TurnReset, _read_running, read_not_running
from unicore.store.keys import HEARTBEATS_INDEX, TaskKeys
from unicore.store.tasks import TaskStore
from unicore_operator.watchdog.redis_state import read_states
from unicore_operator.watchdog.scan import Snapshot, Thresholds, plan_redis_reads, scan
from unicore_operator.watchdog.snapshot import with_redis
from unicore_operator.watchdog.views import AgentTaskView, JobView, PodView, RedisTaskState

NS = "team"
T = Thresholds(heartbeat_timeout=120, pending_timeout=300, max_reaps=3, deadline_grace=30, absence_grace=30)


@pytest.fixture
def store(redis_client: redis.Redis, redis_url: str) -> TaskStore:
    return TaskStore(redis.Redis.from_url(redis_url, decode_responses=True))


def at(monkeypatch: pytest.MonkeyPatch, when: float) -> None:
    """Make the store's lease writes (acquire, renew, release) happen at unix time ``when``."""
    monkeypatch.setattr(lease_module, "write_time", lambda: repr(when))


def create(store: TaskStore, name: str) -> str:
    task_id = f"{NS}/{name}"
    store.create_task(TaskSpec(id=task_id, prompt=None))
    return task_id


def test_the_turn_keeps_its_heartbeat_entry_from_acquire_to_release(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = create(store, "beats")
    at(monkeypatch, 1000.0)
    lease = store.acquire_lease(task_id, holder="pod-a:1")
    assert store.redis.zscore(HEARTBEATS_INDEX, task_id) == 1000.0
    at(monkeypatch, 1010.5)
    store.renew_lease(lease)
    assert store.redis.zscore(HEARTBEATS_INDEX, task_id) == 1010.5
    assert store.heartbeat_at(task_id) == 1010.5  # the task's own key and the index agree
    assert store.release_lease(lease)
    assert store.redis.zscore(HEARTBEATS_INDEX, task_id) is None

    # a release that is no longer ours leaves the new holder's entry alone
    at(monkeypatch, 1100.0)
    old = store.acquire_lease(task_id, holder="pod-b:1")
    store.redis.delete(TaskKeys(task_id).lease)  # expired
    new = store.acquire_lease(task_id, holder="pod-c:1")
    assert not store.release_lease(old)
    assert store.redis.zscore(HEARTBEATS_INDEX, task_id) == 1100.0
    with pytest.raises(LeaseLost):
        store.renew_lease(old)
    assert store.release_lease(new)


def test_deleting_a_running_task_and_reaping_a_turn_remove_the_entry(
    store: TaskStore, redis_client: redis.Redis
) -> None:
    deleted, reaped = create(store, "deleted"), create(store, "reaped")
    store.acquire_lease(deleted, holder="pod-a:1")
    lease = store.acquire_lease(reaped, holder="pod-b:1")
    store.delete_task(deleted)  # the operator's finalizer path
    assert store.redis.zscore(HEARTBEATS_INDEX, deleted) is None
    assert TurnReset(redis_client)(reaped, str(lease.token), time.time(), "heartbeat_stale")
    assert store.redis.zscore(HEARTBEATS_INDEX, reaped) is None
    assert store.redis.zcard(HEARTBEATS_INDEX) == 0


def running_job(name: str, started: float) -> tuple[JobView, PodView]:
    job = JobView(namespace=NS, name=f"{name}-t1", task_id=f"{NS}/{name}", uid=f"uid-{name}", created_at=started - 1,
                  start_time=started, active_deadline_seconds=3600)
    pod = PodView(namespace=NS, name=f"{name}-t1-x", job_name=job.name, phase="Running", created_at=started - 1,
                  start_time=started)
    return job, pod


def test_only_stale_missing_and_flagged_tasks_are_read_and_the_reaps_match_a_full_read(
    store: TaskStore, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    jobs: list[JobView] = []
    pods: list[PodView] = []
    phases: dict[str, str] = {}

    def turn(name: str, *, acquired: float, beat: float | None = None, released: float | None = None,
             pod_started: float | None = None, phase: str = "Running") -> str:
        task_id = create(store, name)
        at(monkeypatch, acquired)
        lease = store.acquire_lease(task_id, holder=f"{name}-t1-x:1", ttl_ms=3_600_000)
        if beat is not None:
            at(monkeypatch, beat)
            store.renew_lease(lease, ttl_ms=3_600_000)
        if released is not None:
            at(monkeypatch, released)
            assert store.release_lease(lease)
        if pod_started is not None:
            job, pod = running_job(name, pod_started)
            jobs.append(job)
            pods.append(pod)
        phases[task_id] = phase
        return task_id

    # a long healthy turn: its pod is older than the heartbeat timeout, its heartbeat is fresh -> not read
    fresh = turn("fresh", acquired=now - 600, beat=now - 5, pod_started=now - 601)
    # healthy, a young pod -> not even beat-checked
    young = turn("young", acquired=now - 50, beat=now - 2, pod_started=now - 51)
    # a hung turn: heartbeat 200 s old -> heartbeat_stale, with its lease token
    hung = turn("hung", acquired=now - 600, beat=now - 200, pod_started=now - 601)
    # released 50 s ago, its pod still Running (the process exits): no entry -> read -> idle since 50 s -> left alone
    released = turn("released", acquired=now - 600, beat=now - 60, released=now - 50, pod_started=now - 601)
    # released long ago, its pod hangs on: no entry -> read -> idle since 300 s -> heartbeat_stale
    lingering = turn("lingering", acquired=now - 600, beat=now - 300, released=now - 300, pod_started=now - 601)
    # a pod Running 200 s whose turn never took the lease -> no entry, no key -> heartbeat_stale (pod start)
    never = create(store, "never")
    job, pod = running_job("never", now - 200)
    jobs.append(job)
    pods.append(pod)
    phases[never] = "Running"
    # a crashed turn, no Job any more, lease expired, cache says Idle: only its stale entry finds it
    crashed = turn("crashed", acquired=now - 300, beat=now - 100, phase="Idle")
    store.redis.delete(TaskKeys(crashed).lease)
    # a killed pod, no live Job, lease still held, cache says Running -> read (flagged): lease_holder_gone
    killed = turn("killed", acquired=now - 300, beat=now - 3)
    # idle tasks (never ran, or ran and released): never read
    for i in range(20):
        phases[create(store, f"idle-{i}")] = "Idle"
    done = turn("done", acquired=now - 900, beat=now - 890, released=now - 880, phase="Idle")
    # stale entries of tasks that no longer run: a deleted task, an idle task (a late renew after a reap)
    redis_client.zadd(HEARTBEATS_INDEX, {f"{NS}/gone": now - 500, done: now - 400})

    tasks = {tid: AgentTaskView(namespace=NS, name=tid.split("/", 1)[1], phase=phase) for tid, phase in phases.items()}
    snapshot = Snapshot(tasks=tasks, jobs=jobs, pods=pods)

    plan = plan_redis_reads(snapshot, now, T)
    assert plan.beat_check == {fresh, hung, released, lingering, never}
    assert plan.read == {killed}
    result = read_states(redis_client, plan, now, T)
    assert result.beating == {fresh}
    assert result.stale == 4  # hung, crashed, gone, done
    assert result.read == 8  # killed (flagged); hung, released, lingering, never (beat check); crashed, gone, done
    actions = scan(with_redis(snapshot, result.states, result.beating), now, T)

    every = {**read_not_running(redis_client, list(tasks)), **_read_running(redis_client, list(tasks))}
    full = scan(with_redis(snapshot, every), now, T)
    found = sorted((a.reason.value, a.task_id, a.lease_token) for a in actions)
    assert found == sorted((a.reason.value, a.task_id, a.lease_token) for a in full)
    assert found == sorted([
        ("heartbeat_stale", hung, "1"),
        ("heartbeat_stale", lingering, ""),
        ("heartbeat_stale", never, ""),
        ("lease_holder_gone", killed, "1"),
        ("running_without_job", crashed, ""),
    ])
    assert young not in result.states and fresh not in result.states
    # the stale entries of tasks that no longer run are gone; the hung and crashed turns keep theirs
    assert result.forgotten == 2
    assert redis_client.zscore(HEARTBEATS_INDEX, f"{NS}/gone") is None
    assert redis_client.zscore(HEARTBEATS_INDEX, done) is None
    assert redis_client.zscore(HEARTBEATS_INDEX, hung) == pytest.approx(now - 200)
    assert redis_client.zscore(HEARTBEATS_INDEX, crashed) == pytest.approx(now - 100)


def test_a_stale_entry_refreshed_meanwhile_is_kept(store: TaskStore, redis_client: redis.Redis,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    now = time.time()
    task_id = create(store, "again")
    redis_client.zadd(HEARTBEATS_INDEX, {task_id: now - 500})  # stale entry of an idle task
    snapshot = Snapshot(tasks={task_id: AgentTaskView(namespace=NS, name="again", phase="Idle")}, jobs=[], pods=[])
    real_read = _read_running

    def read_then_new_turn(client: redis.Redis, ids: list[str]) -> object:
        states = real_read(client, ids)
        at(monkeypatch, now)
        store.acquire_lease(task_id, holder="pod:1")  # a new turn starts between the read and the clean-up
        return states

    monkeypatch.setattr(heartbeats, "_read_running", read_then_new_turn)
    result = read_states(redis_client, plan_redis_reads(snapshot, now, T), now, T)
    assert result.forgotten == 0
    assert redis_client.zscore(HEARTBEATS_INDEX, task_id) == pytest.approx(now)


def test_the_redis_cluster_fallback_reads_what_the_script_reads(store: TaskStore, redis_client: redis.Redis,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    now = time.time()
    at(monkeypatch, now - 30)
    running = create(store, "running")
    lease = store.acquire_lease(running, holder="running-t1-x:1", ttl_ms=3_600_000)
    store.renew_lease(lease, ttl_ms=3_600_000)
    released = create(store, "released")
    assert store.release_lease(store.acquire_lease(released, holder="released-t1-x:1"))
    ids = [running, released, create(store, "idle"), f"{NS}/gone"]
    by_script = heartbeats._read_with_script(redis_client, ids)
    assert by_script == heartbeats._read_with_pipeline(redis_client, ids)
    assert list(by_script) == [running] and by_script[running].lease_token == str(lease.token)
    assert by_script[running].heartbeat_at == pytest.approx(now - 30)
    assert heartbeats.read_not_running(redis_client, ids) == {
        released: RedisTaskState(status="idle", released_at=pytest.approx(now - 30)),
        f"{NS}/idle": RedisTaskState(status="idle"),
        f"{NS}/gone": RedisTaskState(status=""),
    }
