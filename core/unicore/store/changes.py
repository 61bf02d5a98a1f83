"""The stream of task changes ``uc:changes``: which task's row of the tree changed, and how.

One Redis stream for local tasks (``keys.CHANGES_STREAM``) and one per namespace for AgentTasks
(``keys.changes_stream``: a namespace's Redis user can write only its own, so it cannot poison another's), each
capped with ``MAXLEN ~`` at ``keys.CHANGES_MAXLEN`` entries. Every entry has two small fields, never a message's
text:

``task``    the task id
``change``  what changed (``KINDS``): ``created`` (a root or a child), ``turn_started`` (its lease taken: running),
            ``turn`` (a new turn began: the turn count), ``tokens`` (a model call's usage added), ``turn_ended`` (the
            lease released: idle), ``error`` (the last error), ``updated`` (other record fields, e.g. the model its
            agent names now), ``waiting`` (calls wait for a person), ``decided`` (a person decided or answered),
            ``suspended`` / ``resumed``, ``archived`` / ``restored`` (retention retired the task / put it back),
            ``removed`` (its keys deleted)

Written by the state package wherever a tree row's state changes (``TaskStore``, ``suspension``, ``approvals``,
``retention``, ``heartbeats``, ``operator_state``), always as its own command after the write it reports, never
inside a Lua script: the scripts touch one task's keys (one hash tag, one slot on Redis Cluster) and this key is
global. Where the write is already followed by a pipeline of global commands (the heartbeat index, the activation
stream, the task index), the XADD rides in that pipeline (``execute_with_changes``: no extra round trip); elsewhere it
is one XADD (``publish_one``). Either way it is best effort: a failed XADD is logged (once per process as a warning) and
never fails the write it reports, like the live token stream. So a reader must not rely on seeing every change:
entries can be lost (a Redis error, or trimmed away before they were read) and a resync now and then repairs that.

The reader is the local web UI's tree feed (``unicore_client.ui.local_backend``): ``last_id`` before it reads the
forest, then
``read_after`` (XREAD BLOCK) and it re-reads only the rows of the tasks named. It reads the local stream; the
namespaces' streams have no reader yet (the plugin's UI watches the API server) and only keep their last entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from unicore.log import get_logger
from unicore.store.client import RedisClient, RedisPipeline
from unicore.store.codec import text
from unicore.store.keys import CHANGES_MAXLEN, CHANGES_STREAM, changes_stream

log = get_logger("state.changes")

Kind = Literal["created", "turn_started", "turn", "tokens", "turn_ended", "error", "updated", "waiting", "decided",
               "suspended", "resumed", "archived", "restored", "removed"]
KINDS: tuple[str, ...] = get_args(Kind)
READ_COUNT = 1000  # entries per read, at most
_warned = False


@dataclass(frozen=True)
class Change:
    """One entry: its stream id, the task and what changed."""

    entry_id: str
    task_id: str
    change: str

    @classmethod
    def of(cls, entry_id: Any, fields: Any) -> Change:
        decoded = {text(k): text(v) for k, v in (fields or {}).items()}
        return cls(text(entry_id), decoded.get("task", ""), decoded.get("change", ""))


def entry_fields(task_id: str, change: Kind) -> dict[str, str]:
    return {"task": task_id, "change": change}


def queue(pipe: RedisPipeline, task_id: str, change: Kind) -> None:
    """Add the XADD of one change to a pipeline (whose errors the caller handles: ``execute_with_changes``)."""
    pipe.xadd(changes_stream(task_id), entry_fields(task_id, change), maxlen=CHANGES_MAXLEN,  # type: ignore[arg-type]
              approximate=True)


def _lost(changes: Sequence[tuple[str, Kind]], error: BaseException) -> None:
    global _warned
    what = ", ".join(f"{task} {change}" for task, change in changes[:3]) + (" ..." if len(changes) > 3 else "")
    if not _warned:
        _warned = True
        log.warning("task change stream: %s not written (%s: %s); the write it reports stands", what,
                    type(error).__name__, error)
    else:
        log.debug("task change stream: %s not written (%s)", what, error)


def publish(client: RedisClient, changes: Sequence[tuple[str, Kind]]) -> None:
    """XADD each (task id, change) in one round trip; best effort: logged, never raised."""
    if not changes:
        return
    try:
        pipe = client.pipeline(transaction=False)
        for task_id, change in changes:
            queue(pipe, task_id, change)
        pipe.execute()
    except Exception as exc:  # noqa: BLE001 - a change notice never fails the write it reports
        _lost(changes, exc)


def publish_one(client: RedisClient, task_id: str, change: Kind) -> None:
    """One change, one XADD (no pipeline); best effort: logged, never raised."""
    try:
        client.xadd(changes_stream(task_id), entry_fields(task_id, change), maxlen=CHANGES_MAXLEN, approximate=True)
    except Exception as exc:  # noqa: BLE001 - a change notice never fails the write it reports
        _lost([(task_id, change)], exc)


def execute_with_changes(pipe: RedisPipeline, changes: Sequence[tuple[str, Kind]]) -> list[Any]:
    """Run ``pipe`` (a non-transactional pipeline holding the caller's own commands) with the XADDs of ``changes``
    added at its end: one round trip. Returns the replies of the caller's commands and raises the first of their
    errors, as ``execute()`` would; a failed XADD is only logged."""
    own = len(pipe)
    for task_id, change in changes:
        queue(pipe, task_id, change)
    replies = list(pipe.execute(raise_on_error=False))
    for reply in replies[:own]:
        if isinstance(reply, Exception):
            raise reply
    for reply in replies[own:]:
        if isinstance(reply, Exception):
            _lost(changes, reply)
            break
    return replies[:own]


# --------------------------------------------------------------------------- the reader


def last_id(client: RedisClient) -> str:
    """The id of the newest entry (``0-0`` when there is none): a reader that reads the state after this call and then
    ``read_after`` it misses no change."""
    newest = client.xrevrange(CHANGES_STREAM, count=1)
    return text(newest[0][0]) if newest else "0-0"


def read_after(client: RedisClient, after: str, *, wait_seconds: float = 0.0, count: int = READ_COUNT) -> list[Change]:
    """Entries after id ``after``, at most ``count``; when there are none yet, waits up to ``wait_seconds`` for one
    (XREAD BLOCK, at least 1 ms: BLOCK 0 would wait forever; keep it below the client's socket timeout). 0: no
    wait."""
    block = max(1, int(wait_seconds * 1000)) if wait_seconds > 0 else None
    reply = client.xread({CHANGES_STREAM: after}, count=count, block=block)
    return [Change.of(entry_id, fields) for _key, items in reply or [] for entry_id, fields in items]


__all__ = ["KINDS", "Change", "Kind", "entry_fields", "execute_with_changes", "last_id", "publish", "publish_one",
           "queue", "read_after"]
