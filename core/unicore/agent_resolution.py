"""A turn's start resolves its task's agent: the effective settings of this turn, and the record's.

``resolve_for_turn`` reads the task's agent definition as stored now (``unicore.store.agents``), lays the task's own
settings (``TaskRecord.own_spec``: what its creator set) over it with ``unicore.agents.effective_spec`` and returns
the record the turn runs with. What changed is written back to the task's record (one fenced HSET), so what reads
the record between turns (spawn checks of this turn's children, the operator's admission of a child, ``unicore
show``, the token budget) sees the same settings as the turn. A definition changed while a turn runs is seen by the
next turn only; a deleted one fails the turn with a one-line last error (``AgentNotFound``).
"""

from __future__ import annotations

from unicore.agents import AgentDefinition, AgentInvalid, AgentNotFound, effective_spec
from unicore.api.schema import TaskSpec
from unicore.errors import ConfigError
from unicore.store.records import Lease, TaskRecord
from unicore.store.tasks import TaskStore

__all__ = ["RESOLVED_FIELDS", "resolve_for_turn", "resolved_record"]

# The record fields an agent decides (with the task's own narrowing).
RESOLVED_FIELDS = ("model", "system_prompt", "tools", "child_tools", "limits", "approval", "mcp_servers", "agents")


def resolved_record(record: TaskRecord, definition: AgentDefinition) -> TaskRecord:
    """``record`` with the fields its agent decides resolved against ``definition``."""
    own = TaskSpec.model_validate({"id": record.id, **(record.own_spec or {})})
    effective = effective_spec(own, definition)
    update = {field: getattr(effective, field) for field in RESOLVED_FIELDS if field != "agents"}
    update["agents"] = list(definition.agents)
    return record.model_copy(update=update)


def resolve_for_turn(store: TaskStore, lease: Lease, record: TaskRecord) -> TaskRecord:
    """The record this turn runs with (``record`` itself when the task has no agent); see the module doc."""
    if record.agent is None:
        return record
    try:
        definition = store.read_agent(record.agent)
    except AgentInvalid as exc:
        raise ConfigError(str(exc)) from None
    if definition is None:
        raise AgentNotFound(f"agent {record.agent} does not exist (deleted?): task {record.id} uses it; apply it "
                            "again, or send the task's work to another task")
    resolved = resolved_record(record, definition)
    before, after = record.to_hash(), resolved.to_hash()
    changed = {field: after[field] for field in RESOLVED_FIELDS if before.get(field) != after[field]}
    if changed:
        store.set_task_fields(lease, changed)
    return resolved
