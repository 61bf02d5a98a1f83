"""The operator's reconcile with a task that waits for people (issue 15), over a real Redis and a fake API server that
keeps what it is sent (Jobs, status patches, Events): no Job while the task only waits, whatever is queued meanwhile
and however often it is reconciled; an Event when it starts waiting; the decision's wake-up starts the next turn; an
overdue approval is denied as expired by the reconcile, which starts that turn at once; one not due yet gets a
re-check at its due time; a question waits as WaitingForInput until a user message answers it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest
import redis
from unicore.api.schema import InboxMessage, TaskSpec, text_block
from unicore.store import approvals
from unicore.store.approvals import PendingCall
from unicore.store.tasks import TaskStore
from unicore_operator import reconcile
from unicore_operator.context import OperatorContext
from unicore_operator.indexes import job_view
from unicore_operator.redis_state import RedisState
from unicore_operator.settings import OperatorSettings
from unicore_operator.task_api import routes
from unicore_operator.task_api.lookup import static_lookup
from unicore_operator.task_api.service import TaskApi

from tests.integration.test_turn_numbers import RecordingKube

NS, NAME = "team-a", "gated"
KEY = (NS, NAME)
TASK_ID = f"{NS}/{NAME}"
API = f"/apis/tasks.unicore.dev/v1alpha1/namespaces/{NS}/agenttasks/{NAME}"


@pytest.fixture
def store(redis_url: str) -> Iterator[TaskStore]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield TaskStore(client)
    client.close()


class Operator:
    """One task's reconciles as the operator runs them, over ``RecordingKube``."""

    def __init__(self, redis_url: str, store: TaskStore, spec: dict[str, Any]) -> None:
        self.body: dict[str, Any] = {
            "apiVersion": "unicore.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": NAME, "namespace": NS, "uid": "uid-1", "generation": 1},
            "spec": {"prompt": "write it", **spec}, "status": {}}
        self.kube = RecordingKube(self.body)
        settings = OperatorSettings.model_validate({"redis_url": redis_url, "namespaces": (NS,)})
        self.ctx = OperatorContext(settings=settings, redis=RedisState(redis_url), kube=cast(Any, self.kube),
                                   store=store, agenttasks={KEY: [self.body]}, turnjobs={}, turnpods={})
        self.store = store

    async def reconcile(self) -> str | None:
        created = await reconcile.reconcile_task(self.ctx, NS, NAME, "test")
        await asyncio.gather(*self.ctx.background)
        return created

    async def run_job(self, name: str, turn: Any) -> None:
        """The Job ``name`` runs ``turn(store)`` and succeeds; its end is recorded as the Job watch does."""
        job = self.kube.jobs[name]
        self.ctx.turnjobs[KEY] = [job_view(job)]
        turn(self.store)
        job["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
        self.ctx.turnjobs[KEY] = [job_view(job)]
        await reconcile.job_changed(self.ctx, job, "MODIFIED")
        await self.reconcile()

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.body["status"])

    def events(self, reason: str) -> list[str]:
        return [message for got, message in self.kube.events if got == reason]

    async def close(self) -> None:
        for handle in self.ctx.rechecks.values():
            handle.cancel()
        self.ctx.job_executor.shutdown()
        await self.ctx.redis.close()


def turn_that_asks(*calls: PendingCall) -> Any:
    """A turn whose answer calls gated tools (or ask_user): recorded as pending calls, the turn ends."""
    def run(store: TaskStore) -> None:
        lease = store.acquire_lease(TASK_ID)
        drained = store.drain(lease, first_drain=True)
        store.append_message(lease, "assistant", [{"toolUse": {"toolUseId": c.call_id, "name": c.tool,
                                                               "input": c.input}} for c in calls])
        approvals.record_calls(store.redis, lease, list(calls))
        store.end_turn(lease, drained.turn_number or 0, last_response="")
        store.release_lease(lease)
    return run


def answering_turn(store: TaskStore) -> None:
    lease = store.acquire_lease(TASK_ID)
    drained = store.drain(lease, first_drain=False)
    store.append_message(lease, "assistant", [text_block("done")])
    store.end_turn(lease, drained.turn_number or 0, last_response="done")
    store.release_lease(lease)


def write_call(call_id: str, at: float | None = None) -> PendingCall:
    return PendingCall(call_id=call_id, tool="write_file", input={"path": "a.txt", "content": "x"}, kind="approval",
                       turn=0, requested_at=time.time() if at is None else at)


def test_a_waiting_task_runs_no_job_until_the_decision_wakes_it(redis_url: str, store: TaskStore) -> None:
    async def scenario() -> None:
        store.create_task(TaskSpec(id=TASK_ID, prompt="write it"))
        op = Operator(redis_url, store, {"approval": {"tools": ["write_file"]}})
        try:
            first = await op.reconcile()
            assert first == f"{NAME}-t1"
            await op.run_job(first, turn_that_asks(write_call("toolu_1")))
            status = op.status
            assert status["phase"] == "WaitingForApproval" and status["activeJob"] == ""
            assert status["waitingFor"]["callId"] == "toolu_1" and status["waitingFor"]["tool"] == "write_file"
            assert status["conditions"][0]["reason"] == "WaitingForApproval"
            assert len(op.events("WaitingForApproval")) == 1
            # resyncs, and a message sent meanwhile: still waiting, nothing started, no second Event
            store.queue_message(TASK_ID, InboxMessage(id="user:m1", type="user", content="hurry", sender="user:b"))
            for _ in range(3):
                assert await op.reconcile() is None
            assert list(op.kube.jobs) == [first] and len(op.events("WaitingForApproval")) == 1
            assert op.status["message"].endswith("; 1 message(s) queued until then")
            # the decision, as kubectl agenttask approve posts it, wakes the task: the next turn starts
            api = TaskApi(store, static_lookup(lambda: [op.body]))
            decided = routes.answer(api, "POST", f"{API}/approvals", "",
                                    json.dumps({"decision": "approve"}).encode(), sender="user:alice")
            assert decided.status == 200, decided.body
            second = await op.reconcile()
            assert second == f"{NAME}-t2"
            assert op.status["phase"] == "Running" and op.status.get("waitingFor") is None
            await op.run_job(second, answering_turn)
            assert op.status["phase"] == "Idle" and op.status.get("waitingFor") is None
        finally:
            await op.close()

    asyncio.run(scenario())


def test_an_overdue_approval_is_denied_by_the_reconcile_which_starts_the_next_turn(redis_url: str,
                                                                                   store: TaskStore) -> None:
    async def scenario() -> None:
        store.create_task(TaskSpec(id=TASK_ID, prompt="write it"))
        op = Operator(redis_url, store, {"approval": {"tools": ["write_file"], "timeoutSeconds": 30}})
        try:
            first = await op.reconcile()
            assert first is not None
            await op.run_job(first, turn_that_asks(write_call("late", at=time.time() - 31),
                                                   write_call("fresh")))
            # the reconcile after the turn found "late" overdue: denied by timeout, the wake-up waits for "fresh"
            late = approvals.get_call(store.redis, TASK_ID, "late")
            assert (late.status, late.decided_by, late.reason) == ("denied", "timeout", "no decision within 30s")
            assert approvals.get_call(store.redis, TASK_ID, "fresh").status == "pending"
            assert op.status["phase"] == "WaitingForApproval" and op.status["waitingFor"]["callId"] == "fresh"
            assert op.events("ApprovalExpired") == ["denied tool call(s) late: no decision within 30s"]
            assert list(op.kube.jobs) == [first]
            handle = op.ctx.rechecks[KEY]  # a re-check when "fresh" is due (in ~30 s), not a poll
            assert 20 < handle.when() - asyncio.get_running_loop().time() <= 31
            # later: "fresh" is overdue too; the resync's reconcile denies it and starts the turn at once
            key = store.keys(TASK_ID).approvals
            for field in ("call:fresh", "state:fresh"):  # as if recorded a minute ago
                store.redis.hset(key, field, json.dumps({**json.loads(store.redis.hget(key, field) or "{}"),
                                                         "requested_at": time.time() - 60}))
            second = await op.reconcile()
            assert second == f"{NAME}-t2" and approvals.waiting_for(store.redis, TASK_ID) is None
            assert approvals.get_call(store.redis, TASK_ID, "fresh").decided_by == "timeout"
            assert len(op.events("ApprovalExpired")) == 2
        finally:
            await op.close()

    asyncio.run(scenario())


def test_a_question_waits_for_input_until_a_message_answers_it(redis_url: str, store: TaskStore) -> None:
    async def scenario() -> None:
        store.create_task(TaskSpec(id=TASK_ID, prompt="ask me"))
        op = Operator(redis_url, store, {})
        try:
            first = await op.reconcile()
            assert first is not None
            question = PendingCall(call_id="q1", tool="ask_user", input={"question": "Which file?"}, kind="input",
                                   turn=0, requested_at=time.time() - 10_000, question="Which file?")
            await op.run_job(first, turn_that_asks(question))
            assert op.status["phase"] == "WaitingForInput"
            assert op.status["waitingFor"] == {**op.status["waitingFor"], "kind": "input", "callId": "q1",
                                               "question": "Which file?"}
            assert op.events("WaitingForInput") and op.status["conditions"][0]["reason"] == "WaitingForInput"
            assert await op.reconcile() is None  # questions never expire
            assert approvals.get_call(store.redis, TASK_ID, "q1").status == "pending"
            store.queue_message(TASK_ID, InboxMessage(id="user:a", type="user", content="a.txt", sender="user:b"))
            assert await op.reconcile() == f"{NAME}-t2"  # the answer wakes it
        finally:
            await op.close()

    asyncio.run(scenario())
