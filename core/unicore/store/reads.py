"""Pipelined reads that span several keys (of one task or many), for the operator's gauges and task API, the local
supervisor and the local commands: the Redis layout's owner answers them, not the callers. Each takes what its callers
hold: the ``TaskStore`` (the task API, the CLI, the web UI, the local supervisor) or, for the operator's gauges and the
supervisor's failure reasons, a client."""

from __future__ import annotations

from dataclasses import dataclass, field

from unicore.store import approvals
from unicore.store.client import RedisClient
from unicore.store.keys import TaskKeys
from unicore.store.tasks import TaskStore

CHUNK = 1000  # commands per pipeline flush: bounds one reply's size


def inbox_lengths(client: RedisClient, task_ids: list[str]) -> dict[str, int]:
    """Inbox length of every task in ``task_ids`` whose inbox is not empty.

    One pipelined LLEN per task (one round trip per thousand tasks on a single Redis; a Redis Cluster pipeline sends
    each node its share), so it works on both: a script over many tasks' inboxes would cross hash slots."""
    lengths: dict[str, int] = {}
    for start in range(0, len(task_ids), CHUNK):
        chunk = task_ids[start : start + CHUNK]
        pipe = client.pipeline(transaction=False)
        for task_id in chunk:
            pipe.llen(TaskKeys(task_id).inbox)
        for task_id, length in zip(chunk, pipe.execute(), strict=True):
            if int(length):
                lengths[task_id] = int(length)
    return lengths


@dataclass(frozen=True)
class TranscriptHead:
    """What a transcript page needs before it reads its slice of messages (``read_transcript_head``)."""

    raw_turns: list[str]  # the turn headers as stored (JSON), in turn order
    meta: dict[str, str]  # the turnmeta hash (``records.TurnMeta`` reads it)
    total: int  # messages stored
    status: str | None  # the record's status; None when the task has no record (not initialised)
    pending: int  # inbox entries waiting
    raw_compactions: list[str] = field(default_factory=list)  # the compaction records as stored (state.compactions)


def read_transcript_head(store: TaskStore, task_id: str) -> TranscriptHead:
    """Turn headers, turn metadata, message count, status, inbox length and compaction records of a task: one
    round trip."""
    keys = TaskKeys(task_id)
    pipe = store.redis.pipeline(transaction=False)
    pipe.lrange(keys.turns, 0, -1)
    pipe.hgetall(keys.turnmeta)
    pipe.llen(keys.messages)
    pipe.hmget(keys.task, ["status", "turns"])
    pipe.llen(keys.inbox)
    pipe.lrange(keys.compactions, 0, -1)
    raw_turns, meta, total, (status, _turns), pending, raw_compactions = pipe.execute()
    return TranscriptHead(raw_turns=list(raw_turns), meta=dict(meta), total=int(total), status=status,
                          pending=int(pending), raw_compactions=list(raw_compactions))


def read_message_slice(store: TaskStore, task_id: str, start: int, stop: int) -> list[str]:
    """The stored messages with ``start <= seq < stop`` (as stored: JSON); no read for an empty range."""
    return list(store.redis.lrange(TaskKeys(task_id).messages, start, stop - 1)) if stop > start else []


def last_error(client: RedisClient, task_id: str) -> str | None:
    """The ``last_error`` of the task's record (None or "" when there is none)."""
    value = client.hget(TaskKeys(task_id).task, "last_error")
    return None if value is None else str(value)


def busy(store: TaskStore, task_id: str) -> bool:
    """Pending inbox entries (not counted while the task waits for people and none of them answers: a blocked task
    is settled, ``state.approvals.blocked``), a live lease, or a turn not finished (status running): one round
    trip (more only when the inbox is not empty). A suspended task (``state.suspension``) is settled once no
    process holds its lease."""
    keys = TaskKeys(task_id)
    pipe = store.redis.pipeline(transaction=False)
    pipe.llen(keys.inbox)
    pipe.exists(keys.lease)
    pipe.hmget(keys.task, ["status", "suspended"])
    pending, leased, (status, suspended) = pipe.execute()
    if leased:
        return True
    if suspended == "1":
        return False
    if status == "running":
        return True
    return bool(pending) and not approvals.blocked(store.redis, task_id)


__all__ = ["TranscriptHead", "busy", "inbox_lengths", "last_error", "read_message_slice", "read_transcript_head"]
