"""state.approvals on a real redis-server: recording, deciding (atomic, once), expiry, wake-ups, the turn's writes."""

from __future__ import annotations

import json
import threading
import time

import pytest
from unicore.api.schema import Approval, InboxMessage, TaskSpec, tool_result_block
from unicore.errors import AlreadyDecided, DecisionExpired, LeaseLost, NoSuchCall, TaskNotFound, UniCoreError
from unicore.store import approval_writes as writes
from unicore.store import approvals
from unicore.store.approvals import PendingCall
from unicore.store.inbox import build_drain_batch
from unicore.store.keys import ACTIVATIONS_STREAM
from unicore.store.tasks import TaskStore


def _call(call_id: str, kind: str = "approval", position: int = 0, at: float | None = None, **extra) -> PendingCall:
    """A call requested ``at`` (default: now, so it is within any approval timeout)."""
    tool = "ask_user" if kind == "input" else "write_file"
    return PendingCall(call_id=call_id, tool=tool, input={"path": "a.txt", "content": "", "list": []}, kind=kind,
                       turn=0, requested_at=time.time() if at is None else at, position=position, **extra)


@pytest.fixture
def waiting(store: TaskStore):
    """Task ``t`` with two approvals and a question recorded, no lease held."""
    store.create_task(TaskSpec(id="t", prompt="hi"))
    lease = store.acquire_lease("t", holder="test")
    store.drain(lease, first_drain=True)
    now = time.time()  # one answer's calls: requested together
    writes.record_calls(store.redis, lease, [_call("c2", position=1, at=now), _call("c1", position=0, at=now),
                                                _call("q", "input", position=2, at=now, question="Which file?")])
    store.end_turn(lease, 0, last_response="")
    store.release_lease(lease)
    return store


def test_recorded_calls_are_listed_in_call_order_and_the_task_waits_for_approval_first(waiting):
    client = waiting.redis
    assert [c.call_id for c in approvals.pending_calls(client, "t")] == ["c1", "c2", "q"]
    first = approvals.pending_calls(client, "t")[0]
    assert first.input == {"path": "a.txt", "content": "", "list": []}  # an empty list stays a list
    assert first.status == "pending" and first.decided_at is None
    assert approvals.waiting_for(client, "t") == "approval"
    approvals.decide(client, "t", None, True, by="alice")
    assert approvals.waiting_for(client, "t") == "input"
    assert [c.call_id for c in approvals.pending_calls(client, "t")] == ["q"]


def test_recording_again_keeps_a_decision(waiting):
    client = waiting.redis
    approvals.decide(client, "t", "c1", True, by="alice")
    lease = waiting.acquire_lease("t", holder="again")
    assert writes.record_calls(client, lease, [_call("c1")]) == 0
    assert approvals.get_call(client, "t", "c1").status == "approved"


def test_a_second_approval_of_the_same_call_changes_nothing(waiting):
    client = waiting.redis
    [decided] = approvals.decide(client, "t", "c1", True, by="alice", reason="ok")
    assert (decided.status, decided.decided_by, decided.reason) == ("approved", "alice", "ok")
    before = client.hgetall(waiting.keys("t").approvals), client.lrange(waiting.keys("t").inbox, 0, -1)
    with pytest.raises(AlreadyDecided, match="already approved"):
        approvals.decide(client, "t", "c1", True, by="bob")
    with pytest.raises(AlreadyDecided):
        approvals.decide(client, "t", "c1", False, by="bob")
    assert (client.hgetall(waiting.keys("t").approvals), client.lrange(waiting.keys("t").inbox, 0, -1)) == before


def test_concurrent_approvals_decide_a_call_once(waiting):
    client = waiting.redis
    outcomes: list[str] = []

    def approve(who: str) -> None:
        try:
            approvals.decide(client, "t", "c1", True, by=who)
            outcomes.append("decided")
        except AlreadyDecided:
            outcomes.append("already")

    threads = [threading.Thread(target=approve, args=(f"u{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["already"] * 7 + ["decided"]


def test_unknown_calls_tasks_and_approving_a_question_are_refused(waiting):
    client = waiting.redis
    with pytest.raises(NoSuchCall):
        approvals.decide(client, "t", "nope", True, by="alice")
    with pytest.raises(TaskNotFound):
        approvals.decide(client, "missing", None, True, by="alice")
    with pytest.raises(UniCoreError, match="is a question"):
        approvals.decide(client, "t", "q", True, by="alice")
    [denied] = approvals.decide(client, "t", "q", False, by="alice", reason="no")
    assert denied.status == "denied" and denied.result_text() == "denied by alice: no"


def test_the_wake_up_is_queued_once_nothing_is_pending_and_the_task_is_activated(waiting):
    client = waiting.redis
    keys = waiting.keys("t")
    client.delete(ACTIVATIONS_STREAM)
    approvals.decide(client, "t", None, False, by="alice", reason="too risky")
    assert client.llen(keys.inbox) == 0  # the question still waits: nothing to do yet
    assert approvals.blocked(client, "t")
    waiting.queue_text("t", "a.txt please")  # a user message answers the question: no longer blocked
    assert not approvals.blocked(client, "t")
    client.ltrim(keys.inbox, 1, 0)
    approvals.decide(client, "t", "q", False, by="bob")
    entries = [json.loads(raw) for raw in client.lrange(keys.inbox, 0, -1)]
    assert [entry["type"] for entry in entries] == ["decision"]
    assert approvals.waiting_for(client, "t") is None and not approvals.blocked(client, "t")
    assert client.xlen(ACTIVATIONS_STREAM) == 2
    assert build_drain_batch(client.lrange(keys.inbox, 0, -1)) == []  # no conversation content


def test_blocked_tasks_keep_other_messages_for_later(waiting):
    client = waiting.redis
    waiting.queue_text("t", "a child finished", kind="completion")
    waiting.queue_text("t", "hello")
    assert approvals.blocked(client, "t")  # waiting for approval: a user message does not wake it
    assert not waiting.needs_turn("t")
    assert approvals.wakes(None, ["completion"]) and not approvals.wakes("approval", ["user", "completion"])
    assert approvals.wakes("input", ["user"]) and not approvals.wakes("input", ["completion"])
    assert approvals.wakes("approval", ["decision"])


def test_expire_overdue_denies_only_old_approvals(store):
    store.create_task(TaskSpec(id="t", prompt="hi"))
    lease = store.acquire_lease("t", holder="test")
    writes.record_calls(store.redis, lease, [_call("old", at=100.0), _call("new", at=5000.0, position=1),
                                                _call("q", "input", at=5000.0, position=2)])
    assert approvals.expire_overdue(store.redis, "t", now=3700.0, timeout_seconds=3600) == ["old"]
    old = approvals.get_call(store.redis, "t", "old")
    assert (old.status, old.decided_by, old.reason) == ("denied", "timeout", "no decision within 3600s")
    assert approvals.expire_overdue(store.redis, "t", now=3700.0, timeout_seconds=3600) == []
    assert [c.call_id for c in approvals.pending_calls(store.redis, "t", now=3700.0)] == ["new", "q"]


def test_an_approved_call_starts_once_and_resolves_once(waiting):
    client = waiting.redis
    keys = waiting.keys("t")
    approvals.decide(client, "t", "c1", True, by="alice")
    lease = waiting.acquire_lease("t", holder="turn")
    assert writes.start_call(client, lease, "c1") is True
    assert writes.start_call(client, lease, "c1") is True  # the same turn's retry after a lost reply
    waiting.release_lease(lease)
    successor = waiting.acquire_lease("t", holder="successor")
    assert writes.start_call(client, successor, "c1") is False  # another turn does not run it again
    assert writes.start_call(client, successor, "c2") is False  # not approved
    lease = successor
    result = InboxMessage(id="tr:c1", type="tool_result", content=tool_result_block("c1", "done"),
                          sender="t", tool_use_id="c1")
    writes.resolve(client, lease, "c1", result)
    writes.resolve(client, lease, "c1", result)
    assert client.lrange(keys.inbox, 0, -1) == [result.model_dump_json()]
    call = approvals.get_call(client, "t", "c1")
    assert call.started_at is not None and call.resolved_at is not None
    assert [c.call_id for c in approvals.unresolved_calls(client, "t")] == ["c2", "q"]


def test_held_results_wait_with_the_calls_and_leave_when_resolved(waiting):
    client = waiting.redis
    lease = waiting.acquire_lease("t", holder="turn")
    block = tool_result_block("u1", "listed")
    writes.hold_result(client, lease, "u1", 3, block)
    assert writes.held_results(client, "t") == {"u1": (3, block)}
    writes.resolve(client, lease, "u1", InboxMessage(id="tr:u1", type="tool_result", content=block))
    assert writes.held_results(client, "t") == {}


def test_a_user_message_answers_a_question_and_leaves_the_inbox(waiting):
    client = waiting.redis
    keys = waiting.keys("t")
    waiting.queue_text("t", "a child finished", kind="completion")
    waiting.queue_text("t", "use b.txt", message_id="m1")
    raw = client.lrange(keys.inbox, 0, -1)
    lease = waiting.acquire_lease("t", holder="turn")
    with pytest.raises(UniCoreError, match="changed"):
        writes.answer_question(client, lease, "q", 0, raw[1], "use b.txt", "m1", "user")
    assert writes.answer_question(client, lease, "q", 1, raw[1], "use b.txt", "m1", "user")
    assert client.lrange(keys.inbox, 0, -1) == raw[:1]
    q = approvals.get_call(client, "t", "q")
    assert (q.status, q.answer, q.answer_id) == ("answered", "use b.txt", "m1")
    assert not writes.answer_question(client, lease, "q", 0, raw[0], "again", "m2", "user")


def test_the_turn_side_writes_are_fenced(waiting):
    client = waiting.redis
    zombie = waiting.acquire_lease("t", holder="zombie")
    waiting.break_lease("t", "zombie")
    waiting.acquire_lease("t", holder="successor")
    approvals.decide(client, "t", "c1", True, by="alice")
    before = client.hgetall(waiting.keys("t").approvals)
    for write in (
        lambda: writes.record_calls(client, zombie, [_call("x")]),
        lambda: writes.start_call(client, zombie, "c1"),
        lambda: writes.hold_result(client, zombie, "u", 0, tool_result_block("u", "x")),
        lambda: writes.resolve(client, zombie, "c1", InboxMessage(id="tr:c1", type="tool_result", content={})),
        lambda: writes.drop_entries(client, zombie, ["x"]),
    ):
        with pytest.raises(LeaseLost):
            write()
    assert client.hgetall(waiting.keys("t").approvals) == before


def test_the_approvals_key_is_a_task_key(store):
    keys = store.keys("ns/t")
    assert keys.approvals == "uc:{ns/t}:approvals" and keys.approvals in keys.all()


def test_a_decision_retried_after_a_lost_reply_answers_as_the_first_run(waiting):
    """The Redis client re-sends a script whose reply was lost: the same decision (same id) is not a second one."""
    client = waiting.redis

    def run(call_id: str, decision: str) -> list[str]:
        args = [call_id, "1", "alice", "", "1000.5", decision, '{"type": "decision"}', ""]
        return sorted(approvals.run_script(client, approvals.DECIDE, approvals.decide_keys("t"), args))

    assert run("c1", "decision:one") == ["c1"]
    assert run("c1", "decision:one") == ["c1"]  # the retry
    with pytest.raises(AlreadyDecided):
        approvals.decide(client, "t", "c1", True, by="alice")  # a new decision
    assert run("", "decision:all") == ["c2"]  # every pending approval
    assert run("", "decision:all") == ["c2"]  # its retry: the same answer, nothing new decided
    assert [c.call_id for c in approvals.pending_calls(client, "t")] == ["q"]


def test_an_approval_past_its_timeout_is_the_timeouts_to_deny_not_a_persons(store):
    """issue 24: an approval past its timeout could still be approved, and ``pending`` still listed it. From
    ``requested_at + timeout`` on (that instant included, as ``expire_overdue`` counts it) no person may decide it:
    the script refuses it atomically and changes nothing, listing leaves it out, and the timeout still denies it."""
    client = store.redis
    store.create_task(TaskSpec(id="t", prompt="hi", approval=Approval(tools=["write_file"], timeout_seconds=60)))
    lease = store.acquire_lease("t", holder="test")
    now = time.time()
    writes.record_calls(client, lease, [_call("late", at=now - 61), _call("fresh", at=now, position=1),
                                        _call("q", "input", at=now - 10_000, position=2, question="Which?")])
    store.release_lease(lease)
    assert approvals.recorded_timeout(client, "t") == 60
    assert [c.call_id for c in approvals.pending_calls(client, "t")] == ["q", "fresh"]  # a question never expires
    late = approvals.get_call(client, "t", "late")
    at_the_bound = [c.call_id for c in approvals.pending_calls(client, "t", now=late.requested_at + 60)]
    just_before = [c.call_id for c in approvals.pending_calls(client, "t", now=late.requested_at + 59.999)]
    assert "late" not in at_the_bound and "late" in just_before

    keys = store.keys("t")
    before = client.hgetall(keys.approvals), client.lrange(keys.inbox, 0, -1)
    for approve in (True, False):
        with pytest.raises(DecisionExpired, match="waited longer than the approval timeout \\(60s\\)"):
            approvals.decide(client, "t", "late", approve, by="alice")
    assert (client.hgetall(keys.approvals), client.lrange(keys.inbox, 0, -1)) == before  # nothing changed
    # every pending approval: the fresh one is decided, the late one left to the timeout
    assert [c.call_id for c in approvals.decide(client, "t", None, True, by="alice")] == ["fresh"]
    with pytest.raises(DecisionExpired, match="every approval t waits for"):
        approvals.decide(client, "t", None, True, by="alice")
    assert approvals.get_call(client, "t", "late").status == "pending"
    # an explicit timeout (the operator's) wins over the record's
    assert [c.call_id for c in approvals.decide(client, "t", "late", False, by="bob", timeout_seconds=0)] == ["late"]


def test_the_timeout_still_denies_an_approval_a_person_was_refused(store):
    client = store.redis
    store.create_task(TaskSpec(id="t", prompt="hi", approval=Approval(tools=["write_file"], timeout_seconds=60)))
    lease = store.acquire_lease("t", holder="test")
    writes.record_calls(client, lease, [_call("late", at=time.time() - 61)])
    store.release_lease(lease)
    with pytest.raises(DecisionExpired):
        approvals.decide(client, "t", "late", True, by="alice")
    assert approvals.expire_overdue(client, "t", now=time.time(), timeout_seconds=60) == ["late"]
    late = approvals.get_call(client, "t", "late")
    assert (late.status, late.decided_by, late.result_text()) == ("denied", "timeout",
                                                                  "denied by timeout: no decision within 60s")
    with pytest.raises(AlreadyDecided, match="already denied"):
        approvals.decide(client, "t", "late", True, by="alice")
