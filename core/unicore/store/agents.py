"""Stored agent definitions: the one owner of their Redis layout.

One key per agent, ``uc:agent:{<agent id>}`` (``keys.agent_key``), holding its ``AgentDefinition`` as JSON, and an
index of the stored ids, ``uc:agents`` (a sorted set; score: when stored). An agent id is ``<namespace>/<name>`` on
Kubernetes (the operator writes it from the Agent object: ``unicore_operator.handlers.agents``) and the bare name in
local mode (``unicore agents apply``, ``unicore run --agent FILE``). Turns read the definition of their task's agent
at their start (``unicore.agent_resolution``); a turn pod's Redis user may only GET its namespace's agent keys
(``state.acl``), never write one.
"""

from __future__ import annotations

import time

from pydantic import ValidationError

from unicore.agents import AgentDefinition, AgentInvalid
from unicore.store.client import RedisClient
from unicore.store.keys import AGENTS_INDEX, agent_key

__all__ = ["delete_agent", "list_agents", "read_agent", "write_agent"]


def write_agent(client: RedisClient, agent_id: str, definition: AgentDefinition) -> bool:
    """Store (or replace) the definition of ``agent_id``; True when it changed. Raises RedisError."""
    encoded = definition.model_dump_json(exclude_defaults=False)
    key = agent_key(agent_id)
    if client.get(key) == encoded:
        return False
    pipe = client.pipeline(transaction=False)
    pipe.set(key, encoded)
    pipe.zadd(AGENTS_INDEX, {agent_id: time.time()})
    pipe.execute()
    return True


def read_agent(client: RedisClient, agent_id: str) -> AgentDefinition | None:
    """The stored definition of ``agent_id``; None when there is none. AgentInvalid when it does not decode (written
    by another version). Raises RedisError."""
    raw = client.get(agent_key(agent_id))
    if not raw:
        return None
    try:
        return AgentDefinition.model_validate_json(raw)
    except ValidationError as exc:
        raise AgentInvalid(f"the stored definition of agent {agent_id} does not decode: "
                           f"{exc.errors()[0]['msg']}") from None


def delete_agent(client: RedisClient, agent_id: str) -> bool:
    """Remove the definition of ``agent_id``; True when there was one. Raises RedisError."""
    pipe = client.pipeline(transaction=False)
    pipe.delete(agent_key(agent_id))
    pipe.zrem(AGENTS_INDEX, agent_id)
    removed, _ = pipe.execute()
    return bool(removed)


def list_agents(client: RedisClient, prefix: str = "") -> list[str]:
    """The stored agent ids (those starting with ``prefix``: ``"<namespace>/"`` for a namespace's), sorted."""
    ids = (item if isinstance(item, str) else item.decode() for item in client.zrange(AGENTS_INDEX, 0, -1))
    return sorted(agent for agent in ids if agent.startswith(prefix))
