"""Warm turn pods' runtime side (issue 30) on a real redis-server: ``unicore-turn --warm`` as a real process, with its
namespace's own Redis user, waits until it is assigned a turn (``unicore.store.warm_pods.assign``, what the operator
calls), runs exactly that one turn and exits; one turn never gets two pods and a pod never two turns; a pod nobody
assigns exits unused at its longest wait or on SIGTERM; a namespace's user can register and read its own
assignment, not write one or the fence."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.exceptions import NoPermissionError
from unicore.api.schema import TaskSpec
from unicore.store import acl, warm_pods
from unicore.store.client import build_client
from unicore.store.keys import warm_assignment_stream, warm_fence_key, warm_pod_key
from unicore.store.tasks import TaskStore
from unicore.store.warm_pods import Assignment

from tests.waiting import wait_for

NS = "team-warm"


@pytest.fixture
def tenant_url(redis_client: redis.Redis, redis_url: str) -> Iterator[str]:
    """The URL of the namespace's own Redis user (as a warm pod gets it from its Secret)."""
    password = acl.new_password()
    acl.apply_namespace_user(redis_client, NS, password)
    yield acl.identity_url(redis_url, acl.namespace_user(NS), password)
    acl.delete_namespace_user(redis_client, NS)


def warm_process(url: str, tmp_path: Path, pod: str, max_wait: float = 120) -> subprocess.Popen[str]:
    env = {**os.environ, "REDIS_URL": url, "UNICORE_NAMESPACE": NS, "UNICORE_POD_NAME": pod,
           "UNICORE_WARM_POOL": "writer", "UNICORE_WARM_TEMPLATE": "tmpl-1",
           "UNICORE_WARM_MAX_WAIT_SECONDS": f"{max_wait:g}", "UNICORE_HOME": str(tmp_path / "home"),
           "UNICORE_WORKSPACE": str(tmp_path / "ws"), "UNICORE_SUMMARIZE_TURNS": "0"}
    env.pop("UNICORE_TASK_ID", None)
    return subprocess.Popen([sys.executable, "-m", "unicore.turn.entry", "--warm"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def waits(client: redis.Redis, pod: str) -> bool:
    return pod in warm_pods.waiting(client, NS, [pod])


def test_a_warm_process_waits_then_runs_exactly_the_turn_it_is_assigned(redis_client: redis.Redis, tenant_url: str,
                                                                         tmp_path: Path) -> None:
    store = TaskStore(redis_client)
    task = f"{NS}/greeter"
    assert store.create_task(TaskSpec(id=task, prompt="Say hello.", script={"default": "Hello from a warm pod."}))
    process = warm_process(tenant_url, tmp_path, "warm-1")
    try:
        wait_for(lambda: waits(redis_client, "warm-1"), timeout=60, what="the warm pod to say it waits")
        record = redis_client.hgetall(warm_pod_key(NS, "warm-1"))
        assert record["pool"] == "writer" and record["template"] == "tmpl-1"
        assert process.poll() is None and store.get_task(task).turns == 0  # it waits; nothing ran

        first = warm_pods.assign(redis_client, NS, "warm-1", Assignment(task, "greeter-t1", turn=1))
        assert first.assigned
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    done = store.get_task(task)
    assert done.turns == 1 and done.status == "idle"
    assert [m for m in store.messages(task) if m.role == "assistant"][-1].content[0]["text"] == "Hello from a warm pod."
    assert warm_pods.assignment_of(redis_client, NS, "warm-1") == Assignment(task, "greeter-t1", turn=1)
    assert warm_pods.holder(redis_client, NS, "greeter-t1") == "warm-1"


def test_one_turn_gets_one_pod_and_one_pod_one_turn(redis_client: redis.Redis) -> None:
    for pod in ("warm-a", "warm-b"):
        warm_pods.register_waiting(redis_client, NS, pod, pool="writer", template="t")
    turn = Assignment(f"{NS}/t", "t-t1", turn=1)
    assert warm_pods.assign(redis_client, NS, "warm-a", turn).assigned
    again = warm_pods.assign(redis_client, NS, "warm-b", turn)  # a duplicate activation of the same turn
    assert (again.assigned, again.reason, again.holder) == (False, "taken", "warm-a")
    second = warm_pods.assign(redis_client, NS, "warm-a", Assignment(f"{NS}/u", "u-t1", turn=1))
    assert (second.assigned, second.reason) == (False, "not-waiting")  # warm-a has its turn
    assert waits(redis_client, "warm-b") and not waits(redis_client, "warm-a")
    assert redis_client.xlen(warm_assignment_stream(NS, "warm-b")) == 0
    assert warm_pods.assign(redis_client, NS, "warm-c", turn).reason == "not-waiting"  # never registered

    warm_pods.forget(redis_client, NS, "warm-a")  # its Job is gone
    assert warm_pods.assignment_of(redis_client, NS, "warm-a") is None
    assert redis_client.hgetall(warm_fence_key(NS)) == {}
    assert not redis_client.exists(warm_pod_key(NS, "warm-a"), warm_assignment_stream(NS, "warm-a"))


def test_a_waiting_pod_renews_its_short_lived_record_and_writes_it_again_when_redis_lost_it(
        redis_client: redis.Redis, tenant_url: str) -> None:
    tenant = build_client(tenant_url, decode_responses=True, retry_for=0)
    key = warm_pod_key(NS, "warm-r")
    cancel = threading.Event()

    def register() -> None:
        warm_pods.register_waiting(tenant, NS, "warm-r", pool="writer", template="t", since=1234.5)

    register()
    waiter = threading.Thread(target=warm_pods.wait_for_assignment, args=(tenant, NS, "warm-r"),
                              kwargs={"deadline": time.monotonic() + 60, "cancel": cancel, "renew": register,
                                      "renew_every": 0.2}, daemon=True)
    waiter.start()
    try:
        assert 0 < redis_client.pttl(key) <= warm_pods.RECORD_TTL_SECONDS * 1000  # a sign of life, not a lease
        redis_client.delete(key)  # as a Redis restarted without its data would have it
        wait_for(lambda: waits(redis_client, "warm-r"), timeout=10, interval=0.05, what="the record written again")
        assert redis_client.hget(key, "since") == "1234.500"  # the pod's own start of waiting, kept
    finally:
        cancel.set()
        waiter.join(10)
        tenant.close()
    assert not waiter.is_alive()  # cancelled: it renews no more


def test_a_warm_process_nobody_assigns_exits_unused_at_its_longest_wait(redis_client: redis.Redis, tenant_url: str,
                                                                       tmp_path: Path) -> None:
    process = warm_process(tenant_url, tmp_path, "warm-idle", max_wait=1.5)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert redis_client.pttl(warm_pod_key(NS, "warm-idle")) > 0  # its record expires on its own


def test_sigterm_while_waiting_ends_the_warm_process_without_a_turn(redis_client: redis.Redis, tenant_url: str,
                                                                    tmp_path: Path) -> None:
    process = warm_process(tenant_url, tmp_path, "warm-term")
    try:
        wait_for(lambda: waits(redis_client, "warm-term"), timeout=60, what="the warm pod to say it waits")
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err


def test_a_namespace_user_registers_and_reads_its_assignment_but_writes_neither_one_nor_the_fence(
        redis_client: redis.Redis, tenant_url: str) -> None:
    tenant = build_client(tenant_url, decode_responses=True, retry_for=0)
    try:
        warm_pods.register_waiting(tenant, NS, "warm-t", pool="writer", template="t")
        assert warm_pods.assign(redis_client, NS, "warm-t", Assignment(f"{NS}/x", "x-t1")).assigned
        assert warm_pods.wait_for_assignment(tenant, NS, "warm-t", deadline=time.monotonic() + 30) == Assignment(
            f"{NS}/x", "x-t1")
        with pytest.raises(NoPermissionError):
            tenant.xadd(warm_assignment_stream(NS, "warm-t"), {"assignment": "{}"})
        with pytest.raises(NoPermissionError):
            tenant.hset(warm_fence_key(NS), "job:y-t1", "warm-t")
        with pytest.raises(NoPermissionError):
            warm_pods.register_waiting(tenant, "team-other", "warm-t", pool="p", template="t")
    finally:
        tenant.close()


def test_a_warm_pod_on_the_whole_claim_works_in_its_assigned_trees_folder(redis_client: redis.Redis,
                                                                          tenant_url: str, tmp_path: Path) -> None:
    store = TaskStore(redis_client)
    task = f"{NS}/writer"
    script = {"tasks": {task: [{"tool_use": [{"name": "write_file", "input": {"path": "note.txt", "content": "hi"}}]},
                               {"text": "Written."}]}}
    assert store.create_task(TaskSpec(id=task, prompt="Write a note.", script=script, tools=["write_file"]))
    (tmp_path / "ws").mkdir()  # the claim, mounted whole at UNICORE_WORKSPACE
    process = warm_process(tenant_url, tmp_path, "warm-ws")
    try:
        wait_for(lambda: waits(redis_client, "warm-ws"), timeout=60, what="the warm pod to say it waits")
        assert warm_pods.assign(redis_client, NS, "warm-ws", Assignment(task, "writer-t1", turn=1,
                                                                        workspace="tree-a")).assigned
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert (tmp_path / "ws" / "tree-a" / "note.txt").read_text() == "hi"  # the tree's folder, made for its turn
    assert not (tmp_path / "ws" / "note.txt").exists()
