"""What the web UI's HTTP layer (``unicore_client.ui.server``) asks of a backend, so one server serves both modes:

- ``LocalBackend`` (``unicore_client.ui.local_backend``, ``unicore ui``): reads and writes Redis directly;
- ``ClusterBackend`` (``unicore_client.ui.cluster_backend``, ``kubectl agenttask ui``): talks only to the
  Kubernetes API server with the user's kubeconfig (AgentTasks, Events, and the task API's subresources), so every
  request is authorized as that user. Task ids there are ``<namespace>/<name>``.

JSON shapes (what ``static/app.js`` reads):

- a tree node (``forest()``, the ``tree`` feed): ``{id, parent, depth, phase, status, waiting, turns, tokens, model,
  created_at, updated_at, last, error}``; ``phase`` is one of ``PHASES`` (``waiting``: for a person, ``waiting``
  names what: ``"approval"`` or ``"input"``); times are epoch seconds;
- ``task(id)``: a node plus ``children`` (ids), ``messages`` (stored messages) and ``pending_calls``
  (``[{call_id, tool, input}]``) and ``jobs`` (its command Jobs, submit_job: ``[{name, state, gpus, command,
  exitCode once ended}]``) and ``trace`` (its tree's OpenTelemetry trace: ``{id, url}``, url "" without a page to
  link to; ``None`` without a trace; ``unicore_client.ui.trace_links``);
- a message: ``{seq, role, turn_number (from 0), content: [blocks]}``, blocks ``{"text"}``, ``{"toolUse": {toolUseId,
  name, input}}``, ``{"toolResult": {toolUseId, status, content: [{"text"} | {"json"}]}}``;
- ``events(id)``: ``[{time, type, reason, message}]``, oldest first;
- shared conversations (issue 33; the rules: ``unicore.conversations``), in both modes (a conversation's id: its
  name in local mode, ``<namespace>/<name>`` in cluster mode, where what the task API does not say is None:
  ``handoffs`` and a participant's ``joined_at``; ``unicore_client.ui.cluster_conversations``):

  - ``conversations()``: ``[{id, title, status, created_by, created_at, posts, agents, people}]``, newest first;
    ``status`` ``open`` | ``paused`` | ``closed``, ``posts`` the last post's seq, ``agents`` / ``people`` the names
    of those taking part now;
  - ``conversation(name)``: ``{id, title, status, created_by, created_at, posts, handoff_limit, handoffs,
    participants}``, a participant ``{kind: "task" | "user", id, name, left, joined_at, state, task}``: ``state``
    one of ``PARTICIPANT_STATES`` (a task's from its tree row's ``phase``: ``done`` and ``queued`` are ``idle``;
    a person's ``person``), ``task`` the task's tree node (above) or ``None`` (a person, a task gone);
  - a post (``conversation_posts``, the ``post`` event): ``{seq, id, kind, sender_kind, sender, name, text, at}``,
    ``kind`` post | answer | joined | left | note, ``sender_kind`` task | user | system, ``name`` the sender as
    shown (a task's name, a person's user name, ``""`` for the conversation itself), ``at`` epoch seconds;
  - ``conversation_post(name, text, client_id)``: ``{posted, seq}`` (``posted`` False, ``seq`` None: that client
    id was posted before); ``conversation_control(name, action)``: ``{status, changed}``;
  - ``conversation_create(name, title, tasks, handoff_limit)``: ``{id, created}`` (``id`` the conversation's, as
    above; ``created`` False: it existed and is kept as it is, title and limit unchanged, and the person and the
    tasks join it, as ``unicore conv create`` and the task API do); the person using the UI takes part; ``tasks``
    are task ids (cluster mode: of the conversation's namespace, a bare name in it), at most 64, that must exist;
  - ``conversation_member(name, task, action)``: ``{changed}`` (``action`` ``join`` | ``leave``; False: the task took
    part already, or did not).

Errors a backend raises and the server answers: ``unicore.errors.TaskNotFound`` 404, and those of
``unicore_client.ui.refusals`` (re-exported here): ``BadRequest`` (a ``ValueError``) 400, ``Forbidden`` 403,
``NotFound`` 404 (a conversation; a task a conversation names), ``Conflict`` 409 (a closed conversation's post,
control, join or leave), ``NotSupported`` 501 and ``Unavailable`` 503, each with its one-line message.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from unicore_client.ui.refusals import (
    BackendRefusal,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    NotSupported,
    Unavailable,
)

if TYPE_CHECKING:
    from unicore_client.ui.local_backend import Cursor

PHASES = ("queued", "running", "waiting", "suspended", "done", "failed")
PARTICIPANT_STATES = ("running", "idle", "waiting", "suspended", "failed", "gone", "left", "person")
CONVERSATION_ACTIONS = ("pause", "resume", "close")
TaskEvent = tuple[str, str, dict[str, Any]]  # (event id, event name, data); an empty name is a keepalive


class UIBackend(Protocol):
    """The reads and writes of the web UI; shapes and errors in the module doc."""

    def roots(self) -> list[str]: ...

    def forest(self) -> list[dict[str, Any]]:
        """Every root's tree, flattened depth first (newest root first), bounded."""
        ...

    def tree_changes(self, stop: threading.Event) -> Iterator[list[dict[str, Any]] | None]:
        """The tree feed of ``GET /api/events``: the forest now, then again each time it changed; ``None`` after a
        quiet while (the server sends a keepalive). Raises before its first item when the tree cannot be read."""
        ...

    def task(self, task_id: str) -> dict[str, Any]: ...

    def messages(self, task_id: str, start: int, count: int) -> list[dict[str, Any]]: ...

    def events(self, task_id: str) -> list[dict[str, Any]]:
        """The task's Kubernetes Events (local mode: derived from what the store recorded), oldest first."""
        ...

    def create(self, prompt: str, model: str, name: str | None, gated: list[str] | None = None,
               limits: dict[str, Any] | None = None) -> str:
        """Create a root task; its id. ``limits``: ``schema.Limits`` fields by name (the others: defaults)."""
        ...

    def create_from_yaml(self, text: str) -> str:
        """Create the task an AgentTask manifest describes; its id."""
        ...

    def send(self, task_id: str, text: str, client_id: str) -> bool:
        """Queue ``text`` once per ``client_id``; False when that id was queued before."""
        ...

    def decide(self, task_id: str, call_id: str, approve: bool) -> None: ...

    def suspend(self, task_id: str) -> None: ...

    def resume(self, task_id: str) -> None: ...

    def stop(self, task_id: str) -> list[str]:
        """Suspend the task and every descendant; the ids suspended (the task first)."""
        ...

    def task_events(self, task_id: str, cursor: Cursor | int, *, wait_seconds: float = ...,
                    stop: threading.Event | None = None) -> Iterator[TaskEvent]:
        """A task's SSE events (``message``, ``token``, ``task``; see ``LocalBackend.task_events``)."""
        ...

    def conversations(self) -> list[dict[str, Any]]:
        """Every conversation, newest first, bounded."""
        ...

    def conversation(self, name: str) -> dict[str, Any]:
        """One conversation: its meta and participants with their live state."""
        ...

    def conversation_posts(self, name: str, after: int, limit: int) -> list[dict[str, Any]]:
        """Its posts with seq > ``after``, oldest first, at most ``limit`` (bounded)."""
        ...

    def conversation_post(self, name: str, text: str, client_id: str) -> dict[str, Any]:
        """Post ``text`` as the person using the UI, once per ``client_id``; the tasks it reaches run."""
        ...

    def conversation_control(self, name: str, action: str) -> dict[str, Any]:
        """``pause``, ``resume`` or ``close`` it (one of ``CONVERSATION_ACTIONS``)."""
        ...

    def conversation_create(self, name: str, title: str, tasks: list[str], handoff_limit: int) -> dict[str, Any]:
        """Create it as the person using the UI (who takes part), titled ``title`` (its name when empty), with
        ``tasks`` taking part and ``handoff_limit`` hand-offs per person's post; one that exists is kept."""
        ...

    def conversation_member(self, name: str, task: str, action: str) -> dict[str, Any]:
        """``task`` joins (``action`` ``join``: it gets the posts made from now on) or leaves (``leave``: it gets no
        more)."""
        ...

    def conversation_events(self, name: str, after: int, *, wait_seconds: float = ...,
                            stop: threading.Event | None = None) -> Iterator[TaskEvent]:
        """A conversation's SSE events: ``conversation`` (as ``conversation(name)``) first and when it changed,
        ``post`` for each post after ``after``, in order; the event id is the last post's seq sent."""
        ...


__all__ = ["CONVERSATION_ACTIONS", "PARTICIPANT_STATES", "PHASES", "BackendRefusal", "BadRequest", "Conflict",
           "Forbidden", "NotFound", "NotSupported", "TaskEvent", "UIBackend", "Unavailable"]
