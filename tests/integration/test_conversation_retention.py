"""Retention of shared conversations on a real redis-server (issue 33, item 1: "archived and removed with
retention"): an idle conversation is archived to a real directory and removed with its index entry and its tasks'
entries; one that is paused, has posts not delivered, or was active within the TTL is kept; one that changes between
its archive and its removal is kept whole; an archive that fails removes nothing; ``unicore gc`` does it for local
mode's conversations and leaves a cluster's alone."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import redis
from unicore.api.schema import TaskSpec
from unicore.archive import ArchiveSink, FileSink
from unicore.conversation_retention import ConversationRetention, read_conversation_document
from unicore.store import conversations
from unicore.store.keys import CONVERSATIONS_INDEX, TaskKeys, conversation_key
from unicore.store.tasks import TaskStore
from unicore_client.local import main as cli

HOUR = 3600.0
LATER: Callable[[], float] = lambda: time.time() + HOUR  # noqa: E731  # the clock of a pass an hour from now


def open_room(store: TaskStore, name: str = "room", tasks: tuple[str, ...] = ("writer", "critic")) -> None:
    """A conversation with tasks and a person, one person's post delivered to every task."""
    assert conversations.create(store, name, title=f"{name} title", created_by="alice")
    for task_id in tasks:
        if not store.exists(task_id):
            store.create_task(TaskSpec(id=task_id, prompt="work", script={"default": "ok"}))
        conversations.join(store, name, "task", task_id)
    conversations.join(store, name, "user", "alice")
    conversations.post(store, name, f"user:{name}-1", kind="post", sender_kind="user", sender="alice",
                       text="Hello \x1b[2J both")
    conversations.deliver(store, name)


def conversation_keys(client: redis.Redis, name: str) -> list[str]:
    return [key for part in ("meta", "posts", "postids", "members")
            if client.exists(key := conversation_key(name, part))]


def test_an_idle_conversation_is_archived_and_removed_with_what_names_it(store: TaskStore, redis_client: redis.Redis,
                                                                          tmp_path: Path) -> None:
    open_room(store)
    open_room(store, "recent", ("writer",))
    posts = redis_client.lrange(conversation_key("room", "posts"), 0, -1)
    meta = redis_client.hgetall(conversation_key("room", "meta"))
    members = redis_client.hgetall(conversation_key("room", "members"))
    sink = FileSink((tmp_path / "archive").as_uri())
    # "recent" moves now: an hour later it is the room that was idle for the hour, not it
    redis_client.hset(conversation_key("recent", "meta"), "updated_at", repr(time.time() + HOUR))

    outcomes = ConversationRetention(redis_client, 60, sink, clock=LATER).run(["room", "recent"])

    assert [(o.conversation, o.action) for o in outcomes] == [("room", "removed")]
    assert outcomes[0].posts == len(posts) and outcomes[0].url.startswith("file://")
    [archive] = list((tmp_path / "archive").rglob("*.jsonl"))
    assert archive.as_uri() == outcomes[0].url and archive.parent.name == "conversations"
    header, archived_meta, archived_members, archived_posts = read_conversation_document(archive.read_bytes())
    assert header["conversation"] == "room" and header["posts"] == len(posts)
    assert archived_meta == meta and archived_members == members
    assert archived_posts == [json.loads(p) for p in posts]
    assert not conversation_keys(redis_client, "room")
    assert redis_client.zrange(CONVERSATIONS_INDEX, 0, -1) == ["recent"]
    assert redis_client.hkeys(TaskKeys("writer").conversations) == ["recent"]  # its entry for the room went
    assert redis_client.hkeys(TaskKeys("critic").conversations) == []
    assert len(conversation_keys(redis_client, "recent")) == 4  # kept whole
    assert conversations.task_conversations(store, "writer") == ["recent"]


def test_paused_undelivered_and_recently_active_conversations_are_kept(store: TaskStore,
                                                                        redis_client: redis.Redis) -> None:
    open_room(store, "paused")
    conversations.set_status(store, "paused", "paused", "alice")
    open_room(store, "waiting")
    conversations.post(store, "waiting", "user:waiting-2", kind="post", sender_kind="user", sender="alice",
                       text="not delivered yet")  # posted; its poster died before delivering
    open_room(store, "closed")
    conversations.set_status(store, "closed", "closed", "alice")
    open_room(store, "active")

    later = ConversationRetention(redis_client, 60, clock=LATER)
    reasons = {name: later.reason_kept(name) for name in ("paused", "waiting", "closed")}
    assert reasons["paused"] is not None and reasons["paused"].startswith("paused")
    assert reasons["waiting"] == "1 post(s) not delivered yet"
    assert reasons["closed"] is None
    now = ConversationRetention(redis_client, 60)
    reason = now.reason_kept("active")
    assert reason is not None and reason.startswith("active")

    outcomes = later.run(["paused", "waiting", "closed"]) + now.run(["active"])
    assert {(o.conversation, o.action) for o in outcomes} == {("paused", "kept"), ("waiting", "kept"),
                                                              ("closed", "removed")}
    # the pass delivered what its poster did not: it is owed to both tasks, which keep the conversation going
    waiting = next(o for o in outcomes if o.conversation == "waiting")
    assert waiting.reason == "2 message(s) delivered now", waiting
    for task_id in ("writer", "critic"):
        assert [m.content for m in store.inbox(task_id) if "not delivered yet" in str(m.content)], task_id
    for name in ("paused", "waiting", "active"):
        assert len(conversation_keys(redis_client, name)) == 4, name
    assert not conversation_keys(redis_client, "closed")


class PostWhileArchiving:
    """A real directory sink during whose write a person posts: the race that a pass cannot be made to lose on
    demand otherwise."""

    def __init__(self, sink: ArchiveSink, store: TaskStore, name: str) -> None:
        self.sink, self.store, self.name = sink, store, name
        self.url = sink.url

    def write(self, name: str, data: bytes) -> str:
        url = self.sink.write(name, data)
        conversations.post(self.store, self.name, "user:late", kind="post", sender_kind="user", sender="alice",
                           text="one more thing")
        return url


def test_a_post_between_the_archive_and_the_removal_keeps_the_conversation_whole(
    store: TaskStore, redis_client: redis.Redis, tmp_path: Path,
) -> None:
    open_room(store)
    sink = PostWhileArchiving(FileSink((tmp_path / "archive").as_uri()), store, "room")
    outcomes = ConversationRetention(redis_client, 60, sink, clock=LATER).run(["room"])
    assert [(o.conversation, o.action) for o in outcomes] == [("room", "changed")]
    assert len(conversation_keys(redis_client, "room")) == 4
    assert [p.text for p in conversations.posts(store, "room")][-1] == "one more thing"
    assert redis_client.zrange(CONVERSATIONS_INDEX, 0, -1) == ["room"]
    assert conversations.task_conversations(store, "writer") == ["room"]


def test_an_archive_that_fails_removes_nothing(store: TaskStore, redis_client: redis.Redis, tmp_path: Path) -> None:
    open_room(store)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the archive's directory would be")
    outcomes = ConversationRetention(redis_client, 60, FileSink(blocker.as_uri()), clock=LATER).run(["room"])
    assert [(o.conversation, o.action) for o in outcomes] == [("room", "archive-failed")]
    assert len(conversation_keys(redis_client, "room")) == 4
    assert conversations.task_conversations(store, "critic") == ["room"]


def test_an_index_entry_whose_conversation_is_gone_is_dropped(store: TaskStore, redis_client: redis.Redis) -> None:
    open_room(store)
    for part in ("meta", "posts", "postids", "members"):  # a pass that stopped after removing the keys
        redis_client.delete(conversation_key("room", part))
    outcomes = ConversationRetention(redis_client, 60, clock=LATER).run(["room"])
    assert [(o.conversation, o.action) for o in outcomes] == [("room", "gone")]
    assert redis_client.zrange(CONVERSATIONS_INDEX, 0, -1) == []


def test_unicore_gc_removes_local_conversations_and_leaves_a_clusters(
    store: TaskStore, redis_client: redis.Redis, tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    open_room(store)
    assert conversations.create(store, "team-a/hall", title="a cluster's", created_by="bob")
    old = repr(time.time() - HOUR)
    for name in ("room", "team-a/hall"):
        redis_client.hset(conversation_key(name, "meta"), mapping={"updated_at": old, "created_at": old})
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("UNICORE_HOME", str(tmp_path / "home"))
    archive = (tmp_path / "archive").as_uri()

    with redirect_stdout(io.StringIO()) as dry:
        assert cli.main(["gc", "--ttl", "60", "--dry-run"]) == 0
    assert "conversation room: would be removed" in dry.getvalue() and "hall" not in dry.getvalue()
    assert len(conversation_keys(redis_client, "room")) == 4

    with redirect_stdout(io.StringIO()) as out:
        assert cli.main(["gc", "--ttl", "60", "--archive", archive]) == 0
    line = next(x for x in out.getvalue().splitlines() if x.startswith("conversation room:"))
    assert line.startswith("conversation room: removed (4 posts), archived to file://"), line
    assert not conversation_keys(redis_client, "room")
    assert redis_client.zrange(CONVERSATIONS_INDEX, 0, -1) == ["team-a/hall"]
