"""The turn's writes of ``state.approvals`` (fenced by its lease: a turn that lost it writes nothing). They write the
approvals hash only, never the decisions (``uc:{T}:decisions``: the deciders' alone, so a turn cannot approve its
own calls).

``record_calls`` (the answer's waiting calls), ``hold_result`` / ``held_results`` (results of the answer's other
calls, kept until every call is decided), ``answer_question`` (a user message becomes a question's answer and leaves
the inbox), ``start_call`` (an approved call's tool starts at most once), ``resolve`` (a call's result queued once,
under its entry id, and the call marked resolved), ``drop_entries`` (wake-ups that found the task still waiting).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import redis

from unicore.api.schema import ContentBlock, InboxMessage
from unicore.errors import UniCoreError
from unicore.store import changes, codec, lua
from unicore.store.approval_records import _DECODE_STATE, _HELD, PendingCall, _call_json, _state_json, run_script
from unicore.store.client import RedisClient
from unicore.store.keys import TaskKeys
from unicore.store.records import Lease

# KEYS: lease, approvals   ARGV: token, then per call: id, kind, call json, state json
RECORD_CALLS = (
    lua._FENCE
    + """
local added = 0
for i = 2, #ARGV, 4 do
  if redis.call('HEXISTS', KEYS[2], 'call:' .. ARGV[i]) == 0 then
    redis.call('HSET', KEYS[2], 'call:' .. ARGV[i], ARGV[i + 2], 'state:' .. ARGV[i], ARGV[i + 3])
    redis.call('HINCRBY', KEYS[2], 'pending:' .. ARGV[i + 1], 1)
    added = added + 1
  end
end
return added
"""
)

# KEYS: lease, approvals   ARGV: token, call id, held json
HOLD_RESULT = (
    lua._FENCE
    + """
redis.call('HSET', KEYS[2], 'held:' .. ARGV[2], ARGV[3])
return 1
"""
)

# KEYS: lease, approvals, inbox   ARGV: token, call id, inbox index, inbox entry (raw), answer, answer id, by, now
# The user message at that inbox position becomes the answer of a pending question (it leaves the inbox).
ANSWER = (
    lua._FENCE
    + """
local raw = redis.call('HGET', KEYS[2], 'state:' .. ARGV[2])
if not raw then return -1 end
local st = cjson.decode(raw)
if st['status'] ~= 'pending' or st['kind'] ~= 'input' then return 0 end
if redis.call('LINDEX', KEYS[3], tonumber(ARGV[3])) ~= ARGV[4] then return redis.error_reply('UC_STALE_INBOX') end
local marker = 'uc:answered:' .. ARGV[2]
redis.call('LSET', KEYS[3], tonumber(ARGV[3]), marker)
redis.call('LREM', KEYS[3], 1, marker)
st['status'] = 'answered'
st['answer'] = ARGV[5]
st['answer_id'] = ARGV[6]
st['decided_by'] = ARGV[7]
st['decided_at'] = tonumber(ARGV[8])
redis.call('HSET', KEYS[2], 'state:' .. ARGV[2], cjson.encode(st))
redis.call('HINCRBY', KEYS[2], 'pending:input', -1)
return 1
"""
)

# KEYS: lease, approvals   ARGV: token, call id, now
# An approved call's tool may start only once: 1 = start it now, 0 = it was started before (a turn died after).
# The starting turn's token is kept with the mark, so the Redis client's retry of this script after a lost reply
# (the same token) still gets 1. Whether the call is approved is not this script's to say: ``start_call`` reads the
# decision (``uc:{T}:decisions``, which the namespace's user may only read, so no script of the turn names it).
START = (
    lua._FENCE
    + _DECODE_STATE
    + """
local raw = redis.call('HGET', KEYS[2], 'state:' .. ARGV[2])
if not raw then return -1 end
local st = cjson.decode(raw)
if is_set(st['started_at']) then
  -- the same turn's retry after a lost reply (same token) may go on; any other turn may not
  if st['started_by'] == fence_token then return 1 end
  return 0
end
st['started_at'] = tonumber(ARGV[3])
st['started_by'] = fence_token
redis.call('HSET', KEYS[2], 'state:' .. ARGV[2], cjson.encode(st))
return 1
"""
)

# KEYS: lease, approvals, inbox, seen   ARGV: token, call id, entry id, entry json, now
# Queue a call's result for the conversation (once: the entry id is remembered in the seen set) and mark it resolved.
RESOLVE = (
    lua._FENCE
    + _DECODE_STATE
    + """
if redis.call('ZADD', KEYS[4], 'NX', ARGV[5], ARGV[3]) == 1 then redis.call('RPUSH', KEYS[3], ARGV[4]) end
local raw = redis.call('HGET', KEYS[2], 'state:' .. ARGV[2])
if raw then
  local st = cjson.decode(raw)
  if not is_set(st['resolved_at']) then
    st['resolved_at'] = tonumber(ARGV[5])
    redis.call('HSET', KEYS[2], 'state:' .. ARGV[2], cjson.encode(st))
  end
end
redis.call('HDEL', KEYS[2], 'held:' .. ARGV[2])
return 1
"""
)

# KEYS: lease, inbox   ARGV: token, raw entries to remove
DROP_ENTRIES = (
    lua._FENCE
    + """
local removed = 0
for i = 2, #ARGV do removed = removed + redis.call('LREM', KEYS[2], 1, ARGV[i]) end
return removed
"""
)



def record_calls(client: RedisClient, lease: Lease, calls_: Sequence[PendingCall]) -> int:
    """Record calls waiting for a person (idempotent by call id: a call recorded before keeps its state)."""
    if not calls_:
        return 0
    keys = TaskKeys(lease.task_id)
    args: list[Any] = [lease.fence]
    for call in calls_:
        args += [call.call_id, call.kind, _call_json(call), _state_json(replace(call, status="pending"))]
    added = int(run_script(client, RECORD_CALLS, [keys.lease, keys.approvals], args))
    if added:
        changes.publish_one(client, lease.task_id, "waiting")
    return added


def hold_result(client: RedisClient, lease: Lease, call_id: str, position: int, result: ContentBlock) -> None:
    """Keep the result of an ungated call of a waiting answer until the whole answer's results are queued."""
    keys = TaskKeys(lease.task_id)
    run_script(client, HOLD_RESULT, [keys.lease, keys.approvals],
         [lease.fence, call_id, codec.dumps({"position": position, "result": result})])


def held_results(client: RedisClient, task_id: str) -> dict[str, tuple[int, ContentBlock]]:
    """call id -> (position, result block) of the held results."""
    data: dict[str, str] = client.hgetall(TaskKeys(task_id).approvals)
    out: dict[str, tuple[int, ContentBlock]] = {}
    for field, raw in data.items():
        if field.startswith(_HELD):
            held = json.loads(raw)
            out[field[len(_HELD):]] = (int(held.get("position", 0)), held["result"])
    return out


def answer_question(client: RedisClient, lease: Lease, call_id: str, index: int, raw_entry: str, answer: str,
                    answer_id: str, by: str) -> bool:
    """The user message ``raw_entry`` at inbox position ``index`` answers the pending question ``call_id`` and leaves
    the inbox. False if the call is no pending question; UniCoreError if the inbox moved under us."""
    keys = TaskKeys(lease.task_id)
    try:
        done = run_script(client, ANSWER, [keys.lease, keys.approvals, keys.inbox],
                    [lease.fence, call_id, index, raw_entry, answer, answer_id, by, repr(time.time())])
    except redis.ResponseError as exc:
        if lua.STALE_INBOX in str(exc):
            raise UniCoreError(f"inbox of {lease.task_id} changed under the answer") from None
        raise
    if int(done) == 1:
        changes.publish_one(client, lease.task_id, "decided")
    return int(done) == 1


def start_call(client: RedisClient, lease: Lease, call_id: str) -> bool:
    """True exactly once per approved call: the caller runs its tool now. False: it was started before (a turn
    died after starting it: the tool may or may not have run) or the call is not approved. Approved means a
    decider's entry in ``uc:{T}:decisions`` says so (a decision is written once and never changes, so reading it
    before the fenced mark is as good as reading it inside); nothing in the approvals hash does."""
    keys = TaskKeys(lease.task_id)
    decision = client.hget(keys.decisions, call_id)
    if not decision or json.loads(decision).get("status") != "approved":
        return False
    return int(run_script(client, START, [keys.lease, keys.approvals], [lease.fence, call_id, repr(time.time())])) == 1


def resolve(client: RedisClient, lease: Lease, call_id: str, message: InboxMessage) -> None:
    """Queue the call's result (``message``, a tool_result entry; once by its id) and mark the call resolved."""
    keys = TaskKeys(lease.task_id)
    run_script(client, RESOLVE, [keys.lease, keys.approvals, keys.inbox, keys.seen],
         [lease.fence, call_id, message.id, codec.model_json(message), repr(message.timestamp)])


def drop_entries(client: RedisClient, lease: Lease, raw_entries: Sequence[str]) -> int:
    """Remove these inbox entries (e.g. decision wake-ups that found the task still waiting)."""
    if not raw_entries:
        return 0
    keys = TaskKeys(lease.task_id)
    return int(run_script(client, DROP_ENTRIES, [keys.lease, keys.inbox], [lease.fence, *raw_entries]))


__all__ = ["answer_question", "drop_entries", "held_results", "hold_result", "record_calls", "resolve",
           "start_call"]
