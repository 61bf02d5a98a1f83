"""Reports a child owes its parent: its completion (each ended turn) or its failure.

Delivery is derived from stored state, so no crash window can lose a report:
- a child's turn stores its completion report (id ``completion:<child>:<turn>`` and text) in the child's record
  atomically with the turn's end (``TaskStore.end_turn(report=...)``), then ``deliver_report`` queues it into the
  parent's inbox (idempotent by id: the parent's ``seen`` set), activates the parent and clears the owed report;
- a turn process that died between the two leaves ``report_id`` set: whenever no process holds the child's lease
  (``unicore.scheduling``) it is delivered again, by the operator's reconcile, by the child's next turn process
  (local mode starts one for it) or, for a suspended child, by the local supervisor; the same id makes a repeat
  harmless;
- a child that goes Failed (operator: retries exhausted) is reported with ``failure_report``, id
  ``failed:<child>:<turn>``, so the parent's model learns which child failed and why.

The tenant boundary (docs/architecture.md): a child's record (its ``parent``, ``report_id``, ``report``) is writable by
its namespace's Redis user, and the operator delivers with its own connection. So a report goes only to a parent in
the child's own namespace, only with an id of the child's own (``completion:<child>:<n>``: no other child's id can be
pre-empted), and, where the caller knows the parent from the API server (the operator: ``spec.parentRef``), only to
that parent. A report that breaks a rule is dropped with a warning and cleared.
"""

from __future__ import annotations

from typing import Any

import redis

from unicore.api.contract import same_namespace
from unicore.api.schema import DEFAULT_MESSAGE_CAP_BYTES, InboxMessage, task_name
from unicore.errors import MessageTooLarge, TaskNotFound
from unicore.log import get_logger
from unicore.store import conversations
from unicore.store.records import TaskRecord
from unicore.store.reports import clear_report, owed_report
from unicore.store.tasks import TaskStore
from unicore.turn.checkpoints import Checkpoints

log = get_logger("reports")

CUT_MARK = "\n[... cut ...]"


def _child_name(record: TaskRecord) -> str:
    if record.parent and record.id.startswith(f"{record.parent}-"):
        return record.id[len(record.parent) + 1 :]
    return task_name(record.id)


def completion_message(record: TaskRecord, final_text: str, note: str = "") -> str:
    """Seed 000 completion message for the parent."""
    lines = [
        f"[SYSTEM] Child task {record.id} has completed successfully.",
        f"Ran {record.turns} turns with {record.tool_iterations} tool iterations.",
        f"You can continue the conversation by calling spawn_task with name='{_child_name(record)}' and a new "
        "message.",
    ]
    if note:
        lines.append(f"Note: {note}")
    lines += ["", "Final response from child:", final_text]
    return "\n".join(lines)


def failure_message(record: TaskRecord, reason: str) -> str:
    """What the parent is told when a child went Failed (no more turns will run unless it is resumed)."""
    lines = [
        f"[SYSTEM] Child task {record.id} has FAILED: {reason}",
        f"It ran {record.turns} turns with {record.tool_iterations} tool iterations; it will not report again "
        "unless it is given new work.",
        f"You can retry by calling spawn_task with name='{_child_name(record)}' and a new message, or do the work "
        "yourself.",
    ]
    if record.last_error and record.last_error not in reason:
        lines.append(f"Its last error: {record.last_error[:4000]}")
    if record.last_response:
        last = record.last_response
        lines += ["", "Last response from child:", last if len(last) <= 100_000 else last[:100_000] + CUT_MARK]
    return "\n".join(lines)


def _fit(build: Any, text: str, cap: int) -> str:
    """``build(text)``, with ``text`` cut until the encoded inbox entry fits under ``cap`` bytes."""
    message = build(text)
    budget = len(text)
    while len(message.encode()) > cap * 9 // 10 and budget > 0:
        budget = budget // 2
        message = build(text[:budget] + CUT_MARK)
    return message


def completion_report(record: TaskRecord, turn_number: int, final_text: str, note: str = "",
                      cap: int = DEFAULT_MESSAGE_CAP_BYTES) -> tuple[str, str]:
    """(message id, text) of the completion of ``turn_number`` (cut to fit the inbox cap)."""
    text = _fit(lambda body: completion_message(record, body, note), final_text, cap)
    return f"completion:{record.id}:{turn_number}", text


def is_own_report_id(task_id: str, report_id: str) -> bool:
    """``report_id`` is one of ``task_id``'s own completion ids (``completion:<task_id>:<turn number>``)."""
    prefix = f"completion:{task_id}:"
    return report_id.startswith(prefix) and report_id[len(prefix):].isdigit()


def _parent_refusal(task_id: str, parent: str, expected_parent: str | None) -> str | None:
    """Why a report of ``task_id`` may not go to ``parent``; None when it may."""
    if not same_namespace(task_id, parent):
        return f"its parent {parent!r} is in another namespace"
    if expected_parent is not None and parent != expected_parent:
        return f"its stored parent {parent!r} is not its AgentTask's parent {expected_parent or '(none)'!r}"
    return None


def deliver_report(store: TaskStore, task_id: str, expected_parent: str | None = None) -> bool:
    """Queue the report ``task_id`` owes its parent, if any; True when one was owed. ``expected_parent``: the parent
    as the API server has it (``spec.parentRef``; "" for none), when the caller knows it (the operator).

    Idempotent (same message id), so the next turn, the operator and the supervisor may all call it."""
    owed = owed_report(store, task_id)
    if owed is None:
        return False
    refusal = None
    if not is_own_report_id(task_id, owed.report_id):
        refusal = f"the report id {owed.report_id!r} is not one of its own"
    elif owed.parent:
        refusal = _parent_refusal(task_id, owed.parent, expected_parent)
    if refusal:
        log.warning("task %s: report %r dropped: %s", task_id, owed.report_id, refusal)
    elif owed.parent:
        message = InboxMessage(id=owed.report_id, type="completion", content=owed.text, sender=task_id,
                               trace_link=owed.trace_link or None)  # the parent's next turn links to it
        try:
            if store.queue_message(owed.parent, message):
                log.info("task %s: report %s queued for %s", task_id, owed.report_id, owed.parent)
            store.activate(owed.parent, f"completion:{task_id}")
        except TaskNotFound:
            log.warning("task %s: parent %s is gone; report %s dropped", task_id, owed.parent, owed.report_id)
        except MessageTooLarge:
            log.error("task %s: report %s is over the inbox cap; dropped", task_id, owed.report_id)
    clear_report(store, task_id, owed.report_id)
    return True


def settle_owed(store: TaskStore, task_id: str, checkpoints: Checkpoints) -> None:
    """At a turn's start: what the last turn owed others if its process died before giving it. Its report is
    delivered before this turn (whose end would store the next report) starts; its conversation posts and answer
    are posted (``store.conversations.catch_up``)."""
    if deliver_report(store, task_id):
        log.info("task %s: the report of the last turn was owed; delivered now", task_id)
        checkpoints.fault_point("after notify")
    post_to_conversations(store, task_id)


def post_to_conversations(store: TaskStore, task_id: str) -> None:
    """Post (and deliver) what ``task_id`` owes its conversations; a turn pod that may not write them leaves it to
    the operator (a conversation's sender is the task whose own keys the post came from)."""
    try:
        conversations.catch_up(store, task_id)
    except redis.ResponseError as exc:
        log.info("task %s: conversation posts left for the operator: %s", task_id, exc)


def report_failure(store: TaskStore, task_id: str, reason: str, expected_parent: str | None = None) -> bool:
    """Tell the parent of ``task_id`` that it failed (idempotent per failed turn); True when newly queued.
    ``expected_parent`` as for ``deliver_report``."""
    try:
        record = store.get_task(task_id)
    except TaskNotFound:
        return False
    if not record.parent:
        return False
    refusal = _parent_refusal(task_id, record.parent, expected_parent)
    if refusal:
        log.warning("task %s: failure report dropped: %s", task_id, refusal)
        return False
    text = failure_message(record, reason[:4000])
    message = InboxMessage(
        id=f"failed:{task_id}:{max(0, record.turns - 1)}", type="completion", content=text, sender=task_id
    )
    try:
        queued = bool(store.queue_message(record.parent, message))
    except TaskNotFound:
        return False
    if queued:
        store.activate(record.parent, f"failed:{task_id}")
    return queued


__all__ = [
    "completion_message",
    "completion_report",
    "deliver_report",
    "failure_message",
    "is_own_report_id",
    "post_to_conversations",
    "report_failure",
    "settle_owed",
]
