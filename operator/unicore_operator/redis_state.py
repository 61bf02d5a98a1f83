"""The operator's view of Redis: one pipelined read per task, writes through ``unicore.state.store.TaskStore``.

Reads use the contract's keys directly (docs/CONTRACT.md, schema version 1) so a status refresh or an activation
check costs a single round trip. The operator also owns one small hash per task, ``uc:{T}:operator``: how many Jobs
ended per turn (so a retried turn gets a new deterministic Job name), consecutive failures, the last failure and the
earliest retry time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio as aioredis
from unicore.state import lua
from unicore.state.client import build_async_client, build_client
from unicore.state.codec import text, text_hash
from unicore.state.keys import TaskKeys
from unicore.state.records import TurnMeta, turn_meta_field

# Lua: account one ended turn attempt exactly once (its Job's name is remembered in a set), whoever records it first:
# the Job's outcome (source 'job') or the watchdog's reap (source 'watchdog', also remembered in uc:{T}:opreaped, so
# the Job's own outcome, when it shows later, is told apart from a repeat: -2 once, then -1).
# KEYS[1] = uc:{T}:operator, KEYS[2] = uc:{T}:opjobs, KEYS[3] = uc:{T}:opreaped
# ARGV = job name, turn, failed(0/1/2 = succeeded/failed/deleted), reason, retry_at, source
_ACCOUNT_JOB_END = """
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  if ARGV[6] == 'job' and redis.call('SREM', KEYS[3], ARGV[1]) == 1 then return -2 end
  return -1
end
if ARGV[6] == 'watchdog' then redis.call('SADD', KEYS[3], ARGV[1]) end
redis.call('HINCRBY', KEYS[1], 'ended:' .. ARGV[2], 1)
if ARGV[3] == '1' then
  local n = redis.call('HINCRBY', KEYS[1], 'failed', 1)
  redis.call('HSET', KEYS[1], 'last_failure', ARGV[4], 'retry_at', ARGV[5])
  return n
elseif ARGV[3] == '0' then
  redis.call('HSET', KEYS[1], 'failed', 0, 'retry_at', 0)
end
return 0
"""






def _int(value: Any, default: int = 0) -> int:
    try:
        return int(float(text(value)))
    except (TypeError, ValueError):
        return default


def _float(value: Any) -> float:
    try:
        return float(text(value))
    except (TypeError, ValueError):
        return 0.0


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
    last_turn: dict[str, Any] | None = None
    unrecorded_jobs: tuple[str, ...] = ()  # of the ended Jobs asked about, those whose end is not recorded yet

    def unfinished_turn(self) -> bool:
        """A turn started but never ended (its process was stopped or died) and nobody runs it now."""
        if self.lease_held:
            return False
        if self.record.get("status") == "running":
            return True
        return self.last_turn is not None and not self.last_turn.get("ended_at")

    def next_turn(self) -> int:
        """The turn the next Job runs: an interrupted turn continues under its own number."""
        return self.turns if self.turns and self.unfinished_turn() else self.turns + 1

    def next_attempt(self) -> int:
        return self.ended_jobs_by_turn.get(self.next_turn(), 0)


class RedisState:
    """Async reads of task state, accounting of turn Jobs, and helpers around the runtime's TaskStore."""

    def __init__(self, url: str) -> None:
        self.url = url
        # The runtime's builder: the same retries through connection blips, timeouts and health checks.
        self.aio: aioredis.Redis = build_async_client(url)
        self.sync: redis.Redis = build_client(url, decode_responses=True)
        self._account = self.sync.register_script(_ACCOUNT_JOB_END)
        self._break = self.sync.register_script(lua.BREAK_LEASE)

    async def close(self) -> None:
        await self.aio.aclose()  # type: ignore[attr-defined]  # redis>=5.0.1 has aclose(); types-redis 4.6 lacks it
        self.sync.close()

    async def snapshot(self, task_id: str, ended_jobs: Sequence[str] = ()) -> TaskSnapshot:
        """The task's state in one round trip (two when its last turn has a header); ``ended_jobs``: names of
        ended turn Jobs to check against the accounting (``unrecorded_jobs``)."""
        pipe = self.aio.pipeline(transaction=False)
        pipe.hgetall(TaskKeys(task_id).task)
        pipe.llen(TaskKeys(task_id).inbox)
        pipe.exists(TaskKeys(task_id).lease)
        pipe.hgetall(TaskKeys(task_id).operator)
        pipe.lindex(TaskKeys(task_id).turns, -1)
        if ended_jobs:
            pipe.smismember(TaskKeys(task_id).operator_jobs, list(ended_jobs))
        replies = await pipe.execute()
        record_raw, pending, lease, op_raw, last_header = replies[:5]
        recorded = replies[5] if ended_jobs else []
        record = text_hash(record_raw)
        op = text_hash(op_raw)
        ended = {
            _int(name.split(":", 1)[1], -1): _int(value)
            for name, value in op.items()
            if name.startswith("ended:")
        }
        snap = TaskSnapshot(
            exists=bool(record),
            record=record,
            pending=int(pending or 0),
            lease_held=bool(lease),
            turns=_int(record.get("turns")),
            failed_attempts=_int(op.get("failed")),
            last_failure=op.get("last_failure", ""),
            retry_at=_float(op.get("retry_at")),
            ended_jobs_by_turn=ended,
            unrecorded_jobs=tuple(name for name, known in zip(ended_jobs, recorded, strict=True) if not known),
        )
        if last_header:
            try:
                header = json.loads(text(last_header))
            except ValueError:
                header = {}
            number = _int(header.get("turn_number"))
            wanted = [turn_meta_field(number, "summary"), turn_meta_field(number, "ended_at")]
            values = await self.aio.hmget(TaskKeys(task_id).turnmeta, wanted)
            end = TurnMeta.of({field: text(value) for field, value in zip(wanted, values, strict=True) if value},
                              number)
            snap.last_turn = {
                "number": number,
                "started_at": header.get("started_at"),
                "summary": end.summary,
                "ended_at": repr(end.ended_at) if end.ended_at is not None else None,
            }
        return snap

    def account_job_end(self, task_id: str, job_name: str, turn: int, outcome: str, reason: str = "",
                        retry_delay: float = 0.0, source: str = "job") -> int:
        """Record that turn attempt (Job) ``job_name`` ended (``outcome``: succeeded, failed or deleted), once.

        ``source``: "job" (the Job's own outcome) or "watchdog" (a reap). Returns the consecutive failure count after
        a failure, 0 after another outcome, -1 when already recorded, -2 when a reap recorded it and this is the
        first outcome of its Job (``source`` "job").
        """
        flag = {"failed": "1", "succeeded": "0"}.get(outcome, "2")
        result = self._account(
            keys=[TaskKeys(task_id).operator, TaskKeys(task_id).operator_jobs, TaskKeys(task_id).operator_reaped],
            args=[job_name, turn, flag, reason[:512], time.time() + retry_delay, source],
        )
        return int(result)

    def break_lease(self, task_id: str, pod_name: str) -> bool:
        """Delete the task's lease if its holder is a process of pod ``pod_name`` (which has terminated)."""
        return bool(self._break(keys=[TaskKeys(task_id).lease, TaskKeys(task_id).task],
                                args=[f"{pod_name}:", repr(time.time()), "0"]))

    def reset_failures(self, task_id: str) -> None:
        self.sync.hset(TaskKeys(task_id).operator, mapping={"failed": 0, "retry_at": 0, "last_failure": ""})

    def operator_keys(self, task_id: str) -> list[str]:
        return [TaskKeys(task_id).operator, TaskKeys(task_id).operator_jobs, TaskKeys(task_id).operator_reaped]

    def task_keys(self, task_id: str) -> list[str]:
        """Every key of the task (the hash tag makes the pattern exact; SCAN stays on one slot's worth of keys)."""
        return list(self.sync.scan_iter(match=TaskKeys(task_id).pattern(), count=500))
