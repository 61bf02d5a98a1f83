"""Kubernetes Spawner: ``spawn_task`` inside a turn Job creates the child AgentTask through the API server.

It runs the same policy checks as the local spawner (``unicore.tools.policy``) before writing anything, then:
1. reserves the child's slot of ``max_children`` and ``max_descendants`` atomically (``unicore.store.slots``), so
   concurrent spawns cannot overshoot the limits;
2. creates the AgentTask ``<parent>-<name>`` in the parent's namespace with ``spec.prompt``, ``spec.parentRef``
   {name, uid}, an ownerReference to the parent (garbage collection of the tree), the reduced toolset, and the
   parent's GPU/scheduling fields. The operator creates the child's Redis record (inheriting the parent's model,
   script and limits exactly as in local mode), queues ``spec.prompt`` (idempotent id ``prompt-<uid>``) and starts
   the child's turn Job.
There is one write that makes the child (the AgentTask), so there is no half-made child: a spawn that dies after
reserving leaves only a slot, which the next spawn of that name reuses; a create whose answer was lost (timeout,
connection reset) is looked up before it is reported as failed. A Redis record without an AgentTask (left by an
older version) is completed by the next spawn of that name, which creates the missing AgentTask.
An existing child gets the prompt as a new inbox message and an activation: it resumes with its history.

Credentials: ``unicore.kube_config.load_api_client`` (in a turn pod its ServiceAccount; the local pod runner sets
KUBECONFIG); the agents' Role allows create/get/list/watch on agenttasks and nothing else.
"""

from __future__ import annotations

import json
import time
from typing import Any

from unicore.agents import effective_limits
from unicore.api import pod_env
from unicore.api.contract import (
    API_VERSION,
    GROUP,
    KIND,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    PARENT_LABEL,
    PLURAL,
    ROOT_LABEL,
    TRACEPARENT_ANNOTATION,
    VERSION,
    label_value,
)
from unicore.api.schema import SCHEDULING_FIELDS, InboxMessage, Limits, task_name
from unicore.api.spec import AgentRef, AgentTaskSpec, LimitsSpec, ParentRef, task_spec_of
from unicore.errors import ConfigError, MessageTooLarge, ToolError
from unicore.kube_config import load_api_client
from unicore.launch.local_spawner import check_message_size, check_same_agent, child_agent, reserve_child_slots
from unicore.log import get_logger
from unicore.settings import RuntimeSettings
from unicore.store.tasks import TaskStore
from unicore.tools import policy, storeview
from unicore.tools.registry import known_tools
from unicore.traces import spans

log = get_logger("launch.kubernetes")

# How long a resume waits for the operator to initialise a child whose AgentTask exists but whose record does not.
CHILD_RECORD_WAIT_SECONDS = 30.0


def load_custom_objects_api() -> Any:
    """CustomObjectsApi with the turn's credentials (``unicore.kube_config``; a ConfigError if there are none)."""
    from kubernetes import client

    return client.CustomObjectsApi(load_api_client())


def child_agenttask(parent_obj: dict[str, Any], child_name: str, prompt: str, tools: list[str] | None,
                    parent_view: storeview.TaskView, agent: str | None = None,
                    agent_limits: Limits | None = None, traceparent: str | None = None) -> dict[str, Any]:
    """The child AgentTask object (pure). ``agent``: the name of the Agent the child runs (``spec.agentRef``); it
    takes model and tools from it (``tools`` None: all of the agent's), and only the parent's limits narrow it.
    ``traceparent``: the spawn call's span, which the child's turns hang under (``unicore.traces.anchors``)."""
    meta = parent_obj["metadata"]
    parent_spec = task_spec_of(parent_obj)
    parent_labels = meta.get("labels") or {}
    root = parent_labels.get(ROOT_LABEL) or task_name(parent_view.root_id)
    # A child of an agent: the lower of its agent's and its parent's limits (so it narrows both).
    capped = parent_view.limits if agent_limits is None else effective_limits(agent_limits, parent_view.limits)
    # The turn timeout is the parent's as its turn Jobs have it: its spec's value, else (unset) the operator's
    # default for both; the stored limit is the schema's default there, which would widen a shorter default.
    limits = capped.model_dump(exclude={"turn_timeout_seconds"})
    if parent_spec.limits.turn_timeout_seconds is not None:
        limits["turn_timeout_seconds"] = parent_spec.limits.turn_timeout_seconds
    fields: dict[str, Any] = {
        "prompt": prompt,
        "parent_ref": ParentRef(name=meta["name"], uid=meta["uid"]),
        "limits": LimitsSpec.model_validate(limits),
    }
    if agent is not None:
        fields["agent_ref"] = AgentRef(name=agent)
        if tools is not None:
            fields["tools"] = list(tools)
    else:
        fields["model"] = parent_view.model
        fields["tools"] = list(tools or ())
        if parent_view.child_tools is not None:
            fields["child_tools"] = [t for t in parent_view.child_tools if t in (tools or ())]
    for field in SCHEDULING_FIELDS:  # a child schedules like its parent; a child of an agent as that agent says
        # (but for the parent's own queue: a tenant's quota choice reaches its whole tree)
        value = getattr(parent_spec, field)
        if value is not None and (agent is None or field == "queue_name"):
            fields[field] = value
    spec = AgentTaskSpec.model_validate(fields).model_dump(by_alias=True, exclude_unset=True)
    metadata: dict[str, Any] = {
        "name": child_name,
        "namespace": meta["namespace"],
        "labels": {
            MANAGED_BY_LABEL: MANAGED_BY,
            PARENT_LABEL: label_value(meta["name"]),
            ROOT_LABEL: label_value(root),
        },
        "ownerReferences": [{
            "apiVersion": API_VERSION, "kind": KIND, "name": meta["name"], "uid": meta["uid"],
            "controller": False, "blockOwnerDeletion": False,
        }],
    }
    if traceparent:
        metadata["annotations"] = {TRACEPARENT_ANNOTATION: traceparent}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def refusal(exc: Any) -> str:
    """Why the API server refused a create: the message of its Status (an admission policy's or webhook's words),
    else the HTTP reason; a 403 without a message is the agents' Role."""
    message = ""
    try:
        message = str(json.loads(exc.body or "{}").get("message") or "")
    except (TypeError, ValueError, AttributeError):
        message = ""
    if message:
        return message
    return "forbidden (check the agents' Role)" if exc.status == 403 else (exc.reason or str(exc.status))


class KubernetesSpawner:
    """``unicore.tools.base.Spawner`` for turn pods (UNICORE_SPAWNER=kubernetes)."""

    def __init__(self, store: TaskStore, api: Any, namespace: str) -> None:
        self.store = store
        self.api = api
        self.namespace = namespace

    @classmethod
    def from_env(cls, store: TaskStore, settings: RuntimeSettings | None = None) -> KubernetesSpawner:
        """The spawner of a turn pod: ``$UNICORE_NAMESPACE``, else the namespace of ``$UNICORE_TASK_ID``
        (``settings`` None: read now)."""
        if settings is None:
            settings = RuntimeSettings.from_env(only={"namespace", "task_id"})
        namespace = settings.namespace
        if not namespace:
            task_id = settings.task_id or ""
            namespace = task_id.split("/", 1)[0] if "/" in task_id else ""
        if not namespace:
            raise ConfigError(f"{pod_env.NAMESPACE} is not set (the operator sets it on every turn pod)")
        return cls(store, load_custom_objects_api(), namespace)

    def _get_agenttask(self, name: str) -> dict[str, Any] | None:
        from kubernetes.client.rest import ApiException

        try:
            return dict(self.api.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise ToolError(f"cannot read AgentTask {name}: {exc.reason}") from exc

    def spawn(self, parent_id: str, name: str, prompt: str, tools: list[str] | None,
              agent: str | None = None) -> tuple[str, bool]:
        parent = storeview.get_view(self.store, parent_id)
        if parent is None:
            raise ToolError(f"parent task {parent_id} not found")
        child_id = policy.validate_child_name(parent_id, name)
        chosen = child_agent(self.store, parent, agent) if agent is not None else None
        message = InboxMessage(type="user", content=prompt, sender=parent_id)
        check_message_size(message)
        counts = policy.tree_counts(self.store, parent)
        existing = storeview.get_view(self.store, child_id)
        if existing is not None:
            if existing.parent != parent_id:
                raise ToolError(f"task {child_id} exists but is not a child of {parent_id}; choose another name")
            check_same_agent(existing, chosen)
            policy.check_message(parent, counts)
            if self._get_agenttask(task_name(child_id)) is None:
                # A record without its AgentTask (a half-made child): complete it; the prompt becomes spec.prompt.
                plan_tools = existing.tools if existing.tools is not None else policy.DEFAULT_CHILD_TOOLS
                self._create_child(parent, child_id, prompt, list(plan_tools),
                                   existing.agent.rsplit("/", 1)[-1] if existing.agent else None)
                log.info("completed half-made child %s of %s", child_id, parent_id)
                return child_id, True
            self._deliver(child_id, message)
            log.info("resumed child %s of %s with a new message", child_id, parent_id)
            return child_id, False
        plan = policy.check_spawn(parent, name, counts, tools, known_tools(),
                                  agent=(agent, chosen[1].tools) if agent is not None and chosen else None)
        slots = reserve_child_slots(self.store, parent, child_id)
        try:
            chosen_tools = plan.tools if agent is None or tools is not None else None  # None: the agent's, always
            created = self._create_child(parent, child_id, prompt, chosen_tools, agent,
                                         chosen[1].limits if chosen else None)
        except BaseException:
            slots.release(parent_id=parent_id, root_id=parent.root_id, child_id=child_id)
            raise
        if not created:  # a concurrent (or earlier, unanswered) spawn made it: this becomes a resume
            self._wait_for_record(child_id)
            self._deliver(child_id, message)
            return child_id, False
        log.info("spawned child AgentTask %s of %s (tools %s)", child_id, parent_id, plan.tools)
        return child_id, True

    def _create_child(self, parent: storeview.TaskView, child_id: str, prompt: str, tools: list[str] | None,
                      agent: str | None = None, agent_limits: Limits | None = None) -> bool:
        """Create the child AgentTask: True if created, False if it already exists; ToolError otherwise.

        A create whose answer was lost (timeout, connection reset) may have happened: the AgentTask is looked up
        before the spawn is reported as failed."""
        from kubernetes.client.rest import ApiException

        parent_obj = self._get_agenttask(task_name(parent.id))
        if parent_obj is None:
            raise ToolError(f"parent AgentTask {parent.id} not found in the API server")
        body = child_agenttask(parent_obj, task_name(child_id), prompt, tools, parent, agent, agent_limits,
                               traceparent=spans.current())
        try:
            self.api.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise ToolError(f"could not create AgentTask {task_name(child_id)}: {refusal(exc)}") from exc
        except Exception as exc:  # urllib3 timeouts and resets: did the create reach the API server?
            made = self._get_agenttask(task_name(child_id))
            made_by = task_spec_of(made).parent_ref if made is not None else None
            if made_by is not None and made_by.uid == parent_obj["metadata"]["uid"]:
                log.warning("creating AgentTask %s: %s; it was created", child_id, exc)
                return True
            raise ToolError(f"could not create AgentTask {task_name(child_id)}: {exc}") from exc
        return True

    def _wait_for_record(self, child_id: str) -> None:
        """Wait (bounded) until the operator has initialised ``child_id``'s record, so a message can be queued."""
        deadline = time.monotonic() + CHILD_RECORD_WAIT_SECONDS
        while not self.store.exists(child_id):
            if time.monotonic() > deadline:
                raise ToolError(f"child task {child_id} exists but the operator has not initialised it yet; try again")
            time.sleep(0.2)

    def _deliver(self, child_id: str, message: InboxMessage) -> None:
        try:
            self.store.queue_message(child_id, message)
        except MessageTooLarge as exc:
            raise ToolError(str(exc)) from exc
        self.store.activate(child_id, "message")


__all__ = ["KubernetesSpawner", "child_agenttask", "load_custom_objects_api", "refusal"]
