"""Tool calls waiting for a person: approvals of gated tools and ``ask_user`` questions.

THE CONTRACT (the operator, the task API, the CLI and the turn use only what this module exports)

A task's ``approval`` setting (``TaskRecord.approval``: ``tools`` = names or ``["*"]``, ``timeout_seconds``) names
the tools whose calls wait for a person. When the model's answer calls such a tool (or ``ask_user``), the turn
records a ``PendingCall`` (kind ``"approval"``, or ``"input"`` for a question) instead of running it, runs the
other calls of the answer, and ends: the task is idle, ``waiting_for(task)`` says what it waits for, and no model
call happens until every call of that answer is decided. Waiting costs nothing: no process, no pod.

Readers (any Redis identity that may read the task's keys):
- ``pending_calls(client, task, timeout_seconds=)``: the calls a person may still decide, in call order (an
  approval past its timeout is not one: the timeout denies it); ``calls(client, task)``: every recorded call with
  its decision (for ``show`` and the task API);
- ``waiting_for(client, task)``: ``"approval"`` while an approval is pending, else ``"input"`` while a question
  is pending, else None. O(1) (two counters);
- ``blocked(client, task)``: the task waits for people and nothing in its inbox answers them: it needs no turn,
  whatever else waits in its inbox (``wakes`` is the pure rule). A scheduler (operator, local supervisor) starts no
  turn for a blocked task; a user message wakes a task waiting for ``"input"`` (it is the answer).

Deciders (the operator with its admin identity, the task API, the local CLI, the timeout timer):
- ``decide(client, task, call_id, approve, by=, reason=, timeout_seconds=)``: approve or deny one call
  (``call_id``), or every pending approval of the task (``call_id`` None). Atomic (one Lua script): only a pending
  call changes; a call already decided raises ``AlreadyDecided`` and changes nothing (so an approved tool runs once
  however often it is approved); an approval pending since ``now - timeout_seconds`` or earlier is the timeout's to
  deny, never a person's: deciding it raises ``DecisionExpired`` (an ``AlreadyDecided``) and changes nothing, and
  deciding every pending approval leaves it out (``DecisionExpired`` when that leaves none); an unknown id raises
  ``NoSuchCall``. A question (kind input) can be denied, not approved: it is
  answered by a user message. When the decision leaves nothing of the task pending, the same script queues one
  wake-up entry (inbox type ``"decision"``; it carries no conversation text and decides nothing: the turn reads the
  decisions from ``uc:{T}:decisions``) and ``decide`` then activates the task
  (``uc:activations``), so the operator or the local supervisor starts the turn that gives each decided call its
  result (approved: the tool runs now; denied: an error result "denied by <who>: <reason>"). Returns the calls it
  decided (with their new status).
- ``expire_overdue(client, task, now=, timeout_seconds=)``: denies every approval pending since
  ``now - timeout_seconds`` or earlier, by ``"timeout"``, with the reason ``"no decision within <N>s"``; returns
  their ids. Same script, same wake-up.

The timeout (``timeout_seconds``; 0 = none): None = the task's own setting, ``recorded_timeout`` (its record's
``approval.timeout_seconds``, else ``Approval``'s default: the local supervisor's rule); the operator passes its
own (``unicore_operator.approval_waits.task_timeout``: the AgentTask's spec, then the record, then its default).

The turn's side (fenced by its lease, ``unicore.turn.approvals`` uses them): ``record_calls``, ``hold_result``,
``answer_question``, ``start_call``, ``resolve``, ``drop_wakeups``, ``held_results``.

Storage, two hashes per task (``TaskKeys``; one hash tag, so one slot on a Redis Cluster):

- ``uc:{T}:approvals``, the turn's records (inside the namespace's ACL patterns: a turn pod writes it): ``call:<id>``
  the call as recorded (JSON, written once), ``state:<id>`` the turn's marks on it (JSON of scalars only, so the
  scripts can rewrite it with cjson: kind, requested time, a question's answer, started, resolved; a decision's status
  is copied there for the turn's own scripts), ``held:<id>`` the result of an ungated call of the same answer, kept
  until the whole answer's results are queued together, ``pending:approval`` / ``pending:input`` counters (what
  ``waiting_for`` says: they schedule turns and decide nothing);
- ``uc:{T}:decisions``, the people's decisions: ``<id>`` -> JSON ``{status: approved|denied, decided_by,
  reason, decided_at, decision: the wake id, call: the call record as decided}``, written only by ``DECIDE``
  (``decide``, ``expire_overdue``: the deciders' admin or local identity). A namespace's Redis user may read it and
  not write it (``state.acl``), and a call's status is approved or denied only through it
  (``approval_records._parse``): an approval the turn pod writes into ``approvals`` (a state ``approved``, a
  decider's name, a wake-up in the inbox) leaves the call pending, runs nothing and names nobody; an approved call
  runs as its decision recorded it, whatever its record says later. A question's ``answered`` comes from the turn's
  state (the answer is a user message, which the task's own inbox holds anyway).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable

import redis

from unicore.api.schema import Approval, InboxMessage
from unicore.errors import AlreadyDecided, DecisionExpired, NoSuchCall, TaskNotFound, UniCoreError
from unicore.store.activations import write_activation
from unicore.store.approval_records import (  # the records' format, shared with the turn's writes
    _CALL,
    _COUNT,
    _DECODE_STATE,
    _STATE,
    TIMEOUT_DECIDER,
    WAKEUP_TYPE,
    CallStatus,
    PendingCall,
    PendingKind,
    _parse,
    calls_from_hash,
    run_script,
)
from unicore.store.client import RedisClient
from unicore.store.keys import TaskKeys

# --------------------------------------------------------------------------- scripts

# KEYS: approvals, inbox, seen, task, decisions
# ARGV: call id ('' = every pending approval), approve '1'|'0', by, reason, now, wake id, wake entry, before ('' = any),
# expired ('' = none: a pending approval requested at or before it is past its timeout, no person may decide it)
# A call is decided once its entry in decisions exists (only this script writes one), else undecided unless the turn
# answered it (a question) or already gave it its result; what else its state says is the turn pod's to write and is
# no decision. The decision keeps the call's record as it was decided (what runs), and the state gets the status too
# (the turn's scripts read only the approvals hash: an answer to a question that was denied meanwhile is refused).
# The wake id names the decision too (kept in it): the Redis client's retry of the script after a lost reply finds its
# own decision and answers as the first run did, instead of AlreadyDecided.
DECIDE = (
    _DECODE_STATE
    + """
if redis.call('EXISTS', KEYS[4]) == 0 then return redis.error_reply('UC_NO_TASK') end
local decided = {}
local expired = tonumber(ARGV[9])
local function requested(st) return tonumber(st['requested_at']) or 0 end
local function overdue(st)
  return expired ~= nil and st['kind'] == 'approval' and requested(st) <= expired
end
local function ours(prior) return cjson.decode(prior)['decision'] == ARGV[6] end
local function decide_one(id, st)
  local status = 'denied'
  if ARGV[2] == '1' then status = 'approved' end
  local call = redis.call('HGET', KEYS[1], 'call:' .. id)
  redis.call('HSET', KEYS[5], id, cjson.encode({status = status, decided_by = ARGV[3], reason = ARGV[4],
    decided_at = tonumber(ARGV[5]), decision = ARGV[6], call = call}))
  st['status'] = status
  redis.call('HSET', KEYS[1], 'state:' .. id, cjson.encode(st))
  redis.call('HINCRBY', KEYS[1], 'pending:' .. st['kind'], -1)
  decided[#decided + 1] = id
end
if ARGV[1] ~= '' then
  local raw = redis.call('HGET', KEYS[1], 'state:' .. ARGV[1])
  if not raw or redis.call('HEXISTS', KEYS[1], 'call:' .. ARGV[1]) == 0 then
    return redis.error_reply('UC_NO_SUCH_CALL')
  end
  local prior = redis.call('HGET', KEYS[5], ARGV[1])
  if prior then
    if ours(prior) then return {ARGV[1]} end  -- this very call, retried after a lost reply
    return redis.error_reply('UC_ALREADY_DECIDED ' .. cjson.decode(prior)['status'])
  end
  local st = cjson.decode(raw)
  if st['status'] == 'answered' then return redis.error_reply('UC_ALREADY_DECIDED answered') end
  if is_set(st['resolved_at']) then return redis.error_reply('UC_ALREADY_DECIDED resolved') end
  if st['kind'] == 'input' and ARGV[2] == '1' then return redis.error_reply('UC_QUESTION') end
  if overdue(st) then return redis.error_reply('UC_EXPIRED') end
  decide_one(ARGV[1], st)
else
  local before = tonumber(ARGV[8])
  local skipped = 0
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(field, 1, 6) == 'state:' then
      local id = string.sub(field, 7)
      local prior = redis.call('HGET', KEYS[5], id)
      if prior then
        if ours(prior) then decided[#decided + 1] = id end  -- decided by this very call (a retry)
      else
        local st = cjson.decode(redis.call('HGET', KEYS[1], field))
        if st['kind'] == 'approval' and st['status'] ~= 'answered' and not is_set(st['resolved_at'])
            and redis.call('HEXISTS', KEYS[1], 'call:' .. id) == 1
            and (before == nil or requested(st) <= before) then
          if overdue(st) then skipped = skipped + 1 else decide_one(id, st) end
        end
      end
    end
  end
  if #decided == 0 and skipped > 0 then return redis.error_reply('UC_EXPIRED') end
end
if #decided > 0 then
  local left = tonumber(redis.call('HGET', KEYS[1], 'pending:approval') or '0')
    + tonumber(redis.call('HGET', KEYS[1], 'pending:input') or '0')
  if left <= 0 and redis.call('ZADD', KEYS[3], 'NX', ARGV[5], ARGV[6]) == 1 then
    redis.call('RPUSH', KEYS[2], ARGV[7])
  end
end
return decided
"""
)


# --------------------------------------------------------------------------- readers


def calls(client: RedisClient, task_id: str) -> list[PendingCall]:
    """Every recorded call of the task (pending, decided, resolved), in call order, each with its decision (one round
    trip)."""
    keys = TaskKeys(task_id)
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.approvals)
    pipe.hgetall(keys.decisions)
    data, decisions = pipe.execute()
    return calls_from_hash(data, decisions)


def recorded_approval(client: RedisClient, task_id: str) -> Approval | None:
    """The task's ``approval`` setting as its record holds it (None: it has none, or no record)."""
    raw = client.hget(TaskKeys(task_id).task, "approval")
    return Approval.model_validate_json(raw) if raw and raw != "null" else None


def recorded_timeout(client: RedisClient, task_id: str) -> float:
    """The approval timeout the task's record names (``approval.timeout_seconds``), else ``Approval``'s default."""
    return float((recorded_approval(client, task_id) or Approval()).timeout_seconds)


def expired_since(now: float, timeout_seconds: float) -> float | None:
    """An approval requested at or before this time is past its timeout (None: no timeout)."""
    return now - timeout_seconds if timeout_seconds > 0 else None


def overdue(call: PendingCall, now: float, timeout_seconds: float) -> bool:
    """A pending approval past its timeout: no person may decide it; the timeout denies it (``expire_overdue``)."""
    cutoff = expired_since(now, timeout_seconds)
    return call.status == "pending" and call.kind == "approval" and cutoff is not None and call.requested_at <= cutoff


def pending_calls(client: RedisClient, task_id: str, *, timeout_seconds: float | None = None,
                  now: float | None = None) -> list[PendingCall]:
    """The calls of the task a person may still decide (undecided, no result queued yet, not past the timeout), in
    call order. ``timeout_seconds`` None: the task's own (``recorded_timeout``)."""
    timeout = recorded_timeout(client, task_id) if timeout_seconds is None else timeout_seconds
    at = time.time() if now is None else now
    return [call for call in calls(client, task_id)
            if call.status == "pending" and call.resolved_at is None and not overdue(call, at, timeout)]


def unresolved_calls(client: RedisClient, task_id: str) -> list[PendingCall]:
    """The calls whose result has not been queued for the conversation yet (pending or decided), in call order."""
    return [call for call in calls(client, task_id) if call.resolved_at is None]


def get_call(client: RedisClient, task_id: str, call_id: str) -> PendingCall:
    keys = TaskKeys(task_id)
    pipe = client.pipeline(transaction=False)
    pipe.hmget(keys.approvals, [_CALL + call_id, _STATE + call_id])
    pipe.hget(keys.decisions, call_id)
    (call_raw, state_raw), decision_raw = pipe.execute()
    if not call_raw:
        raise NoSuchCall(f"task {task_id} has no tool call {call_id!r} waiting for a person")
    return _parse(call_raw, state_raw, decision_raw)


def waiting_for(client: RedisClient, task_id: str) -> PendingKind | None:
    """"approval" if an approval is pending, else "input" if a question is pending, else None (O(1))."""
    approvals, questions = client.hmget(TaskKeys(task_id).approvals, [_COUNT + "approval", _COUNT + "input"])
    if int(approvals or 0) > 0:
        return "approval"
    if int(questions or 0) > 0:
        return "input"
    return None


def wakes(waiting: PendingKind | None, inbox_types: Iterable[str]) -> bool:
    """Whether inbox entries of these types give the task a turn (pure). Not waiting: any entry. Waiting for
    input: a user message (it answers the question) or a decision wake-up. Waiting for approval: only a wake-up
    (a decision leaves one when nothing is pending any more); other messages wait in the inbox until then."""
    types = set(inbox_types)
    if waiting is None:
        return bool(types)
    if waiting == "input":
        return bool(types & {"user", WAKEUP_TYPE})
    return WAKEUP_TYPE in types


def inbox_entries(client: RedisClient, task_id: str) -> list[str]:
    """The task's inbox entries as stored (JSON), oldest first."""
    return list(client.lrange(TaskKeys(task_id).inbox, 0, -1))


def inbox_types(client: RedisClient, task_id: str) -> list[str]:
    out = []
    for raw in client.lrange(TaskKeys(task_id).inbox, 0, -1):
        try:
            out.append(str(json.loads(raw).get("type", "")))
        except (ValueError, AttributeError):
            out.append("")
    return out


def blocked(client: RedisClient, task_id: str) -> bool:
    """The task waits for people and nothing in its inbox answers them: it needs no turn now."""
    waiting = waiting_for(client, task_id)
    return waiting is not None and not wakes(waiting, inbox_types(client, task_id))


# --------------------------------------------------------------------------- deciders


def _activate(client: RedisClient, task_id: str, reason: str) -> None:
    """Activate the task (decided calls may let it run) and note its row changed (``state.changes``): one round
    trip."""
    write_activation(client, task_id, reason, repr(time.time()), "decided")


def decide_keys(task_id: str) -> list[str]:
    """The keys the decision script (``DECIDE``) takes, in its order."""
    keys = TaskKeys(task_id)
    return [keys.approvals, keys.inbox, keys.seen, keys.task, keys.decisions]


def _decide(client: RedisClient, task_id: str, call_id: str, approve: bool, by: str, reason: str, now: float,
            before: float | None, expired: float | None = None) -> list[str]:
    wake = InboxMessage(id=f"decision:{uuid.uuid4().hex}", type=WAKEUP_TYPE,  # type: ignore[arg-type]
                        content={"by": by, "approve": approve}, sender=by, timestamp=now)
    try:
        ids = run_script(client, DECIDE, decide_keys(task_id),
                   [call_id, "1" if approve else "0", by, reason, repr(now), wake.id, wake.model_dump_json(),
                    "" if before is None else repr(before), "" if expired is None else repr(expired)])
    except TaskNotFound:
        raise TaskNotFound(f"no task {task_id!r}") from None
    except redis.ResponseError as exc:
        text = str(exc)
        if "UC_NO_SUCH_CALL" in text:
            raise NoSuchCall(f"task {task_id} has no tool call {call_id!r} waiting for a person") from None
        if "UC_EXPIRED" in text:
            which = f"tool call {call_id} of {task_id}" if call_id else f"every approval {task_id} waits for"
            raise DecisionExpired(
                f"{which} waited longer than the approval timeout ({now - (expired or now):g}s) and can no longer "
                "be decided: the timeout denies it (the model gets that denial); nothing changed"
            ) from None
        if "UC_ALREADY_DECIDED" in text:
            status = text.rsplit(" ", 1)[-1]
            raise AlreadyDecided(f"tool call {call_id} of {task_id} was already {status}; nothing changed") from None
        if "UC_QUESTION" in text:
            raise UniCoreError(
                f"tool call {call_id} of {task_id} is a question: answer it with a message (send), or deny it"
            ) from None
        raise
    ids = [str(i) for i in ids or []]
    if ids:
        _activate(client, task_id, "decision")
    return ids


def decide(client: RedisClient, task_id: str, call_id: str | None, approve: bool, *, by: str,
           reason: str = "", timeout_seconds: float | None = None) -> list[PendingCall]:
    """Approve or deny ``call_id`` (None: every pending approval of the task); the decided calls. Atomic; raises
    NoSuchCall, AlreadyDecided (nothing changed), DecisionExpired (past ``timeout_seconds``; None: the task's own,
    ``recorded_timeout``; nothing changed), TaskNotFound; approving a question is refused (UniCoreError)."""
    timeout = recorded_timeout(client, task_id) if timeout_seconds is None else timeout_seconds
    now = time.time()
    ids = _decide(client, task_id, call_id or "", approve, by, reason, now, None, expired_since(now, timeout))
    return [get_call(client, task_id, call) for call in ids]


def expire_overdue(client: RedisClient, task_id: str, *, now: float, timeout_seconds: float) -> list[str]:
    """Deny every approval pending since ``now - timeout_seconds`` or earlier (by "timeout"); their ids."""
    reason = f"no decision within {timeout_seconds:g}s"
    return _decide(client, task_id, "", False, TIMEOUT_DECIDER, reason, now, now - timeout_seconds)


__all__ = [
    "AlreadyDecided", "CallStatus", "DecisionExpired", "NoSuchCall", "PendingCall", "PendingKind", "TIMEOUT_DECIDER",
    "WAKEUP_TYPE", "blocked", "calls", "decide", "decide_keys", "expire_overdue", "get_call", "inbox_entries",
    "inbox_types", "overdue", "pending_calls", "recorded_approval", "recorded_timeout", "run_script",
    "unresolved_calls", "waiting_for", "wakes",
]

# The turn's writes live in state.approval_writes; re-exported here (imported last: that module uses this one).
from unicore.store.approval_writes import (  # noqa: E402, I001
    answer_question,
    drop_entries,
    held_results,
    hold_result,
    record_calls,
    resolve,
    start_call,
)

__all__ += ["answer_question", "drop_entries", "held_results", "hold_result", "record_calls", "resolve",
            "start_call"]
