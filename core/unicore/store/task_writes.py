"""The writes of ``TaskStore`` that make and unmake a task: ``create_task`` (its record, its prompt, its place in its
parent's children and the index, in one script that never overwrites an existing conversation) and ``delete_task``
(every key of the task and its index entries and slots)."""

from __future__ import annotations

import time
from typing import Any

from unicore.agents import AgentNotFound, effective_spec, own_settings
from unicore.api.contract import task_namespace
from unicore.api.schema import SCHEMA_VERSION, Approval, InboxMessage, TaskSpec, prompt_message_id, task_name
from unicore.log import get_logger
from unicore.store import changes, conversation_writes
from unicore.store.keys import HEARTBEATS_INDEX, TASKS_INDEX
from unicore.store.records import TaskRecord
from unicore.store.task_reads import TaskReads

log = get_logger("state")


def inherited_approval(own: Approval | None, parent: Approval | None) -> Approval | None:
    """A child's approval setting: what its parent's gates stays gated (a child only narrows what runs unasked);
    its own tools join; its own timeout, else the parent's."""
    if parent is None or not parent.tools:
        return own
    if own is None:
        return parent
    tools = list(dict.fromkeys([*parent.tools, *own.tools]))
    return Approval(tools=tools, timeout_seconds=own.timeout_seconds)


class TaskWrites(TaskReads):
    """Creating and deleting tasks (a create reads the parent's record and the agent's definition)."""

    def create_task(self, spec: TaskSpec, *, root: str | None = None, depth: int | None = None,
                    trace_parent: str = "") -> bool:
        """Create the task (and queue its prompt). Returns False, writing nothing, if the task already exists:
        an existing conversation is never overwritten (a create repeated after a crash must not lose it). ``root``
        and ``depth``: the task's place in its tree as the caller knows it from elsewhere (the operator: the AgentTask
        chain, since a namespace's Redis user may write its parent's record; ``unicore_operator.parent_view``);
        default: from the parent's record. ``trace_parent``: the traceparent its turns hang under
        (``unicore.traces.anchors``; "": none yet)."""
        parent: TaskRecord | None = None
        if spec.parent:
            parent = self.get_task(spec.parent)
        now = time.time()
        own: dict[str, Any] | None = None
        agents: list[str] | None = None
        definition = None
        if spec.agent is not None:  # the agent's definition, narrowed by what the creator set (unicore.agents)
            own = own_settings(spec)
            approval = inherited_approval(spec.approval, parent.approval if parent else None)
            if approval is not None:  # the parent's gates stay gated whatever the agent says
                own["approval"] = approval.model_dump(mode="json")
            definition = self.read_agent(spec.agent)
            if definition is None:
                raise AgentNotFound(f"no agent {spec.agent!r}: apply its definition first")
            agents = list(definition.agents)
            spec = effective_spec(TaskSpec.model_validate({"id": spec.id, **own}), definition).model_copy(
                update={"prompt": spec.prompt, "parent": spec.parent, "script": spec.script, "agent": spec.agent,
                        "mcp_definitions": spec.mcp_definitions})
        record = TaskRecord(
            id=spec.id,
            name=task_name(spec.id),
            parent=spec.parent,
            root=root if root is not None else (parent.root if parent else spec.id),
            depth=depth if depth is not None else (parent.depth + 1 if parent else 0),
            model=spec.model,
            system_prompt=spec.system_prompt,
            tools=spec.tools,
            child_tools=spec.child_tools,
            limits=spec.limits,
            script=spec.script,
            approval=inherited_approval(spec.approval, parent.approval if parent else None),
            suspended=parent.suspended if parent else False,  # spawned while its parent was stopped: stays still
            mcp_servers=spec.mcp_servers,
            mcp_definitions=spec.mcp_definitions,
            agent=spec.agent,
            own_spec=own,
            agents=agents,
            created_at=now,
            updated_at=now,
            trace_parent=trace_parent,
            schema_version=SCHEMA_VERSION,
        )
        prompt_id, prompt_entry = "", ""
        if spec.prompt is not None:
            message = InboxMessage(
                id=prompt_message_id(spec.id), type="user", content=spec.prompt, sender="user", timestamp=now
            )
            prompt_entry = self._encode_entry(message)
            prompt_id = message.id
        keys = self.keys(spec.id)
        fields = [item for pair in record.to_hash().items() for item in pair]
        created = bool(
            self._create(
                keys=[keys.task, keys.inbox, keys.seen], args=[repr(now), prompt_id, prompt_entry, *fields]
            )
        )
        if not created:
            log.info("task %s already exists; its conversation is kept", spec.id)
            return False
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(TASKS_INDEX, {spec.id: now}, nx=True)
        if spec.parent:
            pipe.zadd(self.keys(spec.parent).children, {spec.id: now}, nx=True)
        changes.execute_with_changes(pipe, [(spec.id, "created")])
        log.info("created task %s (parent %s)", spec.id, spec.parent or "-")
        if definition is not None and definition.conversations:
            self._join_agents_conversations(spec.id, definition.conversations)
        return True

    def _join_agents_conversations(self, task_id: str, names: list[str]) -> None:
        """Its agent's conversations (``AgentDefinition.conversations``, of the task's namespace), joined before its
        first turn; one that does not exist is skipped with a warning (the task runs all the same)."""
        namespace = task_namespace(task_id)
        for name in names:
            conversation = f"{namespace}/{name}" if namespace else name
            try:
                conversation_writes.join(self.redis, conversation, "task", task_id)
            except conversation_writes.ConversationError as exc:
                log.warning("task %s: its agent's conversation %s: %s", task_id, conversation, exc)

    def delete_task(self, task_id: str) -> None:
        """Remove every key of the task and its index entries (its children are not deleted)."""
        parent, root = self.redis.hmget(self.keys(task_id).task, ["parent", "root"])
        pipe = self.redis.pipeline(transaction=False)
        for key in self.keys(task_id).all():  # one DEL per key: a cluster pipeline has no multi-key DEL
            pipe.delete(key)
        pipe.zrem(TASKS_INDEX, task_id)
        pipe.zrem(HEARTBEATS_INDEX, task_id)  # a task deleted while a turn runs leaves no member behind
        if parent:
            pipe.zrem(self.keys(parent).children, task_id)
            pipe.zrem(self.keys(parent).child_slots, task_id)  # its slots are free again (store.slots)
        if root and root != task_id:
            pipe.zrem(self.keys(root).tree_slots, task_id)
        changes.execute_with_changes(pipe, [(task_id, "removed")])


__all__ = ["TaskWrites", "inherited_approval"]
