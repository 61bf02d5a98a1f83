"""The task API over a real Redis (TaskStore), without HTTP: messages exactly once, transcript pages."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
import redis
from unicore.api.schema import TaskSpec, text_block
from unicore.store.keys import activations_stream
from unicore.store.tasks import TaskStore
from unicore_operator.task_api import answer
from unicore_operator.task_api.lookup import static_lookup
from unicore_operator.task_api.service import TaskApi

NS, NAME = "team-a", "demo"
TASK_ID = f"{NS}/{NAME}"
BASE = f"/apis/tasks.unicore.dev/v1alpha1/namespaces/{NS}/agenttasks/{NAME}"
SENDER = "user:alice"


def _agenttask(namespace: str, name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}}


@pytest.fixture
def store(redis_url: str) -> TaskStore:
    return TaskStore(redis.Redis.from_url(redis_url, decode_responses=True))


@pytest.fixture
def api(store: TaskStore) -> TaskApi:
    objects = [_agenttask(NS, NAME), _agenttask(NS, "fresh")]
    return TaskApi(store, static_lookup(lambda: objects))


def _run_turn(store: TaskStore, answer: str, *, tool: bool = False) -> None:
    lease = store.acquire_lease(TASK_ID)
    drained = store.drain(lease, first_drain=True)
    assert drained.turn_number is not None
    if tool:
        store.append_message(
            lease,
            "assistant",
            [{"toolUse": {"toolUseId": "t1", "name": "task_status", "input": {"secret": "x" * 10}}}],
        )
        store.append_message(
            lease,
            "user",
            [{"toolResult": {"toolUseId": "t1", "status": "success", "content": [{"text": "tool output"}]}}],
        )
    store.append_message(lease, "assistant", [text_block(answer)])
    store.end_turn(lease, drained.turn_number, last_response=answer, summary=f"said {answer}")
    store.release_lease(lease)


def _post(api: TaskApi, body: Any, name: str = NAME) -> tuple[int, dict[str, Any]]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = answer(api, "POST", f"/apis/tasks.unicore.dev/v1alpha1/namespaces/{NS}/agenttasks/{name}/messages",
                      "", raw, sender=SENDER)
    return response.status, response.body


def test_send_queues_once_per_id_and_activates(api: TaskApi, store: TaskStore) -> None:
    store.create_task(TaskSpec(id=TASK_ID, prompt="hello"))
    _run_turn(store, "first answer")
    stream_before = store.redis.xlen(activations_stream(TASK_ID))

    status, body = _post(api, {"id": "m-1", "text": "follow up"})
    assert (status, body["duplicate"], body["pending"]) == (202, False, 1)
    status, body = _post(api, {"id": "m-1", "text": "follow up"})  # the client's retry
    assert (status, body["duplicate"], body["pending"]) == (202, True, 1)

    inbox = store.inbox(TASK_ID)
    assert [(m.id, m.content, m.type, m.sender) for m in inbox] == [("user:m-1", "follow up", "user", SENDER)]
    assert store.redis.xlen(activations_stream(TASK_ID)) == stream_before + 2  # every attempt wakes the task


def test_concurrent_sends_each_arrive_once(api: TaskApi, store: TaskStore) -> None:
    store.create_task(TaskSpec(id=TASK_ID, prompt="hello"))
    _run_turn(store, "first answer")
    ids = [f"c-{i}" for i in range(8)]

    def send(message_id: str) -> None:
        for _ in range(3):  # each client retries with its own id
            assert _post(api, {"id": message_id, "text": f"text {message_id}"})[0] == 202

    threads = [threading.Thread(target=send, args=(message_id,)) for message_id in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(m.content for m in store.inbox(TASK_ID)) == sorted(f"text {i}" for i in ids)


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"not json", 400, "not JSON"),
        ([1, 2], 400, "JSON object"),
        ({"text": "no id"}, 422, "id"),
        ({"id": "bad id with spaces", "text": "x"}, 422, "id"),
        ({"id": "ok", "text": ""}, 422, "text"),
        ({"id": "ok", "text": "x", "extra": 1}, 422, "extra"),
        # who sent it is the authenticated user, never the body (it could pose as anyone, or as the system)
        ({"id": "ok", "text": "x", "sender": "system"}, 422, "sender: not accepted"),
    ],
)
def test_send_rejects_bad_bodies(api: TaskApi, store: TaskStore, body: Any, status: int, needle: str) -> None:
    store.create_task(TaskSpec(id=TASK_ID, prompt="hello"))
    got, payload = _post(api, body)
    assert got == status and payload["kind"] == "Status" and needle in payload["message"]
    assert store.pending_count(TASK_ID) == 1  # only the prompt


def test_send_too_large_and_unknown_task(api: TaskApi, store: TaskStore) -> None:
    store.create_task(TaskSpec(id=TASK_ID, prompt="hello"))
    status, body = _post(api, {"id": "big", "text": "x" * (store.message_cap_bytes + 1)})
    assert status == 413 and "over the cap" in body["message"]
    status, body = _post(api, {"id": "m", "text": "hi"}, name="nope")
    assert (status, body["reason"]) == (404, "NotFound") and 'agenttask "team-a/nope" not found' in body[
        "message"
    ]
    status, body = _post(api, {"id": "m", "text": "hi"}, name="fresh")  # AgentTask exists, Redis not yet
    assert (status, body["reason"]) == (503, "TaskNotReady")
    assert store.pending_count(TASK_ID) == 1


def test_transcript_pages_turns_and_tools(api: TaskApi, store: TaskStore) -> None:
    store.create_task(TaskSpec(id=TASK_ID, prompt="hello"))
    _run_turn(store, "answer one", tool=True)
    store.queue_text(TASK_ID, "again")
    _run_turn(store, "answer two")

    full = answer(api, "GET", BASE + "/transcript", "tools=true", sender=SENDER).body
    assert full["total"] == 6 and full["more"] is False and full["next"] == 6
    assert [t["number"] for t in full["turns"]] == [1, 2]  # turns are numbered from 1, as their Jobs <task>-tN
    assert full["turns"][0]["summary"] == "said answer one"
    assert full["messages"][1]["content"][0]["toolUse"]["input"] == {"secret": "x" * 10}
    assert full["state"] == {"status": "idle", "pending": 0, "initialised": True}

    brief = answer(api, "GET", BASE + "/transcript", "", sender=SENDER).body
    assert "input" not in brief["messages"][1]["content"][0]["toolUse"]
    assert "content" not in brief["messages"][2]["content"][0]["toolResult"]

    seen: list[int] = []
    since = 0
    while True:
        page = answer(api, "GET", BASE + "/transcript", f"since={since}&limit=4", sender=SENDER).body
        assert len(page["messages"]) <= 4
        seen += [m["seq"] for m in page["messages"]]
        since = page["next"]
        if not page["more"]:
            break
    assert seen == list(range(6))

    turn2 = answer(api, "GET", BASE + "/transcript", "turn=2", sender=SENDER).body
    assert [m["turn"] for m in turn2["messages"]] == [2, 2]
    assert [m["content"][0]["text"] for m in turn2["messages"]] == ["again", "answer two"]
    missing = answer(api, "GET", BASE + "/transcript", "turn=9", sender=SENDER)
    assert missing.status == 404 and "no turn 9 yet (turns are numbered from 1; it has 1..2)" in missing.body["message"]
    zero = answer(api, "GET", BASE + "/transcript", "turn=0", sender=SENDER)
    assert zero.status == 400 and "turn=0 must be between 1" in zero.body["message"]
    bad = answer(api, "GET", BASE + "/transcript", "limit=0", sender=SENDER)
    assert bad.status == 400 and "limit" in bad.body["message"]


def test_summary_and_tree(api: TaskApi, store: TaskStore) -> None:
    store.create_task(TaskSpec(id=TASK_ID, prompt="hello"))
    store.create_task(TaskSpec(id=f"{TASK_ID}-a", parent=TASK_ID, prompt="child"))
    _run_turn(store, "done")
    summary = answer(api, "GET", BASE + "/summary", sender=SENDER).body
    assert summary["turns"] == 1 and summary["lastResponse"] == "done" and summary["status"] == "idle"
    tree = answer(api, "GET", BASE + "/tree", "", sender=SENDER).body
    assert [(n["level"], n["id"]) for n in tree["nodes"]] == [(0, TASK_ID), (1, f"{TASK_ID}-a")]


def test_unknown_route_and_method(api: TaskApi) -> None:
    assert answer(api, "GET", "/v1/nothing", sender=SENDER).status == 404
    response = answer(api, "GET", BASE + "/messages", sender=SENDER)
    assert response.status == 405 and "POST" in response.body["message"]
    assert answer(api, "GET", BASE + "/logs", sender=SENDER).status == 404
