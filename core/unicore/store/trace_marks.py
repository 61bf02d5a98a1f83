"""A task's place in its tree's trace, on its record (``TaskRecord.trace_parent``, ``trace_turn``,
``trace_turn_started``; what they mean: ``unicore.traces``). Writes of the task hash by the process that holds the
task (its creator, its turn): a turn pod writes only its own task's record, as for everything else on it. An
attempt's end unmarks only its own mark (compare-and-set)."""

from __future__ import annotations

from unicore.store import lua
from unicore.store.keys import TaskKeys
from unicore.store.tasks import TaskStore


def anchor(store: TaskStore, task_id: str, traceparent: str) -> str:
    """Set the task's ``trace_parent`` unless it has one; the one it has afterwards ("": the task is gone)."""
    return str(store.redis.eval(lua.SET_UNLESS_SET, 1, TaskKeys(task_id).task, "trace_parent", traceparent) or "")


def begin_attempt(store: TaskStore, task_id: str, traceparent: str, started: float) -> None:
    """A turn attempt's span started (it stays marked until ``end_attempt``)."""
    store.redis.hset(TaskKeys(task_id).task, mapping={"trace_turn": traceparent, "trace_turn_started": repr(started)})


def end_attempt(store: TaskStore, task_id: str, traceparent: str) -> bool:
    """The attempt ``traceparent``'s span ended (it is exported by its own process): unmarked, unless a newer attempt
    marked itself meanwhile (a zombie's end must not unmark it: if that one were killed too, its retry would not
    emit its span). False: not this attempt's mark."""
    return bool(store.redis.eval(lua.HSET_IF_HELD, 1, TaskKeys(task_id).task, "trace_turn", traceparent,
                                 "trace_turn_started", "0"))


__all__ = ["anchor", "begin_attempt", "end_attempt"]
