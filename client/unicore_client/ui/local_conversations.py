"""The web UI's shared conversations (issue 33) in local mode: ``LocalConversations`` reads and writes them through
the store (``unicore.store.conversations``) as the local user, and ``LocalBackend`` hands the UI's conversation
methods to it. What a post or a resumption sets going (the participants' trees) is run by the backend (``run``).
Creating one and adding or taking out tasks do what ``unicore conv create|join|leave`` do
(``unicore_client.local.conversation_command``): the person who creates it takes part, the tasks must exist.

A bad name or task id is ``BadRequest``, a conversation or a task that does not exist ``NotFound``, a post, control,
join or leave it refuses (closed) ``Conflict``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from unicore import conversations as rules
from unicore.api.schema import validate_task_id
from unicore.errors import TaskNotFound
from unicore.store import conversations as store_conversations
from unicore.store.tasks import TaskStore

from unicore_client.ui.conversation_views import (
    MAX_CONVERSATIONS,
    POSTS_PAGE,
    check_create,
    check_member_action,
    check_post,
    conversation_json,
    participant_json,
    post_json,
    status_of_action,
    summary_json,
)
from unicore_client.ui.local_views import node_json
from unicore_client.ui.refusals import BadRequest, Conflict, NotFound

CONVERSATION_POLL_SECONDS = 0.5  # a conversation's SSE stream reads Redis this often


class LocalConversations:
    """The web UI's conversation methods over the store (module doc). ``person``: who posts (the account running
    ``unicore ui``); ``run``: runs the conversation's participants' trees in the background."""

    def __init__(self, store: TaskStore, person: str, run: Callable[[str], None]) -> None:
        self.store = store
        self.person = person
        self._run = run

    def conversations(self) -> list[dict[str, Any]]:
        """Every conversation (at most ``MAX_CONVERSATIONS``), newest first."""
        found = []
        for name in reversed(store_conversations.list_conversations(self.store)[-MAX_CONVERSATIONS:]):
            try:
                meta = store_conversations.read_meta(self.store, name)
            except store_conversations.ConversationError:
                continue  # removed meanwhile
            found.append(summary_json(meta, store_conversations.members(self.store, name)))
        return found

    @staticmethod
    def _name(name: str) -> str:
        try:
            return rules.check_name(name)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    def _meta(self, name: str) -> store_conversations.Meta:
        """The conversation's meta; BadRequest for a name that is none, NotFound for one that does not exist."""
        self._name(name)
        try:
            return store_conversations.read_meta(self.store, name)
        except store_conversations.ConversationError as exc:
            raise NotFound(str(exc)) from None

    def _refused(self, name: str, exc: store_conversations.ConversationError, what: str) -> Exception:
        """A store's refusal as the UI answers it: NotFound when the conversation is gone, else Conflict (closed)."""
        self._meta(name)
        return Conflict(f"{exc}: {what}")

    def conversation(self, name: str) -> dict[str, Any]:
        """Its meta and participants, each task with its tree node and state (``conversation_views``)."""
        meta = self._meta(name)
        participants = []
        for member in store_conversations.members(self.store, name):
            node = None
            if member.kind == "task":
                try:
                    record = self.store.get_task(member.id)
                    node = node_json(record.depth, record, self.store.waiting_for(member.id))
                except TaskNotFound:
                    node = None  # removed (retention): shown as gone
            participants.append(participant_json(member, node))
        return conversation_json(meta, participants)

    def conversation_posts(self, name: str, after: int, limit: int) -> list[dict[str, Any]]:
        self._meta(name)
        count = max(1, min(limit, POSTS_PAGE))
        return [post_json(item) for item in store_conversations.posts(self.store, name, after=max(0, after),
                                                                      limit=count)]

    def conversation_post(self, name: str, text: str, client_id: str) -> dict[str, Any]:
        """Post ``text`` as the local user (who joins first, as ``unicore conv post``), once per ``client_id``; deliver
        it and run the participants' trees in the background. A repeated id posts nothing and still delivers and
        runs (a request that failed after its post did not)."""
        check_post(text, client_id)
        self._meta(name)
        try:
            present = store_conversations.members(self.store, name)
            if not any(m.kind == "user" and m.id == self.person and not m.left for m in present):
                store_conversations.join(self.store, name, "user", self.person)
            seq = store_conversations.post(self.store, name, f"user:{client_id}", kind="post", sender_kind="user",
                                           sender=self.person, text=text)
        except store_conversations.ConversationError as exc:
            raise self._refused(name, exc, "it takes no more posts") from None
        store_conversations.deliver(self.store, name)
        self._run(name)
        return {"posted": seq > 0, "seq": seq or None}

    def conversation_control(self, name: str, action: str) -> dict[str, Any]:
        """Pause (posts kept, none delivered), resume (what waited is delivered, the trees run) or close (no more
        posts) it, as the local user."""
        status = status_of_action(action)
        self._meta(name)
        try:
            changed = store_conversations.set_status(self.store, name, status, self.person)
        except store_conversations.ConversationError as exc:
            raise self._refused(name, exc, f"it cannot {action}") from None
        if status == "open":
            self._run(name)
        return {"status": status, "changed": changed}

    def _tasks(self, tasks: list[str], *, existing: bool = True) -> list[str]:
        """``tasks`` when each is a task id (else BadRequest) and, with ``existing``, a task of the store (else
        NotFound naming those that are not, as ``unicore conv create|join`` says it)."""
        for task in tasks:
            try:
                validate_task_id(task)
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
        missing = [task for task in tasks if existing and not self.store.exists(task)]
        if missing:
            raise NotFound(f"no task {', '.join(missing)}: run it first (unicore run ... --name NAME, or New task)")
        return tasks

    def conversation_create(self, name: str, title: str, tasks: list[str], handoff_limit: int) -> dict[str, Any]:
        """Create it as ``unicore conv create`` does: titled ``title`` (its name when empty), created by the local
        user, who takes part, with ``tasks`` (which must exist) taking part. One that exists is kept as it is
        (``created`` False: title and limit unchanged), and the person and the tasks join it (idempotent). Nothing
        runs: joins are delivered to no one."""
        self._name(name)
        joining = self._tasks(check_create(title, tasks, handoff_limit))
        created = store_conversations.create(self.store, name, title=title or name, created_by=self.person,
                                             handoff_limit=handoff_limit)
        try:
            store_conversations.join(self.store, name, "user", self.person)
            for task in joining:
                store_conversations.join(self.store, name, "task", task)
        except store_conversations.ConversationError as exc:
            raise self._refused(name, exc, "it takes no new participants") from None
        return {"id": name, "created": created}

    def conversation_member(self, name: str, task: str, action: str) -> dict[str, Any]:
        """``join``: ``task`` (which must exist) takes part and gets the posts made from now on; ``leave``: it gets
        no more (a task removed since may leave too), as ``unicore conv join|leave``. ``changed`` False: it took part
        already, or did not."""
        check_member_action(action)
        self._meta(name)
        self._tasks([task], existing=action == "join")
        change = store_conversations.join if action == "join" else store_conversations.leave
        try:
            changed = change(self.store, name, "task", task)
        except store_conversations.ConversationError as exc:
            raise self._refused(name, exc, f"{task} cannot {action}") from None
        return {"changed": changed}

    def conversation_events(self, name: str, after: int, *, wait_seconds: float = CONVERSATION_POLL_SECONDS,
                            stop: threading.Event | None = None) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """The conversation's posts after ``after`` (``post``, in order) and its state (``conversation``: first, then
        when it changed), read every ``wait_seconds``; an empty name when nothing changed (a keepalive). The event id
        is the seq of the last post sent, so ``Last-Event-ID`` resumes with no gap and no duplicate."""
        self._meta(name)  # BadRequest / NotFound before the stream starts
        after = max(0, after)
        last_state: dict[str, Any] | None = None
        while stop is None or not stop.is_set():
            batch = store_conversations.posts(self.store, name, after=after, limit=POSTS_PAGE)
            for item in batch:
                after = item.seq
                yield str(after), "post", post_json(item)
            state = self.conversation(name)
            if state != last_state:
                last_state = state
                yield str(after), "conversation", state
            elif not batch:
                yield str(after), "", {}
            if len(batch) < POSTS_PAGE:
                if stop is not None:
                    stop.wait(wait_seconds)
                else:
                    time.sleep(wait_seconds)


__all__ = ["CONVERSATION_POLL_SECONDS", "LocalConversations"]
