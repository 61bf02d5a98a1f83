"""Retention of shared conversations in Redis (issue 33; the pass: ``unicore.conversation_retention``).

A conversation goes when it has been idle (no post, join, leave or status change) longer than the TTL and nothing
waits in it: not paused (a person paused it: they resume or close it, as a suspended tree is kept), and, while it is
open, every post delivered. Its archive is written and verified first; then one script removes its keys only if
the conversation is as it was archived (seq, status, delivered mark and last change the same), so a post that came
meanwhile keeps it. After that the index entry and its tasks' entries (``uc:{T}:conversations``) are dropped: other
hash slots, so outside the script; a crash in between leaves entries that point at no conversation, which every
reader takes as "not a participant" (as after ``conversations.delete``), and the next pass drops the index entry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from unicore.store import lua
from unicore.store.client import RedisClient
from unicore.store.conversation_writes import members_key, post_keys
from unicore.store.keys import CONVERSATIONS_INDEX, TaskKeys, conversation_key

FINGERPRINT_FIELDS = ("seq", "status", "delivered", "updated_at")


def _float(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


@dataclass(frozen=True)
class ConversationDump:
    """A conversation's keys as stored: its meta hash, its members hash, its posts (the stored JSON, oldest first)."""

    conversation: str
    meta: dict[str, str]
    members: dict[str, str]
    posts: list[str]

    def fingerprint(self) -> list[str]:
        """What must not change between its archive and its removal (``FINGERPRINT_FIELDS``)."""
        return [self.meta.get(name, "") for name in FINGERPRINT_FIELDS]

    def last_activity(self) -> float:
        return max(_float(self.meta.get("updated_at")), _float(self.meta.get("created_at")))

    def task_members(self) -> list[str]:
        """Every task that took part (left or not): whose ``conversations`` entry names it."""
        found = []
        for raw in self.members.values():
            data = json.loads(raw)
            if data.get("kind") == "task":
                found.append(str(data["id"]))
        return sorted(found)

    def undelivered(self) -> int:
        """Posts not delivered yet while it is open (paused or closed: none is delivered)."""
        if self.meta.get("status") != "open":
            return 0
        return max(0, int(self.meta.get("seq") or 0) - int(self.meta.get("delivered") or 0))

    def not_removable(self, *, now: float, ttl: float) -> str | None:
        """Why it stays, or None (module doc)."""
        status = self.meta.get("status", "")
        if status == "paused":
            return "paused: whoever paused it resumes or closes it"
        undelivered = self.undelivered()
        if undelivered:
            return f"{undelivered} post(s) not delivered yet"
        idle = now - self.last_activity()
        if idle <= ttl:
            return f"active {idle:.0f}s ago (TTL {ttl:g}s)"
        return None


def conversation_ids(client: RedisClient) -> list[str]:
    """Every conversation in the index, oldest first."""
    return list(client.zrange(CONVERSATIONS_INDEX, 0, -1))


def idle_since(client: RedisClient, conversations: list[str], before: float) -> tuple[list[str], list[str]]:
    """(the conversations whose last change is older than ``before``, those with no meta left: gone), in one
    pipelined round trip."""
    pipe = client.pipeline(transaction=False)
    for conversation in conversations:
        pipe.hmget(conversation_key(conversation, "meta"), ["updated_at", "created_at", "status"])
    idle, gone = [], []
    for conversation, (updated_at, created_at, status) in zip(conversations, pipe.execute(), strict=True):
        if status is None:
            gone.append(conversation)
        elif max(_float(updated_at), _float(created_at)) < before:
            idle.append(conversation)
    return idle, gone


def read_conversation(client: RedisClient, conversation: str) -> ConversationDump | None:
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(conversation_key(conversation, "meta"))
    pipe.hgetall(members_key(conversation))
    pipe.lrange(conversation_key(conversation, "posts"), 0, -1)
    meta, members, posts = pipe.execute()
    if not meta or "status" not in meta:
        return None
    return ConversationDump(conversation, dict(meta), dict(members), list(posts))


def remove_if_unchanged(client: RedisClient, dump: ConversationDump) -> bool:
    """Remove the conversation's keys if it is still as ``dump`` shows it (False: it changed, nothing removed), then
    its index entry and its tasks' entries."""
    keys = [*post_keys(dump.conversation), members_key(dump.conversation)]
    removed = int(client.eval(lua.CONVERSATION_REMOVE, len(keys), *keys, *dump.fingerprint()))
    if removed:
        forget(client, dump.conversation, dump.task_members())
    return bool(removed)


def forget(client: RedisClient, conversation: str, tasks: list[str]) -> None:
    """Drop what still names a removed conversation: its index entry and its tasks' entries (one slot each)."""
    pipe = client.pipeline(transaction=False)
    pipe.zrem(CONVERSATIONS_INDEX, conversation)
    for task_id in tasks:
        pipe.hdel(TaskKeys(task_id).conversations, conversation)
    pipe.execute()


__all__ = ["FINGERPRINT_FIELDS", "ConversationDump", "conversation_ids", "forget", "idle_since", "read_conversation",
           "remove_if_unchanged"]
