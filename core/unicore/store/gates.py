"""Gates of the scripted model (``providers.scripted``, step ``gate``): a test opens a task's gate once its fault is in
place, and the task's gated model call, which waits for it, goes on (instead of a test racing a scripted sleep).

A gate is one key (``keys.gate_key``: ``uc:{<task id>}:gate:<name>``) that exists once opened; it stays open, so a
retried turn that reaches the same step passes it at once. A turn pod reads it with its namespace's Redis user
(EXISTS, read only: ``store.acl``); only a test, with the admin identity, opens it.
"""

from __future__ import annotations

from unicore.store.client import RedisClient
from unicore.store.keys import gate_key


def open_gate(client: RedisClient, task_id: str, name: str) -> None:
    """Open the gate ``name`` of ``task_id`` (idempotent). Raises RedisError; ValueError for a bad gate name."""
    client.set(gate_key(task_id, name), "1")


def gate_is_open(client: RedisClient, task_id: str, name: str) -> bool:
    """Whether the gate ``name`` of ``task_id`` was opened. Raises RedisError; ValueError for a bad gate name."""
    return bool(client.exists(gate_key(task_id, name)))


__all__ = ["gate_is_open", "open_gate"]
