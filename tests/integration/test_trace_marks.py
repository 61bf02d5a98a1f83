"""A turn attempt's trace mark (``store.trace_marks``) on a real redis-server: an attempt's end unmarks only its own
mark, so a zombie attempt that ends after a newer one began leaves the newer one marked (its retry, should it be
killed too, then emits its span)."""

from __future__ import annotations

import redis
from unicore.api.schema import TaskSpec
from unicore.store import trace_marks
from unicore.store.tasks import TaskStore

OLD = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
NEW = "00-0af7651916cd43dd8448eb211c80319c-c8be7c827a314442-01"


def test_a_zombies_end_leaves_the_newer_attempts_mark(store: TaskStore, redis_client: redis.Redis) -> None:
    store.create_task(TaskSpec(id="t", prompt="go", script={"default": "ok"}))
    trace_marks.begin_attempt(store, "t", OLD, 100.0)
    trace_marks.begin_attempt(store, "t", NEW, 200.0)  # the old attempt lost its lease; a new one began

    assert trace_marks.end_attempt(store, "t", OLD) is False  # the zombie ends late
    record = store.get_task("t")
    assert (record.trace_turn, record.trace_turn_started) == (NEW, 200.0)

    assert trace_marks.end_attempt(store, "t", NEW) is True
    assert store.get_task("t").trace_turn_started == 0
