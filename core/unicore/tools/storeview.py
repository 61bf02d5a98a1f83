"""The one place the tools, policy, prompts and local spawner READ task state.

Everything here is read-only and pipelined. It uses ``TaskStore.get_task`` for single records and the multi-task
reads of ``unicore.store.tree_reads`` (one round trip each; ``TreeNode``, ``descendants``, ``child_count``,
``tree_tokens`` and ``tail_messages`` are re-exported from there), and turns records into ``TaskView``s
(``unicore.store.task_views``, re-exported). Writes (create_task, queue_message, activate) always go through
``TaskStore``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis
from pydantic import BaseModel
from redis.cluster import RedisCluster

from unicore.errors import TaskNotFound
from unicore.store import tree_reads
from unicore.store.codec import text
from unicore.store.records import TaskRecord
from unicore.store.task_views import TaskView, view_from_mapping
from unicore.store.tree_reads import TreeNode, child_count, descendants, tail_messages, tree_tokens

if TYPE_CHECKING:
    from unicore.store.tasks import TaskStore

__all__ = ["Activity", "TaskView", "TreeNode", "child_count", "descendants", "get_view", "now", "read_activity",
           "read_views", "redis_of", "tail_messages", "tree_tokens", "view_from_mapping", "view_of"]


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


def redis_of(store: TaskStore | Any) -> redis.Redis:
    """The store's Redis client (the contract: ``TaskStore(redis)``; a ``RedisCluster`` on a Redis Cluster)."""
    for name in ("redis", "client", "r", "_redis"):
        client = getattr(store, name, None)
        if isinstance(client, redis.Redis | RedisCluster):
            return client  # type: ignore[return-value]  # RedisCluster has the commands the views use
    raise TypeError(f"cannot find the Redis client of {type(store).__name__}")


def get_view(store: TaskStore | Any, task_id: str) -> TaskView | None:
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


def read_views(client: redis.Redis, task_ids: Sequence[str]) -> list[TaskView | None]:
    """Records of many tasks in one round trip (None for a missing task)."""
    return [_view(task_id, data) if data else None
            for task_id, data in zip(task_ids, tree_reads.task_hashes(client, task_ids), strict=True)]


@dataclass(frozen=True)
class Activity:
    """Live view of one task for ``task_status``."""

    view: TaskView
    heartbeat: float | None  # unix time, None when no turn process has heartbeated
    lease_held: bool
    pending: int  # inbox entries waiting
    last_messages: list[dict[str, Any]]


def read_activity(client: redis.Redis, task_ids: Sequence[str], *, tail: int = 3) -> list[Activity | None]:
    """Record, heartbeat, lease, inbox length and last messages of many tasks in ONE round trip."""
    return [
        None if found is None else Activity(view=_view(task_id, found.record), heartbeat=found.heartbeat,
                                            lease_held=found.lease_held, pending=found.pending,
                                            last_messages=found.last_messages)
        for task_id, found in zip(task_ids, tree_reads.read_activity(client, task_ids, tail=tail), strict=True)
    ]


def now() -> float:
    return time.time()
