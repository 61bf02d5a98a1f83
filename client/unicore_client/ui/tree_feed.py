"""Local mode's tree feed (``LocalBackend.tree_changes``, the ``tree`` SSE stream of ``GET /api/events``), driven by
the stream of task changes (``unicore.store.changes``) instead of polling.

It notes the stream's newest entry, reads every task's row once (``unicore.store.ui_reads.read_all_rows``: two round
trips) and sends the forest. Then it blocks on the stream (XREAD BLOCK, ``wait_seconds`` at a time, so a stopping server
ends it; a quiet wait is a keepalive) and, when entries arrive, re-reads only the rows of the tasks they name (one
round trip; a row without a record, removed or retired, leaves the tree), rebuilds the forest in memory and sends it
when it differs from what was sent. Nothing changes, nothing is read but the stream.

Bursts are coalesced: a change after a quiet while goes out at once, then at most one update per
``coalesce_seconds``, the entries of that interval gathered into one re-read. A read that returns a full batch (a
backlog: the reader fell behind) re-reads the whole forest instead. Entries can be lost (a write's best-effort XADD
failed, or the capped stream trimmed them before they were read), so every ``resync_seconds`` the whole forest is
read again whatever the stream said.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from unicore.store import changes
from unicore.store.client import RedisClient
from unicore.store.ui_reads import Row, read_all_rows, read_rows

Nodes = list[dict[str, Any]]


@dataclass(frozen=True)
class FeedTiming:
    wait_seconds: float = 1.0  # one XREAD BLOCK: how soon a stopped server's stream ends (a keepalive after it)
    resync_seconds: float = 30.0  # the whole forest read again, in case an entry was lost
    coalesce_seconds: float = 0.2  # at most one update per this while changes keep coming


def tree_changes(client: RedisClient, stop: threading.Event, build: Callable[[dict[str, Row]], Nodes],
                 timing: FeedTiming | None = None,
                 clock: Callable[[], float] = time.monotonic) -> Iterator[Nodes | None]:
    """The forest (``build`` of the rows) now, then again each time it changed; ``None`` after a quiet wait."""
    timing = timing or FeedTiming()
    after = changes.last_id(client)  # before the rows: a change made while they are read is read again after
    rows = read_all_rows(client)
    nodes = build(rows)
    sent = json.dumps(nodes)
    yield nodes
    resync_at = clock() + timing.resync_seconds
    next_update = clock()  # the next update may go out at once
    named: set[str] = set()  # tasks named by entries read but not re-read yet
    while not stop.is_set():
        now = clock()
        if now >= resync_at:
            after = changes.last_id(client)
            rows = read_all_rows(client)
            named.clear()
            resync_at = now + timing.resync_seconds
        elif named and now >= next_update:
            fresh = read_rows(client, sorted(named))
            for task_id in named:
                if task_id in fresh:
                    rows[task_id] = fresh[task_id]
                else:
                    rows.pop(task_id, None)
            named.clear()
        else:
            wait = min(timing.wait_seconds, resync_at - now, next_update - now if named else timing.wait_seconds)
            batch = changes.read_after(client, after, wait_seconds=max(wait, 0.001))
            if len(batch) >= changes.READ_COUNT:  # a backlog: the whole forest costs less than catching up
                resync_at = now
            if batch:
                after = batch[-1].entry_id
                named.update(change.task_id for change in batch if change.task_id)
            elif not named:
                yield None
            continue
        nodes = build(rows)
        body = json.dumps(nodes)
        if body != sent:
            sent = body
            next_update = clock() + timing.coalesce_seconds
            yield nodes


__all__ = ["FeedTiming", "tree_changes"]
