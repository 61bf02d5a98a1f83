"""Local-mode Spawner: creates (or resumes) a child task in Redis and signals an activation.

The limits are checked first (``unicore.tools.policy``, shared with the Kubernetes spawner); a refused
spawn writes nothing. A new child inherits the parent's model, scripted steps and limits, gets depth = parent
depth + 1 (the store derives depth and root from ``parent``) and the reduced child toolset.
"""

from __future__ import annotations

from typing import Any

from unicore.agents import AgentDefinition, AgentInvalid, AgentNotFound, agent_id, effective_limits
from unicore.api.schema import DEFAULT_MESSAGE_CAP_BYTES, InboxMessage, TaskSpec, child_task_id
from unicore.errors import MessageTooLarge, ToolError
from unicore.log import get_logger
from unicore.store.slots import SpawnSlots
from unicore.store.tasks import TaskStore
from unicore.tools import policy, storeview
from unicore.tools.registry import known_tools
from unicore.tools.storeview import TaskView
from unicore.traces import anchors

log = get_logger("launch.local")


def child_agent(store: TaskStore, parent: TaskView, agent: str) -> tuple[str, AgentDefinition]:
    """(agent id, definition) of agent ``agent`` for a child of ``parent``: its agent must list it, and it must be
    stored; ToolError (the model's error result) otherwise."""
    policy.check_agent(parent, agent)
    child_agent_id = agent_id(parent.id, agent)
    try:
        definition = store.read_agent(child_agent_id)
    except AgentInvalid as exc:
        raise ToolError(str(exc)) from None
    if definition is None:
        raise ToolError(f"agent {agent!r} is listed among the agents you may spawn but does not exist")
    return child_agent_id, definition


def child_spec(parent: TaskView, plan: policy.SpawnPlan, prompt: str,
               agent: tuple[str, AgentDefinition] | None = None, requested_tools: list[str] | None = None) -> TaskSpec:
    """The TaskSpec of a new child (the store creates it and queues its prompt atomically). With ``agent`` (its id)
    the child sets only what narrows that agent: its parent's limits and scripted steps, and the tools the spawn
    asked for (none asked: the agent's, as they are at each of its turns)."""
    if agent is not None:
        narrowing: dict[str, Any] = {"tools": plan.tools} if requested_tools is not None else {}
        return TaskSpec(id=plan.child_id, prompt=prompt, parent=parent.id, agent=agent[0],
                        limits=effective_limits(agent[1].limits, parent.limits), script=parent.script, **narrowing)
    return TaskSpec(
        id=plan.child_id,
        prompt=prompt,
        parent=parent.id,
        model=parent.model,
        system_prompt="",
        tools=plan.tools,
        child_tools=parent.child_tools,
        limits=parent.limits,
        script=parent.script,
    )


def check_same_agent(existing: TaskView, chosen: tuple[str, AgentDefinition] | None) -> None:
    """Spawning an existing child's name with ``agent`` sends it a message only if it runs that agent."""
    if chosen is not None and existing.agent != chosen[0]:
        runs = f"runs agent {existing.agent}" if existing.agent else "runs no agent"
        raise ToolError(f"task {existing.id} exists and {runs}; choose another name for a child of agent "
                        f"{chosen[0].rsplit('/', 1)[-1]}")


def check_message_size(message: InboxMessage, cap: int = DEFAULT_MESSAGE_CAP_BYTES) -> None:
    """Refuse an over-size prompt BEFORE anything is written (the store enforces the same cap on queue)."""
    size = len(message.model_dump_json().encode())
    if size > cap:
        raise ToolError(
            f"prompt too large: {size:,} bytes encoded, the cap is {cap:,}; shorten it or put it in a file"
        )


def reserve_child_slots(store: TaskStore, parent: TaskView, child_id: str) -> SpawnSlots:
    """Reserve ``child_id``'s child and tree slots atomically (LimitExceeded when full); see ``store.slots``."""
    limits = parent.limits
    tree = store.descendants(parent.root_id, limit=limits.max_descendants + 1)
    slots = store.spawn_slots()
    slots.reserve(
        parent_id=parent.id,
        root_id=parent.root_id,
        child_id=child_id,
        max_children=limits.max_children,
        max_descendants=limits.max_descendants,
        known_children=store.children(parent.id),
        known_descendants=[node.id for node in tree],
    )
    return slots


class LocalSpawner:
    """``Spawner`` for local mode (and for tests): everything happens in Redis through ``TaskStore``."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store

    def spawn(self, parent_id: str, name: str, prompt: str, tools: list[str] | None,
              agent: str | None = None) -> tuple[str, bool]:
        parent = storeview.get_view(self.store, parent_id)
        if parent is None:
            raise ToolError(f"parent task {parent_id} not found")
        child_id = policy.validate_child_name(parent_id, name)
        chosen = child_agent(self.store, parent, agent) if agent is not None else None
        existing = storeview.get_view(self.store, child_id)
        message = InboxMessage(type="user", content=prompt, sender=parent_id)
        check_message_size(message)
        counts = policy.tree_counts(self.store, parent)
        if existing is not None:
            if existing.parent != parent_id:
                raise ToolError(
                    f"task {child_id} exists but is not a child of {parent_id}; choose another name"
                )
            check_same_agent(existing, chosen)
            policy.check_message(parent, counts)
            self._deliver(child_id, message, "message")
            log.info("resumed child %s of %s with a new message", child_id, parent_id)
            return child_id, False
        plan = policy.check_spawn(parent, name, counts, tools, known_tools(),
                                  agent=(agent, chosen[1].tools) if agent is not None and chosen else None)
        slots = reserve_child_slots(self.store, parent, plan.child_id)
        try:
            created = self.store.create_task(child_spec(parent, plan, prompt, chosen, tools),
                                             trace_parent=anchors.for_new_task(plan.child_id, name, parent=parent_id))
        except (MessageTooLarge, AgentNotFound) as exc:  # the agent deleted a moment ago
            slots.release(parent_id=parent_id, root_id=parent.root_id, child_id=plan.child_id)
            raise ToolError(str(exc)) from exc
        if not created:
            # create_task never overwrites: a concurrent spawn won the race, so this becomes a resume.
            self._deliver(child_id, message, "message")
            return child_id, False
        self.store.activate(child_id, "spawn")
        log.info("spawned child %s of %s (depth %d, tools %s)", child_id, parent_id, plan.depth, plan.tools)
        return child_id, True

    def _deliver(self, child_id: str, message: InboxMessage, reason: str) -> None:
        try:
            self.store.queue_message(child_id, message)
        except MessageTooLarge as exc:
            raise ToolError(str(exc)) from exc
        self.store.activate(child_id, reason)


__all__ = ["LocalSpawner", "check_same_agent", "child_agent", "child_spec", "child_task_id", "reserve_child_slots"]
