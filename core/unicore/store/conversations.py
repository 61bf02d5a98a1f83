"""Shared conversations in Redis (issue 33; the rules: ``unicore.conversations``).

Keys (``keys.conversation_key``): ``meta`` (hash: title, status, created_by, created_at, handoff_limit, seq: the last
post's, delivered: the last post delivered, handoffs and limited: this round's hand-offs and whether its limit note
was posted), ``posts`` (list of JSON posts, oldest first, the newest ``MAX_POSTS`` kept), ``postids`` (set: every
post id, so a post is taken once), ``members`` (hash: ``task:<id>`` / ``user:<name>`` -> JSON). ``uc:conversations``
indexes them; a task's ``conversations`` set and ``convout`` outbox live with the task.

Exactly once, across crashes, without a lock: a post is taken once by its id (a person's: the client's id; an
agent's post: its tool call's; an agent's answer: ``answer:<task>:<turn>``); delivery queues each post into each
recipient's inbox under an id that is the same on every delivery (``schema.conversation_message_id``), then moves
the conversation's ``delivered`` mark past it with a compare-and-set that also counts the hand-off, so the count and
the limit note happen once even when two deliverers run at once. Whoever posts delivers; anyone may deliver again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from unicore import conversations as rules
from unicore.api.contract import same_namespace
from unicore.api.schema import InboxMessage, conversation_message_id
from unicore.errors import MessageTooLarge, TaskNotFound
from unicore.faults import fault_point
from unicore.log import get_logger
from unicore.store import approvals, lua
from unicore.store import conversation_writes as writes
from unicore.store.conversation_writes import MAX_POSTS, ConversationError
from unicore.store.keys import CONVERSATIONS_INDEX, TaskKeys, conversation_key
from unicore.store.tasks import TaskStore

log = get_logger("conversations")

DELIVERY_BATCH = 200


@dataclass(frozen=True)
class Meta:
    id: str
    title: str
    status: rules.Status
    created_by: str
    created_at: float
    handoff_limit: int
    seq: int
    delivered: int
    handoffs: int


def create(store: TaskStore, conversation: str, *, title: str, created_by: str,
           handoff_limit: int = rules.DEFAULT_HANDOFF_LIMIT) -> bool:
    """Create it (False: it exists, kept as it is)."""
    now = time.time()
    meta = conversation_key(conversation, "meta")
    if not store.redis.hsetnx(meta, "id", conversation):
        return False
    store.redis.hset(meta, mapping={"title": title, "status": "open", "created_by": created_by,
                                    "created_at": repr(now), "updated_at": repr(now),
                                    "handoff_limit": str(handoff_limit), "seq": "0", "delivered": "0",
                                    "handoffs": "0", "limited": "0"})
    store.redis.zadd(CONVERSATIONS_INDEX, {conversation: now}, nx=True)
    return True


def read_meta(store: TaskStore, conversation: str) -> Meta:
    raw = store.redis.hgetall(conversation_key(conversation, "meta"))
    if not raw or "status" not in raw:
        raise ConversationError(f"no conversation {conversation!r}")
    return Meta(id=conversation, title=raw.get("title", ""), status=raw["status"],
                created_by=raw.get("created_by", ""), created_at=float(raw.get("created_at") or 0),
                handoff_limit=int(raw.get("handoff_limit") or rules.DEFAULT_HANDOFF_LIMIT),
                seq=int(raw.get("seq") or 0), delivered=int(raw.get("delivered") or 0),
                handoffs=int(raw.get("handoffs") or 0))


def list_conversations(store: TaskStore) -> list[str]:
    return list(store.redis.zrange(CONVERSATIONS_INDEX, 0, -1))


def members(store: TaskStore, conversation: str) -> list[rules.Member]:
    found = []
    for raw in store.redis.hvals(writes.members_key(conversation)):
        data = json.loads(raw)
        found.append(rules.Member(kind=data["kind"], id=data["id"], since=int(data.get("since") or 0),
                                  left=bool(data.get("left")), joined_at=float(data.get("joined_at") or 0)))
    return sorted(found, key=lambda m: (m.since, m.kind, m.id))


def posts(store: TaskStore, conversation: str, after: int = 0, limit: int = 0) -> list[rules.Post]:
    """The posts with seq > ``after``, oldest first (at most ``limit``; 0: all kept)."""
    key = conversation_key(conversation, "posts")
    first = store.redis.lindex(key, 0)
    if first is None:
        return []
    start = max(0, after - int(json.loads(first)["seq"]) + 1)
    end = start + limit - 1 if limit else -1
    return [_post(raw) for raw in store.redis.lrange(key, start, end)]


def _post(raw: str) -> rules.Post:
    data = json.loads(raw)
    return rules.Post(seq=int(data["seq"]), id=str(data["id"]), kind=data["kind"], sender_kind=data["sender_kind"],
                      sender=str(data.get("sender") or ""), text=str(data.get("text") or ""),
                      at=float(data.get("at") or 0))


def post(store: TaskStore, conversation: str, post_id: str, *, kind: rules.PostKind, sender_kind: rules.SenderKind,
         sender: str, text: str, closing: bool = False) -> int:
    """``conversation_writes.post`` on the store's client."""
    return writes.post(store.redis, conversation, post_id, kind=kind, sender_kind=sender_kind, sender=sender,
                       text=text, closing=closing)


def join(store: TaskStore, conversation: str, kind: Literal["task", "user"], member: str) -> bool:
    """``conversation_writes.join`` on the store's client."""
    return writes.join(store.redis, conversation, kind, member)


def leave(store: TaskStore, conversation: str, kind: Literal["task", "user"], member: str) -> bool:
    """``conversation_writes.leave`` on the store's client."""
    return writes.leave(store.redis, conversation, kind, member)


def set_status(store: TaskStore, conversation: str, status: rules.Status, by: str) -> bool:
    """Pause, resume (open) or close it, with a note; True when it changed. Resumed: what waited is delivered."""
    meta = read_meta(store, conversation)
    if meta.status == status:
        return False
    if meta.status == "closed":
        raise ConversationError(f"conversation {conversation} is closed")
    word = {"open": "resumed", "paused": "paused", "closed": "closed"}[status]
    if status == "closed":
        post(store, conversation, f"note:{word}:{time.time_ns()}", kind="note", sender_kind="system", sender="",
             text=f"{by} {word} the conversation")
    store.redis.hset(conversation_key(conversation, "meta"), "status", status)
    if status != "closed":
        post(store, conversation, f"note:{word}:{time.time_ns()}", kind="note", sender_kind="system", sender="",
             text=f"{by} {word} the conversation")
    if status == "open":
        deliver(store, conversation)
    return True


def delete(store: TaskStore, conversation: str) -> bool:
    """Remove it, its posts and its members (and it from its tasks' sets); False when there was none."""
    present = members(store, conversation)
    pipe = store.redis.pipeline(transaction=False)
    # one DEL each: separate slots on a cluster
    for key in (*writes.post_keys(conversation), writes.members_key(conversation)):
        pipe.delete(key)
    pipe.zrem(CONVERSATIONS_INDEX, conversation)
    for member in present:
        if member.kind == "task":
            pipe.hdel(TaskKeys(member.id).conversations, conversation)
    return bool(pipe.execute()[0])


def partner_roots(store: TaskStore, task_id: str) -> list[str]:
    """The roots of the trees of every task that shares a conversation with ``task_id`` (local mode runs them with
    its tree: what its answer hands to them runs too)."""
    roots: list[str] = []
    for conversation in task_conversations(store, task_id):
        for member in members(store, conversation):
            if member.kind == "task" and not member.left and member.id != task_id:
                try:
                    roots.append(store.get_task(member.id).root or member.id)
                except TaskNotFound:
                    continue
    return list(dict.fromkeys(roots))


def task_conversations(store: TaskStore, task_id: str) -> list[str]:
    return sorted(store.redis.hgetall(TaskKeys(task_id).conversations))  # HGETALL: what a turn pod may read


def queue_outbox(store: TaskStore, task_id: str, conversation: str, post_id: str, text: str) -> None:
    """An agent's post during its turn, kept in its own outbox until ``publish`` takes it."""
    entry = json.dumps({"conversation": conversation, "id": post_id, "text": rules.fit(text)})
    store.redis.rpush(TaskKeys(task_id).conversation_outbox, entry)


def outbox(store: TaskStore, task_id: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in store.redis.lrange(TaskKeys(task_id).conversation_outbox, 0, -1)]


def catch_up(store: TaskStore, task_id: str) -> list[str]:
    """Post and deliver what ``task_id`` owes its conversations: its outbox, and the answer of its last ended turn
    (not while it waits for a person). Idempotent: its turn calls it at its start and end, the local supervisor
    after every turn process, so a crash anywhere in between loses no post and repeats none."""
    if not task_conversations(store, task_id):
        return []
    return publish(store, task_id, answer=_last_answer(store, task_id))


def _last_answer(store: TaskStore, task_id: str) -> tuple[int, str, float] | None:
    try:
        record = store.get_task(task_id)
    except TaskNotFound:
        return None
    if record.turns <= 0 or approvals.waiting_for(store.redis, task_id) is not None:
        return None
    ended = store.turn_meta(task_id, record.turns - 1).get("ended_at")
    if not ended:
        return None  # the turn runs (or died before its end): its answer comes with its end
    return record.turns - 1, record.last_response, float(ended)


def publish(store: TaskStore, task_id: str, answer: tuple[int, str, float] | None = None) -> list[str]:
    """Post what ``task_id`` owes its conversations: its outbox's posts, and ``answer`` (turn number, text, when the
    turn ended) to each conversation it had joined by then; then deliver them. The sender is ``task_id``: these come
    from its own keys. Returns the conversations touched."""
    touched: list[str] = []  # where it posted now or before (delivered again: the last poster may have died first)
    new = 0  # posts taken now
    # the task's own set says where to look; the conversation's members (which no turn pod can write) decide
    joined = {conversation: member for conversation in task_conversations(store, task_id)
              if same_namespace(conversation, task_id)
              and (member := _member_of(store, conversation, task_id)) is not None and not member.left}
    key = TaskKeys(task_id).conversation_outbox
    taken = store.redis.lrange(key, 0, -1)  # out of the outbox once delivered: a crash before keeps them to repeat
    for raw in taken:
        entry = json.loads(raw)
        conversation = str(entry.get("conversation") or "")
        if conversation in joined:
            try:
                new += post(store, conversation, str(entry["id"]), kind="post", sender_kind="task", sender=task_id,
                            text=str(entry.get("text") or "")) > 0
                touched.append(conversation)
            except ConversationError as exc:
                log.warning("task %s: a post was dropped: %s", task_id, exc)
        else:
            log.warning("task %s: a post to %s was dropped: not a participant", task_id, conversation)
    if answer is not None:
        turn, text, ended_at = answer
        for conversation, member in joined.items():
            if member.joined_at > ended_at:
                continue  # that turn ended before it joined
            try:
                new += post(store, conversation, f"answer:{task_id}:{turn}", kind="answer", sender_kind="task",
                            sender=task_id, text=text) > 0
                touched.append(conversation)
            except ConversationError as exc:
                log.info("task %s: its answer was not posted: %s", task_id, exc)
    if new:  # (a repeat, e.g. a turn's start catching up an answer posted before, is no such point)
        fault_point("after conversation post")  # posted, not delivered yet: whoever catches up next delivers
    for conversation in dict.fromkeys(touched):
        try:
            deliver(store, conversation)
        except ConversationError as exc:  # deleted since
            log.info("task %s: conversation %s not delivered: %s", task_id, conversation, exc)
    for raw in taken:  # only now: a post taken whose delivery was cut short (a crash) is posted (once) and
        store.redis.lrem(key, 1, raw)  # delivered by the next catch-up, though its turn may never end
    return list(dict.fromkeys(touched))


def _member_of(store: TaskStore, conversation: str, task_id: str) -> rules.Member | None:
    raw = store.redis.hget(writes.members_key(conversation), f"task:{task_id}")
    if not raw:
        return None
    data = json.loads(raw)
    return rules.Member(kind="task", id=task_id, since=int(data.get("since") or 0), left=bool(data.get("left")),
                        joined_at=float(data.get("joined_at") or 0))


def deliver(store: TaskStore, conversation: str) -> int:
    """Deliver every post not delivered yet, in order (see the module doc); how many inbox messages were queued.
    Nothing while the conversation is paused or closed."""
    queued = 0
    for _ in range(1000):
        meta = read_meta(store, conversation)
        if meta.status != "open":
            return queued
        batch = posts(store, conversation, after=meta.delivered, limit=DELIVERY_BATCH)
        if not batch:
            return queued
        present = members(store, conversation)
        delivered, handoffs = meta.delivered, meta.handoffs
        for item in batch:
            if item.seq <= delivered:
                continue
            route = rules.route(item, present, handoffs, meta.handoff_limit)
            queued += _queue(store, conversation, item, route.to)
            done = int(store.redis.eval(
                lua.CONVERSATION_DELIVERED, 3, *writes.post_keys(conversation), delivered, item.seq,
                "1" if route.handoff else "0", "1" if route.new_round else "0", "1" if route.limited else "0",
                f"note:limit:{item.seq}", rules.limit_note(meta.handoff_limit), repr(time.time()), MAX_POSTS))
            if not done:
                break  # another deliverer moved on: read again
            delivered = item.seq
            handoffs = 0 if route.new_round else handoffs + (1 if route.handoff else 0)
    return queued


def _queue(store: TaskStore, conversation: str, item: rules.Post, to: Sequence[str]) -> int:
    queued = 0
    for task_id in to:
        message = InboxMessage(id=conversation_message_id(conversation, item.id, task_id), type="user",
                               content=rules.inbox_text(conversation, item), sender=f"conversation:{conversation}",
                               timestamp=item.at)
        try:
            if store.queue_message(task_id, message):
                queued += 1
            store.activate(task_id, f"conversation:{conversation}")
        except TaskNotFound:
            log.warning("conversation %s: participant %s is gone; post %d not delivered to it", conversation,
                        task_id, item.seq)
        except MessageTooLarge as exc:
            log.error("conversation %s: post %d is too large for %s: %s", conversation, item.seq, task_id, exc)
    return queued


__all__ = ["MAX_POSTS", "ConversationError", "Meta", "catch_up", "create", "delete", "deliver", "join", "leave",
           "list_conversations", "members", "outbox", "partner_roots", "post", "posts", "publish", "queue_outbox",
           "read_meta", "set_status", "task_conversations"]
