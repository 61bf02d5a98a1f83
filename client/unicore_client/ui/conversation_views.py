"""What the web UI shows of a shared conversation (issue 33; the rules: ``unicore.conversations``), as JSON: a
conversation in the list (``summary_json``), one with its participants (``conversation_json``, ``participant_json``)
and a post (``post_json``); the shapes are documented in ``unicore_client.ui.backend_protocol``. Built from what
``unicore.store.conversations`` reads and a task's tree node (``local_views.node_json``); no Redis here. And what both
backends refuse of a request before anything is sent or stored: a post (``check_post``), a new conversation
(``create_request``, ``check_create``), a participant's join or leave (``check_member_action``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from unicore import conversations as rules
from unicore.store.conversations import Meta

from unicore_client.ui.refusals import BadRequest

MAX_CONVERSATIONS = 200  # conversations listed (newest first)
POSTS_PAGE = 500  # posts per read (the page opens with the newest POSTS_PAGE, then follows live)
CLIENT_ID = re.compile(r"^[A-Za-z0-9-]{8,64}$")  # a post's client id: the message box's rule
STATUS_OF_ACTION: dict[str, rules.Status] = {"pause": "paused", "resume": "open", "close": "closed"}
MEMBER_ACTIONS = ("join", "leave")
MAX_TITLE_CHARS = 256  # a conversation's title (the task API's and ``kubectl agenttask conv create``'s cap)
MAX_TASKS = 64  # the tasks that join a conversation when it is created (the task API's cap)


def check_post(text: str, client_id: str) -> None:
    """What both backends refuse of a person's post before anything is sent or stored (``BadRequest``)."""
    if not CLIENT_ID.match(client_id or ""):
        raise BadRequest("id: 8-64 letters, digits or '-'")
    if not text.strip():
        raise BadRequest("the post is empty")
    if len(text.encode()) > rules.MAX_POST_BYTES:
        raise BadRequest(f"the post is too long: at most {rules.MAX_POST_BYTES} bytes of UTF-8")


def create_request(body: Mapping[str, Any]) -> tuple[str, str, list[str], int]:
    """The fields of ``POST /api/conversations`` (``{name, title?, tasks?, handoff_limit?}``), each of its JSON type:
    name, title ("" when none), tasks ([] when none) and the hand-off limit (the default when none); else
    ``BadRequest``. ``check_create`` checks their values."""
    name, title = body.get("name", ""), body.get("title") or ""
    if not isinstance(name, str) or not isinstance(title, str):
        raise BadRequest("name and title: strings")
    tasks = body.get("tasks") or []
    if not isinstance(tasks, list) or not all(isinstance(task, str) for task in tasks):
        raise BadRequest("tasks: a list of task ids (strings)")
    limit = body.get("handoff_limit")
    if limit is None:
        limit = rules.DEFAULT_HANDOFF_LIMIT
    if not isinstance(limit, int) or isinstance(limit, bool):
        raise BadRequest(f"handoff_limit: a whole number from 0 to {rules.MAX_HANDOFF_LIMIT}")
    return name, title, tasks, limit


def check_create(title: str, tasks: Sequence[str], handoff_limit: int) -> list[str]:
    """What both backends refuse of a new conversation before anything is sent or stored (``BadRequest``, one line;
    the name and each task id are checked by the backend, whose ids differ); the tasks, each once, in order."""
    if len(title) > MAX_TITLE_CHARS:
        raise BadRequest(f"the title is {len(title)} characters, over the cap of {MAX_TITLE_CHARS}")
    if not 0 <= handoff_limit <= rules.MAX_HANDOFF_LIMIT:
        raise BadRequest(f"handoff_limit: a whole number from 0 to {rules.MAX_HANDOFF_LIMIT}, not {handoff_limit}")
    unique = list(dict.fromkeys(tasks))
    if len(unique) > MAX_TASKS:
        raise BadRequest(f"{len(unique)} tasks: at most {MAX_TASKS} join when it is created (add more on its page)")
    return unique


def check_member_action(action: str) -> str:
    """A participant's ``action`` (one of ``MEMBER_ACTIONS``), or ``BadRequest``."""
    if action not in MEMBER_ACTIONS:
        raise BadRequest(f"action {action[:40]!r}: join or leave")
    return action


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


__all__ = ["CLIENT_ID", "MAX_CONVERSATIONS", "MAX_TASKS", "MAX_TITLE_CHARS", "MEMBER_ACTIONS", "POSTS_PAGE",
           "STATUS_OF_ACTION", "check_create", "check_member_action", "check_post", "conversation_json",
           "create_request", "participant_json", "participant_state", "post_json", "status_of_action", "summary_json"]
