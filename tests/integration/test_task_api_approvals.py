"""The task API's ``approvals`` subresource over a real Redis, without HTTP (issue 15): the list of waiting and decided
calls, approve and deny as the authenticated user (once: 409 AlreadyDecided), 404 for no such call, a question
refused, bad bodies refused in one line, the wake-up of the task, the metric and the operator's Event hook. Who may
``get``/``create agenttasks/approvals`` is tests/cluster/test_approvals_cluster.py (the real API server's RBAC and
the operator's SubjectAccessReview)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import redis
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from unicore.api.schema import TaskSpec
from unicore.store import approvals
from unicore.store.approvals import PendingCall
from unicore.store.keys import activations_stream
from unicore.store.tasks import TaskStore
from unicore_operator.metrics import REGISTRY
from unicore_operator.task_api import answer
from unicore_operator.task_api.lookup import static_lookup
from unicore_operator.task_api.service import TaskApi

NS, NAME = "team-a", "demo"
TASK_ID = f"{NS}/{NAME}"
PATH = f"/apis/tasks.unicore.dev/v1alpha1/namespaces/{NS}/agenttasks/{NAME}/approvals"


@pytest.fixture
def store(redis_url: str) -> TaskStore:
    return TaskStore(redis.Redis.from_url(redis_url, decode_responses=True))


@pytest.fixture
def decisions() -> list[tuple[Any, ...]]:
    return []


@pytest.fixture
def api(store: TaskStore, decisions: list[tuple[Any, ...]]) -> TaskApi:
    objects = [{"metadata": {"namespace": NS, "name": NAME}}]
    return TaskApi(store, static_lookup(lambda: objects),
                   on_decided=lambda ns, name, calls, by, reason: decisions.append(
                       (ns, name, [c.call_id for c in calls], by, reason)))


def _call(call_id: str, position: int, kind: str = "approval", ago: float = 0.0, **extra: Any) -> PendingCall:
    """A call requested ``ago`` seconds ago (default: now, within any approval timeout)."""
    tool = "ask_user" if kind == "input" else "write_file"
    return PendingCall(call_id=call_id, tool=tool, input={"path": "notes.txt", "content": "x" * 10},
                       kind=kind, turn=0, requested_at=time.time() - ago + position / 1000,  # type: ignore[arg-type]
                       position=position, **extra)


def waiting(store: TaskStore, *calls: PendingCall) -> None:
    """The task after a turn that ended on these calls (no lease held, the inbox empty)."""
    store.create_task(TaskSpec(id=TASK_ID, prompt="write the notes"))
    lease = store.acquire_lease(TASK_ID, holder="test")
    store.drain(lease, first_drain=True)
    approvals.record_calls(store.redis, lease, list(calls))
    store.end_turn(lease, 0, last_response="")
    store.release_lease(lease)


def get(api: TaskApi) -> tuple[int, dict[str, Any]]:
    response = answer(api, "GET", PATH, sender="user:carol")
    return response.status, response.body


def post(api: TaskApi, body: Any, user: str = "alice") -> tuple[int, dict[str, Any]]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = answer(api, "POST", PATH, "", raw, sender=f"user:{user}")
    return response.status, response.body


def counted(decision: str) -> float:
    for family in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
        for sample in family.samples:
            if sample.name == "unicore_approvals_total" and sample.labels == {"decision": decision}:
                return float(sample.value)
    raise AssertionError(f"no unicore_approvals_total{{decision={decision}}}")


def activations(store: TaskStore) -> int:
    return sum(1 for _, fields in store.redis.xrange(activations_stream(TASK_ID)) if fields.get("task") == TASK_ID)


def test_the_list_shows_waiting_calls_then_decisions(api: TaskApi, store: TaskStore) -> None:
    waiting(store, _call("c1", 0), _call("c2", 1))
    status, listed = get(api)
    assert status == 200 and listed["kind"] == "ApprovalList" and listed["waitingFor"] == "approval"
    assert [(c["callId"], c["tool"], c["status"], c["turn"]) for c in listed["pending"]] == [
        ("c1", "write_file", "pending", 1), ("c2", "write_file", "pending", 1)]  # turns as users count them
    assert json.loads(listed["pending"][0]["input"]) == {"path": "notes.txt", "content": "xxxxxxxxxx"}
    assert listed["decided"] == []
    assert post(api, {"callId": "c2", "decision": "deny", "reason": "not that file"})[0] == 200
    listed = get(api)[1]
    assert [c["callId"] for c in listed["pending"]] == ["c1"]
    (denied,) = listed["decided"]
    assert (denied["callId"], denied["status"], denied["decidedBy"], denied["reason"]) == (
        "c2", "denied", "alice", "not that file")


def test_approve_decides_once_as_the_authenticated_user_and_wakes_the_task(api: TaskApi, store: TaskStore,
                                                                           decisions: list[tuple[Any, ...]]) -> None:
    waiting(store, _call("c1", 0))
    assert approvals.blocked(store.redis, TASK_ID)
    woken, approved = activations(store), counted("approved")
    status, receipt = post(api, {"callId": "c1", "decision": "approve", "reason": "fine"})
    assert status == 200 and receipt["kind"] == "ApprovalReceipt" and receipt["decision"] == "approve"
    (call,) = receipt["decided"]
    assert (call["callId"], call["status"], call["decidedBy"], call["reason"]) == ("c1", "approved", "alice", "fine")
    assert approvals.get_call(store.redis, TASK_ID, "c1").decided_by == "alice"  # the user, not a body field
    assert approvals.waiting_for(store.redis, TASK_ID) is None and not approvals.blocked(store.redis, TASK_ID)
    assert store.needs_turn(TASK_ID) and activations(store) == woken + 1  # the wake-up and its activation
    assert counted("approved") == approved + 1
    assert decisions == [(NS, NAME, ["c1"], "alice", "fine")]

    inbox = store.redis.lrange(store.keys(TASK_ID).inbox, 0, -1)
    for again in ({"callId": "c1", "decision": "approve"}, {"callId": "c1", "decision": "deny"},
                  {"decision": "approve"}):
        status, refused = post(api, again, user="bob")
        assert (status, refused["reason"]) == (409, "AlreadyDecided"), refused
    assert "already approved" in post(api, {"callId": "c1", "decision": "approve"})[1]["message"]
    assert store.redis.lrange(store.keys(TASK_ID).inbox, 0, -1) == inbox  # no second wake-up
    assert approvals.get_call(store.redis, TASK_ID, "c1").decided_by == "alice"
    assert counted("approved") == approved + 1 and len(decisions) == 1


def test_concurrent_approvals_decide_once(api: TaskApi, store: TaskStore) -> None:
    waiting(store, _call("c1", 0))
    results: list[int] = []

    def approve(user: str) -> None:
        results.append(post(api, {"callId": "c1", "decision": "approve"}, user=user)[0])

    threads = [threading.Thread(target=approve, args=(f"user{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [200] + [409] * 7
    assert len(store.redis.lrange(store.keys(TASK_ID).inbox, 0, -1)) == 1


def test_without_a_call_id_every_waiting_approval_is_decided(api: TaskApi, store: TaskStore) -> None:
    waiting(store, _call("c1", 0), _call("c2", 1), _call("q", 2, kind="input", question="Which file?"))
    status, receipt = post(api, {"decision": "deny", "reason": "no writes today"})
    assert status == 200 and [c["callId"] for c in receipt["decided"]] == ["c1", "c2"]
    assert approvals.waiting_for(store.redis, TASK_ID) == "input"  # the question waits for a message
    # a question is answered with a message, not approved; it can be denied
    status, refused = post(api, {"callId": "q", "decision": "approve"})
    assert status == 409 and "answer it with a message" in refused["message"]
    assert post(api, {"callId": "q", "decision": "deny"})[0] == 200
    assert approvals.waiting_for(store.redis, TASK_ID) is None


def test_unknown_calls_and_tasks_are_not_found(api: TaskApi, store: TaskStore) -> None:
    waiting(store, _call("c1", 0))
    status, missing = post(api, {"callId": "nope", "decision": "approve"})
    assert status == 404 and missing["reason"] == "NotFound" and missing["details"]["kind"] == "approvals"
    assert "no tool call 'nope'" in missing["message"]
    other = answer(api, "POST", PATH.replace(f"/{NAME}/", "/other/"), "",
                   json.dumps({"decision": "approve"}).encode(), sender="user:alice")
    assert other.status == 404 and other.body["details"]["kind"] == "agenttasks"
    store.redis.delete(store.keys(TASK_ID).approvals)  # a task that never waited
    status, nothing = post(api, {"decision": "approve"})
    assert status == 404 and "has no tool call waiting for approval" in nothing["message"]


def test_an_agenttask_the_operator_has_not_initialised_asks_to_retry(api: TaskApi) -> None:
    status, body = post(api, {"callId": "c1", "decision": "approve"})
    assert (status, body["reason"]) == (503, "TaskNotReady")


@pytest.mark.parametrize(("body", "status", "needle"), [
    (b"not json", 400, "not JSON"),
    ([1, 2], 400, "must be a JSON object"),
    ({"decision": "maybe"}, 422, "decision: Input should be 'approve' or 'deny'"),
    ({}, 422, "decision: Field required"),
    ({"decision": "approve", "decidedBy": "mallory"}, 422, "decidedBy: not accepted"),
    ({"decision": "approve", "extra": 1}, 422, "extra: Extra inputs are not permitted"),
    ({"decision": "approve", "callId": ""}, 422, "callId: String should match pattern"),
    ({"decision": "approve", "callId": "a\nb"}, 422, "callId: String should match pattern"),
    ({"decision": "deny", "reason": "x" * 5000}, 422, "reason: String should have at most 4096 characters"),
])
def test_bad_bodies_are_refused_and_nothing_is_decided(api: TaskApi, store: TaskStore, body: Any, status: int,
                                                       needle: str) -> None:
    waiting(store, _call("c1", 0))
    got, refused = post(api, body)
    assert got == status and needle in refused["message"] and "\n" not in refused["message"], refused
    assert approvals.waiting_for(store.redis, TASK_ID) == "approval"


def test_the_operators_snapshot_sees_the_wait_and_what_wakes_it(api: TaskApi, store: TaskStore,
                                                                redis_url: str) -> None:
    """operator_state.read_snapshot (the reconcile's one pipelined read): what the task waits for, its pending
    calls, messages held while it waits, and the decision's wake-up that makes it runnable."""
    import asyncio

    from unicore.api.schema import InboxMessage

    def snapshot() -> Any:
        return asyncio.run(read_snapshot_of(redis_url, TASK_ID))

    store.create_task(TaskSpec(id="team-a/plain", prompt="hi"))
    plain = asyncio.run(read_snapshot_of(redis_url, "team-a/plain"))
    assert (plain.waiting_for, plain.pending_calls, plain.runnable_pending) == (None, (), 1)

    waiting(store, _call("c1", 0), _call("c2", 1))
    snap = snapshot()
    assert snap.waiting_for == "approval" and [c.call_id for c in snap.pending_calls] == ["c1", "c2"]
    assert (snap.pending, snap.runnable_pending) == (0, 0)
    store.queue_message(TASK_ID, InboxMessage(id="user:later", type="user", content="and also...", sender="user:x"))
    snap = snapshot()
    assert (snap.pending, snap.runnable_pending) == (1, 0)  # held until the decision
    post(api, {"callId": "c1", "decision": "approve"})
    snap = snapshot()
    assert [c.call_id for c in snap.pending_calls] == ["c2"] and snap.runnable_pending == 0
    post(api, {"callId": "c2", "decision": "deny"})
    snap = snapshot()
    assert snap.waiting_for is None and snap.pending_calls == () and (snap.pending, snap.runnable_pending) == (2, 2)


async def read_snapshot_of(redis_url: str, task_id: str) -> Any:
    import redis.asyncio as aioredis
    from unicore.store.operator_state import read_snapshot

    client = aioredis.Redis.from_url(redis_url)
    try:
        return await read_snapshot(client, task_id)
    finally:
        await client.aclose()


def test_an_approval_past_its_timeout_is_not_listed_and_refused_409(store: TaskStore) -> None:
    """issue 24: the task's timeout as the operator applies it (spec.approval.timeoutSeconds, else the record's,
    else UNICORE_APPROVAL_TIMEOUT_SECONDS): past it, GET no longer lists the approval as pending and POST refuses
    it (409 Expired, nothing changed); the operator's timer denies it."""
    spec: dict[str, Any] = {"approval": {"tools": ["write_file"], "timeoutSeconds": 30}}
    objects = [{"metadata": {"namespace": NS, "name": NAME}, "spec": spec}]
    api = TaskApi(store, static_lookup(lambda: objects), approval_timeout_seconds=3600)
    waiting(store, _call("late", 0, ago=31), _call("fresh", 1))
    assert [c["callId"] for c in get(api)[1]["pending"]] == ["fresh"]
    before = store.redis.hgetall(store.keys(TASK_ID).approvals)
    for body in ({"callId": "late", "decision": "approve"}, {"callId": "late", "decision": "deny"}):
        status, refused = post(api, body)
        assert (status, refused["reason"]) == (409, "Expired"), refused
        assert "waited longer than the approval timeout (30s)" in refused["message"]
    assert store.redis.hgetall(store.keys(TASK_ID).approvals) == before
    status, receipt = post(api, {"decision": "approve"})  # every waiting approval: only the fresh one
    assert status == 200 and [c["callId"] for c in receipt["decided"]] == ["fresh"]

    spec.pop("approval")  # no spec.approval and none recorded: the operator's default
    assert [c["callId"] for c in get(api)[1]["pending"]] == ["late"]
    api.approval_timeout_seconds = 30
    assert get(api)[1]["pending"] == []
    assert post(api, {"callId": "late", "decision": "approve"})[0] == 409
    api.approval_timeout_seconds = 0  # 0 = no timeout
    assert post(api, {"callId": "late", "decision": "approve"})[0] == 200
