"""The web UI's reads over many tasks (``unicore_client.ui.local_backend``): the forest of every task tree in a fixed
number of
round trips, and a task's event list derived from what the store recorded (local mode has no Kubernetes Events).

``read_forest``: ``uc:tasks``, then one pipeline of every task's record and approval counters; the trees are built
from the records' ``parent`` fields (no per-task reads of children sets), so 1,000 tasks cost two round trips. The
same in parts for a reader that keeps the rows and re-reads only those that changed (the tree feed, driven by
``state.changes``): ``read_rows`` of some tasks, ``read_all_rows``, ``build_forest`` (no Redis).

``derived_events``: a task's record, turn headers and ends, approvals and compaction records, as Kubernetes-style
events (time, type Normal/Warning, reason, message), oldest first. A turn's cancellation and the last error carry
no time of their own; they are dated by the record's last change.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from unicore.api.turn_numbers import shown_turn
from unicore.store.approval_records import WAITING_FIELDS, PendingKind, waiting_from_counters
from unicore.store.approvals import calls
from unicore.store.client import RedisClient
from unicore.store.codec import text_hash
from unicore.store.compactions import read_compactions
from unicore.store.keys import TASKS_INDEX, TaskKeys
from unicore.store.records import TaskRecord, TurnHeader, TurnMeta, parse_turn_headers

EVENT_TURNS = 100  # the newest turns whose start and end are listed
# The record fields a tree row shows (HMGET, not HGETALL: a record also holds the script, tools and limits as JSON)
FOREST_FIELDS = ("id", "name", "parent", "root", "depth", "model", "status", "turns", "total_tokens", "created_at",
                 "updated_at", "last_response", "last_error", "suspended", "suspended_at")


@dataclass(frozen=True)
class ForestNode:
    depth: int
    record: TaskRecord
    waiting: PendingKind | None


Row = tuple[TaskRecord, PendingKind | None]  # a tree row's record (FOREST_FIELDS only) and what it waits for


def read_rows(client: RedisClient, task_ids: Sequence[str]) -> dict[str, Row]:
    """The tree rows of ``task_ids`` (a task without a record, removed or retired, is left out): one round trip."""
    pipe = client.pipeline(transaction=False)
    for task_id in task_ids:
        pipe.hmget(TaskKeys(task_id).task, list(FOREST_FIELDS))
        pipe.hmget(TaskKeys(task_id).approvals, list(WAITING_FIELDS))
    replies = pipe.execute() if task_ids else []
    rows: dict[str, Row] = {}
    for task_id, values, counters in zip(task_ids, replies[0::2], replies[1::2], strict=True):
        if values[0] is not None:
            fields = {name: value for name, value in zip(FOREST_FIELDS, values, strict=True) if value is not None}
            rows[task_id] = (TaskRecord.from_hash(text_hash(fields)), waiting_from_counters(counters))
    return rows


def read_all_rows(client: RedisClient) -> dict[str, Row]:
    """Every indexed task's row (``uc:tasks``, then ``read_rows``): two round trips whatever the number of tasks."""
    return read_rows(client, [str(t) for t in client.zrange(TASKS_INDEX, 0, -1)])


def build_forest(rows: Mapping[str, Row], *, max_roots: int, max_nodes: int) -> list[ForestNode]:
    """Every root's tree from ``rows``, depth first (newest root first, children oldest first), at most ``max_roots``
    roots and ``max_nodes`` tasks; the trees come from the records' ``parent`` fields (a task whose parent has no row
    is left out). No Redis."""
    children: dict[str, list[TaskRecord]] = {}
    roots: list[TaskRecord] = []
    for record, _waiting in rows.values():
        if record.parent and record.parent in rows:
            children.setdefault(record.parent, []).append(record)
        elif not record.parent:
            roots.append(record)
    for group in children.values():
        group.sort(key=lambda r: r.created_at)
    roots.sort(key=lambda r: r.created_at, reverse=True)
    nodes: list[ForestNode] = []
    for root in roots[:max_roots]:
        stack = [(0, root)]
        while stack and len(nodes) < max_nodes:
            depth, record = stack.pop()
            nodes.append(ForestNode(depth, record, rows[record.id][1]))
            stack.extend((depth + 1, child) for child in reversed(children.get(record.id, [])))
        if len(nodes) >= max_nodes:
            break
    return nodes


def read_forest(client: RedisClient, *, max_roots: int, max_nodes: int) -> list[ForestNode]:
    """``build_forest`` of every task's row: two round trips whatever the number of tasks."""
    return build_forest(read_all_rows(client), max_roots=max_roots, max_nodes=max_nodes)


def event(time: float, kind: str, reason: str, message: str) -> dict[str, Any]:
    return {"time": time, "type": kind, "reason": reason, "message": message}


def derived_events(client: RedisClient, task_id: str, record: TaskRecord) -> list[dict[str, Any]]:
    """The events of ``task_id`` (``record``: its record, read by the caller), oldest first."""
    keys = TaskKeys(task_id)
    pipe = client.pipeline(transaction=False)
    pipe.lrange(keys.turns, -EVENT_TURNS, -1)
    pipe.hgetall(keys.turnmeta)
    raw_turns, meta = pipe.execute()
    events = [event(record.created_at, "Normal", "Created", f"task created (model {record.model})")]
    events.extend(_turn_events(parse_turn_headers(raw_turns), text_hash(meta)))
    for call in calls(client, task_id):
        what = f"question {call.call_id}: {call.question}" if call.kind == "input" else call.describe()
        events.append(event(call.requested_at, "Normal", "WaitingForInput" if call.kind == "input"
                            else "WaitingForApproval", what))
        if call.decided_at is not None:
            by = call.decided_by or "?"
            text = f"{call.call_id} {call.status} by {by}"
            kind = "Warning" if call.status == "denied" else "Normal"
            events.append(event(call.decided_at, kind, "ApprovalDecided", text + (f": {call.reason}"
                                                                                   if call.reason else "")))
    for record_of in read_compactions(client, task_id):
        events.append(event(record_of.created_at, "Normal", "Compacted",
                            f"turn {shown_turn(record_of.turn_number)}: the history before message {record_of.upto} "
                            "summarised for requests"))
    if record.suspended_at:
        events.append(event(record.suspended_at, "Normal", "Suspended" if record.suspended else "Resumed",
                            "suspended: no new turn starts" if record.suspended else "resumed"))
    if record.last_error:
        events.append(event(record.updated_at, "Warning", "TurnFailed", record.last_error))
    return sorted(events, key=lambda e: e["time"])


def _turn_events(headers: list[TurnHeader], meta: dict[str, str]) -> Iterator[dict[str, Any]]:
    for header in headers:
        shown = shown_turn(header.number)
        yield event(header.started_at, "Normal", "TurnStarted", f"turn {shown} started")
        end = TurnMeta.of(meta, header.number)
        if end.ended_at is not None:
            calls_made = f" after {end.iterations} model call(s)" if end.iterations is not None else ""
            yield event(end.ended_at, "Normal", "TurnEnded",
                        f"turn {shown} ended{calls_made}" + (f" ({end.note})" if end.note else ""))


__all__ = ["ForestNode", "Row", "build_forest", "derived_events", "read_all_rows", "read_forest", "read_rows"]
