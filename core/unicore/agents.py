"""Reusable agent definitions: what an ``Agent`` says, and how a task that uses one narrows it.

An Agent (a Kubernetes object, or a YAML document of the same shape in local mode) gives a model, a system prompt,
tools, MCP servers, the agents it may spawn as children, limits and approval rules. A task that names an agent
(``AgentTask.spec.agentRef``, ``unicore run --agent``, ``spawn_task(agent=...)``) takes its defaults from it and may
only NARROW it: fewer tools, lower limits, fewer MCP servers or tools of them, more approval gates.

Pure functions only (no Redis, no Kubernetes): the definitions are stored by ``unicore.store.agents``; the turn
resolves its task's effective settings at its start (``unicore.agent_resolution``), so an Agent changed meanwhile
takes effect on the next turn and never on one in flight.

- ``AgentDefinition``: the runtime part of an Agent's spec (``definition_from_spec`` reads the camelCase spec of an
  Agent object or document; Kubernetes-only fields such as ``gpus`` are the operator's: ``KUBERNETES_ONLY``).
- ``effective_spec(task, agent)``: the task's own settings (its ``TaskSpec``, whose ``model_fields_set`` says what its
  creator set) laid over its agent's; limits are the lower of the two, tools and MCP tools the intersection.
- ``widening(task, agent)``: where a task asks for more than its agent allows (empty: it only narrows).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel, to_snake

from unicore.api.schema import (
    APPROVE_ALL,
    SCHEDULING_FIELDS,
    Approval,
    Limits,
    MCPServerRef,
    TaskSpec,
    one_ref_per_server,
)
from unicore.errors import ConfigError

__all__ = [
    "AGENT_NAME_RE",
    "AgentDefinition",
    "AgentInvalid",
    "AgentNotFound",
    "DEFAULT_AGENT_TOOLS",
    "KUBERNETES_ONLY",
    "NARROWABLE",
    "agent_id",
    "definition_from_spec",
    "effective_limits",
    "effective_spec",
    "own_settings",
    "widening",
]

# An Agent's name is a Kubernetes object name (a DNS-1123 subdomain) of at most 253 characters.
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
AGENT_NAME_RE = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
MAX_AGENT_NAME = 253
# An Agent without ``tools`` gets the toolset of a root task without ``tools`` (``tools.policy.DEFAULT_TOOLS``; the
# CRD spells the same list as its default).
DEFAULT_AGENT_TOOLS: tuple[str, ...] = (
    "read_file", "write_file", "list_files", "spawn_task", "message_task", "task_status",
)
# Spec keys of an Agent that only the operator reads (its Job builder's scheduling and resource defaults, its warm
# pool), as the spec models' alias generator spells them.
# warmPool: the operator's pools; a2a: the operator's A2A endpoint
KUBERNETES_ONLY = (*(to_camel(field) for field in SCHEDULING_FIELDS), "warmPool", "a2a")
# The TaskSpec fields a task that uses an agent may set to narrow it (what ``own_settings`` keeps).
NARROWABLE = ("model", "system_prompt", "tools", "child_tools", "limits", "approval", "mcp_servers")

ToolName = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z][a-z0-9_]*$")]
AgentName = Annotated[str, Field(min_length=1, max_length=MAX_AGENT_NAME, pattern=AGENT_NAME_RE.pattern)]


class AgentInvalid(ValueError):
    """An Agent definition that cannot be used; the message is one line naming the field."""


class AgentNotFound(ConfigError):
    """A task names an agent whose definition is not stored (never applied, or deleted since)."""


def validate_agent_name(name: str) -> str:
    if not isinstance(name, str) or len(name) > MAX_AGENT_NAME or not AGENT_NAME_RE.match(name):
        raise AgentInvalid(
            f"invalid agent name {str(name)[:80]!r}: use lowercase letters, digits, '-' and '.' (a Kubernetes "
            f"object name of at most {MAX_AGENT_NAME} characters)"
        )
    return name


def agent_id(task_id: str, name: str) -> str:
    """The id of agent ``name`` as seen from task ``task_id``: ``<namespace>/<name>`` on Kubernetes (an Agent is
    namespaced and a task uses the Agents of its own namespace), the bare name in local mode."""
    namespace, slash, _ = task_id.partition("/")
    return f"{namespace}/{name}" if slash else name


class AgentDefinition(BaseModel):
    """The runtime part of an Agent (snake_case attributes; ``definition_from_spec`` reads the camelCase spec)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=512)
    system_prompt: str = Field(default="", max_length=65536)
    tools: list[ToolName] = Field(default_factory=lambda: list(DEFAULT_AGENT_TOOLS), max_length=64)
    mcp_servers: list[MCPServerRef] | None = None
    agents: list[AgentName] = Field(default_factory=list, max_length=64)
    limits: Limits = Field(default_factory=Limits)
    approval: Approval | None = None
    # shared conversations of its namespace its tasks take part in from their creation (docs/conversations.md)
    conversations: list[str] = Field(default_factory=list, max_length=16)

    @field_validator("tools", "agents")
    @classmethod
    def _unique(cls, names: list[str]) -> list[str]:
        return list(dict.fromkeys(names))

    _one_ref_per_server = field_validator("mcp_servers")(  # type: ignore[misc]
        lambda cls, refs: one_ref_per_server(refs))

    def problems(self) -> list[str]:
        """What the CRD's CEL rules refuse too (so local files and the operator say the same)."""
        found: list[str] = []
        if self.approval is not None:
            stray = [tool for tool in self.approval.tools if tool != APPROVE_ALL and not self.has_tool(tool)]
            if stray:
                found.append(f"spec.approval.tools names {', '.join(stray)}, not among the agent's tools")
        if self.agents and "spawn_task" not in self.tools:
            found.append("spec.agents needs spawn_task among spec.tools (children are spawned with it)")
        return found

    def has_tool(self, name: str) -> bool:
        """``name`` is one of its built-in tools, or ``<server>__<tool>`` of one of its MCP servers."""
        if name in self.tools:
            return True
        server, sep, tool = name.partition("__")
        return bool(sep) and any(
            ref.name == server and (ref.tools is None or tool in ref.tools) for ref in self.mcp_servers or ()
        )


def _snake_keys(data: Any, nested: Sequence[str] = ("limits", "approval")) -> Any:
    """camelCase keys of a spec to snake_case (top level, and the objects named in ``nested``)."""
    if not isinstance(data, Mapping):
        return data
    out: dict[str, Any] = {}
    for key, value in data.items():
        snake = to_snake(str(key))
        out[snake] = _snake_keys(value, ()) if snake in nested and isinstance(value, Mapping) else value
    return out


def _error_line(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(to_camel(str(p)) if isinstance(p, str) else str(p) for p in err["loc"])
        parts.append(f"spec.{where}: {err['msg']}" if where else err["msg"])
    return "; ".join(parts)


def definition_from_spec(spec: Mapping[str, Any] | None) -> AgentDefinition:
    """The AgentDefinition of an Agent's ``spec`` (camelCase, as in YAML); AgentInvalid with a one-line reason."""
    if not isinstance(spec, Mapping):
        raise AgentInvalid("spec: an Agent needs a spec mapping (model, systemPrompt, tools, ...)")
    runtime = {key: value for key, value in spec.items() if key not in KUBERNETES_ONLY}
    try:
        definition = AgentDefinition.model_validate(_snake_keys(runtime))
    except ValidationError as exc:
        raise AgentInvalid(_error_line(exc)) from None
    problems = definition.problems()
    if problems:
        raise AgentInvalid("; ".join(problems))
    return definition


# --------------------------------------------------------------------------- narrowing


def effective_limits(agent: Limits, own: Limits | None) -> Limits:
    """The agent's limits, lowered by each limit the task set itself (``own.model_fields_set``): the lower number,
    a token budget only where either has one (0 = unlimited), recursion only if both allow it. ``summarize_turns``
    is no permission: the task's choice, when it made one."""
    values = agent.model_dump()
    if own is None:
        return Limits.model_validate(values)
    for field in own.model_fields_set:
        mine, theirs = getattr(own, field), values[field]
        if field == "token_budget":
            values[field] = min(v for v in (mine, theirs) if v) if (mine or theirs) else 0
        elif field == "recursion":
            values[field] = bool(mine and theirs)
        elif field == "summarize_turns":
            values[field] = mine
        else:
            values[field] = min(mine, theirs)
    return Limits.model_validate(values)


def _effective_mcp(agent: list[MCPServerRef] | None, own: list[MCPServerRef] | None,
                   own_set: bool) -> list[MCPServerRef] | None:
    granted = {ref.name: ref for ref in agent or ()}
    if not own_set:
        return list(granted.values()) or None
    chosen: list[MCPServerRef] = []
    for ref in own or ():
        grant = granted.get(ref.name)
        if grant is None:
            continue
        if grant.tools is None:
            tools = ref.tools
        elif ref.tools is None:
            tools = grant.tools
        else:
            tools = [tool for tool in ref.tools if tool in grant.tools]
        chosen.append(MCPServerRef(name=ref.name, tools=tools))
    return chosen or None


def _effective_approval(agent: Approval | None, own: Approval | None) -> Approval | None:
    """The agent's gates and the task's own (a task only adds gates); the task's timeout, else the agent's."""
    if agent is None or not agent.tools:
        return own if own is not None else agent
    if own is None:
        return agent
    tools = list(dict.fromkeys([*agent.tools, *own.tools]))
    timeout = own.timeout_seconds if "timeout_seconds" in own.model_fields_set else agent.timeout_seconds
    return Approval(tools=tools, timeout_seconds=timeout)


def effective_spec(task: TaskSpec, agent: AgentDefinition) -> TaskSpec:
    """``task`` (what its creator set: ``task.model_fields_set``) laid over ``agent``: the settings its turns run
    with. Narrowing only, whatever ``task`` holds: its tools are cut to the agent's, its limits capped by the
    agent's, its MCP servers and their tools cut to the agent's; the system prompt is the agent's, then the task's
    own text. ``agent`` (the id) and everything not narrowable stay the task's."""
    own = task.model_fields_set
    tools = list(agent.tools) if task.tools is None else [t for t in task.tools if agent.has_tool(t)]
    child_tools = None if task.child_tools is None else [t for t in task.child_tools if t in tools]
    prompts = [text for text in (agent.system_prompt.strip(), task.system_prompt.strip()) if text]
    return task.model_copy(update={
        "model": task.model if "model" in own else agent.model,
        "system_prompt": "\n\n".join(prompts),
        "tools": tools,
        "child_tools": child_tools,
        "limits": effective_limits(agent.limits, task.limits if "limits" in own else None),
        "approval": _effective_approval(agent.approval, task.approval),
        "mcp_servers": _effective_mcp(agent.mcp_servers, task.mcp_servers, "mcp_servers" in own),
    })


def own_settings(task: TaskSpec) -> dict[str, Any]:
    """What the task's creator set of the narrowable fields, as JSON (``exclude_unset``, limits included): stored on
    the task record, read back with ``TaskSpec.model_validate`` so ``model_fields_set`` says the same again."""
    return task.model_dump(mode="json", include=set(NARROWABLE), exclude_unset=True)


_LIMIT_NAMES = {field: to_camel(field) for field in Limits.model_fields}


def widening(task: TaskSpec, agent: AgentDefinition) -> list[str]:
    """Where ``task`` asks for more than ``agent`` gives (spec field names as a user wrote them); empty when it only
    narrows. The turn timeout as Jobs get it is the operator's to compare (``lineage``)."""
    problems: list[str] = []
    outside = [tool for tool in task.tools or () if not agent.has_tool(tool)]
    if outside:
        problems.append(f"spec.tools names {', '.join(outside)}, not among its agent's tools "
                        f"({', '.join(agent.tools) or 'none'})")
    granted = set(task.tools) if task.tools is not None else set(agent.tools)
    stray_children = [tool for tool in task.child_tools or () if tool not in granted]
    if stray_children:
        problems.append(f"spec.childTools names {', '.join(stray_children)}, not among its tools")
    servers = {ref.name: ref for ref in agent.mcp_servers or ()}
    for ref in task.mcp_servers or ():
        grant = servers.get(ref.name)
        if grant is None:
            problems.append(f"spec.mcpServers names {ref.name}, not among its agent's MCP servers "
                            f"({', '.join(servers) or 'none'})")
        elif grant.tools is not None and (ref.tools is None or set(ref.tools) - set(grant.tools)):
            asked = "every tool" if ref.tools is None else ", ".join(t for t in ref.tools if t not in grant.tools)
            problems.append(f"spec.mcpServers {ref.name}: {asked} is more than its agent allows "
                            f"({', '.join(grant.tools) or 'no tools'})")
    if "limits" in task.model_fields_set:
        theirs = agent.limits
        for field in sorted(task.limits.model_fields_set):
            mine, cap = getattr(task.limits, field), getattr(theirs, field)
            name = f"spec.limits.{_LIMIT_NAMES[field]}"
            if field == "token_budget":
                if cap and not mine:
                    problems.append(f"{name} 0 (unlimited) is above its agent's {cap:,}")
                elif cap and mine > cap:
                    problems.append(f"{name} {mine:,} is above its agent's {cap:,}")
            elif field == "recursion":
                if mine and not cap:
                    problems.append(f"{name} is true but its agent's is false")
            elif field not in ("summarize_turns", "turn_timeout_seconds") and mine > cap:
                problems.append(f"{name} {mine} is above its agent's {cap}")
    return problems
