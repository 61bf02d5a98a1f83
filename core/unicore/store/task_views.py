"""A task record (``uc:{T}:task``) as the tools, policy, prompts and local spawner read it: ``TaskView``, decoded
tolerantly from the raw hash (bytes or str) or from a dict of record fields. The field names of the stored record are
this package's knowledge (``records.TaskRecord`` writes them); ``unicore.tools.storeview`` re-exports these."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from unicore.api.schema import Limits
from unicore.store.codec import text, to_float, to_int

__all__ = ["TaskView", "view_from_mapping"]


def _json(value: Any, default: Any) -> Any:
    if value is None or value == "" or value == b"":
        return default
    if not isinstance(value, str | bytes):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return default


def _limits(value: Any) -> Limits:
    if isinstance(value, Limits):
        return value
    raw = _json(value, {})
    if isinstance(raw, BaseModel):
        raw = raw.model_dump()
    try:
        return Limits.model_validate(raw or {})
    except ValueError:
        return Limits.model_validate({})


def _names(value: Any) -> list[str] | None:
    raw = _json(value, None)
    if raw is None:
        return None
    return [str(name) for name in raw]


@dataclass(frozen=True)
class TaskView:
    """What the tools need to know about one task record."""

    id: str
    parent: str | None = None
    root: str = ""
    depth: int = 0
    model: str = "scripted"
    system_prompt: str = ""
    tools: list[str] | None = None
    child_tools: list[str] | None = None
    limits: Limits = field(default_factory=lambda: Limits.model_validate({}))
    script: dict[str, Any] | None = None
    status: str = "idle"
    turns: int = 0
    iterations: int = 0  # model calls
    tool_iterations: int = 0  # model calls that asked for tools
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    tree_total_tokens: int = 0  # rolled up on the root by the store
    created_at: float = 0.0
    updated_at: float = 0.0
    last_response: str = ""
    model_call_started_at: float = 0.0  # optional record field; 0 = unknown / not in a call
    agent: str | None = None  # the agent the task narrows (``unicore.agents``)
    agents: list[str] | None = None  # the agents it may spawn by name (its agent's, as of its last turn start)

    @property
    def root_id(self) -> str:
        return self.root or self.id


def view_from_mapping(data: Mapping[Any, Any]) -> TaskView:
    """Parse a task record hash (``uc:{T}:task``, bytes or str) or a dict of record fields."""
    fields = {text(k): v for k, v in data.items()}
    parent = fields.get("parent")
    parent_id = text(parent) if parent not in (None, "", b"") else None
    task_id = text(fields.get("id", ""))
    root = fields.get("root")
    script = _json(fields.get("script"), None)
    return TaskView(
        id=task_id,
        parent=parent_id,
        root=text(root) if root not in (None, "", b"") else "",
        depth=to_int(fields.get("depth", 0)),
        model=text(fields.get("model", "scripted")),
        system_prompt=text(fields.get("system_prompt", "")),
        tools=_names(fields.get("tools")),
        child_tools=_names(fields.get("child_tools")),
        limits=_limits(fields.get("limits")),
        script=script if isinstance(script, dict) else None,
        status=text(fields.get("status", "idle")),
        turns=to_int(fields.get("turns", 0)),
        iterations=to_int(fields.get("iterations", 0)),
        tool_iterations=to_int(fields.get("tool_iterations", 0)),
        input_tokens=to_int(fields.get("input_tokens", 0)),
        output_tokens=to_int(fields.get("output_tokens", 0)),
        total_tokens=to_int(fields.get("total_tokens", 0)),
        tree_total_tokens=to_int(fields.get("tree_total_tokens", 0)),
        created_at=to_float(fields.get("created_at", 0)),
        updated_at=to_float(fields.get("updated_at", 0)),
        last_response=text(fields.get("last_response", "") or ""),
        model_call_started_at=to_float(fields.get("model_call_started_at", 0)),
        agent=text(fields["agent"]) if fields.get("agent") not in (None, "", b"") else None,
        agents=_names(fields.get("agents")),
    )
