"""The report a child owes its parent, as stored on the child's record (``report_id``, ``report``; written with the
turn's end by ``TaskStore.end_turn(report=...)``): read it, and clear it once it is in the parent's inbox. What a
report says and how it is delivered is ``unicore.turn.reports``."""

from __future__ import annotations

from dataclasses import dataclass

from unicore.store import lua
from unicore.store.keys import TaskKeys
from unicore.store.tasks import TaskStore


@dataclass(frozen=True)
class OwedReport:
    report_id: str  # the inbox message id (idempotent delivery)
    text: str
    parent: str  # "" when the task has no parent (nothing to deliver to)
    trace_link: str = ""  # the traceparent of the turn that wrote it ("": none; the parent's next turn links to it)


def owed_report(store: TaskStore, task_id: str) -> OwedReport | None:
    """The report ``task_id`` owes its parent, or None (one read)."""
    parent, report_id, report, trace_turn = store.redis.hmget(
        TaskKeys(task_id).task, ["parent", "report_id", "report", "trace_turn"])
    if not report_id:
        return None
    return OwedReport(report_id=report_id, text=report or "", parent=parent or "", trace_link=trace_turn or "")


def clear_report(store: TaskStore, task_id: str, report_id: str) -> bool:
    """Clear the owed report ``report_id`` (only if no newer report replaced it meanwhile); True when cleared."""
    return bool(store.redis.eval(lua.CLEAR_REPORT, 1, TaskKeys(task_id).task, report_id))


__all__ = ["OwedReport", "clear_report", "owed_report"]
