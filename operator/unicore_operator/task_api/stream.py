"""``GET .../agenttasks/<name>/stream?after=<id>&wait=<s>``: the task's live token stream
(``unicore.store.token_stream``) for ``kubectl agenttask logs --follow`` and the web UI: the model's answers as they
are written, before they are stored. RBAC: ``get agenttasks/stream`` (group ``tasks.unicore.dev``), granted next to
``agenttasks/transcript``.

- without ``after``: the call in progress (its entries from its latest try; none when no call is running) and the id
  to ask after next: what a reader that has just printed the transcript starts with;
- with ``after``: the entries after that id; when there are none yet, a long poll: the answer waits up to ``wait``
  seconds (at most MAX_WAIT_SECONDS) for one. At most MAX_WAITERS requests wait at once per operator (each holds a
  thread of the server's stream pool and a Redis connection); beyond that a request answers at once, and its client
  asks again.

Every answer also carries the task's state (status, queued messages, stored message count), read before a last
catch-up read of the stream, so a reader that prints the transcript up to ``state.messages`` next has already seen
the live text of every answer stored there (a call's entries are written before its answer is stored). Entries
name the turn as users count them (from 1) and the seq of the message that will store their call's answer.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import redis
from unicore.api.turn_numbers import shown_turn
from unicore.store.tasks import TaskStore
from unicore.store.token_stream import (
    READ_COUNT,
    StreamEntry,
    check_entry_id,
    current_call,
    live_state,
    read_after,
)

from unicore_operator.task_api import transcript as pages
from unicore_operator.task_api.errors import ApiError
from unicore_operator.task_api.service import TaskApi, _int_param, _query

STREAM = "stream"  # the subresource
MAX_WAIT_SECONDS = 10  # below the Redis client's socket timeout (15 s) and any proxy's idle timeout
MAX_WAITERS = 64
BYTE_BUDGET = 1024 * 1024  # one answer's entries, at most (the rest comes with the next request)
CATCH_UP_READS = 4
_waiters = threading.BoundedSemaphore(MAX_WAITERS)


def _shape(entry: StreamEntry) -> dict[str, Any]:
    return {"id": entry.id, "turn": shown_turn(entry.turn), "call": entry.call, "seq": entry.seq,
            "attempt": entry.attempt, "kind": entry.kind, "text": pages.clip_text(entry.text)}


def _wait_for_entries(store: TaskStore, task_id: str, after: str, wait: int) -> list[StreamEntry]:
    entries = read_after(store, task_id, after)
    if entries or wait <= 0 or not _waiters.acquire(blocking=False):
        return entries
    try:
        return read_after(store, task_id, after, wait_seconds=wait)
    finally:
        _waiters.release()


def get_stream(api: TaskApi, namespace: str, name: str, query: str) -> tuple[int, dict[str, Any]]:
    params = _query(query)
    after = params.get("after") or None
    wait = _int_param(params, "wait", 0, maximum=MAX_WAIT_SECONDS) or 0
    if after is not None:
        try:
            check_entry_id(after)
        except ValueError:
            raise ApiError(400, f"query parameter after={after!r} is not a stream entry id (<ms>-<n>)") from None
    api._require_task(namespace, name)
    task_id = f"{namespace}/{name}"
    store = api.store
    try:
        if after is None:
            entries, last = current_call(store, task_id)
        else:
            entries = _wait_for_entries(store, task_id, after, wait)
            last = entries[-1].id if entries else after
        state = live_state(store, task_id)
        for _ in range(CATCH_UP_READS):  # what was written before the state was read
            more = read_after(store, task_id, last)
            if not more:
                break
            entries += more
            last = more[-1].id
            if len(more) < READ_COUNT:
                break
    except redis.RedisError as exc:
        raise ApiError(503, f"Redis is unavailable ({exc}); retry", retry_after=1) from None
    shaped: list[dict[str, Any]] = []
    used = 0
    for entry in entries:
        item = _shape(entry)
        used += len(json.dumps(item))
        if shaped and used > BYTE_BUDGET:
            break
        shaped.append(item)
    complete = len(shaped) == len(entries)
    return 200, {
        "kind": "TokenStream",
        "task": task_id,
        "after": after,
        "next": last if complete else shaped[-1]["id"],  # ask after this next
        "more": not complete,  # entries are left: ask again before reading the transcript up to state.messages
        "entries": shaped,
        "state": {
            "status": state.status or "unknown",
            "initialised": state.status is not None,
            "pending": state.pending,
            "busy": state.busy,
            "messages": state.messages,
        },
    }


__all__ = ["MAX_WAITERS", "MAX_WAIT_SECONDS", "STREAM", "get_stream"]
