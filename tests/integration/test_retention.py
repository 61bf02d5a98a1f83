"""Retention on a real redis-server (issue 15, item 4): a tree idle past its TTL is archived (a real directory, or S3
as its API contract) and removed; an active tree is kept; an archive that fails deletes nothing; a tree that
changes between its archive and its removal is kept whole; a `send` to a removed task says where it went."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import time
from collections.abc import Callable
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import boto3
import pytest
import redis
from botocore.stub import Stubber
from unicore.api.schema import TaskSpec
from unicore.archive import FileSink, S3Sink, document, object_name, read_document
from unicore.retention import Retention
from unicore.store import retention as state
from unicore.store.keys import RETENTION_JOURNAL, TASKS_INDEX, TaskKeys
from unicore.store.tasks import TaskStore
from unicore_client.local import main as cli

from tests.integration.conftest import TurnRunner

HOUR = 3600.0
LATER: Callable[[], float] = lambda: time.time() + HOUR  # noqa: E731  # the clock of a pass an hour from now


def make_tree(store: TaskStore, turn: TurnRunner, root: str, children: int = 1) -> list[str]:
    """A root that ran a turn, and children that each ran one and reported back (the root read the reports)."""
    store.create_task(TaskSpec(id=root, prompt="plan", script={"default": f"{root} answers"}))
    assert turn(root).exit_code == 0
    ids = [root]
    for index in range(children):
        child = f"{root}-c{index}"
        store.create_task(TaskSpec(id=child, parent=root, prompt="work", script={"default": f"{child} done"}))
        assert turn(child).exit_code == 0
        ids.append(child)
    if children:
        assert turn(root).exit_code == 0  # the children's reports
    assert not any(store.needs_turn(task_id) for task_id in ids)
    return ids


def stored(client: redis.Redis, task_id: str) -> list[str]:
    return client.lrange(TaskKeys(task_id).messages, 0, -1)


def left_keys(client: redis.Redis, task_id: str) -> list[str]:
    return sorted(key for key in TaskKeys(task_id).all() if client.exists(key))


def assert_archived(client: redis.Redis, data: bytes, ids: list[str], messages: dict[str, list[str]]) -> None:
    header, tasks = read_document(data)
    assert header["root"] == ids[0] and header["tasks"] == ids
    assert [task["task"] for task in tasks] == ids
    for task in tasks:
        assert task["keys"]["messages"]["value"] == messages[task["task"]]  # byte for byte as stored
        assert task["keys"]["task"]["value"]["id"] == task["task"]
        assert task["usage"]["total_tokens"] >= 0
    for task_id in ids:  # gone, but for the tombstone
        assert left_keys(client, task_id) == [TaskKeys(task_id).archived]
        assert not client.zscore(TASKS_INDEX, task_id)
    assert not client.exists(RETENTION_JOURNAL)


def test_an_idle_tree_past_its_ttl_is_archived_then_removed(
    store: TaskStore, turn: TurnRunner, redis_client: redis.Redis, tmp_path: Path, redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = make_tree(store, turn, "old", children=2)
    recent = make_tree(store, turn, "recent", children=0)
    messages = {task_id: stored(redis_client, task_id) for task_id in ids}
    assert all(messages.values())
    sink = FileSink((tmp_path / "archive").as_uri())

    now_pass = Retention(redis_client, HOUR, sink).run(state.local_roots(redis_client))
    assert now_pass == []  # both trees are younger than the TTL: nothing is even read

    # An hour later `recent` is touched again (a new message, answered) and `old` is not.
    pass_clock = LATER()
    store.queue_text("recent", "again")
    redis_client.hset(TaskKeys("recent").task, "updated_at", repr(pass_clock - 10))
    outcomes = Retention(redis_client, HOUR, sink, clock=lambda: pass_clock).run(state.local_roots(redis_client))
    assert [(o.root, o.action) for o in outcomes] == [("old", "removed")]
    removed = outcomes[0]
    assert removed.tasks == ids and removed.url.startswith("file://")
    files = list((tmp_path / "archive").rglob("*.jsonl"))
    assert [f.as_uri() for f in files] == [removed.url]
    assert_archived(redis_client, files[0].read_bytes(), ids, messages)
    assert store.exists("recent") and stored(redis_client, "recent") and recent == ["recent"]

    # A later send gets a clear error, not an empty conversation.
    monkeypatch.setenv("REDIS_URL", redis_url)
    err = io.StringIO()
    with redirect_stderr(err):
        code = cli.main(["send", "old", "hello again", "--no-wait"])
    assert code == 1
    assert "task old was idle past the retention TTL" in err.getvalue() and removed.url in err.getvalue()
    assert err.getvalue().count("\n") == 1
    assert not store.exists("old") and not redis_client.llen(TaskKeys("old").inbox)
    err = io.StringIO()
    with redirect_stderr(err):
        assert cli.main(["show", "old"]) == 1
    assert "task old was idle past the retention TTL" in err.getvalue() and removed.url in err.getvalue()
    with redirect_stderr(io.StringIO()) as missing:
        assert cli.main(["show", "never-was"]) == 1
    assert "no task 'never-was'" in missing.getvalue()


@pytest.mark.parametrize("activity", ["queued message", "lease", "owed report", "interrupted turn"])
def test_an_active_tree_is_kept_whole(
    activity: str, store: TaskStore, turn: TurnRunner, redis_client: redis.Redis, tmp_path: Path,
) -> None:
    ids = make_tree(store, turn, "busy", children=2)
    child = ids[2]
    if activity == "queued message":
        store.queue_text(child, "one more thing")
    elif activity == "lease":
        store.acquire_lease(child)
    elif activity == "owed report":
        redis_client.hset(TaskKeys(child).task, "report_id", "completion:x:1")
    else:
        redis_client.hset(TaskKeys(child).task, "status", "running")
    before = {task_id: left_keys(redis_client, task_id) for task_id in ids}
    outcomes = Retention(redis_client, HOUR, FileSink((tmp_path / "a").as_uri()), clock=LATER).run(["busy"])
    assert [(o.root, o.action) for o in outcomes] == [("busy", "kept")]
    assert child in outcomes[0].reason
    assert not (tmp_path / "a").exists()
    assert {task_id: left_keys(redis_client, task_id) for task_id in ids} == before


@pytest.mark.parametrize("kind", ["approval", "input"])
def test_a_tree_waiting_for_a_person_is_kept_whatever_its_age(
    kind: str, store: TaskStore, turn: TurnRunner, redis_client: redis.Redis,
) -> None:
    from unicore.store import approvals

    ids = make_tree(store, turn, "asks", children=1)
    lease = store.acquire_lease(ids[1])
    call = approvals.PendingCall(call_id="c1", tool="write_file" if kind == "approval" else "ask_user",
                                 input={"path": "x"}, kind=kind, turn=0, requested_at=time.time(),  # type: ignore[arg-type]
                                 question="which one?" if kind == "input" else "")
    approvals.record_calls(redis_client, lease, [call])
    store.release_lease(lease)
    outcomes = Retention(redis_client, HOUR, None, clock=LATER).run(["asks"])
    assert [(o.action, o.reason) for o in outcomes] == [("kept", f"{ids[1]} is not settled (waiting)")]
    assert all(store.exists(task_id) for task_id in ids)


def test_a_tree_waiting_for_the_caller_or_failed_is_decided_by_the_caller(
    store: TaskStore, turn: TurnRunner, redis_client: redis.Redis,
) -> None:
    ids = make_tree(store, turn, "t", children=1)
    kept = Retention(redis_client, HOUR, None, clock=LATER).run(["t"], waiting=[ids[1]])
    assert [o.action for o in kept] == ["kept"] and store.exists(ids[1])
    store.queue_text(ids[1], "never answered: the operator gave up on this task")
    assert [o.action for o in Retention(redis_client, HOUR, None, clock=LATER).run(["t"])] == ["kept"]
    outcomes = Retention(redis_client, HOUR, None, clock=LATER).run(["t"], failed=[ids[1]])
    assert [(o.action, o.url) for o in outcomes] == [("removed", "")]  # no archive configured: removed only
    assert state.archived_note(store, ids[1]) is not None and not store.exists(ids[1])


def test_a_failed_archive_deletes_nothing_and_the_next_pass_retries(
    store: TaskStore, turn: TurnRunner, redis_client: redis.Redis, tmp_path: Path,
) -> None:
    ids = make_tree(store, turn, "keep", children=1)
    messages = {task_id: stored(redis_client, task_id) for task_id in ids}
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the archive folder should be")
    outcomes = Retention(redis_client, HOUR, FileSink(blocker.as_uri()), clock=LATER).run(["keep"])
    assert [o.action for o in outcomes] == ["archive-failed"] and "not-a-dir" in outcomes[0].reason
    assert all(store.exists(task_id) and stored(redis_client, task_id) == messages[task_id] for task_id in ids)
    assert not redis_client.exists(RETENTION_JOURNAL)

    good = Retention(redis_client, HOUR, FileSink((tmp_path / "ok").as_uri()), clock=LATER).run(["keep"])
    assert [o.action for o in good] == ["removed"]
    assert_archived(redis_client, Path(good[0].url.removeprefix("file://")).read_bytes(), ids, messages)


class SendsDuringTheArchive(FileSink):
    """A directory sink during whose write a user's message reaches a child (the race retention must lose)."""

    def __init__(self, url: str, store: TaskStore, task_id: str) -> None:
        super().__init__(url)
        self.store, self.task_id = store, task_id

    def write(self, name: str, data: bytes) -> str:
        url = super().write(name, data)
        self.store.queue_text(self.task_id, "a message that arrived while the archive was written")
        return url


def test_a_tree_that_changes_after_its_archive_is_kept_whole(
    store: TaskStore, turn: TurnRunner, redis_client: redis.Redis, tmp_path: Path,
) -> None:
    ids = make_tree(store, turn, "race", children=2)
    before = {task_id: left_keys(redis_client, task_id) for task_id in ids}
    sink = SendsDuringTheArchive((tmp_path / "a").as_uri(), store, ids[2])
    outcomes = Retention(redis_client, HOUR, sink, clock=LATER).run(["race"])
    assert [(o.action, o.reason) for o in outcomes] == [("changed", f"{ids[2]} changed after the archive")]
    for task_id in ids:  # every task back as it was (the changed one has its new message queued)
        assert store.exists(task_id) and state.archived_note(store, task_id) is None
        added = [TaskKeys(task_id).inbox] if task_id == ids[2] else []
        assert left_keys(redis_client, task_id) == sorted(before[task_id] + added)
    assert store.pending_count(ids[2]) == 1 and store.needs_turn(ids[2])
    assert not redis_client.exists(RETENTION_JOURNAL)


@pytest.fixture
def s3_api_contract() -> Any:
    """An S3 client whose calls are checked against S3's service model (botocore's Stubber): it stands for S3's
    API contract, not for a store that keeps anything."""
    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def test_an_idle_tree_is_archived_to_s3_before_it_is_removed(
    store: TaskStore, turn: TurnRunner, redis_client: redis.Redis, s3_api_contract: Any,
) -> None:
    client, stubber = s3_api_contract
    ids = make_tree(store, turn, "s3tree", children=1)
    messages = {task_id: stored(redis_client, task_id) for task_id in ids}
    clock = LATER()
    tree = state.read_tree(redis_client, "s3tree")
    assert tree is not None
    data, digest = document(tree, clock)  # what the pass must PUT, exactly
    key = f"unicore/trees/{object_name('s3tree', digest)}"
    md5 = base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
    stubber.add_response("put_object", {"ETag": '"e1"'}, {"Bucket": "archive", "Key": key, "Body": data,
                                                          "ContentType": "application/x-ndjson", "ContentMD5": md5})
    stubber.add_response("head_object", {"ETag": '"e1"', "ContentLength": len(data)}, {"Bucket": "archive", "Key": key})
    sink = S3Sink("s3://archive/unicore/trees/", client)
    outcomes = Retention(redis_client, HOUR, sink, clock=lambda: clock).run(["s3tree"])
    assert [(o.action, o.url) for o in outcomes] == [("removed", f"s3://archive/{key}")]
    assert_archived(redis_client, data, ids, messages)


def test_an_s3_object_that_does_not_read_back_deletes_nothing(
    store: TaskStore, turn: TurnRunner, redis_client: redis.Redis, s3_api_contract: Any,
) -> None:
    client, stubber = s3_api_contract
    ids = make_tree(store, turn, "short", children=0)
    stubber.add_response("put_object", {"ETag": '"abc"'})
    stubber.add_response("head_object", {"ETag": '"abc"', "ContentLength": 3})  # truncated
    outcomes = Retention(redis_client, HOUR, S3Sink("s3://archive", client), clock=LATER).run(["short"])
    assert [o.action for o in outcomes] == ["archive-failed"] and "did not read back" in outcomes[0].reason
    stubber.add_client_error("put_object", "AccessDenied", "Access Denied", 403)
    outcomes = Retention(redis_client, HOUR, S3Sink("s3://archive", client), clock=LATER).run(["short"])
    assert [o.action for o in outcomes] == ["archive-failed"] and "AccessDenied" in outcomes[0].reason
    assert store.exists(ids[0]) and not redis_client.exists(RETENTION_JOURNAL)


def test_the_task_api_answers_gone_for_a_removed_conversation(store: TaskStore, redis_client: redis.Redis) -> None:
    from unicore_operator.task_api import answer
    from unicore_operator.task_api.lookup import static_lookup
    from unicore_operator.task_api.service import TaskApi

    store.create_task(TaskSpec(id="team-a/gone"))
    outcomes = Retention(redis_client, HOUR, None, clock=LATER).run(["team-a/gone"])
    assert [o.action for o in outcomes] == ["removed"]
    api = TaskApi(store, static_lookup(lambda: [{"metadata": {"namespace": "team-a", "name": "gone"}}]))
    body = json.dumps({"id": "m1", "text": "are you there?"}).encode()
    response = answer(api, "POST", "/apis/tasks.unicore.dev/v1alpha1/namespaces/team-a/agenttasks/gone/messages",
                      body=body, sender="user:alice")
    assert response.status == 410
    payload = json.loads(response.encoded())
    assert payload["reason"] == "Gone" and "idle past the retention TTL" in payload["message"]
    assert not store.exists("team-a/gone")  # no empty conversation was started
    logs = answer(api, "GET", "/apis/tasks.unicore.dev/v1alpha1/namespaces/team-a/agenttasks/gone/transcript",
                  sender="user:alice")
    assert logs.status == 410 and "is no longer in Redis" in json.loads(logs.encoded())["message"]
