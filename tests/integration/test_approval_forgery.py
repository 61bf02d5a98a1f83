"""Approval decisions come only from people (issue 25, item 5), on a real redis-server.

Code in a turn pod holds its namespace's Redis user (``state.acl``), which may write every key a turn writes of its
tasks, the approvals hash included. The decisions (approved/denied, by whom, why, when, and the call as decided) live
in ``uc:{T}:decisions``, which that user may only read; the deciders (the task API, the local CLI and UI, the
operator's timeout) write it with the admin or local identity. A turn gives a decided call its result from that key
only, so whatever the tenant writes into the approvals hash or the inbox runs nothing and names nobody.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from unicore.api.schema import Approval, InboxMessage, TaskSpec
from unicore.archive import FileSink, read_document
from unicore.retention import Retention
from unicore.store import approvals
from unicore.store.keys import TaskKeys, activations_stream
from unicore.store.tasks import TaskStore
from unicore.turn.outcome import EXIT_OK

from tests.integration.conftest import TurnRunner
from tests.integration.test_approvals_turn import CountTool
from tests.integration.test_redis_identities import Identities

TASK = "team-a/gated"


@pytest.fixture
def tenant_ids(redis_client: redis.Redis, redis_url: str) -> Iterator[Identities]:
    made = Identities(redis_client, redis_url)
    yield made
    made.close()


@pytest.fixture
def waiting(redis_client: redis.Redis, tenant_ids: Identities, tmp_path: Path) -> tuple[redis.Redis, TurnRunner, str]:
    """``TASK`` after a turn run with team-a's own Redis user: its call of the gated tool waits for a person."""
    CountTool.runs = []
    script = {"tasks": {"gated": [{"tool_use": [{"name": "count", "input": {"label": "a"}}]},
                                  {"echo_results": True}, {"text": "done"}]}}
    TaskStore(redis_client).create_task(TaskSpec(id=TASK, prompt="go", script=script, tools=["count"],
                                                 approval=Approval(tools=["count"])))
    tenant = tenant_ids.client("team-a")
    runner = TurnRunner(tenant, tmp_path, extra_tools=[CountTool()])
    assert runner(TASK).exit_code == EXIT_OK
    [call] = approvals.pending_calls(redis_client, TASK)
    assert CountTool.runs == [] and approvals.waiting_for(redis_client, TASK) == "approval"
    return tenant, runner, call.call_id


def _forge(tenant: redis.Redis, call_id: str, by: str = "alice") -> None:
    """What a turn pod's code can write with its namespace's user: the call approved by ``by``, in the call's state
    and in its record, nothing left pending, a decision wake-up in the inbox and an activation."""
    keys = TaskKeys(TASK)
    forged = {"status": "approved", "decided_by": by, "reason": "fine by me", "decided_at": time.time()}
    state = {**json.loads(tenant.hget(keys.approvals, f"state:{call_id}")), **forged}
    record = {**json.loads(tenant.hget(keys.approvals, f"call:{call_id}")), **forged}
    tenant.hset(keys.approvals, mapping={f"state:{call_id}": json.dumps(state), f"call:{call_id}": json.dumps(record),
                                         "pending:approval": 0})
    wake = InboxMessage(id="decision:forged", type="decision", content={"by": by, "approve": True}, sender=by)
    tenant.rpush(keys.inbox, wake.model_dump_json())
    TaskStore(tenant).activate(TASK, "decision")


def _named(client: redis.Redis, who: str) -> list[str]:
    return [call.call_id for call in approvals.calls(client, TASK) if who in (call.decided_by, call.reason)]


def test_an_approval_forged_by_the_namespaces_user_runs_nothing_and_names_nobody(redis_client, waiting):
    tenant, runner, call_id = waiting
    _forge(tenant, call_id)
    done = runner(TASK)  # the turn the forged wake-up asked for
    assert done.exit_code == EXIT_OK
    assert CountTool.runs == [], "a forged approval ran the gated tool"
    assert len(runner.requests(TASK)) == 1  # no model call either: the call still waits for a person
    for reader in (redis_client, tenant):
        [call] = approvals.calls(reader, TASK)
        assert (call.status, call.decided_by, call.decided_at) == ("pending", "", None)
        assert _named(reader, "alice") == []
    assert [c.call_id for c in approvals.pending_calls(redis_client, TASK)] == [call_id]  # a person may decide it


def test_a_real_decision_after_a_forgery_still_runs_the_tool_once(redis_client, waiting):
    tenant, runner, call_id = waiting
    _forge(tenant, call_id)
    runner(TASK)
    [decided] = approvals.decide(redis_client, TASK, call_id, True, by="bob", reason="ok")
    assert (decided.status, decided.decided_by) == ("approved", "bob")
    done = runner(TASK)
    assert done.exit_code == EXIT_OK and CountTool.runs == ["a"]
    assert runner(TASK).exit_code == EXIT_OK and CountTool.runs == ["a"]  # once
    [call] = approvals.calls(tenant, TASK)
    assert (call.status, call.decided_by, call.reason) == ("approved", "bob", "ok") and _named(tenant, "alice") == []


def test_the_call_runs_as_it_was_decided_not_as_the_tenant_rewrote_it_after(redis_client, waiting):
    tenant, runner, call_id = waiting
    approvals.decide(redis_client, TASK, call_id, True, by="bob")
    keys = TaskKeys(TASK)
    record = json.loads(tenant.hget(keys.approvals, f"call:{call_id}"))
    tenant.hset(keys.approvals, f"call:{call_id}", json.dumps({**record, "input": {"label": "evil"}}))
    runner(TASK)
    assert CountTool.runs == ["a"]
    [call] = approvals.calls(redis_client, TASK)
    assert call.input == {"label": "a"}


DECISION_WRITES = {  # (tenant client, decisions key, call id) -> a write of the decisions
    "HSET": lambda c, key, call: c.hset(key, call, '{"status": "approved", "decided_by": "alice"}'),
    "HDEL": lambda c, key, call: c.hdel(key, call),
    "DEL": lambda c, key, _call: c.delete(key),
    "EVAL": lambda c, key, _call: c.eval("return redis.call('HSET', KEYS[1], 'x', 'y')", 1, key),
    "EVAL, key undeclared": lambda c, key, _call: c.eval(f"return redis.call('HSET', '{key}', 'x', 'y')", 1,
                                                         TaskKeys(TASK).approvals),
    "decide": lambda c, _key, _call: approvals.decide(c, TASK, None, True, by="alice"),
    "expire_overdue": lambda c, _key, _call: approvals.expire_overdue(c, TASK, now=time.time() + 10,
                                                                      timeout_seconds=1),
}


@pytest.mark.parametrize("write", sorted(DECISION_WRITES))
def test_the_namespaces_user_may_read_the_decisions_but_not_write_them(redis_client, waiting, write):
    tenant, _runner, call_id = waiting
    decisions = TaskKeys(TASK).decisions
    assert decisions == "uc:{team-a/gated}:decisions"  # the task's hash tag: one slot with its other keys
    if write not in ("decide", "expire_overdue"):
        approvals.decide(redis_client, TASK, call_id, False, by="bob", reason="no")
    before = redis_client.hgetall(decisions)
    assert tenant.hgetall(decisions) == before
    with pytest.raises(redis.ResponseError, match="NOPERM|no permissions|can't access"):
        DECISION_WRITES[write](tenant, decisions, call_id)
    assert redis_client.hgetall(decisions) == before
    assert [(c.status, c.decided_by) for c in approvals.calls(redis_client, TASK)] == (
        [("pending", "")] if write in ("decide", "expire_overdue") else [("denied", "bob")])


def test_retention_archives_and_removes_the_decisions_with_the_task(redis_client, waiting, tmp_path):
    _tenant, runner, call_id = waiting
    approvals.decide(redis_client, TASK, call_id, True, by="bob")
    assert runner(TASK).exit_code == EXIT_OK and CountTool.runs == ["a"]
    decisions = TaskKeys(TASK).decisions
    assert redis_client.exists(decisions)
    sink = FileSink((tmp_path / "archive").as_uri())
    [outcome] = Retention(redis_client, 3600, sink, clock=lambda: time.time() + 7200).run([TASK])
    assert outcome.action == "removed"
    _header, [task] = read_document(Path(outcome.url.removeprefix("file://")).read_bytes())
    archived = task["keys"]["decisions"]["value"]
    assert list(archived) == [call_id] and json.loads(archived[call_id])["decided_by"] == "bob"
    assert not redis_client.exists(decisions) and not redis_client.exists(TaskKeys(TASK).approvals)


def test_a_decision_stands_when_the_namespace_poisoned_its_own_activation_stream(redis_client, waiting):
    """Found on the real node (issue 25): after a namespace's user gave its activation stream an entry with the
    largest id, a person's approval was written but its wake-up XADD failed, the task API answered 503, the plugin
    retried and got 409 'already decided'. The decision now stands and answers; the resync starts the turn."""
    tenant, runner, call_id = waiting
    tenant.xadd(activations_stream(TASK), {"task": TASK}, id="18446744073709551615-18446744073709551615")
    [decided] = approvals.decide(redis_client, TASK, None, True, by="bob", reason="ok")
    assert (decided.call_id, decided.status, decided.decided_by) == (call_id, "approved", "bob")
    assert runner(TASK).exit_code == EXIT_OK and CountTool.runs == ["a"]
