"""The watchdog's Redis side: ONE pipelined read for all tasks, and the fenced clean-up of a reaped turn.

Keys come from ``unicore.state.keys`` (the schema's owner); this module is the only place the watchdog touches them.
"""

from __future__ import annotations

from collections.abc import Iterable

import redis
from unicore.state.keys import TaskKeys

from unicore_operator.watchdog.views import RedisTaskState

# Read, server side, a chunk of tasks and return only what the scan needs: one string per task whose status is
# ``running`` (index, status, updated_at, heartbeat, lease holder, token, acquired_at, joined by US = \x1f).
# Idle tasks cost the client nothing to parse. All keys are passed in KEYS. KEYS: per task (task, heartbeat, lease)
_READ_SCRIPT = """
local out = {}
for i = 1, #KEYS, 3 do
  local rec = redis.call('HMGET', KEYS[i], 'status', 'updated_at')
  if rec[1] == 'running' then
    local lease = redis.call('HMGET', KEYS[i + 2], 'holder', 'token', 'acquired_at')
    out[#out + 1] = table.concat({tostring((i + 2) / 3), rec[1], rec[2] or '',
      redis.call('GET', KEYS[i + 1]) or '', lease[1] or '', lease[2] or '', lease[3] or ''}, string.char(31))
  end
end
return out
"""
SCRIPT_CHUNK = 1000  # tasks per script call: bounds how long one call keeps Redis busy (about 1 ms per 1,000)

# Release the lease only if it still holds the reaped turn's token (or nobody holds it), then mark the task idle.
# A zombie turn that wakes up later finds the lease gone and every fenced write refused (LeaseLost).
# KEYS: lease, task   ARGV: token ('' = only if no lease), now, reason
_RESET_SCRIPT = """
local current = redis.call('HGET', KEYS[1], 'token')
if current and current ~= ARGV[1] then return 0 end
if current then redis.call('DEL', KEYS[1]) end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('HSET', KEYS[2], 'status', 'idle', 'lease_holder', '', 'updated_at', ARGV[2],
             'last_reap_reason', ARGV[3], 'last_reap_at', ARGV[2])
  redis.call('HINCRBY', KEYS[2], 'reaps', 1)
end
return 1
"""


def _float(raw: object) -> float | None:
    if raw is None or raw == "" or raw == b"":
        return None
    try:
        return float(raw.decode() if isinstance(raw, bytes) else raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _text(raw: object) -> str:
    if raw is None:
        return ""
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def read_states(client: redis.Redis, task_ids: Iterable[str]) -> dict[str, RedisTaskState]:
    """Status, heartbeat and lease of the tasks in ``task_ids`` that Redis marks ``running`` (the scan needs
    nothing about the others: acquiring the lease sets ``running``, releasing clears it). ONE pipelined round
    trip, no per-task waits.

    On a single Redis the pipeline holds one server-side script call per 1,000 tasks that returns one short
    string per running task, which keeps the client's parsing work small. On Redis Cluster (keys of different tasks
    live in different slots) it falls back to a pipeline of plain reads (status for all, then heartbeat and lease for
    the running ones).
    """
    ids = list(task_ids)
    if not ids:
        return {}
    if isinstance(client, redis.Redis) and not _is_cluster(client):
        return _read_with_script(client, ids)
    return _read_with_pipeline(client, ids)


def _is_cluster(client: redis.Redis) -> bool:
    return client.__class__.__name__ == "RedisCluster"


def _row_state(row: list[str]) -> RedisTaskState:
    status, updated = _text(row[1]), _float(row[2])
    return RedisTaskState(status=status, updated_at=updated, heartbeat_at=_float(row[3]),
                          lease_holder=_text(row[4]), lease_token=_text(row[5]), lease_acquired_at=_float(row[6]))


def _read_with_script(client: redis.Redis, ids: list[str]) -> dict[str, RedisTaskState]:
    script = client.register_script(_READ_SCRIPT)
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
            row = _text(raw).split("\x1f")
            states[ids[offset + int(row[0])]] = _row_state(row)
    return states


def _read_with_pipeline(client: redis.Redis, ids: list[str]) -> dict[str, RedisTaskState]:
    pipe = client.pipeline(transaction=False)
    for task_id in ids:
        pipe.hmget(TaskKeys(task_id).task, "status", "updated_at")
    records = pipe.execute()
    states: dict[str, RedisTaskState] = {}
    running: list[str] = []
    for task_id, (status, updated_at) in zip(ids, records, strict=True):
        if _text(status) == "running":
            states[task_id] = RedisTaskState(status="running", updated_at=_float(updated_at))
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
                lease_holder=_text(holder), lease_token=_text(token), lease_acquired_at=_float(acquired),
            )
    return states


class TurnReset:
    """Fenced reset of a reaped turn's Redis state (lease released if still the reaped holder's, status idle)."""

    def __init__(self, client: redis.Redis) -> None:
        self._script = client.register_script(_RESET_SCRIPT)

    def __call__(self, task_id: str, token: str, now: float, reason: str) -> bool:
        keys = TaskKeys(task_id)
        return bool(self._script(keys=[keys.lease, keys.task], args=[token, repr(now), reason]))
