"""Retention on the real control plane (issue 15, item 4): the operator archives an idle tree to a directory, removes
it from Redis and the AgentTask says Archived (phase, status.archive, conditions, an Event); a suspended tree past
the same TTL is kept. The shared conversations of the namespaces it watches go the same way (issue 33)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from unicore.archive import read_document
from unicore.conversation_retention import read_conversation_document
from unicore.store import conversations
from unicore.store.keys import CONVERSATIONS_INDEX, TaskKeys, conversation_key
from unicore.store.tasks import TaskStore

from tests.cluster.operator_harness import OperatorProcess, Tasks, install_agent_rbac, task_events
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture
def retaining_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    install_agent_rbac(crd.kubeconfig, k8s_namespace)
    proc = OperatorProcess(crd.kubeconfig, redis_url, k8s_namespace, tmp_path / "operator.log",
                           UNICORE_RETENTION_TTL_SECONDS="3", UNICORE_RETENTION_INTERVAL_SECONDS="1",
                           UNICORE_RETENTION_ARCHIVE_URL=(tmp_path / "archive").as_uri()).start()
    yield proc
    proc.stop()
    print(f"--- operator log ({proc.log_path}):\n{proc.log(80)}")


def test_an_idle_tree_is_archived_and_its_agenttask_says_archived(
    retaining_operator: OperatorProcess, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str,
    tmp_path: Path,
) -> None:
    held = tasks.create("held", {"prompt": "wait for me", "gpus": 0, "suspend": True, "script": {"default": "ok"}})
    assert held
    tasks.create("old", {"prompt": "hello", "gpus": 0, "script": {"default": "hello back"}})
    wait_for(lambda: tasks.phase("old") in ("Idle", "Archived"), timeout=90, what="the turn of old")
    wait_for(lambda: tasks.phase("old") == "Archived", timeout=60,
             what=f"old to be archived (phases {tasks.all_phases()})")

    status = (tasks.get("old") or {})["status"]
    files = list((tmp_path / "archive").rglob("*.jsonl"))
    assert len(files) == 1 and status["archive"]["url"] == files[0].as_uri()
    assert status["archive"]["archivedAt"] and files[0].as_uri() in status["message"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Archived"]["status"] == "True" and conditions["Ready"]["status"] == "False"
    assert conditions["Ready"]["reason"] == "Archived"
    header, archived = read_document(files[0].read_bytes())
    task_id = f"{k8s_namespace}/old"
    assert header["tasks"] == [task_id]
    stored = "\n".join(archived[0]["keys"]["messages"]["value"])  # the messages as Redis stored them
    assert '"hello"' in stored and '"hello back"' in stored
    assert not redis_client.exists(TaskKeys(task_id).task) and not redis_client.exists(TaskKeys(task_id).messages)
    assert redis_client.hget(TaskKeys(task_id).archived, "url") == files[0].as_uri()
    wait_for(lambda: task_events(tasks, "old", "Archived"), timeout=30, what="the Archived Event")
    assert tasks.get("old") is not None  # the object stays until its user deletes it

    # The suspended tree (its prompt still queued), older than `old` and so past the TTL in every pass that
    # archived `old`, is still whole.
    assert tasks.phase("held") == "Suspended"
    assert redis_client.exists(TaskKeys(f"{k8s_namespace}/held").task)
    assert redis_client.llen(TaskKeys(f"{k8s_namespace}/held").inbox) == 1

    # The finalizer still cleans up: deleting the AgentTask removes the tombstone too.
    tasks.delete("old")
    wait_for(lambda: tasks.get("old") is None, timeout=30, what="old to be deleted")
    assert not redis_client.exists(TaskKeys(task_id).archived)


def test_an_idle_conversation_of_the_watched_namespace_is_archived_and_removed(
    retaining_operator: OperatorProcess, redis_client: redis.Redis, k8s_namespace: str, tmp_path: Path,
) -> None:
    store = TaskStore(redis_client)
    hall, paused, elsewhere = f"{k8s_namespace}/hall", f"{k8s_namespace}/quiet", "not-watched/hall"
    for name in (hall, paused, elsewhere):
        assert conversations.create(store, name, title=name, created_by="alice")
        conversations.join(store, name, "user", "alice")
    conversations.set_status(store, paused, "paused", "alice")
    wait_for(lambda: not redis_client.exists(conversation_key(hall, "meta")), timeout=60,
             what="the idle conversation removed by the operator's retention pass")
    [archive] = list((tmp_path / "archive" / k8s_namespace / "conversations").glob("hall-*.jsonl"))
    header, meta, members, posts = read_conversation_document(archive.read_bytes())
    assert header["conversation"] == hall and meta["title"] == hall and list(members) == ["user:alice"]
    assert [p["kind"] for p in posts] == ["joined"]
    assert set(redis_client.zrange(CONVERSATIONS_INDEX, 0, -1)) == {paused, elsewhere}
    assert redis_client.exists(conversation_key(paused, "meta")) and redis_client.exists(
        conversation_key(elsewhere, "meta"))  # paused: kept; another namespace's: not this operator's


def test_the_chart_passes_the_retention_values_and_refuses_bad_ones() -> None:
    from tests.cluster.test_chart_render import CHART, KUBE_VERSION, env_of, helm, one, render

    env = env_of(one(render(), "Deployment", "unicore-operator"))
    assert env["UNICORE_RETENTION_TTL_SECONDS"] == "0"  # off by default
    objs = render("--set", "operator.retention.ttlSeconds=86400", "--set",
                  "operator.retention.archiveUrl=s3://archive/unicore", "--set",
                  "operator.retention.s3EndpointUrl=http://minio:9000")
    env = env_of(one(objs, "Deployment", "unicore-operator"))
    assert env["UNICORE_RETENTION_TTL_SECONDS"] == "86400"
    assert env["UNICORE_RETENTION_ARCHIVE_URL"] == "s3://archive/unicore"
    assert env["UNICORE_ARCHIVE_S3_ENDPOINT_URL"] == "http://minio:9000"
    assert env["UNICORE_RETENTION_INTERVAL_SECONDS"] == "300"
    for bad in ("operator.retention.archiveUrl=https://x", "operator.retention.ttlSeconds=-1",
                "operator.retention.intervalSeconds=0", "operator.retention.ttl=5"):
        proc = helm("template", "uc", str(CHART), "--kube-version", KUBE_VERSION, "--set", bad, check=False)
        assert proc.returncode != 0 and "values don't meet the specifications" in proc.stderr, (bad, proc.stderr)
