"""``kubectl agenttask ui``'s shared conversations (issue 33) in cluster mode: ``ClusterConversations`` reads and
writes them through the task API's ``conversations`` (``proxy.conversation_path``, the client of ``kubectl agenttask
conv``) as the user, and ``ClusterBackend`` hands the UI's conversation methods to it: the list of the tree's
namespace(s), one conversation with its participants (a task's state from its AgentTask's status.phase, as the tree
shows it), posts after a seq, a post as the user (the page's client id is the task API's post id: taken once),
pause/resume/close, the live feed (a long poll of ``posts``), a new conversation (the user takes part) and a task's
join or leave (the requests of ``kubectl agenttask conv create|join|leave``); the JSON as in local mode
(``cluster_conversations``). Tasks are AgentTasks of the conversation's namespace (``<namespace>/<name>``, a bare
name in it): a task of another namespace is refused before any request.

A 403 becomes ``Forbidden`` (naming the right and the role), a 404 ``NotFound``, a 409 (closed) ``Conflict``, an
unreachable task API ``Unavailable``, anything else it refused ``BadRequest``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from unicore.errors import TaskNotFound

from unicore_client.kubectl_plugin.errors import NotFound as PluginNotFound
from unicore_client.kubectl_plugin.errors import PluginError
from unicore_client.kubectl_plugin.kube import KubeContext
from unicore_client.kubectl_plugin.proxy import TaskApiClient, conversation_path
from unicore_client.ui import cluster_conversations as conv_views
from unicore_client.ui import cluster_nodes as ui_nodes
from unicore_client.ui.backend_protocol import Conflict, Forbidden, NotFound, TaskEvent
from unicore_client.ui.cluster_watch import TaskWatch, refusal
from unicore_client.ui.conversation_views import (
    MAX_CONVERSATIONS,
    POSTS_PAGE,
    check_create,
    check_member_action,
    check_post,
    status_of_action,
)
from unicore_client.ui.refusals import BadRequest

CONVERSATION_WAIT_SECONDS = 2.0  # the live feed's long poll by default (as a task stream's)
CONVERSATION_WAIT_MAX = 30  # a conversation's long poll, at most (the task API holds one 30 s)
T = TypeVar("T")
GetTask = Callable[[str, str], dict[str, Any]]


class ClusterConversations:
    """The web UI's conversation methods over the task API (module doc). ``watch``: the tree's AgentTask cache (a
    participant's state, the namespaces listed); ``get_task``: a GET of an AgentTask as the user (``TaskNotFound``,
    ``Forbidden``) for a participant the watch does not cover."""

    def __init__(self, kube: KubeContext, watch: TaskWatch, get_task: GetTask, *, api_timeout: float) -> None:
        self.kube = kube
        self.watch = watch
        self._get = get_task
        self.conv_api = ConversationApiClient(kube, timeout=api_timeout)
        self._conv_lock = threading.Lock()
        self._conv_details: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}  # a list row's, by its last seq

    def _conv_id(self, conversation_id: str) -> tuple[str, str]:
        try:
            return conv_views.split_conversation(conversation_id, self.kube.namespace)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    def _conv_api(self, call: Callable[[], T]) -> T:
        try:
            return call()
        except PluginError as exc:
            raise _conversation_refused(exc) from None

    def _conv_get(self, namespace: str, name: str | None = None, subresource: str | None = None,
                  query: Sequence[tuple[str, Any]] = ()) -> dict[str, Any]:
        return self._conv_api(lambda: self.conv_api.get(conversation_path(namespace, name, subresource), query))

    def _conv_post(self, namespace: str, name: str, subresource: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._conv_api(lambda: self.conv_api.post(conversation_path(namespace, name, subresource), body))

    def _conversation_namespaces(self) -> list[str]:
        """The namespaces whose conversations are listed: the tree's; with every namespace, those of the AgentTasks
        the user sees and the context's own."""
        if self.watch.namespace is not None:
            return [self.watch.namespace]
        seen = {str((obj.get("metadata") or {}).get("namespace") or "") for obj in self.watch.snapshot()[1]}
        return sorted((seen | {self.kube.namespace}) - {""})

    def _details(self, namespace: str, item: dict[str, Any]) -> dict[str, Any] | None:
        """What a list row adds from a GET of the conversation (creator, who takes part), kept while its last seq is
        the same (a join, a leave and a status change are posts); None when it is gone meanwhile."""
        key = (namespace, str(item["name"]))
        posts = int(item.get("posts") or 0)
        with self._conv_lock:
            cached = self._conv_details.get(key)
        if cached is not None and cached[0] == posts:
            return cached[1]
        try:
            details = conv_views.details_of(self._conv_get(namespace, key[1], query=[("after", posts)]))
        except NotFound:
            return None
        except Forbidden:  # may list but not get: the row without its details
            return {}
        with self._conv_lock:
            self._conv_details[key] = (posts, details)
        return details

    def conversations(self) -> list[dict[str, Any]]:
        """The conversations of the namespace(s) shown (``_conversation_namespaces``), newest first, at most
        ``MAX_CONVERSATIONS``. With several namespaces, one the user may not list is left out (Forbidden only when
        every one is)."""
        namespaces = self._conversation_namespaces()
        found: list[dict[str, Any]] = []
        refused: list[Forbidden] = []
        listed: set[tuple[str, str]] = set()
        for namespace in namespaces:
            try:
                answer = self._conv_get(namespace)
            except Forbidden as exc:
                refused.append(exc)
                continue
            items = [item for item in answer.get("items") or [] if isinstance(item, dict) and item.get("name")]
            for item in items[-MAX_CONVERSATIONS:]:  # the store lists them oldest first
                listed.add((namespace, str(item["name"])))
                details = self._details(namespace, item)
                if details is not None:
                    found.append(conv_views.summary_of(namespace, item, details))
        if refused and len(refused) == len(namespaces):
            raise refused[0]
        with self._conv_lock:
            for key in [key for key in self._conv_details if key[0] in namespaces and key not in listed]:
                del self._conv_details[key]
        found.sort(key=lambda row: (row["created_at"], row["id"]), reverse=True)
        return found[:MAX_CONVERSATIONS]

    def _posts_count(self, namespace: str, name: str) -> int:
        """The conversation's last seq: from the namespace's list, else (may get but not list) by reading its posts
        page by page."""
        try:
            answer = self._conv_get(namespace)
        except Forbidden:
            after = 0
            while True:
                page = self._conv_get(namespace, name, "posts", [("after", after)])
                last = conv_views.last_seq(page)
                if last <= after or len(page.get("posts") or []) < POSTS_PAGE:
                    return max(after, last)
                after = last
        for item in answer.get("items") or []:
            if isinstance(item, dict) and item.get("name") == name:
                return int(item.get("posts") or 0)
        return 0  # not listed: the GET that follows says 404

    def _read_conversation(self, namespace: str, name: str) -> tuple[dict[str, Any], int]:
        """The Conversation object (with no posts but those newer than the count) and its last seq."""
        count = self._posts_count(namespace, name)
        conversation = self._conv_get(namespace, name, query=[("after", count)])
        return conversation, max(count, conv_views.last_seq(conversation))

    def _participant_nodes(self, conversation: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
        """Each task participant's tree node by task id (None: its AgentTask is gone), from the watch where it covers
        the task's namespace, else by a GET as the user (Forbidden when the user may not read it)."""
        nodes: dict[str, dict[str, Any] | None] = {}
        for member in conv_views.members_of(conversation):
            if member.kind != "task" or member.id in nodes:
                continue
            namespace, name = conv_views.task_of(member)
            if self.watch.covers(namespace) and self.watch.error is None:
                cached = self.watch.get(namespace, name)
                nodes[member.id] = None if cached is None else ui_nodes.node_of(cached)
                continue
            try:
                nodes[member.id] = ui_nodes.node_of(self._get(namespace, name))
            except TaskNotFound:
                nodes[member.id] = None
        return nodes

    def _conversation_json(self, namespace: str, name: str, conversation: dict[str, Any],
                           count: int) -> dict[str, Any]:
        return conv_views.conversation_of(namespace, name, conversation, count,
                                          self._participant_nodes(conversation))

    def conversation(self, name: str) -> dict[str, Any]:
        """Its meta and participants, each task with its tree node (from its AgentTask's status.phase) and state."""
        namespace, short = self._conv_id(name)
        conversation, count = self._read_conversation(namespace, short)
        return self._conversation_json(namespace, short, conversation, count)

    def conversation_posts(self, name: str, after: int, limit: int) -> list[dict[str, Any]]:
        namespace, short = self._conv_id(name)
        answer = self._conv_get(namespace, short, "posts", [("after", max(0, after))])
        return conv_views.posts_of(answer)[:max(1, min(limit, POSTS_PAGE))]

    def conversation_post(self, name: str, text: str, client_id: str) -> dict[str, Any]:
        """Post ``text`` as the user the API server authenticates (who joins, as ``kubectl agenttask conv post``);
        ``client_id`` is the task API's post id, which it takes once (a retry, the page's or the client's after a
        5xx, posts nothing). The operator delivers it and runs the turns it starts."""
        namespace, short = self._conv_id(name)
        check_post(text, client_id)
        receipt = self._conv_post(namespace, short, "posts", {"id": client_id, "text": text})
        seq = int(receipt.get("seq") or 0)
        posted = not receipt.get("duplicate") and seq > 0
        return {"posted": posted, "seq": seq if posted else None}

    def conversation_control(self, name: str, action: str) -> dict[str, Any]:
        """Pause, resume or close it as the user (the operator delivers what waited once it is resumed)."""
        namespace, short = self._conv_id(name)
        status = status_of_action(action)
        receipt = self._conv_post(namespace, short, "control", {"action": action})
        return {"status": str(receipt.get("status") or status),
                "changed": bool(receipt.get("changed"))}

    def _task_names(self, namespace: str, tasks: Sequence[str]) -> list[str]:
        """The AgentTask names of ``tasks`` (``<namespace>/<name>``, a bare name in ``namespace``); BadRequest, before
        any request, for an id that is none or a task of another namespace (a conversation's tasks are of its)."""
        names = []
        for task in tasks:
            try:
                task_namespace, name = ui_nodes.split_id(task, namespace)
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
            if task_namespace != namespace:
                raise BadRequest(f"task {task_namespace}/{name} is not in namespace {namespace}: a conversation's "
                                 "tasks are AgentTasks of its namespace")
            names.append(name)
        return names

    def conversation_create(self, name: str, title: str, tasks: list[str], handoff_limit: int) -> dict[str, Any]:
        """Create it as the user (who takes part, as ``kubectl agenttask conv create``) with ``tasks`` taking part;
        the task API answers 201 when it made it and 200 when it existed (kept as it is; the user and the tasks
        join it). A task that does not exist is its 404."""
        namespace, short = self._conv_id(name)
        names = self._task_names(namespace, check_create(title, tasks, handoff_limit))
        body = {"name": short, "title": title, "handoffLimit": handoff_limit, "tasks": names}
        status, _ = self._conv_api(lambda: self.conv_api.post_with_status(conversation_path(namespace), body))
        return {"id": f"{namespace}/{short}", "created": status == 201}

    def conversation_member(self, name: str, task: str, action: str) -> dict[str, Any]:
        """``task`` joins or leaves it (``POST .../members``, as ``kubectl agenttask conv join|leave``)."""
        namespace, short = self._conv_id(name)
        check_member_action(action)
        (task_name,) = self._task_names(namespace, [task])
        receipt = self._conv_post(namespace, short, "members", {"task": task_name, "action": action})
        return {"changed": bool(receipt.get("changed"))}

    def conversation_events(self, name: str, after: int, *, wait_seconds: float = CONVERSATION_WAIT_SECONDS,
                            stop: threading.Event | None = None) -> Iterator[TaskEvent]:
        """As ``LocalBackend.conversation_events``, from the task API: each round one long poll of ``posts`` (``wait``
        seconds; none while catching up), each post after ``after`` (``post``), then the conversation (``conversation``)
        when it changed: its participants' states from the watch each round, the Conversation object read again
        when posts came (joins, leaves, pauses and closes are posts) or its status changed; a keepalive after a quiet
        round. The event id is the last post's seq sent."""
        namespace, short = self._conv_id(name)
        wait = max(1, min(CONVERSATION_WAIT_MAX, math.ceil(wait_seconds)))
        conversation, count = self._read_conversation(namespace, short)  # NotFound / Forbidden before the stream
        read_at = count  # the seq the Conversation object read shows the conversation at
        after = max(0, after)
        last: dict[str, Any] | None = None
        catching_up = True
        while stop is None or not stop.is_set():
            query: list[tuple[str, Any]] = [("after", after)] + ([] if catching_up else [("wait", wait)])
            answer = self._conv_get(namespace, short, "posts", query)
            batch = conv_views.posts_of(answer)
            for post in batch:
                if post["seq"] > after:
                    after = post["seq"]
                    yield str(after), "post", post
            count = max(count, after)
            if after > read_at or answer.get("status") != conversation.get("status"):
                conversation = self._conv_get(namespace, short, query=[("after", after)])
                read_at = after
            state = self._conversation_json(namespace, short, conversation, count)
            if state != last:
                last = state
                yield str(after), "conversation", state
            elif not batch:
                yield str(after), "", {}  # a quiet long poll: the server sends a keepalive
            catching_up = len(batch) >= POSTS_PAGE


class _ConversationConflict(PluginError):
    """The task API's 409 for a conversation (closed: no post, no pause or resume), the server's message."""


class ConversationApiClient(TaskApiClient):
    """The plugin's task API client (``proxy.TaskApiClient``: the user's credentials, retries, its 403 and 404
    messages), with its 409 told apart, so that the UI answers it as a conflict."""

    def _error(self, method: str, path: str, status: int, payload: dict[str, Any]) -> PluginError:
        if status == 409:
            return _ConversationConflict(" ".join(str(payload.get("message") or payload).split()))
        return super()._error(method, path, status, payload)


def _conversation_refused(exc: PluginError) -> Exception:
    """A conversation request's failure as the UI's error: 409 Conflict, 404 NotFound, 403 Forbidden (naming the
    right and the role), 503 Unavailable, anything else the task API refused BadRequest (400)."""
    if isinstance(exc, _ConversationConflict):
        return Conflict(exc.message)
    if isinstance(exc, PluginNotFound):
        return NotFound(exc.message)
    if exc.__class__ is PluginError:
        return BadRequest(exc.message)
    return refusal(exc)


__all__ = ["CONVERSATION_WAIT_MAX", "CONVERSATION_WAIT_SECONDS", "ClusterConversations", "ConversationApiClient"]
