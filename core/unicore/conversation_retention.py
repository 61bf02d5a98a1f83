"""Retention of shared conversations (issue 33): a conversation idle longer than the TTL, with nothing waiting in it
(``unicore.store.conversation_retention``: not paused; open: every post delivered), is archived (if an archive is
configured) and removed from Redis, like an idle task tree (``unicore.retention``), in the same pass and with the
same TTL and archive: ``unicore gc`` in local mode, the operator's retention loop on Kubernetes (the conversations of
the namespaces it watches).

Posts not delivered yet (a poster that died before delivering; joins, which reach no one) are delivered by the pass
first: what that queues keeps the conversation for this pass.

The archive (``CONVERSATION_FORMAT``), one JSON-lines document per conversation, beside the trees' archives: a header
``{"format", "conversation", "archivedAt", "posts"}``, a line ``{"meta": {...}}`` (its meta hash as stored), a line
``{"members": {...}}`` (its members hash: ``task:<id>`` / ``user:<name>`` -> the stored JSON), then its posts as
stored, oldest first (the newest ``MAX_POSTS`` are kept in Redis, so in the archive). Object name:
``<namespace>/conversations/<name>-<sha256 of the body, 16 hex>.jsonl`` (local mode: ``conversations/<name>-...``).
A write that fails removes nothing; a conversation that changed between its archive and its removal is kept (the
next pass archives it again).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from unicore.archive import ArchiveError, ArchiveSink, object_name
from unicore.log import get_logger
from unicore.store import conversation_retention as state
from unicore.store import conversations
from unicore.store.client import RedisClient
from unicore.store.tasks import TaskStore

log = get_logger("retention")

CONVERSATION_FORMAT = "unicore.conversation-archive/v1"

Action = Literal["removed", "kept", "archive-failed", "changed", "gone"]


@dataclass(frozen=True)
class ConversationOutcome:
    """What a pass did with one conversation."""

    conversation: str
    action: Action
    reason: str = ""
    url: str = ""
    posts: int = 0


def conversation_document(dump: state.ConversationDump, archived_at: float) -> tuple[bytes, str]:
    """(the JSON-lines document of ``dump``, the hex sha256 of its body)."""
    lines = [json.dumps({"meta": dump.meta}, sort_keys=True), json.dumps({"members": dump.members}, sort_keys=True),
             *dump.posts]
    body = "".join(line + "\n" for line in lines).encode()
    header = {"format": CONVERSATION_FORMAT, "conversation": dump.conversation, "posts": len(dump.posts),
              "archivedAt": datetime.datetime.fromtimestamp(archived_at, datetime.UTC).isoformat()}
    return json.dumps(header).encode() + b"\n" + body, hashlib.sha256(body).hexdigest()


def read_conversation_document(data: bytes) -> tuple[dict[str, Any], dict[str, str], dict[str, str],
                                                     list[dict[str, Any]]]:
    """(header, meta, members, posts) of a conversation archive."""
    lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
    if len(lines) < 3 or lines[0].get("format") != CONVERSATION_FORMAT:
        raise ValueError("not a UniCore conversation archive")
    return lines[0], lines[1]["meta"], lines[2]["members"], lines[3:]


def conversation_object_name(conversation: str, digest: str) -> str:
    namespace, slash, name = conversation.rpartition("/")
    return object_name(f"{namespace}/conversations/{name}" if slash else f"conversations/{name}", digest)


@dataclass
class ConversationRetention:
    """One retention policy for the conversations of one Redis (``client``: decoded responses)."""

    client: RedisClient
    ttl_seconds: float
    sink: ArchiveSink | None = None
    clock: Callable[[], float] = time.time

    def candidates(self, conversations: Iterable[str]) -> tuple[list[str], list[str]]:
        """(idle longer than the TTL, gone: an index entry whose conversation was removed) among ``conversations``."""
        return state.idle_since(self.client, list(conversations), self.clock() - self.ttl_seconds)

    def run(self, conversations: Iterable[str]) -> list[ConversationOutcome]:
        """Remove every idle conversation among ``conversations`` (ids from ``store.conversation_retention
        .conversation_ids``, which the caller scopes: local ones, or the operator's namespaces)."""
        idle, gone = self.candidates(conversations)
        outcomes = []
        for conversation in gone:  # removed by an earlier pass that stopped before its index entry went
            state.forget(self.client, conversation, [])
            outcomes.append(ConversationOutcome(conversation, "gone", "no meta left: its index entry dropped"))
        outcomes.extend(self.remove(conversation) for conversation in idle)
        return outcomes

    def reason_kept(self, conversation: str) -> str | None:
        """Why ``conversation`` is kept (None: it would be removed); for a dry run."""
        dump = state.read_conversation(self.client, conversation)
        return "gone" if dump is None else dump.not_removable(now=self.clock(), ttl=self.ttl_seconds)

    def remove(self, conversation: str) -> ConversationOutcome:
        dump = state.read_conversation(self.client, conversation)
        if dump is None:
            return ConversationOutcome(conversation, "kept", "no meta in Redis")
        if dump.undelivered():  # its poster died before delivering, or only joins came (they reach no one): the
            queued = conversations.deliver(TaskStore(self.client), conversation)  # pass delivers, as anyone may
            if queued:
                return ConversationOutcome(conversation, "kept", f"{queued} message(s) delivered now")
            dump = state.read_conversation(self.client, conversation)
            if dump is None:
                return ConversationOutcome(conversation, "kept", "no meta in Redis")
        now = self.clock()
        reason = dump.not_removable(now=now, ttl=self.ttl_seconds)
        if reason:
            return ConversationOutcome(conversation, "kept", reason)
        url = ""
        if self.sink is not None:
            data, digest = conversation_document(dump, now)
            try:
                url = self.sink.write(conversation_object_name(conversation, digest), data)
            except ArchiveError as exc:
                log.warning("conversation %s not removed: %s", conversation, exc)
                return ConversationOutcome(conversation, "archive-failed", str(exc))
            log.info("archived conversation %s (%d posts, %d bytes) to %s", conversation, len(dump.posts),
                     len(data), url)
        if not state.remove_if_unchanged(self.client, dump):
            log.info("conversation %s kept: it changed after its archive", conversation)
            return ConversationOutcome(conversation, "changed", "it changed after its archive")
        log.info("removed conversation %s (%d posts) from Redis", conversation, len(dump.posts))
        return ConversationOutcome(conversation, "removed", url=url, posts=len(dump.posts))


__all__ = ["CONVERSATION_FORMAT", "ConversationOutcome", "ConversationRetention", "conversation_document",
           "conversation_object_name", "read_conversation_document"]
