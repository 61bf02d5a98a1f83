"""Pydantic models of the AgentTask and Agent specs, checks beyond the CRD's CEL rules, and the TaskSpec the runtime
stores.

The models are the one place a spec's camelCase keys are spelled (by their alias generator; tests/unit/test_crd_model.py
holds them to the CRDs' properties): every reader of an AgentTask or Agent spec (operator, kubectl plugin, web UI,
spawner) parses it once, where the object comes in, and reads attributes.

- ``parse_spec``: whether a task can run. A spec that passes admission but fails here (an unknown model name, a
  script the scripted model cannot load) makes the task phase Failed with a clear message; the object and anything
  queued stay as they are.
- ``task_spec_of`` / ``agent_spec_of``: the spec of an object as the API server holds it, for reading (labels, Jobs,
  views, checks). They never raise: a field the model refuses reads as unset, as does one it does not know (a newer
  CRD's). The API server's schema lets neither through, so this is the spec as written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from unicore.api import contract
from unicore.api.resources import ResourcesInvalid, check_resources
from unicore.api.schema import (
    Approval,
    InboxMessage,
    Limits,
    MCPServerRef,
    Prompt,
    TaskSpec,
    object_prompt_message_id,
)
from unicore.errors import UniCoreError
from unicore.providers.registry import parse_model_spec
from unicore.providers.scripted import load_script
from unicore.store.task_views import TaskView
from unicore.tools import policy


class SpecInvalid(UniCoreError):
    """The AgentTask spec cannot be run; the message says why."""


class CamelModel(BaseModel):
    """A part of the spec: camelCase keys in YAML (``maxIterations``), snake_case attributes (``max_iterations``)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class LimitsSpec(CamelModel):
    max_iterations: int | None = Field(default=None, ge=1)
    max_depth: int | None = Field(default=None, ge=0)
    max_children: int | None = Field(default=None, ge=0)
    max_descendants: int | None = Field(default=None, ge=0)
    token_budget: int | None = Field(default=None, ge=0)
    turn_timeout_seconds: int | None = Field(default=None, ge=1)
    command_timeout_seconds: int | None = Field(default=None, ge=1, le=86_400)
    max_job_gpus: int | None = Field(default=None, ge=0, le=64, alias="maxJobGPUs")
    recursion: bool | None = None
    summarize_turns: bool | None = None

    def set_fields(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class ApprovalSpec(CamelModel):
    """``spec.approval``: tool calls that wait for a person (``unicore.store.approvals``)."""

    tools: list[str] = Field(default_factory=list)
    timeout_seconds: int | None = Field(default=None, ge=1, le=30 * 24 * 3600)

    def runtime(self) -> Approval:
        if self.timeout_seconds is None:
            return Approval(tools=self.tools)
        return Approval(tools=self.tools, timeout_seconds=self.timeout_seconds)


class ResourcesSpec(CamelModel):
    """``spec.resources``: requests and limits (resource name -> Kubernetes quantity) of the turn container, merged
    key by key over the operator's defaults; the same rules as the CRD's CEL (``resources.check_resources``)."""

    requests: dict[str, int | str] | None = None
    limits: dict[str, int | str] | None = None

    @model_validator(mode="after")
    def _quantities(self) -> ResourcesSpec:
        try:
            check_resources(self.model_dump(exclude_none=True))
        except ResourcesInvalid as exc:
            raise ValueError(str(exc)) from None
        return self


class ParentRef(CamelModel):
    name: str
    uid: str | None = None
    namespace: str | None = None  # only ever the child's own (lineage.check_child refuses any other)


class AgentRef(CamelModel):
    """``spec.agentRef``: the Agent of the task's namespace it runs as (``unicore.agents``)."""

    name: str


class WorkbenchSpec(CamelModel):
    """``spec.workbench``: what the workbench container (``spec.image``, where ``run_command`` runs) gets besides the
    task's GPUs: the user's own variables (``env``: Kubernetes EnvVars, values or ``secretKeyRef``/
    ``configMapKeyRef`` of the task's namespace; ``envFrom``: whole ConfigMaps/Secrets) and resources. Never any of
    the runtime's (the CRD refuses ``REDIS_URL`` and ``UNICORE_*`` names)."""

    env: list[dict[str, Any]] | None = None
    env_from: list[dict[str, Any]] | None = None
    resources: ResourcesSpec | None = None


class SchedulingSpec(CamelModel):
    """Where a turn pod runs: the fields an AgentTask and an Agent share (``unicore.api.schema.SCHEDULING_FIELDS``;
    an Agent's are its tasks' defaults, ``job_builder``)."""

    gpus: int | None = Field(None, ge=0)
    resources: ResourcesSpec | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[dict[str, Any]] | None = None
    priority_class_name: str | None = None
    runtime_class_name: str | None = None
    image: str | None = Field(None, min_length=1, max_length=512)
    workbench: WorkbenchSpec | None = None
    queue_name: str | None = None  # Kueue LocalQueue of its turn and command Jobs


class AgentTaskSpec(SchedulingSpec):
    """``spec`` of an AgentTask."""

    prompt: Prompt | None = None  # schema.check_prompt: not empty, not only whitespace
    system_prompt: str | None = None
    model: str | None = None
    script: dict[str, Any] | None = None
    tools: list[str] | None = None
    child_tools: list[str] | None = None
    limits: LimitsSpec = Field(default_factory=lambda: LimitsSpec())
    approval: ApprovalSpec | None = None
    mcp_servers: list[MCPServerRef] | None = None
    parent_ref: ParentRef | None = None
    agent_ref: AgentRef | None = None
    conversations: list[str] | None = Field(default=None, max_length=16)  # shared conversations it takes part in
    suspend: bool = False


class WarmPoolSpec(CamelModel):
    """``spec.warmPool`` of an Agent: ready turn pods kept waiting for its tasks' turns (docs/warm-pods.md)."""

    size: int = Field(0, ge=0, le=64)
    max_wait_seconds: int | None = Field(default=None, ge=60, le=86_400)


class A2ASkillSpec(CamelModel):
    id: str = Field(min_length=1, max_length=128)
    name: str | None = Field(default=None, max_length=256)
    description: str | None = Field(default=None, max_length=2048)
    tags: list[str] = Field(default_factory=list, max_length=32)


class A2ASpec(CamelModel):
    """``spec.a2a`` of an Agent: serve it as an A2A agent (docs/a2a.md), with this card text."""

    description: str | None = Field(default=None, max_length=2048)
    skills: list[A2ASkillSpec] | None = Field(default=None, max_length=32)
    script: dict[str, Any] | None = None  # the scripted model's script of the tasks it starts (demos, tests)


class AgentSpec(SchedulingSpec):
    """``spec`` of an Agent as it is read (``agent_spec_of``). The runtime's part is checked and used as
    ``unicore.agents.AgentDefinition``; the scheduling fields are defaults of its tasks' turn pods (``job_builder``)."""

    model: str | None = None
    system_prompt: str | None = None
    tools: list[str] | None = None
    agents: list[str] | None = None
    limits: LimitsSpec = Field(default_factory=lambda: LimitsSpec())
    approval: ApprovalSpec | None = None
    mcp_servers: list[MCPServerRef] | None = None
    warm_pool: WarmPoolSpec | None = None
    a2a: A2ASpec | None = Field(default=None, alias="a2a")  # not the generator's "a2A"
    conversations: list[str] | None = Field(default=None, max_length=16)  # its tasks take part in them


class TemplateMetadata(CamelModel):
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class TaskTemplateSpec(CamelModel):
    """``spec.taskTemplate`` of an AgentSchedule: the metadata and spec of each AgentTask it starts."""

    metadata: TemplateMetadata = Field(default_factory=TemplateMetadata)
    spec: dict[str, Any] = Field(default_factory=dict)  # an AgentTask spec (the CRD checks it; ``task_spec_of``)


class ScheduleSpec(CamelModel):
    """``spec`` of an AgentSchedule (crds/agentschedule.yaml, docs/schedules.md)."""

    schedule: str = Field(min_length=1, max_length=200)
    time_zone: str | None = Field(default=None, max_length=64)
    concurrency_policy: Literal["Allow", "Forbid", "Replace"] = "Allow"
    starting_deadline_seconds: int | None = Field(default=None, ge=0)
    suspend: bool = False
    successful_tasks_history_limit: int = Field(3, ge=0, le=100)
    failed_tasks_history_limit: int = Field(1, ge=0, le=100)
    task_template: TaskTemplateSpec


class TriggerTaskRef(CamelModel):
    name: str = Field(min_length=1, max_length=253)


class TriggerSpec(CamelModel):
    """``spec`` of an AgentTrigger (crds/agenttrigger.yaml, docs/triggers.md): each authenticated delivery starts a
    task from ``task_template`` or sends ``message`` to ``task``."""

    source: Literal["github", "cloudevents", "json"]
    secret_key: str | None = Field(default=None, min_length=1, max_length=253)  # key of Secret unicore-triggers
    events: list[str] | None = Field(default=None, max_length=64)  # accepted event types (globs); None: all
    max_body_bytes: int = Field(1_048_576, ge=1024, le=10_485_760)
    rate_per_minute: int = Field(60, ge=1, le=6000)
    suspend: bool = False
    task_template: TaskTemplateSpec | None = None
    task: TriggerTaskRef | None = None
    message: str | None = Field(default=None, min_length=1, max_length=65_536)


Spec = TypeVar("Spec", bound=CamelModel)


def spec_key(model: type[CamelModel], field: str) -> str:
    """The camelCase key of ``model``'s ``field`` as YAML spells it (``max_depth`` -> ``maxDepth``)."""
    return model.model_fields[field].alias or field


def readable(model: type[Spec], raw: Any) -> Spec:
    """``raw`` as a ``model``, never an error: each top-level key the model refuses (a value it rejects, a key it
    does not know) reads as unset, and anything but a mapping as an empty spec."""
    values = dict(raw) if isinstance(raw, Mapping) else {}
    while True:
        try:
            return model.model_validate(values)
        except ValidationError as exc:
            refused = {err["loc"][0] for err in exc.errors() if err["loc"]}
            kept = {key: value for key, value in values.items() if key not in refused}
            if len(kept) == len(values):
                return model()
            values = kept


def task_spec_of(body: Mapping[str, Any] | None) -> AgentTaskSpec:
    """The spec of AgentTask ``body`` (the object as the API server or an index holds it), for reading."""
    return readable(AgentTaskSpec, (body or {}).get("spec"))


def agent_spec_of(body: Mapping[str, Any] | None) -> AgentSpec:
    """The spec of Agent ``body``, for reading (its scheduling defaults, limits and MCP servers)."""
    return readable(AgentSpec, (body or {}).get("spec"))


def parse_spec(spec: dict[str, Any]) -> AgentTaskSpec:
    """The typed spec, or SpecInvalid with every problem listed."""
    try:
        parsed = AgentTaskSpec.model_validate(dict(spec or {}))
    except ValidationError as exc:
        problems = "; ".join(
            f"spec.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise SpecInvalid(f"invalid AgentTask spec: {problems}") from exc
    if parsed.parent_ref is None and parsed.prompt is None:
        raise SpecInvalid("spec.prompt is required for a root task (a task without spec.parentRef)")
    if parsed.model:
        check_model(parsed.model)
    if parsed.script is not None:
        check_script(parsed.script)
    return parsed


def check_model(model: str) -> None:
    try:
        parse_model_spec(model)
    except (UniCoreError, ValueError) as exc:
        raise SpecInvalid(f"spec.model {model!r}: {exc}") from exc


def check_script(script: dict[str, Any]) -> None:
    try:
        load_script(script)
    except (UniCoreError, ValueError, TypeError) as exc:
        raise SpecInvalid(f"spec.script: {exc}") from exc


def agent_task_spec(namespace: str, name: str, spec: AgentTaskSpec, parent: TaskView | None) -> TaskSpec:
    """The TaskSpec of an AgentTask with ``spec.agentRef``: only what the spec sets (``TaskSpec.model_fields_set``
    is the task's narrowing of its agent, ``unicore.agents``), and for a child its parent's limits under its own."""
    assert spec.agent_ref is not None
    fields: dict[str, Any] = {"id": contract.task_id(namespace, name), "prompt": None,
                              "agent": contract.task_id(namespace, spec.agent_ref.name)}
    if spec.parent_ref is not None:
        fields["parent"] = contract.task_id(namespace, spec.parent_ref.name)
    limits = {**(parent.limits.model_dump() if parent is not None else {}), **spec.limits.set_fields()}
    if limits:
        fields["limits"] = limits
    script = spec.script if spec.script is not None else (parent.script if parent is not None else None)
    own = {"model": spec.model, "system_prompt": spec.system_prompt, "tools": spec.tools,
           "child_tools": spec.child_tools, "script": script, "mcp_servers": spec.mcp_servers,
           "approval": spec.approval.runtime() if spec.approval is not None else None}
    fields.update({key: value for key, value in own.items() if value is not None})
    try:
        return TaskSpec.model_validate(fields)
    except ValidationError as exc:
        raise SpecInvalid(f"cannot build the task: {exc.errors()[0]['msg']}") from exc


def to_task_spec(namespace: str, name: str, spec: AgentTaskSpec, parent: TaskView | None) -> TaskSpec:
    """The runtime's TaskSpec for AgentTask ``namespace/name``; a child inherits model, script and limits, and
    without ``spec.tools`` gets its parent's default child toolset (what ``spawn_task`` gives when it names none).
    With ``spec.agentRef``: ``agent_task_spec``."""
    if spec.agent_ref is not None:
        return agent_task_spec(namespace, name, spec, parent)
    parent_id = contract.task_id(namespace, spec.parent_ref.name) if spec.parent_ref else None
    limits_data = parent.limits.model_dump() if parent is not None else {}
    limits_data.update(spec.limits.set_fields())
    try:
        limits = Limits.model_validate(limits_data)
    except ValidationError as exc:
        raise SpecInvalid(f"spec.limits: {exc.errors()[0]['msg']}") from exc
    model = spec.model or (parent.model if parent is not None else "") or "scripted"
    script = spec.script if spec.script is not None else (parent.script if parent is not None else None)
    try:
        return TaskSpec(
            id=contract.task_id(namespace, name),
            prompt=None,  # queued separately with an idempotent message id
            parent=parent_id,
            model=model,
            system_prompt=spec.system_prompt or "",
            tools=spec.tools if spec.tools is not None or parent is None else policy.child_tools(parent, None, None),
            child_tools=spec.child_tools,
            limits=limits,
            script=script,
            approval=spec.approval.runtime() if spec.approval is not None else None,  # a child adds its parent's
            mcp_servers=spec.mcp_servers,
        )
    except ValidationError as exc:
        raise SpecInvalid(f"cannot build the task: {exc.errors()[0]['msg']}") from exc


def prompt_message(uid: str, namespace: str, spec: AgentTaskSpec) -> InboxMessage | None:
    """The inbox message of spec.prompt (None without one): from the parent task for a child, else the user."""
    if not spec.prompt:
        return None
    sender = contract.task_id(namespace, spec.parent_ref.name) if spec.parent_ref is not None else "user"
    return InboxMessage(id=object_prompt_message_id(uid), type="user", content=spec.prompt, sender=sender)
