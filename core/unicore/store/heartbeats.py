"""The watchdog's reads of turn state: only what a scan needs (O(stale), not O(running)), and the fenced clean-up of
a reaped turn.

How a scan reads Redis (``read_turns``), given which tasks the watchdog's caches say to read and to beat-check:
1. one pipelined round trip on the global sorted set ``uc:heartbeats`` (task id -> last heartbeat; the turn ZADDs
   on acquire and every heartbeat, ZREMs on release; the reaper and ``TaskStore.delete_task`` ZREM too):
   ``ZRANGEBYSCORE -inf (stale cutoff`` = the stale entries, and, for the beat-checked tasks (those whose Running
   pod is older than the heartbeat timeout), one script call returning only those whose entry is older than the
   beat cutoff or missing (healthy long turns cost the server a ZSCORE each and the client nothing to parse);
2. one pipelined round trip reading status, heartbeat and lease of: the stale entries, those flagged tasks, and the
   tasks that must be read anyway. Only the tasks Redis marks ``running`` come back.
   Beat-checked tasks that Redis no longer marks ``running`` (a turn that released its lease, its pod not yet
   gone) get a third read, of their status and ``released_at`` (the release time): the scan gives such a pod until
   ``release + heartbeat timeout`` to exit instead of reaping a turn that has just ended.
3. stale entries whose task no longer runs (released by a crashed process, or a deleted task) are removed, each only
   if its score is still the one read (a turn that beat meanwhile keeps its entry).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import redis

from unicore.store import changes, lua
from unicore.store.client import RedisClient
from unicore.store.codec import text
from unicore.store.keys import HEARTBEATS_INDEX, TaskKeys

# KEYS: uc:heartbeats   ARGV: cutoff, task ids joined by LF (one argument: packing 10,000 arguments costs the client
# more than the server's work). Returns the 1-based positions of the ids whose entry is missing or older than cutoff.
BEAT_CHECK_SCRIPT = """
local out, i, cutoff = {}, 0, tonumber(ARGV[1])
for id in string.gmatch(ARGV[2], '[^' .. string.char(10) .. ']+') do
  i = i + 1
  local score = redis.call('ZSCORE', KEYS[1], id)
  if not score or tonumber(score) < cutoff then out[#out + 1] = i end
end
return out
"""

# KEYS: uc:heartbeats   ARGV: member, score, member, score, ... Removes each member whose score is unchanged.
FORGET_SCRIPT = """
local removed = 0
for i = 1, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return removed
"""

# Read, server side, a chunk of tasks and return only what the scan needs: one string per task whose status is
# ``running`` (index, status, updated_at, heartbeat, lease holder, token, acquired_at, the record's lease_holder,
# joined by US = \x1f). Idle tasks cost the client nothing to parse. All keys are passed in KEYS.
# KEYS: per task (task, heartbeat, lease)
READ_SCRIPT = """
local out = {}
for i = 1, #KEYS, 3 do
  local rec = redis.call('HMGET', KEYS[i], 'status', 'updated_at', 'lease_holder')
  if rec[1] == 'running' then
    local lease = redis.call('HMGET', KEYS[i + 2], 'holder', 'token', 'acquired_at')
    out[#out + 1] = table.concat({tostring((i + 2) / 3), rec[1], rec[2] or '',
      redis.call('GET', KEYS[i + 1]) or '', lease[1] or '', lease[2] or '', lease[3] or '', rec[3] or ''},
      string.char(31))
  end
end
return out
"""
SCRIPT_CHUNK = 1000  # tasks per script call: bounds how long one call keeps Redis busy (about 1 ms per 1,000)


@dataclass(frozen=True, slots=True)
class RedisTaskState:
    """What Redis says about one task's turn (read only for the tasks the scan needs)."""

    status: str = ""  # "running" / "idle" / "" (no record)
    updated_at: float | None = None
    heartbeat_at: float | None = None
    lease_holder: str = ""
    lease_token: str = ""
    lease_acquired_at: float | None = None
    released_at: float | None = None  # when the last turn released the lease (read only for tasks not running)
    # The record's ``lease_holder`` (``<pod name>:<pid>`` of the turn that last took the lease; kept when the lease
    # hash expires with a dead holder): names the turn attempt a ``running_without_job`` reap counts as failed.
    turn_holder: str = ""

    @property
    def leased(self) -> bool:
        return bool(self.lease_token or self.lease_holder)


@dataclass
class ReadResult:
    """What one scan read from Redis."""

    # tasks Redis marks running, among those read; plus beat-checked tasks that are not (status, released_at)
    states: dict[str, RedisTaskState] = field(default_factory=dict)
    beating: frozenset[str] = frozenset()  # beat-checked tasks whose heartbeat entry is fresh
    stale: int = 0  # entries of uc:heartbeats older than the stale cutoff
    read: int = 0  # tasks whose state was read
    forgotten: int = 0  # stale entries removed (their task no longer runs)


def _float(raw: object) -> float | None:
    if raw is None or raw == "" or raw == b"":
        return None
    try:
        return float(raw.decode() if isinstance(raw, bytes) else raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def read_turns(client: RedisClient, *, read: Iterable[str], beat_check: Iterable[str], stale_cutoff: float,
               beat_cutoff: float) -> ReadResult:
    """Read the turn state of the tasks in ``read``, of those in ``beat_check`` whose heartbeat entry is older than
    ``beat_cutoff`` or missing, and of every entry of ``uc:heartbeats`` older than ``stale_cutoff``: two round trips,
    plus a third only when stale entries of tasks that no longer run are removed. See the module docstring."""
    checks = sorted(beat_check)
    stale, unsure = _heartbeat_index(client, checks, stale_cutoff, beat_cutoff)
    ids = sorted(set(read) | set(stale) | set(unsure))
    states = _read_running(client, ids)
    gone = [(member, score) for member, score in stale.items() if member not in states]
    states.update(read_not_running(client, [task_id for task_id in unsure if task_id not in states]))
    forgotten = 0
    if gone:
        script = client.register_script(FORGET_SCRIPT)
        forgotten = int(script(keys=[HEARTBEATS_INDEX], args=[v for m, sc in gone for v in (m, repr(sc))]))
    return ReadResult(states=states, beating=frozenset(checks).difference(unsure), stale=len(stale), read=len(ids),
                      forgotten=forgotten)


def _heartbeat_index(client: RedisClient, checks: list[str], stale_cutoff: float,
                     beat_cutoff: float) -> tuple[dict[str, float], list[str]]:
    """(stale entries -> score, beat-checked ids whose entry is missing or older than ``beat_cutoff``)."""
    script = client.register_script(BEAT_CHECK_SCRIPT)
    args = [repr(beat_cutoff), "\n".join(checks)]
    if _is_cluster(client):  # one key, but no scripts in a cluster pipeline: two calls
        entries = client.zrangebyscore(HEARTBEATS_INDEX, "-inf", f"({stale_cutoff!r}", withscores=True)
        positions = script(keys=[HEARTBEATS_INDEX], args=args) if checks else []
    else:
        pipe = client.pipeline(transaction=False)
        pipe.zrangebyscore(HEARTBEATS_INDEX, "-inf", f"({stale_cutoff!r}", withscores=True)
        if checks:
            script(keys=[HEARTBEATS_INDEX], args=args, client=pipe)
        replies = pipe.execute()
        entries, positions = replies[0], (replies[1] if checks else [])
    stale = {text(member): float(score) for member, score in entries}
    return stale, [checks[int(i) - 1] for i in positions]


def _read_running(client: RedisClient, task_ids: Iterable[str]) -> dict[str, RedisTaskState]:
    """Status, heartbeat and lease of the tasks in ``task_ids`` that Redis marks ``running`` (the scan needs
    nothing about the others: acquiring the lease sets ``running``, releasing clears it). ONE pipelined round
    trip, no per-task waits.

    On a single Redis the pipeline holds one server-side script call per 1,000 tasks that returns one short
    string per running task. On Redis Cluster (keys of different tasks live in different slots) it falls back to a
    pipeline of plain reads (status for all, then heartbeat and lease for the running ones).
    """
    ids = list(task_ids)
    if not ids:
        return {}
    if isinstance(client, redis.Redis) and not _is_cluster(client):
        return _read_with_script(client, ids)
    return _read_with_pipeline(client, ids)


def read_not_running(client: RedisClient, task_ids: Iterable[str]) -> dict[str, RedisTaskState]:
    """Status and ``released_at`` of the tasks in ``task_ids`` that Redis does not mark ``running`` (one pipelined
    round trip; ``status`` "" when the record is gone). Releasing the lease sets ``idle`` and ``released_at``."""
    ids = list(task_ids)
    states: dict[str, RedisTaskState] = {}
    for task_id, (status, released_at) in zip(ids, _task_fields(client, ids, "status", "released_at"), strict=True):
        if text(status) != "running":
            states[task_id] = RedisTaskState(status=text(status), released_at=_float(released_at))
    return states


def _task_fields(client: RedisClient, task_ids: list[str], *fields: str) -> list[list[object]]:
    """``fields`` of each task's record (``uc:{T}:task``), in one pipelined round trip (none for no tasks)."""
    if not task_ids:
        return []
    pipe = client.pipeline(transaction=False)
    for task_id in task_ids:
        pipe.hmget(TaskKeys(task_id).task, *fields)
    return list(pipe.execute())


def _is_cluster(client: RedisClient) -> bool:
    return client.__class__.__name__ == "RedisCluster"


def _row_state(row: list[str]) -> RedisTaskState:
    status, updated = text(row[1]), _float(row[2])
    return RedisTaskState(status=status, updated_at=updated, heartbeat_at=_float(row[3]),
                          lease_holder=text(row[4]), lease_token=text(row[5]), lease_acquired_at=_float(row[6]),
                          turn_holder=text(row[7]))


def _read_with_script(client: RedisClient, ids: list[str]) -> dict[str, RedisTaskState]:
    script = client.register_script(READ_SCRIPT)
    pipe = client.pipeline(transaction=False)
    for start in range(0, len(ids), SCRIPT_CHUNK):
        keys: list[str] = []
        for task_id in ids[start:start + SCRIPT_CHUNK]:
            tk = TaskKeys(task_id)
            keys += (tk.task, tk.heartbeat, tk.lease)
        script(keys=keys, client=pipe)
    states: dict[str, RedisTaskState] = {}
    for chunk_no, rows in enumerate(pipe.execute()):
        offset = chunk_no * SCRIPT_CHUNK - 1
        for raw in rows:
            row = text(raw).split("\x1f")
            states[ids[offset + int(row[0])]] = _row_state(row)
    return states


def _read_with_pipeline(client: RedisClient, ids: list[str]) -> dict[str, RedisTaskState]:
    states: dict[str, RedisTaskState] = {}
    running: list[str] = []
    fields = _task_fields(client, ids, "status", "updated_at", "lease_holder")
    for task_id, (status, updated_at, turn_holder) in zip(ids, fields, strict=True):
        if text(status) == "running":
            states[task_id] = RedisTaskState(status="running", updated_at=_float(updated_at),
                                             turn_holder=text(turn_holder))
            running.append(task_id)
    if running:
        pipe = client.pipeline(transaction=False)
        for task_id in running:
            keys = TaskKeys(task_id)
            pipe.get(keys.heartbeat)
            pipe.hmget(keys.lease, "holder", "token", "acquired_at")
        replies = pipe.execute()
        for i, task_id in enumerate(running):
            beat, (holder, token, acquired) = replies[2 * i], replies[2 * i + 1]
            base = states[task_id]
            states[task_id] = RedisTaskState(
                status=base.status, updated_at=base.updated_at, heartbeat_at=_float(beat),
                lease_holder=text(holder), lease_token=text(token), lease_acquired_at=_float(acquired),
                turn_holder=base.turn_holder,
            )
    return states


class TurnReset:
    """Fenced reset of a reaped turn's Redis state (lease released if still the reaped holder's, status idle)."""

    def __init__(self, client: RedisClient) -> None:
        self._client = client
        self._script = client.register_script(lua.REAP_RESET)

    def __call__(self, task_id: str, token: str, now: float, reason: str) -> bool:
        keys = TaskKeys(task_id)
        reset = bool(self._script(keys=[keys.lease, keys.task], args=[token, repr(now), reason]))
        if reset:  # the reaped turn's heartbeat entry and its row's change (separate keys: other slots on a cluster)
            pipe = self._client.pipeline(transaction=False)
            pipe.zrem(HEARTBEATS_INDEX, task_id)
            changes.execute_with_changes(pipe, [(task_id, "turn_ended")])
        return reset


__all__ = ["ReadResult", "RedisTaskState", "TurnReset", "read_not_running", "read_turns"]
