"""TaskApi: what the task API routes do, independent of any HTTP server.

Writes are exactly-once: the client picks a message id and retries with it; the inbox accepts an id once
(``TaskStore.queue_message``), and the task is activated on every attempt (activations are idempotent
signals), so a retry after a lost answer or an operator restart neither duplicates the message nor loses
the wake-up.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import redis
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from unicore.api.schema import DEFAULT_APPROVAL_TIMEOUT_SECONDS, InboxMessage, UserMessageId
from unicore.api.turn_numbers import FIRST_SHOWN_TURN, shown_turn, stored_turn
from unicore.errors import MessageTooLarge, TaskNotFound
from unicore.store.reads import read_message_slice, read_transcript_head
from unicore.store.records import parse_turn_headers
from unicore.store.retention import archived_note
from unicore.store.tasks import TaskStore

from unicore_operator.log import logger
from unicore_operator.task_api import transcript as pages
from unicore_operator.task_api.bodies import json_object
from unicore_operator.task_api.errors import ApiError, task_not_found
from unicore_operator.task_api.lookup import LookupUnavailable, TaskLookup

MESSAGE_ID_RE = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
USER_MESSAGE_PREFIX = "user:"  # keeps client ids apart from the ids the runtime gives completions and prompts
USER_SENDER_PREFIX = "user:"  # a message's sender: "user:<the authenticated user>", never what the body says
log = logger.getChild("task_api")
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
TREE_MAX_NODES = 1000
LAST_RESPONSE_CHARS = 1024


# (namespace, name, the calls decided, by whom, the reason): called after a decision on tool calls
DecidedHook = Callable[[str, str, list[Any], str, str], None]


class MessageRequest(BaseModel):
    """Body of ``POST .../agenttasks/<name>/messages``."""

    model_config = ConfigDict(extra="forbid")

    id: UserMessageId = Field(  # not an id of the runtime's own messages, though stored as "user:<id>": one rule
        pattern=MESSAGE_ID_RE, description="client-chosen id; a retry with the same id is a no-op"
    )
    text: str = Field(min_length=1)


def sender_of(user: str) -> str:
    """The stored sender of a message a user posted: their name as the API server authenticated it."""
    return USER_SENDER_PREFIX + user


def _query(raw: str) -> dict[str, str]:
    return {key: values[-1] for key, values in parse_qs(raw, keep_blank_values=True).items()}


def _int_param(
    params: dict[str, str], key: str, default: int | None, *, minimum: int = 0, maximum: int | None = None
) -> int | None:
    if key not in params or params[key] == "":
        return default
    try:
        value = int(params[key])
    except ValueError:
        raise ApiError(400, f"query parameter {key}={params[key]!r} is not an integer") from None
    if value < minimum or (maximum is not None and value > maximum):
        upper = f" and {maximum}" if maximum is not None else ""
        raise ApiError(400, f"query parameter {key}={value} must be between {minimum}{upper}")
    return value


def _bool_param(params: dict[str, str], key: str) -> bool:
    value = params.get(key, "false").lower()
    if value in ("", "1", "true", "yes"):
        return True
    if value in ("0", "false", "no"):
        return False
    raise ApiError(400, f"query parameter {key}={value!r} must be true or false")


class TaskApi:
    """The read/write task API over one TaskStore; ``lookup`` says whether an AgentTask exists."""

    def __init__(self, store: TaskStore, lookup: TaskLookup, *, message_cap_bytes: int | None = None,
                 on_decided: DecidedHook | None = None,
                 approval_timeout_seconds: float = DEFAULT_APPROVAL_TIMEOUT_SECONDS) -> None:
        self.store = store
        self.lookup = lookup
        self.message_cap_bytes = message_cap_bytes or store.message_cap_bytes
        self.on_decided = on_decided  # told of each decision on tool calls (``approvals``): the operator's Event
        # the operator's UNICORE_APPROVAL_TIMEOUT_SECONDS: an approval past its task's timeout is no person's to decide
        self.approval_timeout_seconds = approval_timeout_seconds

    # ------------------------------------------------------------------ helpers
    def _require_task(self, namespace: str, name: str) -> dict[str, Any]:
        if not NAME_RE.match(namespace) or not NAME_RE.match(name):
            raise ApiError(400, f"invalid namespace or name: {namespace!r}/{name!r}")
        try:
            obj = self.lookup(namespace, name)
        except LookupUnavailable as exc:
            raise ApiError(503, f"{exc}; retry", retry_after=1) from exc
        if obj is None:
            raise task_not_found(namespace, name)
        return obj

    # ------------------------------------------------------------------ routes
    def post_message(self, namespace: str, name: str, body: bytes, *, sender: str) -> tuple[int, dict[str, Any]]:
        """Queue the body's message for the task; ``sender``: who posted it (``sender_of`` the authenticated
        user), stored with it."""
        payload = json_object(body, '{"id": "<uuid>", "text": "..."}')
        if "sender" in payload:
            raise ApiError(422, "invalid message: sender: not accepted; a message's sender is the user the "
                                "Kubernetes API server authenticated")
        try:
            request = MessageRequest.model_validate(payload)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()
            )
            raise ApiError(422, f"invalid message: {problems}") from None
        size = len(request.text.encode())
        if size > self.message_cap_bytes:
            raise ApiError(
                413,
                f"the message text is {size} bytes, over the cap of {self.message_cap_bytes} "
                "bytes; nothing was queued",
            )
        self._require_task(namespace, name)
        task_id = f"{namespace}/{name}"
        message = InboxMessage(
            id=USER_MESSAGE_PREFIX + request.id, type="user", content=request.text, sender=sender
        )
        try:
            queued = self.store.queue_message(task_id, message)
        except TaskNotFound:
            note = archived_note(self.store, task_id)
            if note is not None:  # retention removed its conversation: no retry will bring it back
                raise ApiError(410, note.describe(), reason="Gone") from None
            raise ApiError(
                503,
                f"agenttask {task_id} exists but the operator has not initialised it yet; retry "
                "with the same message id",
                reason="TaskNotReady",
                retry_after=1,
            ) from None
        except MessageTooLarge as exc:
            raise ApiError(413, str(exc)) from None
        except redis.RedisError as exc:
            raise ApiError(
                503, f"Redis is unavailable ({exc}); retry with the same message id", retry_after=1
            ) from None
        self.store.activate(task_id, "message")
        log.info("message %s from %s for %s %s", request.id, sender, task_id,
                 "queued" if queued else "was already queued")
        return 202, {
            "kind": "MessageReceipt",
            "task": task_id,
            "id": request.id,
            "duplicate": not queued,
            "pending": self.store.pending_count(task_id),
        }

    def get_transcript(self, namespace: str, name: str, query: str) -> tuple[int, dict[str, Any]]:
        params = _query(query)
        since = _int_param(params, "since", 0) or 0
        limit = _int_param(params, "limit", pages.DEFAULT_LIMIT, minimum=1, maximum=pages.MAX_LIMIT) or 1
        shown = _int_param(params, "turn", None, minimum=FIRST_SHOWN_TURN)  # as users count turns (the Job's -tN)
        turn = None if shown is None else stored_turn(shown)
        tools = _bool_param(params, "tools")
        self._require_task(namespace, name)
        task_id = f"{namespace}/{name}"
        try:
            head = read_transcript_head(self.store, task_id)
            note = archived_note(self.store, task_id) if head.status is None else None
            if note is not None:  # retention removed the conversation: the archive holds it
                raise ApiError(410, note.describe(), reason="Gone")
            headers = parse_turn_headers(head.raw_turns)
            window = pages.page_window(headers, head.total, since=since, limit=limit, turn=turn)
            if window is None:
                raise ApiError(
                    404,
                    f"agenttask {task_id} has no turn {shown} yet ("
                    + (f"turns are numbered from {FIRST_SHOWN_TURN}; it has {FIRST_SHOWN_TURN}.."
                       f"{shown_turn(len(headers) - 1)}" if headers else "no turn yet") + ")",
                    details={"name": name, "group": "unicore.dev", "kind": "turns"},
                )
            start, stop = window
            raw_messages = read_message_slice(self.store, task_id, start, stop)
        except redis.RedisError as exc:
            raise ApiError(503, f"Redis is unavailable ({exc}); retry", retry_after=1) from None
        page = pages.build_page(
            headers=headers,
            meta=head.meta,
            total=head.total,
            start=start,
            raw_messages=raw_messages,
            tools=tools,
            turn=turn,
            raw_compactions=head.raw_compactions,
        )
        page = {
            "kind": "TranscriptPage",
            "task": task_id,
            "state": {
                "status": head.status or "unknown",
                "pending": head.pending,
                "initialised": head.status is not None,
            },
            **page,
        }
        return 200, page

    def get_task(self, namespace: str, name: str) -> tuple[int, dict[str, Any]]:
        self._require_task(namespace, name)
        return 200, {"kind": "TaskSummary", **self._summary(f"{namespace}/{name}")}

    def get_tree(self, namespace: str, name: str) -> tuple[int, dict[str, Any]]:
        self._require_task(namespace, name)
        nodes: list[dict[str, Any]] = []
        truncated = False

        def walk(task_id: str, level: int) -> None:
            nonlocal truncated
            if len(nodes) >= TREE_MAX_NODES:
                truncated = True
                return
            nodes.append({"level": level, **self._summary(task_id)})
            for child in self.store.children(task_id):
                walk(child, level + 1)

        try:
            walk(f"{namespace}/{name}", 0)
        except redis.RedisError as exc:
            raise ApiError(503, f"Redis is unavailable ({exc}); retry", retry_after=1) from None
        return 200, {
            "kind": "TaskTree",
            "root": f"{namespace}/{name}",
            "nodes": nodes,
            "truncated": truncated,
        }

    def _summary(self, task_id: str) -> dict[str, Any]:
        try:
            record = self.store.get_task(task_id)
        except TaskNotFound:
            return {"id": task_id, "initialised": False}
        return {
            "id": task_id,
            "initialised": True,
            "parent": record.parent,
            "root": record.root,
            "depth": record.depth,
            "status": record.status,
            "turns": record.turns,
            "iterations": record.iterations,
            "tokens": {
                "input": record.input_tokens,
                "output": record.output_tokens,
                "total": record.total_tokens,
            },
            "treeTokens": record.tree_total_tokens,
            "pending": self.store.pending_count(task_id),
            "leaseHolder": self.store.lease_holder(task_id),
            "model": record.model,
            "createdAt": record.created_at,
            "updatedAt": record.updated_at,
            "lastResponse": pages.clip_text(record.last_response, LAST_RESPONSE_CHARS),
            "lastError": pages.clip_text(record.last_error, LAST_RESPONSE_CHARS),
        }
