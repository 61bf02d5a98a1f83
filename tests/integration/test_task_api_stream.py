"""The task API's ``stream`` subresource over a real Redis, without HTTP (issue 14): the call in progress, entries
after an id, a long poll bounded by ``wait``, the task's state, and refusals of bad parameters and unknown tasks.
Authorization (who may ``get agenttasks/stream``) is in test_task_api_tls.py and tests/cluster/test_task_api_stream.py.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from unicore.api.schema import TaskSpec, text_block
from unicore.store.tasks import TaskStore
from unicore.store.token_stream import StreamSettings, TokenStreamSink
from unicore_operator.task_api import answer
from unicore_operator.task_api import stream as stream_route
from unicore_operator.task_api.lookup import static_lookup
from unicore_operator.task_api.service import TaskApi

from tests.waiting import wait_for

NS, NAME = "team-a", "demo"
TASK_ID = f"{NS}/{NAME}"
PATH = f"/apis/tasks.unicore.dev/v1alpha1/namespaces/{NS}/agenttasks/{NAME}/stream"


@pytest.fixture
def store(redis_url: str) -> TaskStore:
    return TaskStore(redis.Redis.from_url(redis_url, decode_responses=True))


@pytest.fixture
def api(store: TaskStore) -> TaskApi:
    objects = [{"metadata": {"namespace": NS, "name": NAME}}]
    return TaskApi(store, static_lookup(lambda: objects))


def get(api: TaskApi, query: str = "") -> tuple[int, dict[str, Any]]:
    response = answer(api, "GET", PATH, query, sender="user:alice")
    return response.status, response.body


def sink(store: TaskStore, *, call: int, seq: int) -> TokenStreamSink:
    return TokenStreamSink(store.redis, TASK_ID, turn=0, call=call, seq=seq, settings=StreamSettings(flush_chars=1))


def test_a_reader_starts_at_the_call_in_progress_and_then_reads_after_its_id(api: TaskApi, store: TaskStore) -> None:
    store.create_task(TaskSpec(id=TASK_ID, prompt="hello"))
    lease = store.acquire_lease(TASK_ID)
    store.drain(lease, first_drain=True)
    status, empty = get(api)
    assert (status, empty["entries"], empty["next"], empty["more"]) == (200, [], "0", False)
    assert empty["state"] == {"status": "running", "initialised": True, "pending": 0, "busy": True, "messages": 1}

    first = sink(store, call=0, seq=1)
    first.text("an earlier answer")
    first.close()
    store.append_message(lease, "assistant", [text_block("an earlier answer")])
    second = sink(store, call=1, seq=2)
    second.attempt_started()
    second.text("half of")
    second.attempt_started()
    second.text("the answer")
    second.text(" so far")

    def live_text() -> dict[str, Any] | None:
        body = get(api)[1]
        return body if "".join(e["text"] for e in body["entries"]) == "the answer so far" else None

    start = wait_for(live_text, timeout=10, what="the second try's text")  # published by the sink's thread
    got = [(e["kind"], e["attempt"], e["text"]) for e in start["entries"]]
    # the first try's text is void (never published, or skipped: the reader starts at the latest try it saw)
    assert ("attempt", 2, "") in got and {a for k, a, _ in got if k == "text"} == {2}
    assert {(e["turn"], e["call"], e["seq"]) for e in start["entries"]} == {(1, 1, 2)}  # turns as users count them
    assert start["state"]["messages"] == 2

    second.close()
    status, after = get(api, f"after={start['next']}")
    assert status == 200 and [e["kind"] for e in after["entries"]] == ["end"]
    assert after["next"] == after["entries"][-1]["id"] != start["next"]
    status, from_start = get(api, "after=0")
    assert [e["kind"] for e in from_start["entries"]].count("end") == 2  # everything kept, oldest first
    store.release_lease(lease)


def test_a_long_poll_answers_when_an_entry_comes_and_otherwise_after_wait(api: TaskApi, store: TaskStore) -> None:
    store.create_task(TaskSpec(id=TASK_ID, prompt="hello"))
    began = time.monotonic()
    status, idle = get(api, "after=0&wait=1")
    waited = time.monotonic() - began
    assert (status, idle["entries"], idle["next"]) == (200, [], "0") and 0.9 <= waited < 5

    writer = sink(store, call=0, seq=1)
    timer = threading.Timer(0.3, lambda: (writer.text("token"), writer.close()))
    timer.start()
    began = time.monotonic()
    status, woken = get(api, "after=0&wait=10")
    timer.join()
    assert status == 200 and woken["entries"][0]["text"] == "token" and time.monotonic() - began < 5


def test_waits_beyond_the_limit_of_waiters_answer_at_once(api: TaskApi, store: TaskStore,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    store.create_task(TaskSpec(id=TASK_ID, prompt="hello"))
    monkeypatch.setattr(stream_route, "_waiters", threading.BoundedSemaphore(1))
    assert stream_route._waiters.acquire(blocking=False)  # the one waiter's place is taken
    began = time.monotonic()
    assert get(api, "after=0&wait=10")[1]["entries"] == []
    assert time.monotonic() - began < 5


@pytest.mark.parametrize(("query", "status", "needle"), [
    ("after=latest", 400, "not a stream entry id"),
    ("after=1-2-3", 400, "not a stream entry id"),
    ("after=0&wait=11", 400, "wait=11 must be between 0 and 10"),
    ("after=0&wait=soon", 400, "is not an integer"),
])
def test_bad_parameters_are_refused(api: TaskApi, store: TaskStore, query: str, status: int, needle: str) -> None:
    store.create_task(TaskSpec(id=TASK_ID, prompt="hello"))
    code, body = get(api, query)
    assert (code, body["kind"]) == (status, "Status") and needle in body["message"]


def test_an_unknown_task_is_not_found_and_a_task_without_a_record_is_not_initialised(api: TaskApi) -> None:
    response = answer(api, "GET", PATH.replace(f"/{NAME}/", "/nothing/"), "", sender="user:alice")
    assert (response.status, response.body["reason"]) == (404, "NotFound")
    status, body = get(api)  # the AgentTask exists, the operator has not made its record yet
    assert status == 200 and body["state"]["initialised"] is False and body["entries"] == []
