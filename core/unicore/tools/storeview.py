"""The one place the tools, policy, prompts and spawners turn task state into ``TaskView``s.

Everything here is read-only and asks the ``TaskStore`` it is handed: ``get_task`` for single records and the
pipelined multi-task reads (``task_hashes``, ``read_activity``: ``unicore.store.tree_reads``, one round trip each),
and turns records into ``TaskView``s (``unicore.store.task_views``, re-exported). The other tree reads
(``descendants``, ``child_count``, ``tree_tokens``, ``tail_messages``) are the store's methods, asked directly. Writes
(create_task, queue_message, activate) always go through ``TaskStore``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from unicore.errors import TaskNotFound
from unicore.store import tree_reads
from unicore.store.codec import text
from unicore.store.records import TaskRecord
from unicore.store.task_views import TaskView, view_from_mapping
from unicore.store.tasks import TaskStore

__all__ = ["Activity", "TaskView", "get_view", "now", "read_activity", "read_views", "view_from_mapping", "view_of"]


def view_of(record: Any) -> TaskView:
    """A TaskView of whatever ``TaskStore.get_task`` returns (a TaskView, a mapping, or a model/object)."""
    if isinstance(record, TaskView):
        return record
    if isinstance(record, TaskRecord):
        return TaskView.of(record)
    if isinstance(record, Mapping):
        return view_from_mapping(record)
    if isinstance(record, BaseModel):
        return view_from_mapping(record.model_dump())
    names = [name for name in TaskView.__dataclass_fields__ if hasattr(record, name)]
    return view_from_mapping({name: getattr(record, name) for name in names})


def get_view(store: TaskStore, task_id: str) -> TaskView | None:
    """The task's record, or None if there is no such task."""
    try:
        record = store.get_task(task_id)
    except TaskNotFound:
        return None
    if record is None:
        return None
    return view_of(record)


def _view(task_id: str, data: Mapping[Any, Any]) -> TaskView:
    return view_from_mapping({"id": task_id, **{text(k): v for k, v in data.items()}})


def read_views(store: TaskStore, task_ids: Sequence[str]) -> list[TaskView | None]:
    """Records of many tasks in one round trip (None for a missing task)."""
    return [_view(task_id, data) if data else None
            for task_id, data in zip(task_ids, store.task_hashes(task_ids), strict=True)]


@dataclass(frozen=True)
class Activity:
    """Live view of one task for ``task_status``."""

    view: TaskView
    heartbeat: float | None  # unix time, None when no turn process has heartbeated
    lease_held: bool
    pending: int  # inbox entries waiting
    last_messages: list[dict[str, Any]]


def read_activity(store: TaskStore, task_ids: Sequence[str], *,
                  tail: int = tree_reads.DEFAULT_TAIL) -> list[Activity | None]:
    """Record, heartbeat, lease, inbox length and last messages of many tasks in ONE round trip."""
    return [
        None if found is None else Activity(view=_view(task_id, found.record), heartbeat=found.heartbeat,
                                            lease_held=found.lease_held, pending=found.pending,
                                            last_messages=found.last_messages)
        for task_id, found in zip(task_ids, store.read_activity(task_ids, tail=tail), strict=True)
    ]


def now() -> float:
    return time.time()
