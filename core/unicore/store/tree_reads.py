"""Pipelined reads over many tasks of a tree, for the tools, the policy checks, the prompts and the spawners
(``unicore.tools.storeview`` turns the records into its views): each costs one round trip (``descendants`` one per
tree level), whatever the number of tasks."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from unicore.api.contract import same_namespace
from unicore.store.client import RedisClient
from unicore.store.codec import text, to_float, to_int
from unicore.store.keys import TaskKeys

DEFAULT_MAX_LEVELS = 64  # levels ``descendants`` walks down unless told
DEFAULT_LIMIT = 100_000  # descendants it returns at most unless told
DEFAULT_TAIL = 3  # last messages ``read_activity`` reads of each task unless told


def _message(raw: Any) -> dict[str, Any] | None:
    """A stored message (JSON) as a dict; None when it does not decode to an object."""
    if raw is None or raw == "" or raw == b"":
        return None
    if not isinstance(raw, str | bytes):
        return raw if isinstance(raw, dict) else None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _messages(raws: Iterable[Any]) -> list[dict[str, Any]]:
    return [m for m in (_message(raw) for raw in raws) if m is not None]


def task_hashes(client: RedisClient, task_ids: Sequence[str]) -> list[dict[Any, Any]]:
    """The record hash of each task (``{}`` for a missing task), in one round trip."""
    pipe = client.pipeline(transaction=False)
    for task_id in task_ids:
        pipe.hgetall(TaskKeys(task_id).task)
    return list(pipe.execute())


@dataclass(frozen=True)
class TreeNode:
    id: str
    parent: str
    level: int  # 1 = direct child of the tree's top


def descendants(
    client: RedisClient, top: str, *, max_levels: int = DEFAULT_MAX_LEVELS, limit: int = DEFAULT_LIMIT
) -> list[TreeNode]:
    """Breadth-first descendants of ``top`` (not ``top`` itself): one pipelined round trip per tree level."""
    found: list[TreeNode] = []
    frontier = [top]
    level = 0
    seen = {top}
    while frontier and level < max_levels and len(found) < limit:
        level += 1
        pipe = client.pipeline(transaction=False)
        for task_id in frontier:
            pipe.zrange(TaskKeys(task_id).children, 0, -1)
        next_frontier: list[str] = []
        for parent, children in zip(frontier, pipe.execute(), strict=True):
            for raw in children:
                child = text(raw)
                if child in seen or not same_namespace(top, child):
                    continue
                seen.add(child)
                found.append(TreeNode(child, parent, level))
                next_frontier.append(child)
                if len(found) >= limit:
                    return found
        frontier = next_frontier
    return found


def child_count(client: RedisClient, task_id: str) -> int:
    return int(client.zcard(TaskKeys(task_id).children))


def tree_tokens(client: RedisClient, task_ids: Iterable[str]) -> int:
    """Sum of ``total_tokens`` of the given tasks (one round trip)."""
    ids = list(task_ids)
    if not ids:
        return 0
    pipe = client.pipeline(transaction=False)
    for task_id in ids:
        pipe.hget(TaskKeys(task_id).task, "total_tokens")
    return sum(to_int(value) for value in pipe.execute() if value is not None)


def tail_messages(client: RedisClient, task_id: str, count: int) -> tuple[list[dict[str, Any]], int]:
    """The last ``count`` stored messages (oldest first) and the total number stored."""
    pipe = client.pipeline(transaction=False)
    pipe.llen(TaskKeys(task_id).messages)
    pipe.lrange(TaskKeys(task_id).messages, -count, -1)
    total, raws = pipe.execute()
    return _messages(raws), int(total)


@dataclass(frozen=True)
class TaskActivity:
    """Live state of one task: its record hash, heartbeat, lease, inbox length and last messages."""

    record: dict[Any, Any]
    heartbeat: float | None  # unix time, None when no turn process has heartbeated
    lease_held: bool
    pending: int  # inbox entries waiting
    last_messages: list[dict[str, Any]]


def read_activity(
    client: RedisClient, task_ids: Sequence[str], *, tail: int = DEFAULT_TAIL
) -> list[TaskActivity | None]:
    """Record, heartbeat, lease, inbox length and last messages of many tasks in ONE round trip (None for a missing
    task)."""
    pipe = client.pipeline(transaction=False)
    for task_id in task_ids:
        keys = TaskKeys(task_id)
        pipe.hgetall(keys.task)
        pipe.get(keys.heartbeat)
        pipe.exists(keys.lease)
        pipe.llen(keys.inbox)
        pipe.lrange(keys.messages, -tail, -1)
    results = pipe.execute()
    activities: list[TaskActivity | None] = []
    for index in range(len(task_ids)):
        data, beat, lease, pending, raws = results[index * 5 : index * 5 + 5]
        if not data:
            activities.append(None)
            continue
        activities.append(
            TaskActivity(
                record=data,
                heartbeat=to_float(beat) if beat is not None else None,
                lease_held=bool(lease),
                pending=int(pending),
                last_messages=_messages(raws),
            )
        )
    return activities


__all__ = ["TaskActivity", "TreeNode", "child_count", "descendants", "read_activity", "tail_messages",
           "task_hashes", "tree_tokens"]
