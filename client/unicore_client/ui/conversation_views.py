"""What the web UI shows of a shared conversation (issue 33; the rules: ``unicore.conversations``), as JSON: a
conversation in the list (``summary_json``), one with its participants (``conversation_json``, ``participant_json``)
and a post (``post_json``); the shapes are documented in ``unicore_client.ui.backend_protocol``. Built from what
``unicore.store.conversations`` reads and a task's tree node (``local_views.node_json``); no Redis here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from unicore import conversations as rules
from unicore.store.conversations import Meta

from unicore_client.ui.refusals import BadRequest

MAX_CONVERSATIONS = 200  # conversations listed (newest first)
POSTS_PAGE = 500  # posts per read (the page opens with the newest POSTS_PAGE, then follows live)
CLIENT_ID = re.compile(r"^[A-Za-z0-9-]{8,64}$")  # a post's client id: the message box's rule
STATUS_OF_ACTION: dict[str, rules.Status] = {"pause": "paused", "resume": "open", "close": "closed"}


def check_post(text: str, client_id: str) -> None:
    """What both backends refuse of a person's post before anything is sent or stored (``BadRequest``)."""
    if not CLIENT_ID.match(client_id or ""):
        raise BadRequest("id: 8-64 letters, digits or '-'")
    if not text.strip():
        raise BadRequest("the post is empty")
    if len(text.encode()) > rules.MAX_POST_BYTES:
        raise BadRequest(f"the post is too long: at most {rules.MAX_POST_BYTES} bytes of UTF-8")


def status_of_action(action: str) -> rules.Status:
    """The status a control ``action`` (one of ``backend_protocol.CONVERSATION_ACTIONS``) sets, or ``BadRequest``."""
    status = STATUS_OF_ACTION.get(action)
    if status is None:
        raise BadRequest(f"{action!r}: pause, resume or close")
    return status


def participant_state(member: rules.Member, node: dict[str, Any] | None) -> str:
    """One of ``backend_protocol.PARTICIPANT_STATES``: a task's from its tree row's phase (done or queued: idle, it
    waits for a post), ``left``, ``gone`` (its task was removed), ``person``."""
    if member.left:
        return "left"
    if member.kind == "user":
        return "person"
    if node is None:
        return "gone"
    phase = str(node.get("phase") or "")
    return "idle" if phase in ("done", "queued") else phase


def participant_json(member: rules.Member, node: dict[str, Any] | None) -> dict[str, Any]:
    return {"kind": member.kind, "id": member.id, "name": member.name, "left": member.left,
            "joined_at": member.joined_at, "state": participant_state(member, node), "task": node}


def post_json(post: rules.Post) -> dict[str, Any]:
    name = rules.Member(kind="task", id=post.sender).name if post.sender_kind == "task" else post.sender
    return {"seq": post.seq, "id": post.id, "kind": post.kind, "sender_kind": post.sender_kind, "sender": post.sender,
            "name": name, "text": post.text, "at": post.at}


def _meta_json(meta: Meta) -> dict[str, Any]:
    return {"id": meta.id, "title": meta.title, "status": meta.status, "created_by": meta.created_by,
            "created_at": meta.created_at, "posts": meta.seq}


def summary_json(meta: Meta, members: Sequence[rules.Member]) -> dict[str, Any]:
    """A conversation in the list: its meta and the names of who takes part now."""
    present = [m for m in members if not m.left]
    return {**_meta_json(meta), "agents": [m.name for m in present if m.kind == "task"],
            "people": [m.name for m in present if m.kind == "user"]}


def conversation_json(meta: Meta, participants: list[dict[str, Any]]) -> dict[str, Any]:
    return {**_meta_json(meta), "handoff_limit": meta.handoff_limit, "handoffs": meta.handoffs,
            "participants": participants}


__all__ = ["CLIENT_ID", "MAX_CONVERSATIONS", "POSTS_PAGE", "STATUS_OF_ACTION", "check_post", "conversation_json",
           "participant_json", "participant_state", "post_json", "status_of_action", "summary_json"]
