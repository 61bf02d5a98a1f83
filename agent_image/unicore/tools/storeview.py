"""The one place the tools, policy, prompts and local spawner READ task state.

Everything here is read-only and pipelined. It uses ``TaskStore.get_task`` for single records and the multi-task
reads of ``unicore.state.tree_reads`` (one round trip each; ``TreeNode``, ``descendants``, ``child_count``,
``tree_tokens`` and ``tail_messages`` are re-exported from there), and turns records into ``TaskView``s.
Writes (create_task, queue_message, activate) always go through ``TaskStore``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis
from pydantic import BaseModel
from redis.cluster import RedisCluster

from unicore.errors import TaskNotFound
from unicore.schema import Limits
from unicore.state import tree_reads
from unicore.state.codec import text
from unicore.state.tree_reads import TreeNode, child_count, descendants, tail_messages, tree_tokens

if TYPE_CHECKING:
    from unicore.state.store import TaskStore

__all__ = ["Activity", "TaskView", "TreeNode", "child_count", "descendants", "get_view", "now", "read_activity",
           "read_views", "redis_of", "tail_messages", "tree_tokens", "view_from_mapping", "view_of"]


def _json(value: Any, default: Any) -> Any:
    if value is None or value == "" or value == b"":
        return default
    if not isinstance(value, str | bytes):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return default


def _int(value: Any) -> int:
    try:
        return int(float(text(value)))
    except (TypeError, ValueError):
        return 0


def _float(value: Any) -> float:
    try:
        return float(text(value))
    except (TypeError, ValueError):
        return 0.0


def _limits(value: Any) -> Limits:
    if isinstance(value, Limits):
        return value
    raw = _json(value, {})
    if isinstance(raw, BaseModel):
        raw = raw.model_dump()
    try:
        return Limits.model_validate(raw or {})
    except ValueError:
        return Limits.model_validate({})


def _names(value: Any) -> list[str] | None:
    raw = _json(value, None)
    if raw is None:
        return None
    return [str(name) for name in raw]


@dataclass(frozen=True)
class TaskView:
    """What the tools need to know about one task record."""

    id: str
    parent: str | None = None
    root: str = ""
    depth: int = 0
    model: str = "scripted"
    system_prompt: str = ""
    tools: list[str] | None = None
    child_tools: list[str] | None = None
    limits: Limits = field(default_factory=lambda: Limits.model_validate({}))
    script: dict[str, Any] | None = None
    status: str = "idle"
    turns: int = 0
    iterations: int = 0  # model calls
    tool_iterations: int = 0  # model calls that asked for tools
    total_tokens: int = 0
    tree_total_tokens: int = 0  # rolled up on the root by the store
    created_at: float = 0.0
    updated_at: float = 0.0
    last_response: str = ""
    model_call_started_at: float = 0.0  # optional record field; 0 = unknown / not in a call

    @property
    def root_id(self) -> str:
        return self.root or self.id


def view_from_mapping(data: Mapping[Any, Any]) -> TaskView:
    """Parse a task record hash (``uc:{T}:task``, bytes or str) or a dict of record fields."""
    fields = {text(k): v for k, v in data.items()}
    parent = fields.get("parent")
    parent_id = text(parent) if parent not in (None, "", b"") else None
    task_id = text(fields.get("id", ""))
    root = fields.get("root")
    script = _json(fields.get("script"), None)
    return TaskView(
        id=task_id,
        parent=parent_id,
        root=text(root) if root not in (None, "", b"") else "",
        depth=_int(fields.get("depth", 0)),
        model=text(fields.get("model", "scripted")),
        system_prompt=text(fields.get("system_prompt", "")),
        tools=_names(fields.get("tools")),
        child_tools=_names(fields.get("child_tools")),
        limits=_limits(fields.get("limits")),
        script=script if isinstance(script, dict) else None,
        status=text(fields.get("status", "idle")),
        turns=_int(fields.get("turns", 0)),
        iterations=_int(fields.get("iterations", 0)),
        tool_iterations=_int(fields.get("tool_iterations", 0)),
        total_tokens=_int(fields.get("total_tokens", 0)),
        tree_total_tokens=_int(fields.get("tree_total_tokens", 0)),
        created_at=_float(fields.get("created_at", 0)),
        updated_at=_float(fields.get("updated_at", 0)),
        last_response=text(fields.get("last_response", "") or ""),
        model_call_started_at=_float(fields.get("model_call_started_at", 0)),
    )


def view_of(record: Any) -> TaskView:
    """A TaskView of whatever ``TaskStore.get_task`` returns (a TaskView, a mapping, or a model/object)."""
    if isinstance(record, TaskView):
        return record
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
