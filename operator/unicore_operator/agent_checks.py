"""Agents on Kubernetes: what an Agent object says, and whether an AgentTask only narrows its Agent.

Pure functions, shared by the admission webhook (``admission.review``: the API server refuses the task with the
message) and the create handler (``handlers.agenttasks``: a task that got past admission another way goes Failed):

- ``agent_definition(body)``: the ``unicore.agents.AgentDefinition`` of an Agent object, checked as the runtime will
  use it (the model name parses); ``SpecInvalid`` with a one-line reason;
- ``agent_task_problems(...)``: an AgentTask with ``spec.agentRef`` names an existing Agent of its own namespace; a
  child's Agent is one its parent may spawn (its agent's ``spec.agents``); what the task sets itself is within the
  Agent (``unicore.agents.widening``: tools, MCP servers and their tools, limits), and its own
  ``limits.turnTimeoutSeconds`` is not above one the Agent sets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unicore.agents import AgentDefinition, AgentInvalid, definition_from_spec, widening
from unicore.api.spec import AgentTaskSpec, SpecInvalid, agent_spec_of, agent_task_spec, check_model
from unicore.store.task_views import TaskView

__all__ = ["agent_definition", "agent_task_problems", "refusal", "usable_agent"]


def agent_definition(body: Mapping[str, Any]) -> AgentDefinition:
    """The runtime definition of Agent ``body``; SpecInvalid (one line) when it cannot be used."""
    spec = body.get("spec")
    try:
        definition = definition_from_spec(spec if isinstance(spec, Mapping) else None)
    except AgentInvalid as exc:
        raise SpecInvalid(str(exc)) from None
    try:
        check_model(definition.model)
    except SpecInvalid as exc:
        raise SpecInvalid(str(exc).replace("spec.model", "spec.model of the Agent", 1)) from None
    return definition


def usable_agent(namespace: str, agent: str, agent_body: Mapping[str, Any] | None,
                 parent: TaskView | None) -> tuple[AgentDefinition | None, list[str]]:
    """The definition of Agent ``namespace/agent`` (``agent_body``; None: there is none) and what stops a task from
    running as it: it does not exist, is being deleted or cannot be used, or the task's ``parent`` (its settings as
    the API server has them, ``parent_view``; None for a root) may not spawn it (its agent's ``spec.agents``)."""
    if agent_body is None:
        return None, [f"Agent {namespace}/{agent} does not exist: spec.agentRef names an Agent of the task's own "
                      "namespace"]
    if (agent_body.get("metadata") or {}).get("deletionTimestamp"):
        return None, [f"Agent {namespace}/{agent} is being deleted"]
    try:
        definition = agent_definition(agent_body)
    except SpecInvalid as exc:
        return None, [f"Agent {namespace}/{agent} cannot be used: {exc}"]
    if parent is not None and agent not in (parent.agents or []):
        listed = ", ".join(parent.agents or []) or "none"
        return definition, [f"its parent {parent.id} may not spawn agent {agent} (the agents it may spawn: {listed})"]
    return definition, []


def agent_task_problems(*, namespace: str, name: str, parsed: AgentTaskSpec,
                        agent_body: Mapping[str, Any] | None, parent: TaskView | None) -> list[str]:
    """What is wrong with AgentTask ``namespace/name`` (``parsed``: its spec; ``parent`` its parent's settings for a
    child, ``parent_view``) against its Agent ``agent_body`` (None: there is none); empty when it only narrows it."""
    ref = parsed.agent_ref
    assert ref is not None
    definition, problems = usable_agent(namespace, ref.name, agent_body, parent)
    if definition is None or agent_body is None:
        return problems
    try:
        own = agent_task_spec(namespace, name, parsed, None)  # only what the task sets itself
    except SpecInvalid as exc:
        return [*problems, str(exc)]
    problems += widening(own, definition)
    mine, cap = parsed.limits.turn_timeout_seconds, agent_spec_of(agent_body).limits.turn_timeout_seconds
    if mine is not None and cap is not None and mine > cap:
        problems.append(f"spec.limits.turnTimeoutSeconds {mine} is above its agent's {cap}")
    return problems


def refusal(namespace: str, name: str, agent: str, problems: list[str]) -> str:
    """One message for a task that widens its Agent (or names none that exists)."""
    return f"AgentTask {namespace}/{name} may only narrow its Agent {namespace}/{agent}: " + "; ".join(problems)
