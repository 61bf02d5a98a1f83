"""Multi-task reads for the operator's gauges (the Redis layout's owner answers them, not the operator)."""

from __future__ import annotations

from typing import Any

from unicore.state.keys import TaskKeys

CHUNK = 1000  # commands per pipeline flush: bounds one reply's size


def inbox_lengths(client: Any, task_ids: list[str]) -> dict[str, int]:
    """Inbox length of every task in ``task_ids`` whose inbox is not empty.

    One pipelined LLEN per task (one round trip per thousand tasks on a single Redis; a Redis Cluster pipeline sends
    each node its share), so it works on both: a script over many tasks' inboxes would cross hash slots."""
    lengths: dict[str, int] = {}
    for start in range(0, len(task_ids), CHUNK):
        chunk = task_ids[start : start + CHUNK]
        pipe = client.pipeline(transaction=False)
        for task_id in chunk:
            pipe.llen(TaskKeys(task_id).inbox)
        for task_id, length in zip(chunk, pipe.execute(), strict=True):
            if int(length):
                lengths[task_id] = int(length)
    return lengths


__all__ = ["inbox_lengths"]
