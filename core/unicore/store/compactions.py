"""Compaction records (``uc:{T}:compactions``) and the ranged history read a model request is built from.

A compaction record says "the stored messages with ``seq < upto`` are summarized by ``summary``" (written by a turn,
``unicore.turn.compaction``). The list is append-only and the stored messages are never rewritten: ``show``, the task
API
and the transcript still read every message. Records only grow: ``APPEND_COMPACTION`` (fenced) adds a record only
when its ``upto`` passes the newest record's and does not pass the stored messages, so a retry, a zombie or a turn
that crashed after writing one cannot add a duplicate or a record that points past the history.

``load_request_history`` reads the newest valid record, then only the messages from its ``upto`` on (two round
trips, whatever the history's length), plus the newest turn's header and end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

import redis

from unicore.api.schema import Message, tool_result_message_id
from unicore.errors import LeaseLost, UniCoreError
from unicore.store import codec, lua
from unicore.store.client import RedisClient
from unicore.store.keys import TaskKeys
from unicore.store.messages import load_message
from unicore.store.records import Lease, Turn, TurnMeta, turn_meta_field

RECORDS_READ = 8  # the newest records a request read looks at for the newest valid one
BAD_RECORD = "UC_BAD_COMPACTION"

# KEYS: lease, messages, compactions   ARGV: token, upto, record_json
# 0 = not added (a record covering as much or more is already there), else the number of records.
APPEND_COMPACTION = (
    lua._FENCE
    + """
local upto = tonumber(ARGV[2])
if upto == nil or upto < 1 or upto >= redis.call('LLEN', KEYS[2]) then
  return redis.error_reply('UC_BAD_COMPACTION upto ' .. ARGV[2] .. ' is outside the stored messages')
end
local last = redis.call('LINDEX', KEYS[3], -1)
if last then
  local ok, record = pcall(cjson.decode, last)
  if ok and type(record) == 'table' and tonumber(record['upto']) and tonumber(record['upto']) >= upto then
    return 0
  end
end
return redis.call('RPUSH', KEYS[3], ARGV[3])
"""
)


@dataclass(frozen=True)
class Compaction:
    """One compaction record: the messages with ``seq < upto`` summarized."""

    upto: int  # the first seq NOT summarized: requests start from it
    summary: str
    answers: int = 0  # assistant messages before ``upto`` (a scripted model counts its steps with them)
    turn_number: int = 0  # the turn that wrote it
    created_at: float = field(default_factory=time.time)

    def to_json(self) -> str:
        return codec.dumps(asdict(self))

    @classmethod
    def parse(cls, raw: str) -> Compaction | None:
        """The record, or None when it cannot be read (a damaged record is skipped, never fatal)."""
        try:
            data = json.loads(raw)
            return cls(upto=int(data["upto"]), summary=str(data["summary"]), answers=int(data.get("answers", 0)),
                       turn_number=int(data.get("turn_number", 0)),
                       created_at=float(data.get("created_at", 0.0)))
        except (ValueError, TypeError, KeyError):
            return None


def newest_valid(raw_records: Iterable[str], total: int) -> Compaction | None:
    """The newest record that parses and leaves at least one of the ``total`` stored messages after it."""
    for raw in reversed(list(raw_records)):
        record = Compaction.parse(raw)
        if record is not None and 0 < record.upto < total:
            return record
    return None


def append_compaction(client: RedisClient, lease: Lease, record: Compaction) -> bool:
    """Append ``record`` (fenced: LeaseLost if the lease is gone). False when a record covering as much is already
    stored (nothing written)."""
    keys = TaskKeys(lease.task_id)
    try:
        result = client.eval(APPEND_COMPACTION, 3, keys.lease, keys.messages, keys.compactions,
                             lease.fence, record.upto, record.to_json())
    except redis.ResponseError as exc:
        if lua.LEASE_LOST in str(exc):
            raise LeaseLost(f"lease of {keys.lease} lost: write refused") from None
        if BAD_RECORD in str(exc):
            raise UniCoreError(f"compaction of {lease.task_id}: {exc}") from None
        raise
    return int(result) > 0


def read_compactions(client: RedisClient, task_id: str) -> list[Compaction]:
    """Every readable record, oldest first (for transcripts: where compaction happened)."""
    return [r for r in map(Compaction.parse, client.lrange(TaskKeys(task_id).compactions, 0, -1)) if r is not None]


@dataclass
class RequestHistory:
    """What a model request is built from: the newest compaction and the stored messages from its ``upto`` on."""

    compaction: Compaction | None
    messages: list[Message]  # the stored messages with seq >= start, in order
    start: int  # the first seq read (the compaction's upto, else 0)
    total: int  # messages stored when read
    turn: Turn | None  # the newest turn (header and end); its ``messages`` are those read (seq >= start)


def load_request_history(client: RedisClient, task_id: str) -> RequestHistory:
    """The newest valid compaction record and only the messages after it: two round trips, and the messages
    decoded are ``total - start``, whatever the history's length."""
    keys = TaskKeys(task_id)
    pipe = client.pipeline(transaction=False)
    pipe.lrange(keys.compactions, -RECORDS_READ, -1)
    pipe.lindex(keys.turns, -1)
    pipe.llen(keys.messages)
    raw_records, raw_turn, total = pipe.execute()
    total = int(total)
    compaction = newest_valid(raw_records, total)
    start = compaction.upto if compaction is not None else 0
    header = json.loads(raw_turn) if raw_turn else None
    names = ("ended_at", "summary", "iterations", "note")
    pipe = client.pipeline(transaction=False)
    pipe.lrange(keys.messages, start, -1)
    if header is not None:
        pipe.hmget(keys.turnmeta, [turn_meta_field(int(header["turn_number"]), name) for name in names])
    replies = pipe.execute()
    messages = [load_message(raw) for raw in replies[0]]
    turn = None
    if header is not None:
        number = int(header["turn_number"])
        meta = {turn_meta_field(number, name): value for name, value in zip(names, replies[1], strict=True) if value}
        end = TurnMeta.of(meta, number)
        turn = Turn(turn_number=number, started_at=header["started_at"], first_seq=header["first_seq"],
                    summary=end.summary, ended_at=end.ended_at, iterations=end.iterations, note=end.note,
                    messages=[m for m in messages if m.turn_number == number])
    return RequestHistory(compaction=compaction, messages=messages, start=start, total=total, turn=turn)


def seen_tool_results(client: RedisClient, task_id: str, tool_use_ids: Sequence[str]) -> set[str]:
    """Those of ``tool_use_ids`` whose result the task's inbox already accepted (``tr:<id>`` in its seen set): ids
    used before a compaction, which the request's messages no longer show (one pipelined round trip)."""
    if not tool_use_ids:
        return set()
    pipe = client.pipeline(transaction=False)
    for tool_id in tool_use_ids:
        pipe.zscore(TaskKeys(task_id).seen, tool_result_message_id(tool_id))
    return {tool_id for tool_id, score in zip(tool_use_ids, pipe.execute(), strict=True) if score is not None}


__all__ = ["APPEND_COMPACTION", "Compaction", "RequestHistory", "append_compaction", "load_request_history",
           "newest_valid", "read_compactions", "seen_tool_results"]
