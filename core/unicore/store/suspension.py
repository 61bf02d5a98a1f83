"""Local mode's suspend, resume and stop: the ``suspended`` flag of a task's record.

On Kubernetes the AgentTask's ``spec.suspend`` is the truth (the operator deletes the running turn Job and starts no
new one). Local mode has no object to hold it, so the flag lives in the task's record hash, written here only:

- ``suspend``: the flag is set (one script: a missing or retired task is ``TaskNotFound``, nothing is written) and
  the task is activated, so a local supervisor running its tree notices at once (a change of the flag is also noted
  in the stream of task changes, ``state.changes``, in the same round trip). ``TaskStore.next_action`` and
  ``reads.busy`` then say no turn is needed (a suspended task is settled, like one waiting for a person; a report it
  still owes its parent is delivered all the same: ``unicore.scheduling``), and the
  supervisor SIGTERMs a turn process of it that is running: the turn stops at its next safe point and records its
  unanswered tool calls as cancelled, exactly as a turn pod does when the operator deletes its Job.
- ``resume``: the flag is cleared and the task activated; its inbox, or an unfinished turn, runs again.
- ``stop``: the task and every descendant are suspended, top down; the walk repeats until it finds no new child, so
  a child spawned while the stop ran is caught (a child created under a suspended parent is suspended from the
  start: ``TaskStore.create_task``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from unicore.errors import TaskNotFound
from unicore.store import changes, lua
from unicore.store.client import RedisClient
from unicore.store.keys import TaskKeys
from unicore.store.tasks import TaskStore
from unicore.store.tree_reads import descendants

SUSPENDED = "suspended"
STOP_PASSES = 8  # walks of the tree in one stop (each finds only children spawned during the previous one)


def set_suspended(store: TaskStore, task_id: str, suspended: bool) -> bool:
    """Set or clear the flag; True when it changed. ``TaskNotFound`` for a missing task (nothing written). Either
    way the task is activated, so whoever runs its tree looks at it now."""
    script = store.redis.register_script(lua.SET_SUSPENDED)
    changed = int(script(keys=[TaskKeys(task_id).task], args=["1" if suspended else "0", repr(time.time())]))
    if changed < 0:
        raise TaskNotFound(f"no task {task_id!r}")
    row: changes.Kind = "suspended" if suspended else "resumed"
    store.activate(task_id, "suspend" if suspended else "resume", change=row if changed == 1 else None)
    return changed == 1


def suspend(store: TaskStore, task_id: str) -> bool:
    return set_suspended(store, task_id, True)


def resume(store: TaskStore, task_id: str) -> bool:
    return set_suspended(store, task_id, False)


def stop(store: TaskStore, task_id: str) -> list[str]:
    """Suspend ``task_id`` and every descendant (top down); the ids suspended now (already suspended: left out)."""
    changed = [task_id] if suspend(store, task_id) else []
    done = {task_id}
    for _ in range(STOP_PASSES):
        new = [node.id for node in descendants(store.redis, task_id) if node.id not in done]
        if not new:
            break
        for child in new:
            done.add(child)
            try:
                if suspend(store, child):
                    changed.append(child)
            except TaskNotFound:  # removed meanwhile: nothing of it can run
                continue
    return changed


def is_suspended(store: TaskStore, task_id: str) -> bool:
    return store.redis.hget(TaskKeys(task_id).task, SUSPENDED) == "1"


def suspended_flags(client: RedisClient, task_ids: Sequence[str]) -> list[bool]:
    """The flag of each task (False for a missing one), in one round trip."""
    pipe = client.pipeline(transaction=False)
    for task_id in task_ids:
        pipe.hget(TaskKeys(task_id).task, SUSPENDED)
    return [value == "1" for value in pipe.execute()]


__all__ = ["SUSPENDED", "is_suspended", "resume", "set_suspended", "stop", "suspend", "suspended_flags"]
