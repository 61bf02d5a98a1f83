"""The writes of shared conversations that need only a Redis client (``store.conversations`` has the rest): a
post taken once by its id, a participant's join or leave. ``TaskStore.create_task`` joins a new task to its agent's
conversations with them (``store.task_writes``)."""

from __future__ import annotations

import json
import time
from typing import Literal

from unicore import conversations as rules
from unicore.api.contract import same_namespace
from unicore.errors import UniCoreError
from unicore.store import lua
from unicore.store.client import RedisClient
from unicore.store.keys import TaskKeys, conversation_key

MAX_POSTS = 10_000


class ConversationError(UniCoreError):
    """A conversation that does not exist, is closed, or a participant that is not one."""


def post_keys(conversation: str) -> list[str]:
    return [conversation_key(conversation, "meta"), conversation_key(conversation, "posts"),
            conversation_key(conversation, "postids")]


def members_key(conversation: str) -> str:
    return conversation_key(conversation, "members")


def post(client: RedisClient, conversation: str, post_id: str, *, kind: rules.PostKind, sender_kind: rules.SenderKind,
         sender: str, text: str, closing: bool = False) -> int:
    """Append a post (its seq), or 0 when ``post_id`` was posted before; ConversationError when there is no such
    conversation or it is closed. The caller delivers it (``deliver``)."""
    seq = int(client.eval(lua.CONVERSATION_POST, 3, *post_keys(conversation), post_id, kind, sender_kind, sender,
                          rules.fit(text), repr(time.time()), MAX_POSTS, "1" if closing else "0"))
    if seq == -1:
        raise ConversationError(f"no conversation {conversation!r}")
    if seq == -2:
        raise ConversationError(f"conversation {conversation} is closed")
    return seq


def join(client: RedisClient, conversation: str, kind: Literal["task", "user"], member: str) -> bool:
    """Add a task or a person (True: it joined now); it gets the posts made from now on. A task of another
    namespace cannot join (the tenant boundary)."""
    if kind == "task" and not same_namespace(conversation, member):
        raise ConversationError(f"task {member} is not in the namespace of conversation {conversation}")
    record = json.dumps({"kind": kind, "id": member, "joined_at": time.time(), "left": False})
    changed = _member(client, conversation, f"{kind}:{member}", record, "join")
    if kind == "task":
        client.hset(TaskKeys(member).conversations, conversation, repr(time.time()))
    if changed:
        post(client, conversation, f"joined:{kind}:{member}:{time.time_ns()}", kind="joined", sender_kind=kind,
             sender=member, text=f"{member} joined")
    return changed


def leave(client: RedisClient, conversation: str, kind: Literal["task", "user"], member: str) -> bool:
    """Take a participant out (True: it left now); it gets nothing posted from now on."""
    changed = _member(client, conversation, f"{kind}:{member}", "", "leave")
    if kind == "task":
        client.hdel(TaskKeys(member).conversations, conversation)
    if changed:
        post(client, conversation, f"left:{kind}:{member}:{time.time_ns()}", kind="left", sender_kind=kind,
             sender=member, text=f"{member} left")
    return changed


def _member(client: RedisClient, conversation: str, key: str, record: str, action: str) -> bool:
    result = int(client.eval(lua.CONVERSATION_MEMBER, 2, conversation_key(conversation, "meta"),
                                  members_key(conversation), key, record, action))
    if result == -1:
        raise ConversationError(f"no conversation {conversation!r}")
    if result == -2:
        raise ConversationError(f"conversation {conversation} is closed")
    return result == 1


__all__ = ["MAX_POSTS", "ConversationError", "join", "leave", "members_key", "post", "post_keys"]
