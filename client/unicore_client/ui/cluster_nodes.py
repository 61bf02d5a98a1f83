"""``kubectl agenttask ui``: what the cluster's answers become in the web UI's JSON (the shapes of
``unicore_client.ui.backend_protocol``), as pure functions: AgentTask objects -> tree nodes and the forest, task API
transcript messages -> the page's messages, Events -> ``{time, type, reason, message}``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from unicore.api.schema import Limits
from unicore.api.spec import LimitsSpec, spec_key, task_spec_of
from unicore.api.turn_numbers import stored_turn

from unicore_client.kubectl_plugin.humanize import parse_time
from unicore_client.kubectl_plugin.tree_view import parent_name, task_forest
from unicore_client.tree import newest_first

MAX_ROOTS = 200  # as the local UI: roots shown (newest first) ...
MAX_NODES = 1000  # ... and tasks in all
NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# AgentTask phase -> the page's phase (``backend_protocol.PHASES``); Waiting = its children still work, WaitingForJobs
# = its command Jobs (submit_job) still run
PHASE_OF = {"Pending": "queued", "Running": "running", "Waiting": "running", "WaitingForJobs": "running",
            "WaitingForApproval": "waiting",
            "WaitingForInput": "waiting", "Suspended": "suspended", "Idle": "done", "Archived": "done",
            "Failed": "failed"}
WAITING_OF = {"WaitingForApproval": "approval", "WaitingForInput": "input"}


def split_id(task_id: str, default_namespace: str) -> tuple[str, str]:
    """``<namespace>/<name>`` (a bare name: in ``default_namespace``); ValueError naming what is wrong."""
    namespace, _, name = task_id.rpartition("/")
    namespace = namespace or default_namespace
    if not NAMESPACE.match(namespace) or not NAME.match(name):
        raise ValueError(f"bad task id {task_id!r}: expected <namespace>/<name> (lower-case DNS names)")
    return namespace, name


def task_id_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _epoch(value: Any) -> float | None:
    parsed = parse_time(value)
    return parsed.timestamp() if parsed else None


def node_of(obj: Mapping[str, Any], depth: int | None = None) -> dict[str, Any]:
    """A tree node (the page's shape) of an AgentTask object; ``status`` is the AgentTask's phase."""
    meta = obj.get("metadata") or {}
    spec = task_spec_of(obj)
    status = obj.get("status") or {}
    phase = str(status.get("phase") or "")
    parent = parent_name(obj)
    created = _epoch(meta.get("creationTimestamp")) or 0.0
    ended = _epoch((status.get("lastTurn") or {}).get("endedAt"))
    message = str(status.get("message") or "")
    return {
        "phase": PHASE_OF.get(phase, "queued"), "id": task_id_of(obj),
        "parent": f"{meta.get('namespace', '')}/{parent}" if parent else None,
        "depth": int(status.get("depth") or 0) if depth is None else depth,
        "status": phase or "New", "waiting": WAITING_OF.get(phase),
        "turns": int(status.get("turns") or 0), "tokens": int(status.get("tokens") or 0),
        "model": str(status.get("model") or spec.model or "scripted"),
        "created_at": created, "updated_at": max(created, ended or created),
        "last": str(status.get("lastResponse") or "")[:200],
        "error": message[:500] if phase == "Failed" else "",
        "message": message[:500],  # what the phase waits for or why it failed (the AgentTask's status.message)
        "suspended": spec.suspend,
        "origin": origin_text(status.get("origin")),  # what started it (issue 31); shown as text, never as HTML
    }


def origin_text(origin: Any) -> str:
    """``status.origin`` of an AgentTask in a few words (``schedule nightly``, ``trigger alerts``, ``a2a advisor``)."""
    if not isinstance(origin, Mapping) or not origin.get("kind"):
        return ""
    kind = {"AgentSchedule": "schedule", "AgentTrigger": "trigger"}.get(str(origin["kind"]), "a2a")
    return f"{kind} {str(origin.get('name') or '')[:100]}"


def forest_of(objects: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every root's tree, flattened depth first (newest root first, siblings oldest first), at most MAX_NODES tasks
    of MAX_ROOTS roots; a task whose parent the user cannot see is a root."""
    forest = task_forest(objects)
    return [node_of(row.item, depth)
            for depth, row in forest.walk(newest_first(forest.roots)[:MAX_ROOTS], max_nodes=MAX_NODES)]


def descendants(objects: Iterable[Mapping[str, Any]], namespace: str, name: str) -> list[str]:
    """The names of ``name``'s descendants among ``objects`` (its namespace's AgentTasks), parents before children."""
    children: dict[str, list[str]] = {}
    for obj in objects:
        meta = obj.get("metadata") or {}
        parent = parent_name(obj)
        if meta.get("namespace") == namespace and parent:
            children.setdefault(parent, []).append(str(meta.get("name")))
    found: list[str] = []
    queue = list(children.get(name, []))
    while queue:
        child = queue.pop(0)
        if child in found or child == name:
            continue
        found.append(child)
        queue.extend(children.get(child, []))
    return found


def spec_limits(limits: Mapping[str, Any]) -> dict[str, Any]:
    """``schema.Limits`` fields by name (``max_children``) -> ``spec.limits`` (``maxChildren``); ValueError naming
    an unknown one."""
    unknown = sorted(set(limits) - set(Limits.model_fields))
    if unknown:
        raise ValueError(f"limits: no such limit {', '.join(unknown)} (known: {', '.join(Limits.model_fields)})")
    return {spec_key(LimitsSpec, key): value for key, value in limits.items()}


def message_of(message: Mapping[str, Any]) -> dict[str, Any]:
    """A task API transcript message (``tools=true``; turns from 1) as the page's message (``turn_number`` from 0)."""
    return {"seq": int(message.get("seq") or 0), "role": message.get("role"),
            "turn_number": stored_turn(int(message.get("turn") or 1)), "timestamp": message.get("timestamp"),
            "content": list(message.get("content") or [])}


def event_of(event: Mapping[str, Any]) -> dict[str, Any]:
    """A core/v1 Event (as the API serializes it) as ``{time, type, reason, message}``; time in epoch seconds."""
    meta = event.get("metadata") or {}
    when = (event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp")
            or meta.get("creationTimestamp"))
    return {"time": _epoch(when), "type": str(event.get("type") or ""), "reason": str(event.get("reason") or ""),
            "message": str(event.get("message") or "")}


__all__ = ["descendants", "event_of", "forest_of", "message_of", "node_of", "spec_limits", "split_id", "task_id_of"]
