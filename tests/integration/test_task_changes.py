"""The stream of task changes (``unicore.store.changes``, ``uc:changes``) on a real redis-server: every kind of tree
row change writes an entry (store writes, a turn run by the real local supervisor with the scripted model, approvals,
suspend/resume, retention), a failing XADD fails no write, and the local UI's tree feed
(``unicore_client.ui.tree_feed``)
reads only the stream while nothing changes and only the changed rows when something does (counted with INFO
commandstats)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
from unicore.api.schema import TaskSpec, Usage
from unicore.archive import FileSink
from unicore.retention import Retention
from unicore.store import approvals, changes, suspension
from unicore.store.keys import CHANGES_STREAM
from unicore.store.tasks import TaskStore
from unicore_client.ui.local_backend import LocalBackend
from unicore_client.ui.tree_feed import FeedTiming

from tests.integration.conftest import TurnRunner
from tests.integration.test_approvals_turn import gated  # noqa: F401 (the fixture)

HOUR = 3600.0


def changes_of(client: redis.Redis, after: str = "0-0") -> list[tuple[str, str]]:
    return [(c.task_id, c.change) for c in changes.read_after(client, after)]


def only(task_id: str, found: list[tuple[str, str]]) -> list[str]:
    return [change for task, change in found if task == task_id]


def test_store_writes_that_change_a_tree_row_each_note_it_and_nothing_else_does(
    store: TaskStore, redis_client: redis.Redis
) -> None:
    assert store.create_task(TaskSpec(id="r", prompt="go"))
    assert store.create_task(TaskSpec(id="r-c", parent="r", prompt="child work"))
    assert not store.create_task(TaskSpec(id="r", prompt="again"))  # exists: nothing written, nothing noted
    assert changes_of(redis_client) == [("r", "created"), ("r-c", "created")]
    mark = changes.last_id(redis_client)

    store.queue_text("r", "more")  # the inbox is not in the tree row
    store.activate("r", "test")
    lease = store.acquire_lease("r")
    store.drain(lease, first_drain=True)  # a new turn
    store.drain(lease, first_drain=False)  # nothing left: no new turn
    store.append_message(lease, "assistant", [{"text": "hi"}], usage=Usage(input_tokens=3, output_tokens=2,
                                                                             total_tokens=5))
    store.append_message(lease, "assistant", [{"text": "no usage"}])
    store.end_turn(lease, 0, last_response="hi")
    store.record_error(lease, "it broke")
    assert store.release_lease(lease)
    assert not store.release_lease(lease)  # not ours any more: nothing
    assert changes_of(redis_client, mark) == [("r", "turn_started"), ("r", "turn"), ("r", "tokens"),
                                              ("r", "error"), ("r", "turn_ended")]
    mark = changes.last_id(redis_client)

    lease = store.acquire_lease("r-c", holder="gone:1")
    assert store.break_lease("r-c", "gone:1")
    store.delete_task("r-c")
    assert changes_of(redis_client, mark) == [("r-c", "turn_started"), ("r-c", "turn_ended"), ("r-c", "removed")]
    for _id, fields in redis_client.xrange(CHANGES_STREAM):
        assert set(fields) == {"task", "change"} and fields["change"] in changes.KINDS  # small: never text


def test_suspend_and_resume_note_the_change_and_a_repeat_does_not(store: TaskStore,
                                                                   redis_client: redis.Redis) -> None:
    store.create_task(TaskSpec(id="s", prompt="go"))
    mark = changes.last_id(redis_client)
    assert suspension.suspend(store, "s") and not suspension.suspend(store, "s")
    assert suspension.resume(store, "s")
    assert changes_of(redis_client, mark) == [("s", "suspended"), ("s", "resumed")]


def test_a_gated_call_notes_the_wait_and_the_decision(store: TaskStore, turn: TurnRunner, gated: Any,  # noqa: F811
                                                      redis_client: redis.Redis) -> None:
    gated("g", [{"tool_use": [{"name": "count", "input": {"label": "a"}}]}, {"text": "counted"}])
    mark = changes.last_id(redis_client)
    assert turn("g").exit_code == 0
    assert only("g", changes_of(redis_client, mark)) == ["turn_started", "turn", "tokens", "waiting", "turn_ended"]
    mark = changes.last_id(redis_client)
    [call] = approvals.pending_calls(redis_client, "g")
    approvals.decide(redis_client, "g", call.call_id, True, by="alice")
    assert changes_of(redis_client, mark) == [("g", "decided")]


def test_a_turn_of_the_local_supervisor_notes_its_start_and_its_end(store: TaskStore, redis_client: redis.Redis,
                                                                    redis_url: str, tmp_path: Path) -> None:
    from unicore.launch.local import LocalSupervisor

    store.create_task(TaskSpec(id="p", prompt="hello", script={"tasks": {"p": [{"text": "hi there"}]}}))
    store.activate("p", "test")
    supervisor = LocalSupervisor(redis_client, redis_url, env={"UNICORE_HOME": str(tmp_path)},
                                 on_event=lambda _text: None)
    report = supervisor.run_until_settled("p", timeout=120)
    assert report.settled and report.turns_run == 1 and not report.failures
    # tokens twice: the answer's usage, then the turn summary's
    assert only("p", changes_of(redis_client)) == ["created", "turn_started", "turn", "tokens", "tokens",
                                                   "turn_ended"]
    assert store.get_task("p").last_response == "hi there"


def test_retention_notes_the_tasks_it_archives_and_removes(store: TaskStore, turn: TurnRunner,
                                                           redis_client: redis.Redis, tmp_path: Path) -> None:
    store.create_task(TaskSpec(id="old", prompt="plan", script={"default": "done"}))
    assert turn("old").exit_code == 0
    mark = changes.last_id(redis_client)
    later = time.time() + HOUR
    outcomes = Retention(redis_client, HOUR, FileSink((tmp_path / "a").as_uri()), clock=lambda: later).run(["old"])
    assert [o.action for o in outcomes] == ["removed"]
    assert changes_of(redis_client, mark) == [("old", "archived"), ("old", "removed")]


def test_a_change_that_cannot_be_noted_fails_no_write(store: TaskStore, turn: TurnRunner,
                                                      redis_client: redis.Redis) -> None:
    """The stream key holding something else (WRONGTYPE for every XADD): tasks are created, run, suspended and
    decided as before."""
    redis_client.set(CHANGES_STREAM, "not a stream")
    assert store.create_task(TaskSpec(id="w", prompt="go", script={"tasks": {"w": [{"text": "fine"}]}}))
    outcome = turn("w")
    assert (outcome.exit_code, outcome.final_text) == (0, "fine")
    assert suspension.suspend(store, "w") and store.get_task("w").suspended
    store.delete_task("w")
    assert not store.exists("w") and redis_client.get(CHANGES_STREAM) == "not a stream"


# ----------------------------------------------------------------------------- the tree feed


def feed_of(client: redis.Redis, stop: threading.Event, **timing: float) -> Iterator[list[dict[str, Any]] | None]:
    return LocalBackend(client, "", tree_timing=FeedTiming(**timing)).tree_changes(stop)


def next_tree(feed: Iterator[list[dict[str, Any]] | None], timeout: float = 20.0) -> list[dict[str, Any]]:
    """The feed's next forest (keepalives skipped), within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nodes = next(feed)
        if nodes is not None:
            return nodes
    raise AssertionError("no tree update")


def rows(nodes: list[dict[str, Any]]) -> dict[str, str]:
    return {node["id"]: node["phase"] for node in nodes}


def test_the_tree_feed_sends_a_change_without_polling(store: TaskStore, redis_client: redis.Redis) -> None:
    stop = threading.Event()
    feed = feed_of(redis_client, stop, wait_seconds=0.2)
    assert next(feed) == []
    store.create_task(TaskSpec(id="a", prompt="go"))
    assert rows(next_tree(feed)) == {"a": "queued"}
    store.create_task(TaskSpec(id="a-kid", parent="a", prompt="go"))
    suspension.suspend(store, "a")
    assert rows(next_tree(feed)) == {"a": "suspended", "a-kid": "queued"}
    stop.set()
    assert list(feed) == []  # a stopping server ends it


def command_calls(client: redis.Redis, *names: str) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in names}


READS = ("hmget", "hgetall", "zrange", "xrevrange")


def test_the_tree_feed_reads_only_the_stream_while_nothing_changes_and_then_only_the_changed_rows(
    store: TaskStore, redis_client: redis.Redis
) -> None:
    for index in range(30):
        store.create_task(TaskSpec(id=f"t{index}", prompt="go"))
    stop = threading.Event()
    feed = feed_of(redis_client, stop, wait_seconds=0.1)
    assert len(next_tree(feed)) == 30
    before = command_calls(redis_client, *READS, "xread")
    for _ in range(5):
        assert next(feed) is None  # quiet waits: keepalives
    after = command_calls(redis_client, *READS, "xread")
    assert {name: after[name] - before[name] for name in READS} == dict.fromkeys(READS, 0)
    assert after["xread"] - before["xread"] >= 5

    suspension.suspend(store, "t7")
    suspension.suspend(store, "t8")
    nodes = next_tree(feed)
    assert [n["id"] for n in nodes if n["phase"] == "suspended"] == ["t8", "t7"]  # newest root first
    done = command_calls(redis_client, *READS)
    assert done["zrange"] == after["zrange"]  # no index read: not the whole forest
    assert done["hmget"] - after["hmget"] == 2 * 2  # both changes in one re-read: record + approval counters each
    stop.set()


def test_the_tree_feed_resyncs_when_an_entry_was_lost(store: TaskStore, redis_client: redis.Redis) -> None:
    store.create_task(TaskSpec(id="x", prompt="go"))
    stop = threading.Event()
    feed = feed_of(redis_client, stop, wait_seconds=0.1, resync_seconds=0.5)
    assert rows(next_tree(feed)) == {"x": "queued"}
    suspension.suspend(store, "x")
    redis_client.xtrim(CHANGES_STREAM, maxlen=0)  # the entry trimmed away before the feed read it
    assert rows(next_tree(feed)) == {"x": "suspended"}  # by the resync
    stop.set()


def test_the_tree_feed_follows_a_tree_the_local_supervisor_runs(store: TaskStore, redis_client: redis.Redis,
                                                               redis_url: str, tmp_path: Path) -> None:
    from unicore.launch.local import LocalSupervisor

    stop = threading.Event()
    feed = feed_of(redis_client, stop, wait_seconds=0.2)
    assert next(feed) == []
    store.create_task(TaskSpec(id="run", prompt="hello", script={"tasks": {"run": [{"text": "hi"}]}}))
    store.activate("run", "test")
    supervisor = LocalSupervisor(redis_client, redis_url, env={"UNICORE_HOME": str(tmp_path)},
                                 on_event=lambda _text: None)
    ran = threading.Thread(target=supervisor.run_until_settled, args=("run",), kwargs={"timeout": 120},
                           daemon=True)
    ran.start()
    shown: list[list[tuple[str, int]]] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and (not shown or shown[-1] != [("done", 1)]):
            nodes = next(feed)
            if nodes is not None:
                shown.append([(node["phase"], node["turns"]) for node in nodes])
    finally:
        ran.join(120)
        stop.set()
    assert shown[0] == [("queued", 0)] and shown[-1] == [("done", 1)], shown
    assert all(row[0][0] in ("queued", "running", "done") for row in shown), shown
