"""``kubectl agenttask ui``'s backend: the web UI's ``UIBackend`` (``unicore_client.ui.backend_protocol``) over the
Kubernetes API server, with the user's kubeconfig only (never Redis, never a ServiceAccount of UniCore's), so every
request is authorized as that user:

- the tree: the AgentTasks the user may list, kept current by a watch (``ui_watch.TaskWatch``);
- a task, its transcript, its live answers, messages and approvals: the AgentTask (GET) and the task API's
  subresources (``summary``, ``transcript``, ``stream`` as a long poll, ``messages``, ``approvals``; ``proxy.py``);
- suspend, resume, stop (the task and every descendant), create (a form or YAML): AgentTask PATCH/CREATE as the user;
- Events: the AgentTask's core/v1 Events, listed as the user;
- shared conversations (issue 33): the task API's ``conversations`` (``proxy.conversation_path``, the client of
  ``kubectl agenttask conv``): the list of the tree's namespace(s), one conversation with its participants (a task's
  state from its AgentTask's status.phase, as the tree shows it), posts after a seq, a post as the user (the page's
  client id is the task API's post id: taken once), pause/resume/close, and the live feed (a long poll of ``posts``);
  the JSON as in local mode (``cluster_conversations``).

Task and conversation ids are ``<namespace>/<name>`` (a bare name: the context's namespace). A 403 becomes
``Forbidden`` with the API's reason (the server answers 403 with it; the task API's names the missing right and the
role that has it), a 404 ``TaskNotFound`` (a conversation's: ``NotFound``), a conversation's 409 (closed) ``Conflict``,
an unreachable API ``Unavailable``; anything else the API refused ``BadRequest``.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import yaml
from unicore.errors import TaskNotFound
from unicore.store.token_stream import SHOWN_KINDS

from unicore_client.kubectl_plugin.commands import kube_error
from unicore_client.kubectl_plugin.errors import NotFound as PluginNotFound
from unicore_client.kubectl_plugin.errors import PluginError
from unicore_client.kubectl_plugin.kube import GROUP, PLURAL, VERSION, KubeContext
from unicore_client.kubectl_plugin.proxy import TaskApiClient, conversation_path, task_path
from unicore_client.ui import cluster_conversations as conv_views
from unicore_client.ui import cluster_nodes as ui_nodes
from unicore_client.ui.backend_protocol import Conflict, Forbidden, NotFound, TaskEvent
from unicore_client.ui.cluster_watch import TaskWatch, refusal
from unicore_client.ui.conversation_views import MAX_CONVERSATIONS, POSTS_PAGE, check_post, status_of_action
from unicore_client.ui.local_backend import Cursor
from unicore_client.ui.refusals import BadRequest
from unicore_client.ui.trace_links import cluster_trace

API_TIMEOUT_SECONDS = 10.0  # retrying the task API while the operator restarts, per request
STREAM_WAIT_SECONDS = 2.0  # a task stream's long poll (the task API allows 10); also how soon a phase change shows
QUIET_SECONDS = 10.0  # the tree feed's keepalive after this long without a change
COALESCE_SECONDS = 0.1  # after a change, this long for more before the forest is sent
TRANSCRIPT_LIMIT = 1000  # the task API's page cap
CONVERSATION_WAIT_MAX = 30  # a conversation's long poll, at most (the task API holds one 30 s)
T = TypeVar("T")


def _refused(exc: PluginError) -> Exception:
    if isinstance(exc, PluginNotFound):
        return TaskNotFound(exc.message)
    if exc.__class__ is PluginError:  # the API answered but refused the request (409, 410, 422, ...)
        return BadRequest(exc.message)
    return refusal(exc)


class ClusterBackend:
    """The UI's reads and writes in cluster mode (module doc). ``namespace``: the tree's (None: every namespace the
    user may list); bare names and created tasks use ``kube.namespace``."""

    def __init__(self, kube: KubeContext, namespace: str | None, *, api_timeout: float = API_TIMEOUT_SECONDS) -> None:
        self.kube = kube
        self.watch = TaskWatch(kube, namespace)
        self.api = TaskApiClient(kube, timeout=api_timeout)
        self.conv_api = ConversationApiClient(kube, timeout=api_timeout)
        self._conv_lock = threading.Lock()
        self._conv_details: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}  # a list row's, by its last seq

    def start(self) -> ClusterBackend:
        """The first list of the tree (Forbidden / Unavailable with the API's reason), then its watch."""
        self.watch.start()
        return self

    def close(self) -> None:
        self.watch.close()

    # ------------------------------------------------------------------ helpers

    def _id(self, task_id: str) -> tuple[str, str]:
        try:
            return ui_nodes.split_id(task_id, self.kube.namespace)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    def _kube(self, call: Callable[[], T], *, verb: str, what: str, namespace: str) -> T:
        """A Kubernetes API call as the user, its failure as the UI's error (module doc)."""
        try:
            return call()
        except Exception as exc:
            raise _refused(kube_error(exc, verb=verb, what=what, namespace=namespace)) from None

    def _task_api(self, call: Callable[[], T]) -> T:
        try:
            return call()
        except PluginError as exc:
            raise _refused(exc) from None

    def _get(self, namespace: str, name: str) -> dict[str, Any]:
        obj = self._kube(lambda: self.kube.custom().get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                                                  name),
                         verb="get", what=f'agenttask "{name}"', namespace=namespace)
        return dict(obj)

    def _listed(self, namespace: str) -> list[dict[str, Any]]:
        if self.watch.covers(namespace) and self.watch.error is None:
            return self.watch.snapshot()[1]
        listed = self._kube(lambda: self.kube.custom().list_namespaced_custom_object(GROUP, VERSION, namespace,
                                                                                      PLURAL),
                            verb="list", what="agenttasks", namespace=namespace)
        return list(listed.get("items") or [])

    def _stream(self, namespace: str, name: str, after: str | None, wait: int) -> dict[str, Any]:
        query: list[tuple[str, Any]] = [] if after is None else [("after", after), ("wait", wait)]
        return self._task_api(lambda: self.api.get(task_path(namespace, name, "stream"), query))

    def _transcript(self, namespace: str, name: str, since: int, limit: int) -> dict[str, Any]:
        query = [("since", since), ("limit", max(1, min(limit, TRANSCRIPT_LIMIT))), ("tools", True)]
        return self._task_api(lambda: self.api.get(task_path(namespace, name, "transcript"), query))

    # ------------------------------------------------------------------ reads

    def roots(self) -> list[str]:
        return [node["id"] for node in self.forest() if node["depth"] == 0]

    def forest(self) -> list[dict[str, Any]]:
        if self.watch.error is not None:
            raise self.watch.error
        return ui_nodes.forest_of(self.watch.snapshot()[1])

    def tree_changes(self, stop: threading.Event) -> Iterator[list[dict[str, Any]] | None]:
        """The forest now, then each time the watch saw a change (``None`` after QUIET_SECONDS without one)."""
        seen = -1
        last: list[dict[str, Any]] | None = None
        while not stop.is_set():
            version = self.watch.wait_changed(seen, QUIET_SECONDS) if seen >= 0 else self.watch.version
            if version == seen:
                yield None
                continue
            if seen >= 0:
                stop.wait(COALESCE_SECONDS)  # a burst of changes (a tree spawning) becomes one event
            seen = self.watch.version
            nodes = self.forest()  # Forbidden when the watch lost the right to list
            if nodes != last:
                last = nodes
                yield nodes

    def task(self, task_id: str) -> dict[str, Any]:
        namespace, name = self._id(task_id)
        obj = self._get(namespace, name)
        node = ui_nodes.node_of(obj)
        status = obj.get("status") or {}
        node["children"] = [f"{namespace}/{child['name']}" for child in status.get("children") or []
                            if child.get("name")]
        state = self._stream(namespace, name, None, 0).get("state") or {}
        node["messages"] = int(state.get("messages") or 0)
        node["busy"] = bool(state.get("busy"))
        node["jobs"] = [job for job in status.get("jobs") or [] if isinstance(job, dict)]  # status.jobs as it is
        node["trace"] = cluster_trace(status.get("trace"))  # status.trace: {id, url} (ui.trace_links); None: none
        node["pending_calls"] = []
        if node["waiting"] == "approval":
            listed = self._task_api(lambda: self.api.get(task_path(namespace, name, "approvals")))
            node["pending_calls"] = [{"call_id": call.get("callId"), "tool": call.get("tool"),
                                      "input": call.get("input")}
                                     for call in listed.get("pending") or [] if call.get("kind") == "approval"]
        return node

    def messages(self, task_id: str, start: int, count: int) -> list[dict[str, Any]]:
        namespace, name = self._id(task_id)
        if count <= 0:
            return []
        page = self._transcript(namespace, name, max(0, start), count)
        return [ui_nodes.message_of(message) for message in page.get("messages") or []]

    def events(self, task_id: str) -> list[dict[str, Any]]:
        namespace, name = self._id(task_id)
        selector = f"involvedObject.name={name},involvedObject.kind=AgentTask"
        listed = self._kube(lambda: self.kube.core().list_namespaced_event(namespace, field_selector=selector),
                            verb="list", what="events", namespace=namespace)
        events = [ui_nodes.event_of(self.kube.api_client.sanitize_for_serialization(item)) for item in listed.items]
        return sorted(events, key=lambda event: event["time"] or 0.0)

    # ------------------------------------------------------------------ writes

    def _create(self, namespace: str, body: dict[str, Any]) -> str:
        created = self._kube(lambda: self.kube.custom().create_namespaced_custom_object(GROUP, VERSION, namespace,
                                                                                         PLURAL, body),
                             verb="create", what="agenttasks", namespace=namespace)
        return ui_nodes.task_id_of(created)

    def create(self, prompt: str, model: str, name: str | None, gated: list[str] | None = None,
               limits: dict[str, Any] | None = None) -> str:
        """A root AgentTask (in ``<namespace>/`` of ``name``, else the UI's namespace); ``limits`` by
        ``schema.Limits`` field (snake_case, as in local mode), written as the spec's camelCase keys (the API
        server checks the bounds)."""
        if not prompt.strip():
            raise BadRequest("the prompt is empty")
        namespace, name = self._id(name or f"task-{uuid.uuid4().hex[:8]}")
        spec: dict[str, Any] = {"prompt": prompt, "model": model or "scripted"}
        if gated:
            spec["approval"] = {"tools": list(dict.fromkeys(gated))}
        if limits:
            spec["limits"] = ui_nodes.spec_limits(limits)
        return self._create(namespace, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentTask",
                                        "metadata": {"name": name}, "spec": spec})

    def create_from_yaml(self, text: str) -> str:
        """The AgentTask the YAML describes (apiVersion and kind may be left out), in its metadata.namespace or the
        UI's; the API server validates the rest (its message comes back as a 400)."""
        try:
            body = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise BadRequest(f"not YAML: {' '.join(str(exc).split())}") from None
        if not isinstance(body, dict):
            raise BadRequest("the YAML is one AgentTask object (a mapping with metadata and spec)")
        body.setdefault("apiVersion", f"{GROUP}/{VERSION}")
        body.setdefault("kind", "AgentTask")
        if (body["apiVersion"], body["kind"]) != (f"{GROUP}/{VERSION}", "AgentTask"):
            raise BadRequest(f"not an AgentTask ({GROUP}/{VERSION}): apiVersion {body['apiVersion']!r}, kind "
                             f"{body['kind']!r}")
        metadata = body.get("metadata")
        if not isinstance(metadata, dict) or not (metadata.get("name") or metadata.get("generateName")):
            raise BadRequest("metadata.name (or metadata.generateName) is required")
        namespace = str(metadata.get("namespace") or self.kube.namespace)
        return self._create(namespace, body)

    def send(self, task_id: str, text: str, client_id: str) -> bool:
        namespace, name = self._id(task_id)
        if not text.strip():
            raise BadRequest("the message is empty")
        receipt = self._task_api(lambda: self.api.post(task_path(namespace, name, "messages"),
                                                       {"id": client_id, "text": text}))
        return not receipt.get("duplicate")

    def decide(self, task_id: str, call_id: str, approve: bool) -> None:
        namespace, name = self._id(task_id)
        body = {"callId": call_id, "decision": "approve" if approve else "deny", "reason": ""}
        self._task_api(lambda: self.api.post(task_path(namespace, name, "approvals"), body))

    def _set_suspend(self, namespace: str, name: str, suspend: bool) -> None:
        patch = {"spec": {"suspend": suspend}}
        self._kube(lambda: self.kube.custom().patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                                                              patch),
                   verb="patch", what=f'agenttask "{name}"', namespace=namespace)

    def suspend(self, task_id: str) -> None:
        self._set_suspend(*self._id(task_id), True)

    def resume(self, task_id: str) -> None:
        self._set_suspend(*self._id(task_id), False)

    def stop(self, task_id: str) -> list[str]:
        """The task suspended first (its turn stops, it spawns no more), then its descendants, parents first; a
        second look catches children created meanwhile."""
        namespace, name = self._id(task_id)
        self._set_suspend(namespace, name, True)
        done = [name]
        for _ in range(2):
            for child in ui_nodes.descendants(self._listed(namespace), namespace, name):
                if child not in done:
                    self._set_suspend(namespace, child, True)
                    done.append(child)
        return [f"{namespace}/{each}" for each in done]

    # ------------------------------------------------------------------ live events

    def _state_node(self, namespace: str, name: str) -> dict[str, Any]:
        cached = self.watch.get(namespace, name) if self.watch.covers(namespace) else None
        return ui_nodes.node_of(cached if cached is not None else self._get(namespace, name))

    def task_events(self, task_id: str, cursor: Cursor | int, *, wait_seconds: float = STREAM_WAIT_SECONDS,
                    stop: threading.Event | None = None) -> Iterator[TaskEvent]:
        """As ``LocalBackend.task_events``, from the task API: each round one long poll of ``stream`` (the entries
        after the cursor and the task's state), then the transcript up to the state's stored messages (``message``),
        the task's node when it changed (``task``), the live text of calls not stored yet (``token``)."""
        namespace, name = self._id(task_id)
        wait = max(1, min(10, math.ceil(wait_seconds)))
        first = self._stream(namespace, name, None, 0)  # Forbidden / TaskNotFound before the stream starts
        entries = list(first.get("entries") or [])
        if isinstance(cursor, int):
            cursor = Cursor(cursor, "0" if entries else str(first.get("next") or "0"))
        else:
            entries = []  # resumed: what comes after its cursor, below
        answer: dict[str, Any] | None = first
        last_node: dict[str, Any] | None = None
        while stop is None or not stop.is_set():
            if answer is None:
                answer = self._stream(namespace, name, cursor.tokens, wait)
                entries = list(answer.get("entries") or [])
            state = answer.get("state") or {}
            stored = int(state.get("messages") or 0)
            while cursor.messages < stored:
                page = self._transcript(namespace, name, cursor.messages, stored - cursor.messages)
                if not page.get("messages"):
                    break
                for message in page["messages"]:
                    cursor = Cursor(cursor.messages + 1, cursor.tokens)
                    yield cursor.text(), "message", ui_nodes.message_of(message)
            node = {**self._state_node(namespace, name), "busy": bool(state.get("busy")), "messages": stored}
            if node != last_node:
                last_node = node
                yield cursor.text(), "task", node
            for entry in entries:
                cursor = Cursor(cursor.messages, _later(cursor.tokens, str(entry["id"])))
                if entry.get("kind") in SHOWN_KINDS and int(entry.get("seq") or 0) >= cursor.messages:
                    yield cursor.text(), "token", {"seq": entry["seq"], "attempt": entry.get("attempt", 0),
                                                   "kind": entry["kind"], "text": entry.get("text", "")}
            if not entries and answer is not first:
                yield cursor.text(), "", {}  # a quiet long poll: the server sends a keepalive
            answer = None

    # ------------------------------------------------------------------ conversations (issue 33)

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

    def conversation_events(self, name: str, after: int, *, wait_seconds: float = STREAM_WAIT_SECONDS,
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


def _later(a: str, b: str) -> str:
    """The later of two stream entry ids (``<ms>-<n>``)."""

    def key(entry_id: str) -> tuple[int, int]:
        ms, _, n = entry_id.partition("-")
        return int(ms), int(n or 0)

    return max(a, b, key=key)


__all__ = ["ClusterBackend"]
