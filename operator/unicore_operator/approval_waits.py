"""The operator's side of tool calls that wait for people (``unicore.store.approvals``): what a task waits for, as the
phase machine sees it; the approval timeout; the Events and the ``unicore_approvals_total`` counter.

The timeout runs in the reconcile, which already runs for every task on each resync (``UNICORE_RESYNC_SECONDS``) and
on every activation: a task whose oldest pending approval is overdue has it denied (``expire_overdue``, by
"timeout"); one that is not yet overdue gets a re-check at its due time (``reconcile.schedule_recheck``), so an
expiry is on time without a timer per task, and an operator restarted meanwhile finds it at its first resync. The
denial queues the task's wake-up (in the same Redis script), so the same reconcile starts the turn that gives the
model its error result. Nothing is read for a task that waits for nobody (the snapshot's two counters say so).

The timeout of a task: its ``spec.approval.timeoutSeconds``, else (a child without its own ``spec.approval``
inherits its parent's, in its Redis record) the record's, else ``UNICORE_APPROVAL_TIMEOUT_SECONDS``; 0 = none.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from unicore.api.spec import AgentTaskSpec
from unicore.store import approvals
from unicore.store.client import RedisClient
from unicore.store.operator_state import TaskSnapshot
from unicore.store.tasks import TaskStore

from unicore_operator.indexes import first
from unicore_operator.phases import APPROVAL, INPUT, HumanWait

if TYPE_CHECKING:
    from unicore_operator.context import OperatorContext

DECISIONS = ("approved", "denied", "expired")  # unicore_approvals_total{decision}
# Event reasons (a task that starts waiting gets an Event named after its phase: WaitingForApproval/WaitingForInput)
APPROVAL_DECIDED = "ApprovalDecided"  # a user decided (task API)
APPROVAL_EXPIRED = "ApprovalExpired"  # nobody decided in time


def human_wait(snap: TaskSnapshot) -> HumanWait | None:
    """What the task waits for from people, from the snapshot (None when it waits for nobody). The first pending
    call of the kind it waits for names the tool (or the question); ``since`` is the oldest one's."""
    if snap.waiting_for is None:
        return None
    kind = APPROVAL if snap.waiting_for == "approval" else INPUT
    calls = [call for call in snap.pending_calls if call.kind == snap.waiting_for]
    if not calls:  # the counters say so, the calls are not readable (yet): still waiting
        return HumanWait(kind=kind, calls=0)
    first = calls[0]
    return HumanWait(kind=kind, call_id=first.call_id, tool=first.tool, question=first.question, calls=len(calls),
                     since=min(call.requested_at for call in calls))


def timeout_seconds(spec: AgentTaskSpec, record: Mapping[str, str], default: float) -> float:
    """How long an approval of this task may wait (0 = no limit); see the module doc. ``record``: the task's Redis
    record as stored (its ``approval`` field, JSON)."""
    try:
        inherited = json.loads(record.get("approval") or "null")
    except ValueError:
        inherited = None
    recorded = inherited.get("timeout_seconds") if isinstance(inherited, dict) else None
    return _timeout(spec, None if recorded is None else float(recorded), default)


def task_timeout(store: TaskStore, spec: AgentTaskSpec, task_id: str, default: float) -> float:
    """``timeout_seconds`` of a task whose record is read now (the task API's decisions and lists)."""
    recorded = store.recorded_approval(task_id)
    return _timeout(spec, None if recorded is None else float(recorded.timeout_seconds), default)


def _timeout(spec: AgentTaskSpec, recorded: float | None, default: float) -> float:
    own = spec.approval
    if own is not None and own.timeout_seconds is not None:
        return float(own.timeout_seconds)
    if own is None and recorded is not None:
        return recorded
    return float(default)


def overdue_at(calls: Iterable[approvals.PendingCall], timeout: float) -> float | None:
    """When the oldest pending approval of ``calls`` is overdue (unix time); None without one or without a limit."""
    oldest = min((call.requested_at for call in calls if call.kind == "approval" and call.status == "pending"),
                 default=None)
    if oldest is None or timeout <= 0:
        return None
    return oldest + timeout


def expire(client: RedisClient, task_id: str, timeout: float, now: float | None = None) -> list[str]:
    """Deny the task's overdue approvals (``state.approvals.expire_overdue``); the ids denied (sync client)."""
    return approvals.expire_overdue(client, task_id, now=time.time() if now is None else now,
                                    timeout_seconds=timeout)


def decided_text(calls: Iterable[approvals.PendingCall], by: str, reason: str) -> str:
    """The Event message of a user's decision."""
    parts = [f"call {call.call_id} ({call.tool}) {call.status}" for call in calls]
    why = f": {reason}" if reason else ""
    return f"{', '.join(parts)} by {by}{why}"[:1024]


def decision_events(ctx: OperatorContext) -> Callable[[str, str, list[Any], str, str], None]:
    """The task API's ``on_decided`` hook: an Event ApprovalDecided on the AgentTask (best effort, from the task
    API's worker thread)."""

    def post(namespace: str, name: str, calls: list[Any], by: str, reason: str) -> None:
        body = first(ctx.agenttasks.get((namespace, name))) if ctx.agenttasks is not None else None
        target = dict(body) if body is not None else {"metadata": {"namespace": namespace, "name": name}}
        ctx.kube.post_event(target, "Normal", APPROVAL_DECIDED, decided_text(calls, by, reason))

    return post


__all__ = ["APPROVAL_DECIDED", "APPROVAL_EXPIRED", "DECISIONS", "decided_text", "decision_events", "expire",
           "human_wait", "overdue_at", "task_timeout", "timeout_seconds"]
