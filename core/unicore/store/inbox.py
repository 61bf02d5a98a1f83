"""A task's inbox in ``TaskStore``: queueing messages (idempotent by message id, within the size cap), activating
the task, reading what waits; and how a drain turns the inbox's entries into the conversation's user messages
(``build_drain_batch``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from unicore.api.schema import ContentBlock, InboxMessage, text_block
from unicore.errors import TaskNotFound
from unicore.log import get_logger
from unicore.store import changes, codec
from unicore.store.activations import write_activation
from unicore.store.records import Lease
from unicore.store.task_store_base import TaskStoreBase, write_time

log = get_logger("state")


def inbox_entry_to_content(entry: dict[str, Any]) -> tuple[str, Any]:
    """("tool_result", toolResult block) or ("text", str) for one decoded inbox entry."""
    if entry.get("type") == "tool_result":
        block = entry.get("content")
        if isinstance(block, dict) and "toolResult" in block:
            return "tool_result", block
        if isinstance(block, dict) and "toolUseId" in block:
            return "tool_result", {"toolResult": block}
    content = entry.get("content")
    return "text", content if isinstance(content, str) else codec.dumps(content)


def oldest_queued(raw_entries: Sequence[str]) -> float | None:
    """When the oldest of ``raw_entries`` (inbox entries as stored) was queued: the earliest ``timestamp`` they
    carry; None when none carries one."""
    stamps: list[float] = []
    for raw in raw_entries:
        try:
            stamp = json.loads(raw).get("timestamp")
        except (ValueError, AttributeError):
            continue
        if isinstance(stamp, int | float) and not isinstance(stamp, bool):
            stamps.append(float(stamp))
    return min(stamps) if stamps else None


def queued_trace_links(raw_entries: Sequence[str]) -> list[str]:
    """The ``trace_link`` traceparents ``raw_entries`` (inbox entries as stored) carry, in order, each once."""
    links: list[str] = []
    for raw in raw_entries:
        try:
            link = json.loads(raw).get("trace_link")
        except (ValueError, AttributeError):
            continue
        if isinstance(link, str) and link and link not in links:
            links.append(link)
    return links


def build_drain_messages(raw_entries: Sequence[str]) -> list[list[ContentBlock]]:
    """All tool results first, in ONE user message; then one user message per text entry."""
    return [content for content, _ids in build_drain_batch(raw_entries)]


def build_drain_batch(raw_entries: Sequence[str]) -> list[tuple[list[ContentBlock], list[str]]]:
    """``build_drain_messages`` with, per message, the ids of the ``user`` inbox entries (a send, a prompt, a
    parent's message) it holds: what ``unicore.turn.history.answer_to`` finds a request's answer by. Completions and
    tool results are not requests and carry no ids."""
    tool_results: list[ContentBlock] = []
    result_ids: list[str] = []
    texts: list[tuple[list[ContentBlock], list[str]]] = []
    for raw in raw_entries:
        try:
            entry = json.loads(raw)
            if not isinstance(entry, dict):
                raise ValueError("not an object")
        except ValueError:
            log.warning("unreadable inbox entry kept as text: %.200s", raw)
            texts.append(([text_block(f"[unreadable inbox entry] {raw}")], []))
            continue
        if entry.get("type") == "decision":  # a wake-up after people decided (store.approvals): no message
            continue
        ids = [entry["id"]] if entry.get("type") == "user" and isinstance(entry.get("id"), str) else []
        kind, content = inbox_entry_to_content(entry)
        if kind == "tool_result":
            tool_results.append(content)
            if isinstance(entry.get("answers"), str):  # a person's answer to ask_user: a request, like a send
                result_ids.append(entry["answers"])
        else:
            texts.append(([text_block(content)], ids))
    return ([(tool_results, result_ids)] if tool_results else []) + texts


class TaskInbox(TaskStoreBase):
    """Queueing into a task's inbox and reading it."""

    def check_message(self, message: InboxMessage) -> int:
        """The bytes ``message`` takes in an inbox (its stored JSON); MessageTooLarge, as ``queue_message`` would
        raise it, when that is over the cap. Writes nothing: a caller can refuse what it could never queue."""
        return len(self._encode_entry(message).encode())

    def queue_message(self, task_id: str, message: InboxMessage) -> bool:
        """Append ``message`` to the task's inbox. Idempotent by ``message.id``: returns False (writing nothing) if
        that id was already accepted. Raises MessageTooLarge / TaskNotFound, writing nothing."""
        encoded = self._encode_entry(message)
        keys = self.keys(task_id)
        result = int(
            self._queue(
                keys=[keys.task, keys.inbox, keys.seen], args=[message.id, encoded, repr(message.timestamp)]
            )
        )
        if result < 0:
            raise TaskNotFound(f"no task {task_id!r}; message {message.id} was not queued")
        return result == 1

    def queue_own_result(self, lease: Lease, message: InboxMessage) -> bool:
        """``queue_message`` into the lease holder's own inbox, fenced (LeaseLost if the lease is no longer ours):
        the result of a tool call reaches the conversation only from the turn that still owns it."""
        keys = self.keys(lease.task_id)
        result = self._fenced(
            self._queue_own,
            [keys.lease, keys.task, keys.inbox, keys.seen],
            [lease.fence, message.id, self._encode_entry(message), repr(message.timestamp)],
        )
        return int(result) == 1

    def queue_text(
        self,
        task_id: str,
        text: str,
        *,
        sender: str = "user",
        kind: str = "user",
        message_id: str | None = None,
    ) -> bool:
        message = InboxMessage(type=kind, content=text, sender=sender)  # type: ignore[arg-type]
        if message_id:
            message.id = message_id
        return self.queue_message(task_id, message)

    def activate(self, task_id: str, reason: str, *, change: changes.Kind | None = None) -> str:
        """Signal that the task has work (at-least-once stream consumed by the operator / local supervisor);
        ``change``: also note that its tree row changed (``store.changes``, in the same round trip)."""
        return write_activation(self.redis, task_id, reason, write_time(), change)

    def pending_count(self, task_id: str) -> int:
        return int(self.redis.llen(self.keys(task_id).inbox))

    def inbox(self, task_id: str) -> list[InboxMessage]:
        return [
            InboxMessage.model_validate_json(raw)
            for raw in self.redis.lrange(self.keys(task_id).inbox, 0, -1)
        ]


__all__ = ["TaskInbox", "build_drain_batch", "build_drain_messages", "inbox_entry_to_content"]
