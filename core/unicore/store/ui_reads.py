"""The web UI's reads over many tasks (``unicore_client.ui.local_backend``): every task's tree row in a fixed number
of round trips, and what a task's event list is made of (local mode has no Kubernetes Events). Reads only: the JSON
the UI shows, the forest built from the rows and the events' wording are ``unicore_client.ui.local_views``'.

``read_all_rows``: ``uc:tasks``, then one pipeline of every task's row fields and approval counters, so 1,000 tasks
cost two round trips; ``read_rows`` re-reads only some (the tree feed, driven by ``store.changes``).

``read_task_history``: a task's newest turn headers with their ends, its approval calls and its compaction records
(three round trips).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from unicore.store.approval_records import WAITING_FIELDS, PendingCall, PendingKind, waiting_from_counters
from unicore.store.approvals import calls
from unicore.store.client import RedisClient
from unicore.store.codec import text_hash
from unicore.store.compactions import Compaction, read_compactions
from unicore.store.keys import TASKS_INDEX, TaskKeys
from unicore.store.records import TaskRecord, TurnHeader, TurnMeta, parse_turn_headers

# The record fields a tree row holds (HMGET, not HGETALL: a record also holds the script, tools and limits as JSON)
ROW_FIELDS = ("id", "name", "parent", "root", "depth", "model", "status", "turns", "total_tokens", "created_at",
              "updated_at", "last_response", "last_error", "suspended", "suspended_at")

Row = tuple[TaskRecord, PendingKind | None]  # a tree row's record (ROW_FIELDS only) and what it waits for


def read_rows(client: RedisClient, task_ids: Sequence[str]) -> dict[str, Row]:
    """The tree rows of ``task_ids`` (a task without a record, removed or retired, is left out): one round trip."""
    pipe = client.pipeline(transaction=False)
    for task_id in task_ids:
        pipe.hmget(TaskKeys(task_id).task, list(ROW_FIELDS))
        pipe.hmget(TaskKeys(task_id).approvals, list(WAITING_FIELDS))
    replies = pipe.execute() if task_ids else []
    rows: dict[str, Row] = {}
    for task_id, values, counters in zip(task_ids, replies[0::2], replies[1::2], strict=True):
        if values[0] is not None:
            fields = {name: value for name, value in zip(ROW_FIELDS, values, strict=True) if value is not None}
            rows[task_id] = (TaskRecord.from_hash(fields), waiting_from_counters(counters))
    return rows


def read_all_rows(client: RedisClient) -> dict[str, Row]:
    """Every indexed task's row (``uc:tasks``, then ``read_rows``): two round trips whatever the number of tasks."""
    return read_rows(client, [str(t) for t in client.zrange(TASKS_INDEX, 0, -1)])


@dataclass(frozen=True)
class TaskHistory:
    """What a task's event list is made of."""

    turns: list[tuple[TurnHeader, TurnMeta]]  # the newest turns, oldest first: each header with its end (if any)
    calls: list[PendingCall]  # every approval or question, in call order
    compactions: list[Compaction]


def read_task_history(client: RedisClient, task_id: str, *, last_turns: int) -> TaskHistory:
    """The ``last_turns`` newest turns of ``task_id``, its calls and its compactions."""
    keys = TaskKeys(task_id)
    pipe = client.pipeline(transaction=False)
    pipe.lrange(keys.turns, -last_turns, -1)
    pipe.hgetall(keys.turnmeta)
    raw_turns, raw_meta = pipe.execute()
    meta = text_hash(raw_meta)
    turns = [(header, TurnMeta.of(meta, header.number)) for header in parse_turn_headers(raw_turns)]
    return TaskHistory(turns, calls(client, task_id), read_compactions(client, task_id))


__all__ = ["ROW_FIELDS", "Row", "TaskHistory", "read_all_rows", "read_rows", "read_task_history"]
