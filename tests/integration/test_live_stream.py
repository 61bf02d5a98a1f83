"""The live token stream on a real redis-server (issue 14, item 2): bounded, batched but with the first delta at once,
never failing a turn, filled while a local-mode turn runs, writable (not readable) by a namespace's own Redis user,
and printed by ``unicore show --follow``."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.exceptions import NoPermissionError
from unicore.api.schema import TaskSpec
from unicore.providers.base import ModelRequest
from unicore.store import acl
from unicore.store.client import build_client
from unicore.store.keys import TaskKeys
from unicore.store.tasks import TaskStore
from unicore.store.token_stream import (
    StreamEntry,
    StreamSettings,
    TokenStreamSink,
    current_call,
    publish,
    read_after,
)
from unicore.turn.outcome import TurnOutcome

from tests.integration.conftest import TurnRunner
from tests.unicore_cli import OutputReader
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


def entries(client: redis.Redis, task_id: str) -> list[StreamEntry]:
    return read_after(TaskStore(client), task_id, "0", count=100_000)


def texts(client: redis.Redis, task_id: str) -> list[str]:
    return [e.text for e in entries(client, task_id) if e.kind == "text"]


def test_the_stream_is_capped_and_expires(redis_client: redis.Redis) -> None:
    settings = StreamSettings(entries=100, ttl_seconds=120)
    for start in range(0, 3000, 500):
        batch = [{"turn": 0, "call": 0, "seq": 1, "attempt": 1, "kind": "text", "text": f"t{i}"}
                 for i in range(start, start + 500)]
        publish(redis_client, "capped", batch, settings)
    key = TaskKeys("capped").tokens
    length = redis_client.xlen(key)
    assert 100 <= length < 400, length  # MAXLEN ~: whole stream nodes (100 entries each) are trimmed
    assert 0 < redis_client.pttl(key) <= 120_000
    kept = entries(redis_client, "capped")
    assert kept[-1].text == "t2999" and kept[0].text != "t0"  # the newest kept, the oldest gone


def test_the_first_delta_goes_out_at_once_and_later_ones_are_batched(redis_client: redis.Redis) -> None:
    # A flush every 60 s: only the first delta, a full batch (64 characters) and the end may go out before that.
    sink = TokenStreamSink(redis_client, "batched", turn=2, call=1, seq=7,
                           settings=StreamSettings(flush_seconds=60.0, flush_chars=64))
    sink.attempt_started()
    sink.text("Hello")
    wait_for(lambda: texts(redis_client, "batched") == ["Hello"], timeout=5, what="the first delta")
    for _ in range(10):
        sink.text("a")
    sink.text("b" * 60)  # 70 characters pending: one entry for all eleven deltas
    wait_for(lambda: len(texts(redis_client, "batched")) == 2, timeout=5, what="the batch")
    assert texts(redis_client, "batched") == ["Hello", "a" * 10 + "b" * 60]
    sink.text("tail")
    sink.close()
    got = entries(redis_client, "batched")
    assert [(e.kind, e.text) for e in got] == [("attempt", ""), ("text", "Hello"), ("text", "a" * 10 + "b" * 60),
                                              ("text", "tail"), ("end", "")]
    assert {(e.turn, e.call, e.seq, e.attempt) for e in got} == {(2, 1, 7, 1)}
    assert sink.published == 5 and sink.dropped == 0


def test_small_deltas_go_out_after_the_flush_interval_without_waiting_for_the_end(redis_client: redis.Redis) -> None:
    sink = TokenStreamSink(redis_client, "ticking", turn=0, call=0, seq=1,
                           settings=StreamSettings(flush_seconds=0.05, flush_chars=10_000))
    sink.text("one ")
    sink.text("two ")
    sink.text("three")
    wait_for(lambda: "".join(texts(redis_client, "ticking")) == "one two three", timeout=5,
             what="the batched deltas before close")
    assert not [e for e in entries(redis_client, "ticking") if e.kind == "end"]
    sink.close()
    assert entries(redis_client, "ticking")[-1].kind == "end"


def test_a_new_try_is_marked_and_the_reader_starts_at_the_call_in_progress(redis_client: redis.Redis) -> None:
    store = TaskStore(redis_client)
    done = TokenStreamSink(redis_client, "tries", turn=0, call=0, seq=1)
    done.text("finished answer")
    done.close()
    sink = TokenStreamSink(redis_client, "tries", turn=0, call=1, seq=3)
    sink.attempt_started()
    sink.text("cut mid")
    wait_for(lambda: "cut mid" in texts(redis_client, "tries"), timeout=5, what="the first try's text")
    sink.attempt_started()
    sink.text("whole answer")
    wait_for(lambda: "whole answer" in texts(redis_client, "tries"), timeout=5, what="the second try's text")
    tail, after = current_call(store, "tries")
    assert [(e.kind, e.attempt, e.text) for e in tail] == [("attempt", 2, ""), ("text", 2, "whole answer")]
    assert after == entries(redis_client, "tries")[-1].id
    sink.close()
    assert current_call(store, "tries")[0] == []  # the newest entry ends the call: nothing in progress
    assert read_after(store, "tries", after)[0].kind == "end"


def test_a_publish_that_fails_is_dropped_and_never_raises() -> None:
    dead = build_client("redis://127.0.0.1:1/0", decode_responses=True, retry_for=0)  # nothing listens on port 1
    sink = TokenStreamSink(dead, "nowhere", turn=0, call=0, seq=1, settings=StreamSettings(close_wait_seconds=10))
    sink.attempt_started()
    sink.text("lost")
    sink.close()
    assert sink.published == 0 and sink.dropped == 3


def test_a_turn_whose_stream_cannot_be_written_still_ends_well(store: TaskStore, turn: TurnRunner,
                                                               redis_client: redis.Redis) -> None:
    store.create_task(TaskSpec(id="wrongtype", prompt="hi", script={"default": "All good here."}))
    redis_client.set(TaskKeys("wrongtype").tokens, "not a stream")  # every XADD answers WRONGTYPE
    outcome = turn("wrongtype")
    assert (outcome.exit_code, outcome.final_text) == (0, "All good here.")
    assert store.last_message("wrongtype").content == [{"text": "All good here."}]


def _gated_turn(store: TaskStore, turn: TurnRunner, task_id: str) -> tuple[threading.Event, threading.Thread,
                                                                          list[TurnOutcome]]:
    """A task whose first answer streams and asks for a tool; its second model call waits for the returned gate."""
    script = {"tasks": {task_id: [
        {"text": "alpha beta gamma", "tool_use": [{"name": "note", "input": {"text": "n1"}}]},
        {"text": "final words here"},
    ]}}
    store.create_task(TaskSpec(id=task_id, prompt="stream please", script=script))
    gate = threading.Event()

    def hold_second_call(request: ModelRequest) -> None:
        if any(m.get("role") == "assistant" for m in request.messages):
            assert gate.wait(60), "the test never opened the gate"

    turn.hooks[task_id] = hold_second_call
    outcomes: list[TurnOutcome] = []
    thread = threading.Thread(target=lambda: outcomes.append(turn(task_id)), daemon=True)
    return gate, thread, outcomes


def test_a_local_turn_streams_its_answer_before_the_turn_ends(store: TaskStore, turn: TurnRunner,
                                                              redis_client: redis.Redis) -> None:
    gate, thread, outcomes = _gated_turn(store, turn, "live")
    thread.start()
    try:
        wait_for(lambda: "".join(texts(redis_client, "live")) == "alpha beta gamma", timeout=20,
                 what="the first answer in the stream")
        assert thread.is_alive() and not outcomes  # the turn has not ended
        first = [e for e in entries(redis_client, "live") if e.kind == "text"]
        assert len(first) >= 1 and {(e.turn, e.call, e.seq) for e in first} == {(0, 0, 1)}  # seq 0: the prompt
    finally:
        gate.set()
        thread.join(30)
    assert outcomes and outcomes[0].exit_code == 0
    got = entries(redis_client, "live")
    assert "".join(e.text for e in got if e.seq == 3) == "final words here"  # seq 2: the tool result
    assert [e.kind for e in got if e.kind != "text"] == ["end", "end", "turn_end"]
    assert [m.content for m in store.messages("live") if m.role == "assistant"][1] == [{"text": "final words here"}]


def test_a_namespaces_user_may_write_its_tasks_stream_but_not_read_it(redis_client: redis.Redis,
                                                                      redis_url: str) -> None:
    password = acl.new_password()
    acl.apply_namespace_user(redis_client, "team-s", password)
    tenant = build_client(acl.identity_url(redis_url, acl.namespace_user("team-s"), password),
                          decode_responses=True, retry_for=0)
    try:
        sink = TokenStreamSink(tenant, "team-s/t", turn=0, call=0, seq=1)
        sink.text("from the turn pod")
        sink.close()
        assert sink.dropped == 0 and texts(redis_client, "team-s/t") == ["from the turn pod"]
        with pytest.raises(NoPermissionError):
            read_after(TaskStore(tenant), "team-s/t", "0")
        other = TokenStreamSink(tenant, "team-t/t", turn=0, call=0, seq=1)
        other.text("into another namespace")
        other.close()
        assert other.dropped == 2 and texts(redis_client, "team-t/t") == []
    finally:
        tenant.close()
        acl.delete_namespace_user(redis_client, "team-s")


# --------------------------------------------------------------------------- unicore show --follow


@pytest.fixture
def follow_env(redis_url: str, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "REDIS_URL": redis_url, "UNICORE_HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def follow(follow_env: dict[str, str]) -> Iterator[Any]:
    procs: list[subprocess.Popen[str]] = []

    def start(task_id: str) -> tuple[subprocess.Popen[str], OutputReader]:
        proc = subprocess.Popen([sys.executable, "-m", "unicore_client.local.main", "show", task_id, "--follow"],
                                env=follow_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None
        return proc, OutputReader(proc.stdout)

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_show_follow_prints_tokens_as_they_come_then_exits_when_the_task_settles(
        store: TaskStore, turn: TurnRunner, follow: Any) -> None:
    gate, thread, outcomes = _gated_turn(store, turn, "shown")
    proc, out = follow("shown")
    wait_for(lambda: "waiting in the inbox" in out.text, timeout=20, what="the transcript so far")
    thread.start()
    try:
        wait_for(lambda: "Assistant: alpha beta gamma" in out.text, timeout=20, what=f"the live answer in {out.text!r}")
        assert thread.is_alive() and proc.poll() is None  # printed while the turn runs
        wait_for(lambda: "[tool result" in out.text, timeout=20, what="the stored tool call and result")
    finally:
        gate.set()
        thread.join(30)
    assert proc.wait(timeout=30) == 0  # the task settled
    text = out.text
    assert text.count("alpha beta gamma") == 1 and text.count("final words here") == 1  # live, never again stored
    order = [text.index(s) for s in ("User: stream please", "Assistant: alpha beta gamma", "[tool call note",
                                     "[tool result", "Assistant: final words here")]
    assert order == sorted(order), text


def test_show_follow_escapes_control_characters_of_live_text(store: TaskStore, turn: TurnRunner,
                                                             follow: Any) -> None:
    store.create_task(TaskSpec(id="escaped", prompt="go", script={"tasks": {"escaped": [
        {"sleep": 0.5, "text": "red \x1b[31mtext\x1b]0;title\x07 done"}]}}))
    proc, out = follow("escaped")
    wait_for(lambda: "waiting in the inbox" in out.text, timeout=20, what="the transcript so far")
    assert turn("escaped").exit_code == 0
    assert proc.wait(timeout=30) == 0
    assert "\x1b" not in out.text and "\x07" not in out.text
    assert out.text.count("red \\x1b[31mtext\\x1b]0;title\\x07 done") == 1


def test_show_follow_does_not_go_with_json(follow_env: dict[str, str], store: TaskStore) -> None:
    store.create_task(TaskSpec(id="plain", prompt="x"))
    done = subprocess.run([sys.executable, "-m", "unicore_client.local.main", "show", "plain", "--follow", "--json"],
                          env=follow_env, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 2 and "--follow" in done.stderr
