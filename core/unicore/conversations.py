"""Shared conversations (issue 33): several tasks and people in one append-only thread. The delivery rules, pure.

A conversation (``<namespace>/<name>`` on a cluster, ``<name>`` in local mode) has participants (tasks of its
namespace, any tree, and people) and ordered posts, each with its sender as authenticated (a task's posts come from
its own outbox, a person's from the command or API call that made it) and a kind:

* ``post``: a person's message, or an agent's ``post_message`` during a turn;
* ``answer``: a participating task's final answer of a turn (posted for every turn it ends);
* ``joined`` / ``left`` / ``note``: what happened (a note: the hand-off limit was reached, the conversation paused).

Who gets a post (``route``), in order of the posts:

1. a person's post goes to every participating task, or only to those it mentions (``@name``); it starts a new round
   of hand-offs (the count goes back to 0);
2. an agent's post or answer goes only to the tasks it mentions (not to itself): a *hand-off*. A conversation allows
   ``handoff_limit`` hand-offs per person's post (default ``DEFAULT_HANDOFF_LIMIT``); past it, agents' mentions reach
   no one and one note says so, so two agents can never ping-pong forever;
3. notes, joins and leaves go to no one.

A task gets the posts made after it joined and before it left; a paused conversation keeps its posts and delivers
them when resumed; a closed one takes no posts. A delivered post is an inbox message whose id is the same on every
delivery (``schema.conversation_message_id``): delivery may run again after any crash and a post still arrives once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from unicore.api.schema import task_name

PostKind = Literal["post", "answer", "joined", "left", "note"]
SenderKind = Literal["task", "user", "system"]
Status = Literal["open", "paused", "closed"]

DEFAULT_HANDOFF_LIMIT = 4
MAX_HANDOFF_LIMIT = 100
MAX_POST_BYTES = 64 * 1024  # one post's text, as stored (an agent's longer answer is cut with a mark)
NAME_PATTERN = r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$"  # a conversation's name: a DNS label (or dotted)
MENTION = re.compile(r"(?<![\w@/.-])@([a-z0-9](?:[a-z0-9.-]*[a-z0-9])?)")
CUT_MARK = "\n[... cut ...]"


@dataclass(frozen=True)
class Post:
    """One post as stored and read back (``seq``: its position in the conversation, from 1)."""

    seq: int
    id: str
    kind: PostKind
    sender_kind: SenderKind
    sender: str  # a task id, a person's user name, or "" for the conversation itself
    text: str
    at: float

    @property
    def from_agent(self) -> bool:
        return self.sender_kind == "task" and self.kind in ("post", "answer")

    @property
    def from_person(self) -> bool:
        return self.sender_kind == "user" and self.kind == "post"


@dataclass(frozen=True)
class Member:
    """A participant: a task (``kind`` task, ``id`` its task id) or a person (``kind`` user). ``since``: the seq of
    the last post before it joined (it gets those after); ``left``: it left (gets nothing more)."""

    kind: Literal["task", "user"]
    id: str
    since: int = 0
    left: bool = False
    joined_at: float = 0.0

    @property
    def name(self) -> str:
        return task_name(self.id) if self.kind == "task" else self.id


@dataclass(frozen=True)
class Route:
    """Where one post goes: the task ids that get it, whether it is a hand-off (counted), whether it was held back
    by the hand-off limit, and whether it starts a new round (a person's post)."""

    to: tuple[str, ...] = ()
    handoff: bool = False
    limited: bool = False
    new_round: bool = False


def mentions(text: str) -> list[str]:
    """The names ``text`` mentions (``@writer``), each once, in order; an e-mail address is no mention."""
    found: list[str] = []
    for name in MENTION.findall(text or ""):
        if name not in found:
            found.append(name)
    return found


def route(post: Post, members: Sequence[Member], handoffs: int, limit: int) -> Route:
    """Who gets ``post`` (see the module doc), given the participants now and the hand-offs counted since the last
    person's post (pure)."""
    tasks = [m for m in members if m.kind == "task" and not m.left and m.since < post.seq]
    named = set(mentions(post.text))
    mentioned = [m.id for m in tasks if m.name in named or m.id in named]
    if post.from_person:
        return Route(to=tuple(mentioned or [m.id for m in tasks]), new_round=True)
    if not post.from_agent:
        return Route()
    targets = tuple(task for task in mentioned if task != post.sender)
    if not targets:
        return Route()
    if handoffs >= limit:
        return Route(limited=True)
    return Route(to=targets, handoff=True)


def limit_note(limit: int) -> str:
    """The note posted once when agents' mentions stop reaching each other."""
    return (f"The agents handed the conversation to each other {limit} times since the last person's post: their "
            "mentions reach no one until a person posts again.")


def inbox_text(conversation: str, post: Post) -> str:
    """What a participating task's model reads for a delivered post: where it is from and who wrote it."""
    who = {"user": f"{post.sender} (a person)", "task": f"{task_name(post.sender)} (an agent)"}.get(
        post.sender_kind, "the conversation")
    kind = "final answer" if post.kind == "answer" else "post"
    return (f"[conversation {conversation}] {kind} #{post.seq} from {who}:\n{post.text}\n"
            f"(Your final answer of this turn is posted to the conversation; mention a participant as @name to "
            "hand it to them.)")


def fit(text: str, limit: int = MAX_POST_BYTES) -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8, marked when cut."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - len(CUT_MARK.encode())].decode(errors="ignore") + CUT_MARK


def check_name(name: str) -> str:
    """A conversation name, or a ValueError of one line."""
    if not re.fullmatch(NAME_PATTERN, name or ""):  # fullmatch: "$" alone lets a trailing newline through
        raise ValueError(f"not a conversation name: {name!r} (lowercase letters, digits, '-' and '.', at most 63, "
                         "starting and ending with a letter or digit)")
    return name


def active_tasks(members: Iterable[Member]) -> list[str]:
    return [m.id for m in members if m.kind == "task" and not m.left]


__all__ = ["DEFAULT_HANDOFF_LIMIT", "MAX_HANDOFF_LIMIT", "MAX_POST_BYTES", "Member", "Post", "PostKind", "Route",
           "SenderKind", "Status", "active_tasks", "check_name", "fit", "inbox_text", "limit_note", "mentions",
           "route"]
