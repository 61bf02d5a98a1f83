"""Big states for the web UI's tests and bench/bench_ui.py, written through the store's own (fenced) writes: a forest
of many tasks, and a task with a long transcript."""

from __future__ import annotations

from unicore.api.schema import TaskSpec
from unicore.store.tasks import TaskStore


def seed_forest(store: TaskStore, roots: int, children_per_root: int, prefix: str = "big") -> list[str]:
    """``roots`` idle root tasks with ``children_per_root`` children each; the ids, roots first in each tree."""
    ids: list[str] = []
    for r in range(roots):
        root = f"{prefix}{r}"
        store.create_task(TaskSpec(id=root))
        ids.append(root)
        for c in range(children_per_root):
            child = f"{root}-c{c}"
            store.create_task(TaskSpec(id=child, parent=root))
            ids.append(child)
    return ids


def seed_transcript(store: TaskStore, task_id: str, count: int) -> None:
    """A task whose one ended turn holds ``count`` messages (``message N`` texts, user and assistant in turn)."""
    store.create_task(TaskSpec(id=task_id, prompt="message 0"))
    lease = store.acquire_lease(task_id, holder="seed")
    drained = store.drain(lease, first_drain=True)
    for seq in range(1, count):
        store.append_message(lease, "assistant" if seq % 2 else "user", [{"text": f"message {seq}"}])
    assert drained.turn_number is not None
    store.end_turn(lease, drained.turn_number, last_response=f"message {count - 1}")
    store.release_lease(lease)
