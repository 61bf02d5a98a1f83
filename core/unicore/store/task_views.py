"""``TaskView``: the part of a task record (``records.TaskRecord``) that the tools, the spawn policy, the prompts, the
spawners and the operator's admission and phases read, as a small frozen value. It is a projection of a decoded
``TaskRecord`` (``TaskView.of``), never a second decoder of the ``uc:{T}:task`` hash: ``view_from_mapping`` decodes
a raw hash with ``TaskRecord.from_hash(..., tolerant=True)`` first. The operator also builds one from an AgentTask
spec (``unicore_operator.parent_view``). ``unicore.tools.storeview`` re-exports these."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from unicore.api.schema import Limits
from unicore.store.records import TaskRecord
from unicore.traces.spans import parse as parse_traceparent

__all__ = ["TaskView", "view_from_mapping"]


@dataclass(frozen=True)
class TaskView:
    """What the tools need to know about one task record (``TaskView.of`` a ``TaskRecord``)."""

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
    agent: str | None = None  # the agent the task narrows (``unicore.agents``)
    agents: list[str] | None = None  # the agents it may spawn by name (its agent's, as of its last turn start)
    trace_parent: str = ""  # where its turns hang in its tree's trace ("": none; ``unicore.traces``)

    @property
    def trace_id(self) -> str:
        ref = parse_traceparent(self.trace_parent)
        return ref.trace_id if ref is not None else ""

    @property
    def root_id(self) -> str:
        return self.root or self.id

    @classmethod
    def of(cls, record: TaskRecord) -> TaskView:
        """The view of a decoded task record."""
        return cls(
            id=record.id, parent=record.parent, root=record.root, depth=record.depth, model=record.model,
            system_prompt=record.system_prompt, tools=_copy(record.tools), child_tools=_copy(record.child_tools),
            limits=record.limits, script=record.script, status=record.status, turns=record.turns,
            iterations=record.iterations, tool_iterations=record.tool_iterations, input_tokens=record.input_tokens,
            output_tokens=record.output_tokens, total_tokens=record.total_tokens,
            tree_total_tokens=record.tree_total_tokens, created_at=record.created_at, updated_at=record.updated_at,
            last_response=record.last_response, agent=record.agent, agents=_copy(record.agents),
            trace_parent=record.trace_parent,
        )


def _copy(names: list[str] | None) -> list[str] | None:
    return None if names is None else list(names)


def view_from_mapping(data: Mapping[Any, Any]) -> TaskView:
    """The view of a task record hash (``uc:{T}:task``, bytes or str) or of a dict of record fields, decoded
    tolerantly (``TaskRecord.from_hash``): a field that does not decode reads as its default."""
    return TaskView.of(TaskRecord.from_hash(data, tolerant=True))
