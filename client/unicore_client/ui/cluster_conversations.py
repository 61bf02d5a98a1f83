"""``kubectl agenttask ui``'s shared conversations (issue 33), as pure functions: a conversation's id in cluster mode
(``<namespace>/<name>``, as a task's; a bare name is in the UI's namespace) and the task API's answers (resource
``conversations`` of ``tasks.unicore.dev``, ``task_api/conversation_routes.py``: camelCase, a post's ``senderKind``)
as the web UI's JSON (the shapes of ``unicore_client.ui.backend_protocol``, built by ``conversation_views`` as in
local mode).

What the task API does not say is filled in plainly: ``handoffs`` is None (the page then shows the limit only) and a
participant's ``joined_at`` None; the number of posts (``posts``, the last post's seq) comes from the namespace's
list (``ConversationList`` items carry it), not from the Conversation object, whose ``posts`` is a page of posts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from unicore import conversations as rules

from unicore_client.ui.conversation_views import participant_json, post_json

NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
SENDER_KINDS = ("task", "user", "system")


def split_conversation(conversation_id: str, default_namespace: str) -> tuple[str, str]:
    """``<namespace>/<name>`` (a bare name: in ``default_namespace``); ValueError of one line naming what is wrong."""
    namespace, _, name = (conversation_id or "").rpartition("/")
    namespace = namespace or default_namespace
    if not NAMESPACE.match(namespace) or not re.fullmatch(rules.NAME_PATTERN, name):
        raise ValueError(f"bad conversation id {conversation_id[:300]!r}: expected <namespace>/<name> (a namespace "
                         "and a conversation name: lowercase letters, digits, '-' and '.')")
    return namespace, name


def _float(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def post_of(item: Mapping[str, Any]) -> dict[str, Any]:
    """A task API post (``{seq, id, kind, senderKind, sender, text, at}``) as the page's post."""
    sender_kind = str(item.get("senderKind") or "system")
    return post_json(rules.Post(
        seq=_int(item.get("seq")), id=str(item.get("id") or ""), kind=str(item.get("kind") or "note"),  # type: ignore[arg-type]
        sender_kind=sender_kind if sender_kind in SENDER_KINDS else "system",  # type: ignore[arg-type]
        sender=str(item.get("sender") or ""), text=str(item.get("text") or ""), at=_float(item.get("at"))))


def posts_of(answer: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The posts of a task API answer (a Conversation or ConversationPosts), as the page's, in order."""
    return [post_of(item) for item in answer.get("posts") or [] if isinstance(item, Mapping)]


def member_of(item: Mapping[str, Any]) -> rules.Member:
    """A task API participant (``{kind, name, id, left}``; a task's id is ``<namespace>/<name>``)."""
    kind: Literal["task", "user"] = "task" if item.get("kind") == "task" else "user"
    return rules.Member(kind=kind, id=str(item.get("id") or item.get("name") or ""), left=bool(item.get("left")))


def members_of(conversation: Mapping[str, Any]) -> list[rules.Member]:
    return [member_of(item) for item in conversation.get("participants") or [] if isinstance(item, Mapping)]


def task_of(member: rules.Member) -> tuple[str, str]:
    """A task participant's (namespace, name)."""
    namespace, _, name = member.id.rpartition("/")
    return namespace, name


def last_seq(answer: Mapping[str, Any]) -> int:
    """The seq of the last post in a task API answer (0: none)."""
    return max((_int(item.get("seq")) for item in answer.get("posts") or [] if isinstance(item, Mapping)), default=0)


def present_names(members: Sequence[rules.Member]) -> tuple[list[str], list[str]]:
    """The names of the agents and of the people taking part now."""
    present = [m for m in members if not m.left]
    return [m.name for m in present if m.kind == "task"], [m.name for m in present if m.kind == "user"]


def summary_of(namespace: str, item: Mapping[str, Any], details: Mapping[str, Any] | None) -> dict[str, Any]:
    """A ConversationList item (``{name, title, status, posts}``) as the page's list row; ``details``: what a GET of
    the conversation added (``created_by``, ``created_at``, ``agents``, ``people``), None when it could not be read."""
    details = details or {}
    return {"id": f"{namespace}/{item.get('name')}", "title": str(item.get("title") or ""),
            "status": str(item.get("status") or ""), "created_by": str(details.get("created_by") or ""),
            "created_at": _float(details.get("created_at")), "posts": _int(item.get("posts")),
            "agents": list(details.get("agents") or []), "people": list(details.get("people") or [])}


def details_of(conversation: Mapping[str, Any]) -> dict[str, Any]:
    """What a list row takes from a Conversation object (``summary_of``)."""
    agents, people = present_names(members_of(conversation))
    return {"created_by": str(conversation.get("createdBy") or ""), "created_at": _float(conversation.get("createdAt")),
            "agents": agents, "people": people}


def conversation_of(namespace: str, name: str, conversation: Mapping[str, Any], posts: int,
                    nodes: Mapping[str, dict[str, Any] | None]) -> dict[str, Any]:
    """A Conversation object as the page's conversation (id ``<namespace>/<name>``): ``posts`` the last post's seq,
    ``nodes`` each task participant's tree node by task id (None: the task is gone)."""
    handoffs = conversation.get("handoffs")  # not in the task API's answer (yet): None
    participants = []
    for item in conversation.get("participants") or []:
        if not isinstance(item, Mapping):
            continue
        member = member_of(item)
        node = nodes.get(member.id) if member.kind == "task" else None
        shown = participant_json(member, node)
        shown["joined_at"] = _float(item["joinedAt"]) if "joinedAt" in item else None
        participants.append(shown)
    return {"id": f"{namespace}/{name}", "title": str(conversation.get("title") or ""),
            "status": str(conversation.get("status") or ""), "created_by": str(conversation.get("createdBy") or ""),
            "created_at": _float(conversation.get("createdAt")), "posts": posts,
            "handoff_limit": _int(conversation.get("handoffLimit")),
            "handoffs": None if handoffs is None else _int(handoffs), "participants": participants}


__all__ = ["conversation_of", "details_of", "last_seq", "member_of", "members_of", "post_of", "posts_of",
           "present_names", "split_conversation", "summary_of", "task_of"]
