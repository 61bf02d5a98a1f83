"""``kubectl agenttask ui``'s backend: the web UI's ``UIBackend`` (``unicore_client.ui.backend_protocol``) over the
Kubernetes API server, with the user's kubeconfig only (never Redis, never a ServiceAccount of UniCore's), so every
request is authorized as that user:

- the tree: the AgentTasks the user may list, kept current by a watch (``ui_watch.TaskWatch``);
- a task, its transcript, its live answers, messages and approvals: the AgentTask (GET) and the task API's
  subresources (``summary``, ``transcript``, ``stream`` as a long poll, ``messages``, ``approvals``; ``proxy.py``);
- suspend, resume, stop (the task and every descendant), create (a form or YAML): AgentTask PATCH/CREATE as the user;
- Events: the AgentTask's core/v1 Events, listed as the user;
- shared conversations (issue 33): the task API's ``conversations``, through ``cluster_conversation_source``.

Task and conversation ids are ``<namespace>/<name>`` (a bare name: the context's namespace). A 403 becomes
``Forbidden`` with the API's reason (the server answers 403 with it; the task API's names the missing right and the
role that has it), a 404 ``TaskNotFound`` (a conversation's: ``NotFound``), a conversation's 409 (closed) ``Conflict``,
an unreachable API ``Unavailable``; anything else the API refused ``BadRequest``.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import yaml
from unicore.errors import TaskNotFound
from unicore.store.token_stream import SHOWN_KINDS

from unicore_client.kubectl_plugin.commands import kube_error
from unicore_client.kubectl_plugin.errors import NotFound as PluginNotFound
from unicore_client.kubectl_plugin.errors import PluginError
from unicore_client.kubectl_plugin.kube import GROUP, PLURAL, VERSION, KubeContext
from unicore_client.kubectl_plugin.proxy import TaskApiClient, task_path
from unicore_client.ui import cluster_nodes as ui_nodes
from unicore_client.ui.backend_protocol import TaskEvent
from unicore_client.ui.cluster_conversation_source import ClusterConversations
from unicore_client.ui.cluster_watch import TaskWatch, refusal
from unicore_client.ui.local_backend import Cursor
from unicore_client.ui.refusals import BadRequest
from unicore_client.ui.trace_links import cluster_trace

API_TIMEOUT_SECONDS = 10.0  # retrying the task API while the operator restarts, per request
STREAM_WAIT_SECONDS = 2.0  # a task stream's long poll (the task API allows 10); also how soon a phase change shows
QUIET_SECONDS = 10.0  # the tree feed's keepalive after this long without a change
COALESCE_SECONDS = 0.1  # after a change, this long for more before the forest is sent
TRANSCRIPT_LIMIT = 1000  # the task API's page cap
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
        self.conversation_source = ClusterConversations(kube, self.watch, self._get, api_timeout=api_timeout)

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

    def conversations(self) -> list[dict[str, Any]]:
        return self.conversation_source.conversations()

    def conversation(self, name: str) -> dict[str, Any]:
        return self.conversation_source.conversation(name)

    def conversation_posts(self, name: str, after: int, limit: int) -> list[dict[str, Any]]:
        return self.conversation_source.conversation_posts(name, after, limit)

    def conversation_post(self, name: str, text: str, client_id: str) -> dict[str, Any]:
        return self.conversation_source.conversation_post(name, text, client_id)

    def conversation_control(self, name: str, action: str) -> dict[str, Any]:
        return self.conversation_source.conversation_control(name, action)

    def conversation_create(self, name: str, title: str, tasks: list[str], handoff_limit: int) -> dict[str, Any]:
        return self.conversation_source.conversation_create(name, title, tasks, handoff_limit)

    def conversation_member(self, name: str, task: str, action: str) -> dict[str, Any]:
        return self.conversation_source.conversation_member(name, task, action)

    def conversation_events(self, name: str, after: int, *, wait_seconds: float = STREAM_WAIT_SECONDS,
                            stop: threading.Event | None = None) -> Iterator[TaskEvent]:
        return self.conversation_source.conversation_events(name, after, wait_seconds=wait_seconds, stop=stop)


def _later(a: str, b: str) -> str:
    """The later of two stream entry ids (``<ms>-<n>``)."""

    def key(entry_id: str) -> tuple[int, int]:
        ms, _, n = entry_id.partition("-")
        return int(ms), int(n or 0)

    return max(a, b, key=key)


__all__ = ["ClusterBackend"]
