"""What the web UI shows of local tasks, as JSON: a tree row (``node_json``), the forest of every root's tree
(``build_forest``, ``forest_json``) and a task's events (``task_events``), built from the store's reads
(``unicore.store.ui_reads``: the rows, a task's history). No Redis here.

The forest comes from the rows' ``parent`` fields (no per-task reads of children sets). The events are
Kubernetes-style (time, type Normal/Warning, reason, message), oldest first: the task's creation, its turns started
and ended, approvals asked and decided, compactions, its last suspension or resumption and its last error. A turn's
cancellation and the last error carry no time of their own; they are dated by the record's last change.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from unicore.api.turn_numbers import shown_turn
from unicore.store.approval_records import PendingKind
from unicore.store.records import TaskRecord, TurnHeader, TurnMeta
from unicore.store.ui_reads import Row, TaskHistory

from unicore_client.tree import TreeRow, assemble, newest_first

MAX_ROOTS = 200  # roots shown in the tree view (newest first)
MAX_NODES = 1000  # tasks per tree view
EVENT_TURNS = 100  # the newest turns whose start and end are listed


def node_json(depth: int, record: TaskRecord, waiting: str | None) -> dict[str, Any]:
    phase = ("suspended" if record.suspended else "running" if record.status == "running" else "waiting" if waiting
             else "failed" if record.last_error else "done" if record.turns else "queued")
    return {
        "phase": phase, "id": record.id, "parent": record.parent, "depth": depth,
        "status": record.status, "waiting": waiting, "suspended": record.suspended,
        "turns": record.turns, "tokens": record.total_tokens, "model": record.model,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "last": record.last_response[:200], "error": record.last_error[:500],
    }


@dataclass(frozen=True)
class ForestNode:
    depth: int
    record: TaskRecord
    waiting: PendingKind | None


def build_forest(rows: Mapping[str, Row], *, max_roots: int, max_nodes: int) -> list[ForestNode]:
    """Every root's tree from ``rows``, depth first (newest root first, children oldest first), at most ``max_roots``
    roots and ``max_nodes`` tasks; the trees come from the records' ``parent`` fields (a task whose parent has no row
    is left out)."""
    forest = assemble((TreeRow(task_id, record.parent, record.created_at, (record, waiting))
                       for task_id, (record, waiting) in rows.items()), orphans_are_roots=False)
    return [ForestNode(depth, *row.item)
            for depth, row in forest.walk(newest_first(forest.roots)[:max_roots], max_nodes=max_nodes)]


def forest_json(rows: dict[str, Row]) -> list[dict[str, Any]]:
    """The tree view's nodes of ``rows`` (at most MAX_ROOTS roots and MAX_NODES tasks)."""
    return [node_json(n.depth, n.record, n.waiting)
            for n in build_forest(rows, max_roots=MAX_ROOTS, max_nodes=MAX_NODES)]


def event(time: float, kind: str, reason: str, message: str) -> dict[str, Any]:
    return {"time": time, "type": kind, "reason": reason, "message": message}


def task_events(record: TaskRecord, history: TaskHistory) -> list[dict[str, Any]]:
    """The events of the task of ``record`` (its ``history``: ``ui_reads.read_task_history``), oldest first."""
    events = [event(record.created_at, "Normal", "Created", f"task created (model {record.model})")]
    events.extend(_turn_events(history.turns))
    for call in history.calls:
        what = f"question {call.call_id}: {call.question}" if call.kind == "input" else call.describe()
        events.append(event(call.requested_at, "Normal", "WaitingForInput" if call.kind == "input"
                            else "WaitingForApproval", what))
        if call.decided_at is not None:
            by = call.decided_by or "?"
            text = f"{call.call_id} {call.status} by {by}"
            kind = "Warning" if call.status == "denied" else "Normal"
            events.append(event(call.decided_at, kind, "ApprovalDecided", text + (f": {call.reason}"
                                                                                   if call.reason else "")))
    for compaction in history.compactions:
        events.append(event(compaction.created_at, "Normal", "Compacted",
                            f"turn {shown_turn(compaction.turn_number)}: the history before message "
                            f"{compaction.upto} summarised for requests"))
    if record.suspended_at:
        events.append(event(record.suspended_at, "Normal", "Suspended" if record.suspended else "Resumed",
                            "suspended: no new turn starts" if record.suspended else "resumed"))
    if record.last_error:
        events.append(event(record.updated_at, "Warning", "TurnFailed", record.last_error))
    return sorted(events, key=lambda e: e["time"])


def _turn_events(turns: list[tuple[TurnHeader, TurnMeta]]) -> Iterator[dict[str, Any]]:
    for header, end in turns:
        shown = shown_turn(header.number)
        yield event(header.started_at, "Normal", "TurnStarted", f"turn {shown} started")
        if end.ended_at is not None:
            calls_made = f" after {end.iterations} model call(s)" if end.iterations is not None else ""
            yield event(end.ended_at, "Normal", "TurnEnded",
                        f"turn {shown} ended{calls_made}" + (f" ({end.note})" if end.note else ""))
