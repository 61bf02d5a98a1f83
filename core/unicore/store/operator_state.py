"""The operator's side of the Redis layout: one pipelined read per task, and its own small records of each task.

``read_snapshot`` reads what a reconcile needs in a single round trip (two when the last turn has a header, one more
when the task waits for people): the task record, the inbox length, whether a lease is held, the operator hash, the
last turn header, the child ids, what the task waits for from people (``state.approvals.waiting_for``'s counters)
and, optionally, which ended Jobs the accounting has not seen yet. A task that waits for people also gets its pending
calls and whether its inbox holds anything that wakes it (``state.approvals.wakes``).

The operator owns one small hash per task, ``uc:{T}:operator``: how many Jobs ended per turn (so a retried turn gets
a new deterministic Job name), consecutive failures, the last failure and the earliest retry time; plus two sets of
Job names (``opjobs``: ends recorded, ``opreaped``: reaps recorded first). :class:`OperatorRecords` writes them.

Sync calls take the operator's ``decode_responses=True`` client, async ones its ``redis.asyncio`` client (bytes);
the caller passes the client (this package knows nothing of the operator).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from unicore.api.contract import same_namespace
from unicore.scheduling import turn_unfinished
from unicore.store import approval_records as records_of_calls
from unicore.store import approvals, changes, command_jobs, lua
from unicore.store.client import AsyncRedisClient, RedisClient
from unicore.store.codec import text, text_hash, to_float, to_int
from unicore.store.keys import HEARTBEATS_INDEX, TaskKeys
from unicore.store.records import TurnMeta, turn_meta_field
from unicore.store.task_views import TaskView, view_from_mapping

_ENDED_PREFIX = "ended:"  # operator hash field ``ended:<turn>``: Jobs of that turn that ended


@dataclass(frozen=True)
class LastTurn:
    """The task's newest turn: its header and, once it ended, its end (``number`` as Redis counts, from 0)."""

    number: int
    started_at: float | None
    ended_at: float | None
    summary: str = ""


@dataclass
class TaskSnapshot:
    """What the operator needs to know about one task in Redis."""

    exists: bool
    record: dict[str, str] = field(default_factory=dict)
    pending: int = 0
    lease_held: bool = False
    turns: int = 0
    failed_attempts: int = 0
    last_failure: str = ""
    retry_at: float = 0.0
    ended_jobs_by_turn: dict[int, int] = field(default_factory=dict)
    last_turn: LastTurn | None = None
    unrecorded_jobs: tuple[str, ...] = ()  # of the ended Jobs asked about, those whose end is not recorded yet
    children: tuple[str, ...] = ()  # child task ids (``uc:{T}:children``), oldest first
    waiting_for: approvals.PendingKind | None = None  # ``state.approvals.waiting_for``
    pending_calls: tuple[approvals.PendingCall, ...] = ()  # read only when waiting_for is set
    inbox_wakes: bool = True  # the queued messages give the task a turn (``state.approvals.wakes``)
    command_jobs: tuple[command_jobs.JobState, ...] = ()  # its submit_job requests and what became of them
    conversations: int = 0  # how many shared conversations it takes part in (``store.conversations``)

    @property
    def jobs_outstanding(self) -> int:
        return len(command_jobs.outstanding(list(self.command_jobs)))

    @property
    def runnable_pending(self) -> int:
        """Queued messages that give the task a turn now: none while it waits for people and nothing queued
        answers them (those messages stay queued until a decision or an answer comes)."""
        return self.pending if self.inbox_wakes else 0

    @property
    def view(self) -> TaskView | None:
        """The task record, decoded (tolerantly: a bad field reads as its default); None when there is none."""
        return view_from_mapping(self.record) if self.exists else None

    @property
    def parent(self) -> str:
        return self.record.get("parent", "")

    @property
    def depth(self) -> int | None:
        """The record's depth; None when the record does not say."""
        raw = self.record.get("depth")
        return int(raw or 0) if raw else None

    @property
    def owes_report(self) -> bool:
        """A turn ended with a report for the parent that has not reached the parent's inbox yet."""
        return bool(self.record.get("report_id"))

    def report_delivered(self) -> None:
        """Forget the owed report in this snapshot (``unicore.turn.reports.deliver_report`` cleared it in Redis)."""
        self.record["report_id"] = ""

    def unfinished_turn(self) -> bool:
        """A turn started but never ended (its process was stopped or died) and nobody runs it now."""
        if self.lease_held:
            return False
        ended = None if self.last_turn is None else self.last_turn.ended_at is not None
        return turn_unfinished(self.record.get("status"), ended)

    def next_turn(self) -> int:
        """The turn the next Job runs: an interrupted turn continues under its own number. A turn that has its end
        is done, even when its process died before it let go of the lease (the record still says running): the
        next Job runs the next turn."""
        last_ended = self.last_turn is not None and self.last_turn.ended_at is not None
        return self.turns if self.turns and self.unfinished_turn() and not last_ended else self.turns + 1

    def next_attempt(self) -> int:
        return self.ended_jobs_by_turn.get(self.next_turn(), 0)


async def read_snapshot(client: AsyncRedisClient, task_id: str, ended_jobs: Sequence[str] = ()) -> TaskSnapshot:
    """The task's state in one round trip (two when its last turn has a header); ``ended_jobs``: names of ended
    turn Jobs to check against the accounting (``unrecorded_jobs``)."""
    keys = TaskKeys(task_id)
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.task)
    pipe.llen(keys.inbox)
    pipe.exists(keys.lease)
    pipe.hgetall(keys.operator)
    pipe.lindex(keys.turns, -1)
    pipe.zrange(keys.children, 0, -1)
    pipe.hmget(keys.approvals, list(records_of_calls.WAITING_FIELDS))
    pipe.hgetall(keys.command_jobs)
    pipe.hgetall(keys.operator_command_jobs)
    pipe.hlen(keys.conversations)
    if ended_jobs:
        pipe.smismember(keys.operator_jobs, list(ended_jobs))
    replies = await pipe.execute()
    record_raw, pending, lease, op_raw, last_header, children, counters, requested, done, talks = replies[:10]
    recorded = replies[10] if ended_jobs else []
    record = text_hash(record_raw)
    op = text_hash(op_raw)
    ended = {
        to_int(name.split(":", 1)[1], -1): to_int(value)
        for name, value in op.items()
        if name.startswith(_ENDED_PREFIX)
    }
    snap = TaskSnapshot(
        exists=bool(record),
        record=record,
        pending=int(pending or 0),
        lease_held=bool(lease),
        turns=to_int(record.get("turns")),
        failed_attempts=to_int(op.get("failed")),
        last_failure=op.get("last_failure", ""),
        retry_at=to_float(op.get("retry_at")),
        ended_jobs_by_turn=ended,
        unrecorded_jobs=tuple(name for name, known in zip(ended_jobs, recorded, strict=True) if not known),
        children=tuple(child for child in (text(raw) for raw in children or ()) if same_namespace(task_id, child)),
        waiting_for=records_of_calls.waiting_from_counters(counters),
        command_jobs=tuple(command_jobs.states_of(text_hash(requested), text_hash(done))),
        conversations=int(talks or 0),
    )
    if snap.waiting_for is not None:
        await _read_waiting(client, keys, snap)
    if last_header:
        try:
            header = json.loads(text(last_header))
        except ValueError:
            header = {}
        number = to_int(header.get("turn_number"))
        wanted = [turn_meta_field(number, "summary"), turn_meta_field(number, "ended_at")]
        values = await client.hmget(keys.turnmeta, wanted)
        end = TurnMeta.of({name: text(value) for name, value in zip(wanted, values, strict=True) if value}, number)
        started = header.get("started_at")
        snap.last_turn = LastTurn(number=number, ended_at=end.ended_at, summary=end.summary,
                                  started_at=float(started) if isinstance(started, int | float) else None)
    return snap


def _types_of(raw_entries: Iterable[str]) -> list[str]:
    """The inbox entries' types (as ``approvals.inbox_types``)."""
    types = []
    for raw in raw_entries:
        try:
            types.append(str(json.loads(raw).get("type", "")))
        except (ValueError, AttributeError):
            types.append("")
    return types


async def _read_waiting(client: AsyncRedisClient, keys: TaskKeys, snap: TaskSnapshot) -> None:
    """The pending calls of a task that waits for people and, when messages are queued, whether one wakes it."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.approvals)
    pipe.hgetall(keys.decisions)
    if snap.pending:
        pipe.lrange(keys.inbox, 0, -1)
    replies = await pipe.execute()
    found = records_of_calls.calls_from_hash(text_hash(replies[0]), text_hash(replies[1]))
    snap.pending_calls = tuple(call for call in found if call.status == "pending" and call.resolved_at is None)
    if snap.pending:
        snap.inbox_wakes = approvals.wakes(snap.waiting_for, _types_of(text(raw) for raw in replies[2]))


class OperatorRecords:
    """The operator's writes to its per-task records, on a sync ``decode_responses=True`` client."""

    def __init__(self, client: RedisClient) -> None:
        self.redis = client
        self._account = client.register_script(lua.ACCOUNT_JOB_END)
        self._break = client.register_script(lua.BREAK_LEASE)

    def account_job_end(self, task_id: str, job_name: str, turn: int, outcome: str, reason: str = "",
                        retry_delay: float = 0.0, source: str = "job") -> int:
        """Record that turn attempt (Job) ``job_name`` ended (``outcome``: succeeded, failed or deleted), once.

        ``source``: "job" (the Job's own outcome) or "watchdog" (a reap). Returns the consecutive failure count after
        a failure, 0 after another outcome, -1 when already recorded, -2 when a reap recorded it and this is the
        first outcome of its Job (``source`` "job").
        """
        keys = TaskKeys(task_id)
        flag = {"failed": "1", "succeeded": "0"}.get(outcome, "2")
        result = self._account(
            keys=[keys.operator, keys.operator_jobs, keys.operator_reaped],
            args=[job_name, turn, flag, reason[:512], time.time() + retry_delay, source],
        )
        return int(result)

    def break_lease(self, task_id: str, pod_name: str) -> bool:
        """Delete the task's lease if its holder is a process of pod ``pod_name`` (which has terminated)."""
        keys = TaskKeys(task_id)
        broken = bool(self._break(keys=[keys.lease, keys.task], args=[f"{pod_name}:", repr(time.time()), "0"]))
        if broken:
            changes.publish_one(self.redis, task_id, "turn_ended")
        return broken

    def reset_failures(self, task_id: str) -> None:
        """Forget the consecutive failures (a resumed task starts over)."""
        self.redis.hset(TaskKeys(task_id).operator, mapping={"failed": 0, "retry_at": 0, "last_failure": ""})

    def set_failures(self, task_id: str, failed: int, last_failure: str) -> None:
        """Set the consecutive failure count and the last failure (the watchdog's reap limit)."""
        self.redis.hset(TaskKeys(task_id).operator, mapping={"failed": failed, "last_failure": last_failure})

    def task_keys(self, task_id: str) -> list[str]:
        """Every key of the task (the hash tag makes the pattern exact; SCAN stays on one slot's worth of keys)."""
        return list(self.redis.scan_iter(match=TaskKeys(task_id).pattern(), count=500))


async def expire_task_keys(client: AsyncRedisClient, task_id: str, keys: Sequence[str], seconds: int) -> None:
    """EXPIRE ``keys`` (the task's, from ``task_keys``) after ``seconds`` and drop the task from the global
    heartbeat index (the task's pattern does not find that key), in one pipelined round trip."""
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.expire(key, seconds)
    pipe.zrem(HEARTBEATS_INDEX, task_id)
    await pipe.execute()


async def delete_keys(client: AsyncRedisClient, keys: Sequence[str]) -> None:
    """DEL ``keys`` (leftovers of a deleted task, from ``task_keys``)."""
    await client.delete(*keys)


__all__ = ["OperatorRecords", "TaskSnapshot", "delete_keys", "expire_task_keys", "read_snapshot"]
