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
- ``events(id)``: ``[{time, type, reason, message}]``, oldest first.

Errors a backend raises and the server answers: ``unicore.errors.TaskNotFound`` 404,
``unicore_client.ui.local_backend.BadRequest``
(a ``ValueError``) 400, ``Forbidden`` 403 and ``Unavailable`` 503 (below), each with its one-line message.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from unicore_client.ui.local_backend import Cursor

PHASES = ("queued", "running", "waiting", "suspended", "done", "failed")
TaskEvent = tuple[str, str, dict[str, Any]]  # (event id, event name, data); an empty name is a keepalive


class BackendRefusal(Exception):
    """A request the backend's source refused; the server answers ``status`` with the one-line message."""

    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = " ".join(message.split())  # one line, whatever the API server wrote


class Forbidden(BackendRefusal):
    """The user may not do this (the Kubernetes API server's or task API's 403, its reason in the message)."""

    status = 403


class Unavailable(BackendRefusal):
    """The source cannot answer now (API server or task API unreachable); the page may retry."""

    status = 503


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


__all__ = ["PHASES", "BackendRefusal", "Forbidden", "TaskEvent", "UIBackend", "Unavailable"]
