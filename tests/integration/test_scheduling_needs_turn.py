"""``TaskStore.needs_turn`` / ``next_action`` on a real redis-server, against the operator's reading of the same keys.

Each state is made with the store's own writes; local mode's answer (``TaskStore.next_action``) and the operator's
(``read_snapshot`` -> ``reconcile.observe`` -> ``wants_turn_job`` / ``delivers_owed_report``) must agree. The pure
agreement over every state is tests/unit/test_scheduling_agreement.py; this checks what each side reads from Redis.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import redis
from unicore.api.schema import TaskSpec
from unicore.launch.local import LocalSupervisor
from unicore.scheduling import NextAction, Reason
from unicore.store import approval_writes, approvals, suspension
from unicore.store.approvals import PendingCall
from unicore.store.client import build_async_client
from unicore.store.operator_state import read_snapshot
from unicore.store.tasks import TaskStore
from unicore_operator import reconcile
from unicore_operator.context import OperatorContext
from unicore_operator.phases import delivers_owed_report, wants_turn_job
from unicore_operator.settings import OperatorSettings

SETTINGS = OperatorSettings(redis_url="redis://unused:6379/0", namespaces=("ns",))
CTX = OperatorContext(settings=SETTINGS, redis=None, kube=None, store=None)  # type: ignore[arg-type]


def operator_answer(store: TaskStore, redis_url: str, task_id: str) -> tuple[bool, bool]:
    """(starts a turn Job, delivers the owed report), as the operator's reconcile decides from Redis."""
    async def read() -> tuple[bool, bool]:
        client = build_async_client(redis_url)
        try:
            snap = await read_snapshot(client, task_id)
        finally:
            await client.aclose()
        body = {"metadata": {"name": task_id, "namespace": "ns", "uid": "needs-turn", "generation": 1},
                "spec": {"prompt": "go", "suspend": store.get_task(task_id).suspended}}
        obs = reconcile.observe(CTX, body, snap, None, [])
        return wants_turn_job(obs), delivers_owed_report(obs)

    return asyncio.run(read())


def answers(store: TaskStore, redis_url: str, task_id: str) -> NextAction:
    """Local mode's next action, after checking the operator agrees and ``needs_turn`` says the same."""
    action = store.next_action(task_id)
    assert operator_answer(store, redis_url, task_id) == (action.run_turn, action.deliver_report)
    assert store.needs_turn(task_id) == (action.run_turn or action.deliver_report)
    return action


def end_turn_owing_a_report(store: TaskStore, task_id: str) -> None:
    """The task's turn ends with a report for its parent that its process never delivered (it died)."""
    lease = store.acquire_lease(task_id, holder="test")
    store.drain(lease, first_drain=True)
    store.end_turn(lease, 0, last_response="child result", report=(f"completion:{task_id}:0", "child result"))
    store.release_lease(lease)


def test_local_mode_and_the_operator_read_the_same_next_action_from_redis(store: TaskStore, redis_url: str) -> None:
    store.create_task(TaskSpec(id="t", prompt="go"))
    assert answers(store, redis_url, "t") == NextAction(True, False, Reason.QUEUED)

    lease = store.acquire_lease("t", holder="test")
    assert answers(store, redis_url, "t") == NextAction(False, False, Reason.TURN_RUNNING)
    store.drain(lease, first_drain=True)
    store.release_lease(lease)  # the turn never ended: its process was stopped
    assert answers(store, redis_url, "t") == NextAction(True, False, Reason.UNFINISHED_TURN)

    suspension.suspend(store, "t")
    assert answers(store, redis_url, "t") == NextAction(False, False, Reason.SUSPENDED)
    suspension.resume(store, "t")

    lease = store.acquire_lease("t", holder="test")
    call = PendingCall(call_id="c1", tool="write_file", input={"path": "a.txt"}, kind="approval", turn=0,
                       requested_at=time.time(), position=0)
    approval_writes.record_calls(store.redis, lease, [call])
    store.end_turn(lease, 0, last_response="")
    store.release_lease(lease)
    store.queue_text("t", "a child finished", kind="completion")
    assert answers(store, redis_url, "t") == NextAction(False, False, Reason.WAITING_FOR_APPROVAL)
    approvals.decide(store.redis, "t", "c1", True, by="alice")  # queues the decision's wake-up
    assert answers(store, redis_url, "t") == NextAction(True, False, Reason.QUEUED)


def test_a_suspended_childs_owed_report_is_delivered_by_the_supervisor(store: TaskStore, redis_client: redis.Redis,
                                                                        redis_url: str, tmp_path: Path) -> None:
    """A report owed by a suspended child was held back in local mode until the child was resumed (the operator
    delivered it). The supervisor now delivers it itself, and starts no turn."""
    store.create_task(TaskSpec(id="p", prompt="go"))
    suspension.suspend(store, "p")  # the parent runs no turn: the tree settles once the report is in
    store.create_task(TaskSpec(id="p-c", parent="p", prompt="work"))  # suspended, as its parent
    suspension.resume(store, "p-c")
    end_turn_owing_a_report(store, "p-c")
    assert answers(store, redis_url, "p-c") == NextAction(False, True, Reason.NOTHING)  # its next turn delivers it
    suspension.suspend(store, "p-c")
    assert answers(store, redis_url, "p-c") == NextAction(False, True, Reason.SUSPENDED)

    supervisor = LocalSupervisor(redis_client, redis_url, env={"UNICORE_HOME": str(tmp_path)},
                                 on_event=lambda _text: None)
    settle = supervisor.run_until_settled("p", timeout=60)
    assert settle.settled and settle.turns_run == 0
    assert [m.id for m in store.inbox("p") if m.type == "completion"] == ["completion:p-c:0"]
    assert store.next_action("p-c") == NextAction(False, False, Reason.SUSPENDED)
