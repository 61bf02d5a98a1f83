"""Shared conversations in the task API (issue 33; rules: ``unicore.conversations``, store:
``unicore.store.conversations``): resource ``conversations`` of group ``tasks.unicore.dev``, namespaced.

    GET  .../namespaces/{ns}/conversations                  list         every conversation of the namespace
    POST .../namespaces/{ns}/conversations                  create       {"name", "title", "handoffLimit", "tasks": []}
    GET  .../namespaces/{ns}/conversations/{name}           get          meta, participants, posts (?after=<seq>)
    GET  .../namespaces/{ns}/conversations/{name}/posts     get          posts after ?after=<seq>, waiting ?wait=<s>
    POST .../namespaces/{ns}/conversations/{name}/posts     create       {"id": "<client id>", "text": "..."}
    POST .../namespaces/{ns}/conversations/{name}/members   create       {"task": "<name>", "action": "join"|"leave"}
    POST .../namespaces/{ns}/conversations/{name}/control   create       {"action": "pause"|"resume"|"close"}

RBAC is checked by the API server and again by the operator (``server.py``), as for tasks: reading a conversation
is ``get``/``list conversations`` (and ``get conversations/posts``), taking part is ``create conversations/posts``.
The person is the user the API server authenticated (a body cannot name one); tasks must be AgentTasks of the
conversation's namespace (the tenant boundary). A post is taken once per client id.
"""

from __future__ import annotations

import re
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from unicore import conversations as rules
from unicore.api.schema import UserMessageId
from unicore.store import conversations as store

from unicore_operator.task_api.bodies import json_object
from unicore_operator.task_api.errors import ApiError
from unicore_operator.task_api.service import USER_SENDER_PREFIX, TaskApi, _int_param, _query

RESOURCE = "conversations"
MAX_WAIT_SECONDS = 30.0
POSTS_PAGE = 500


class CreateBody(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str = Field(pattern=rules.NAME_PATTERN, max_length=63)
    title: str = Field("", max_length=256)
    handoff_limit: int = Field(rules.DEFAULT_HANDOFF_LIMIT, alias="handoffLimit", ge=0, le=rules.MAX_HANDOFF_LIMIT)
    tasks: list[str] = Field(default_factory=list, max_length=64)


class PostBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: UserMessageId = Field(min_length=1, max_length=256)
    text: str = Field(min_length=1, max_length=rules.MAX_POST_BYTES)


class MemberBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: str = Field(min_length=1, max_length=253)
    action: Literal["join", "leave"] = "join"


class ControlBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action: Literal["pause", "resume", "close"]


EXAMPLES = {"CreateBody": '{"name": "room", "tasks": ["writer"]}', "PostBody": '{"id": "1", "text": "..."}',
            "MemberBody": '{"task": "writer", "action": "join"}', "ControlBody": '{"action": "pause"}'}


def _parse(model: type[BaseModel], body: bytes) -> Any:
    try:
        return model.model_validate(json_object(body, EXAMPLES[model.__name__]))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise ApiError(422, f"{where}: {first['msg']}") from None


def _person(sender: str) -> str:
    return sender[len(USER_SENDER_PREFIX):] if sender.startswith(USER_SENDER_PREFIX) else sender


def _conversation_id(namespace: str, name: str) -> str:
    if not re.match(rules.NAME_PATTERN, name or ""):
        raise ApiError(400, f"not a conversation name: {name!r}")
    return f"{namespace}/{name}"


def _meta(api: TaskApi, conversation: str) -> store.Meta:
    try:
        return store.read_meta(api.store, conversation)
    except store.ConversationError:
        name = conversation.split("/", 1)[1]
        raise ApiError(404, f"conversation {conversation} not found", reason="NotFound",
                       details={"name": name, "group": "tasks.unicore.dev", "kind": RESOURCE}) from None


def shape_post(item: rules.Post) -> dict[str, Any]:
    return {"seq": item.seq, "id": item.id, "kind": item.kind, "senderKind": item.sender_kind,
            "sender": item.sender, "text": item.text, "at": item.at}


def _shape(api: TaskApi, meta: store.Meta, after: int) -> dict[str, Any]:
    members = store.members(api.store, meta.id)
    return {
        "kind": "Conversation", "apiVersion": "tasks.unicore.dev/v1alpha1",
        "metadata": {"name": meta.id.split("/", 1)[1], "namespace": meta.id.split("/", 1)[0]},
        "title": meta.title, "status": meta.status, "createdBy": meta.created_by, "createdAt": meta.created_at,
        "handoffLimit": meta.handoff_limit, "handoffs": meta.handoffs, "seq": meta.seq,
        "posts": [shape_post(p) for p in store.posts(api.store, meta.id, after=after, limit=POSTS_PAGE)],
        "participants": [{"kind": m.kind, "name": m.name, "id": m.id, "left": m.left, "joinedAt": m.joined_at}
                         for m in members],
    }


def list_conversations(api: TaskApi, namespace: str) -> tuple[int, dict[str, Any]]:
    items = []
    for conversation in store.list_conversations(api.store):
        if conversation.startswith(f"{namespace}/"):
            meta = store.read_meta(api.store, conversation)
            items.append({"name": conversation.split("/", 1)[1], "title": meta.title, "status": meta.status,
                          "posts": meta.seq})
    return 200, {"kind": "ConversationList", "apiVersion": "tasks.unicore.dev/v1alpha1", "items": items}


def create(api: TaskApi, namespace: str, body: bytes, sender: str) -> tuple[int, dict[str, Any]]:
    request = _parse(CreateBody, body)
    for task in request.tasks:
        api._require_task(namespace, task)
    conversation = f"{namespace}/{request.name}"
    created = store.create(api.store, conversation, title=request.title or request.name, created_by=_person(sender),
                           handoff_limit=request.handoff_limit)
    store.join(api.store, conversation, "user", _person(sender))
    for task in request.tasks:
        store.join(api.store, conversation, "task", f"{namespace}/{task}")
    return (201 if created else 200), _shape(api, _meta(api, conversation), 0)


def get(api: TaskApi, namespace: str, name: str, query: str) -> tuple[int, dict[str, Any]]:
    after = _int_param(_query(query), "after", 0, minimum=0) or 0
    return 200, _shape(api, _meta(api, _conversation_id(namespace, name)), after)


def get_posts(api: TaskApi, namespace: str, name: str, query: str) -> tuple[int, dict[str, Any]]:
    """Posts after ``after``; with ``wait``, held up to that many seconds until there is one (a long poll)."""
    params = _query(query)
    conversation = _conversation_id(namespace, name)
    meta = _meta(api, conversation)
    after = _int_param(params, "after", 0, minimum=0) or 0
    wait = min(float(_int_param(params, "wait", 0, minimum=0) or 0), MAX_WAIT_SECONDS)
    deadline = time.monotonic() + wait
    found = store.posts(api.store, conversation, after=after, limit=POSTS_PAGE)
    while not found and time.monotonic() < deadline:
        time.sleep(0.25)  # the handler runs in a worker thread (server.py); a long poll's step
        found = store.posts(api.store, conversation, after=after, limit=POSTS_PAGE)
    return 200, {"kind": "ConversationPosts", "status": store.read_meta(api.store, conversation).status
                 if found else meta.status, "posts": [shape_post(p) for p in found]}


def post(api: TaskApi, namespace: str, name: str, body: bytes, sender: str) -> tuple[int, dict[str, Any]]:
    request = _parse(PostBody, body)
    conversation = _conversation_id(namespace, name)
    _meta(api, conversation)
    person = _person(sender)
    try:
        store.join(api.store, conversation, "user", person)
        seq = store.post(api.store, conversation, f"user:{request.id}", kind="post", sender_kind="user",
                         sender=person, text=request.text)
    except store.ConversationError as exc:
        raise ApiError(409, str(exc), reason="Conflict") from None
    store.deliver(api.store, conversation)
    return (201 if seq else 200), {"kind": "PostReceipt", "seq": seq, "duplicate": seq == 0}


def members(api: TaskApi, namespace: str, name: str, body: bytes) -> tuple[int, dict[str, Any]]:
    request = _parse(MemberBody, body)
    conversation = _conversation_id(namespace, name)
    _meta(api, conversation)
    api._require_task(namespace, request.task)
    task_id = f"{namespace}/{request.task}"
    try:
        changed = (store.join if request.action == "join" else store.leave)(api.store, conversation, "task", task_id)
    except store.ConversationError as exc:
        raise ApiError(409, str(exc), reason="Conflict") from None
    return 200, {"kind": "MemberReceipt", "task": request.task, "action": request.action, "changed": changed}


def control(api: TaskApi, namespace: str, name: str, body: bytes, sender: str) -> tuple[int, dict[str, Any]]:
    request = _parse(ControlBody, body)
    conversation = _conversation_id(namespace, name)
    _meta(api, conversation)
    status: rules.Status = {"pause": "paused", "resume": "open", "close": "closed"}[request.action]  # type: ignore[assignment]
    try:
        changed = store.set_status(api.store, conversation, status, _person(sender))
    except store.ConversationError as exc:
        raise ApiError(409, str(exc), reason="Conflict") from None
    return 200, {"kind": "ControlReceipt", "status": status, "changed": changed}


def delete(api: TaskApi, namespace: str, name: str) -> tuple[int, dict[str, Any]]:
    """Remove the conversation, its posts and members (what tasks were delivered stays in their inboxes)."""
    conversation = _conversation_id(namespace, name)
    _meta(api, conversation)
    store.delete(api.store, conversation)
    return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success",
                 "details": {"name": name, "group": "tasks.unicore.dev", "kind": RESOURCE}}


__all__ = ["RESOURCE", "control", "create", "delete", "get", "get_posts", "list_conversations", "members", "post",
           "shape_post"]
