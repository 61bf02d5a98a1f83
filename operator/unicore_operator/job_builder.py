"""Pure construction of a turn Job (a plain dict, ready for BatchV1Api.create_namespaced_job).

Nothing here talks to the API or Redis: the same (task, turn, attempt) always gives the same Job, and in particular
the same name, so a duplicate activation is answered by the API server with 409 AlreadyExists and does nothing.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from unicore.agents import DEFAULT_AGENT_TOOLS
from unicore.api import pod_env
from unicore.api.resources import merge_resources
from unicore.api.schema import SCHEDULING_FIELDS
from unicore.api.spec import AgentSpec, AgentTaskSpec, task_spec_of

from unicore_operator import names
from unicore_operator.settings import OperatorSettings
from unicore_operator.workbench_pod import add_workbench, runs_commands

TURN_CONTAINER = "turn"
WORKSPACE_PATH = "/workspace"
AGENT_UID = 65532


def turn_job_name(task_name: str, turn: int, attempt: int = 0, *, namespace: str = "") -> str:
    """``<task>-t<turn>`` (``-r<attempt>`` for retries), at most 52 characters.

    A long task name is cut and followed by a hash of the full task id, so names stay unique and deterministic.
    """
    suffix = f"-t{turn}" + (f"-r{attempt}" if attempt else "")
    if len(task_name) + len(suffix) <= names.JOB_NAME_MAX:
        return f"{task_name}{suffix}"
    digest = names.short_hash(names.task_id(namespace, task_name) if namespace else task_name)
    room = names.JOB_NAME_MAX - len(suffix) - len(digest) - 1
    head = task_name[:room].rstrip("-.")
    return f"{head}-{digest}{suffix}"


def task_labels(task: dict[str, Any], spec: AgentTaskSpec) -> dict[str, str]:
    """The labels every object of a task carries (CONTRACT: managed-by, task, parent, root)."""
    name = task["metadata"]["name"]
    parent = spec.parent_ref.name if spec.parent_ref is not None else ""
    root = root_name(task, spec)
    return {
        names.MANAGED_BY_LABEL: names.MANAGED_BY,
        names.TASK_LABEL: names.label_value(name),
        names.PARENT_LABEL: names.label_value(parent),
        names.ROOT_LABEL: names.label_value(root),
    }


def root_name(task: dict[str, Any], spec: AgentTaskSpec) -> str:
    """The root task's name: from the task's own root label (set by the spawner), else its tree path, else its
    parent's name (``spec``, its spec), else itself."""
    labels = task["metadata"].get("labels") or {}
    status = task.get("status") or {}
    if labels.get(names.ROOT_LABEL):
        return str(labels[names.ROOT_LABEL])
    tree_path = status.get("treePath")
    if tree_path:
        return str(tree_path).split("/", 1)[0]
    parent = spec.parent_ref.name if spec.parent_ref is not None else ""
    return parent or str(task["metadata"]["name"])


def owner_reference(task: dict[str, Any], *, controller: bool = True, block: bool = True) -> dict[str, Any]:
    meta = task["metadata"]
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": controller,
        "blockOwnerDeletion": block,
    }


def gpu_count(spec: AgentTaskSpec, settings: OperatorSettings) -> int:
    return settings.default_gpus if spec.gpus is None else spec.gpus


def build_resources(spec: AgentTaskSpec, settings: OperatorSettings) -> dict[str, Any]:
    """The operator's default requests and limits (``UNICORE_AGENT_RESOURCES``), then the GPU limit of
    ``spec.gpus`` (limits only: an extended resource's request is its limit), then ``spec.resources``: each wins
    key by key over the ones before (``resources.merge_resources``)."""
    gpus = gpu_count(spec, settings)
    gpu_limits = {settings.gpu_resource: str(gpus)} if gpus > 0 else {}
    own = spec.resources.model_dump(exclude_none=True) if spec.resources is not None else None
    return merge_resources(settings.agent_resources, gpu_limits, own)


def build_tolerations(spec: AgentTaskSpec, settings: OperatorSettings) -> list[dict[str, Any]]:
    """spec.tolerations replace the default; the default tolerates the GPU taint when the pod asks for a GPU."""
    if spec.tolerations is not None:
        return copy.deepcopy(spec.tolerations)
    if gpu_count(spec, settings) > 0 and settings.gpu_toleration:
        return [{"key": settings.gpu_resource, "operator": "Exists", "effect": "NoSchedule"}]
    return []


def build_env(task: dict[str, Any], settings: OperatorSettings,
              model: str | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(env, envFrom) of the turn container; ``model``: the model its turns use (the task's, else its Agent's)."""
    meta = task["metadata"]
    tid = names.task_id(meta["namespace"], meta["name"])
    redis_env: dict[str, Any]
    # The namespace's own Redis user (redis_identities.py), else the shared Secret, else the operator's own URL.
    secret = settings.redis_identity_secret if settings.redis_identities else settings.agent_redis_secret
    if secret:
        redis_env = {"name": pod_env.REDIS_URL, "valueFrom": {"secretKeyRef": {"name": secret, "key": "redis-url"}}}
    else:
        redis_env = {"name": pod_env.REDIS_URL, "value": settings.redis_url}
    env = [
        redis_env,
        {"name": pod_env.TASK_ID, "value": tid},
        {"name": pod_env.SPAWNER, "value": "kubernetes"},
        {"name": pod_env.NAMESPACE, "value": meta["namespace"]},
        {"name": pod_env.WORKSPACE, "value": WORKSPACE_PATH},
        {"name": pod_env.HOME, "value": "/tmp"},
        {"name": pod_env.POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    if settings.stall_seconds is not None:
        env.append({"name": pod_env.STALL_SECONDS, "value": f"{settings.stall_seconds:g}"})
    env += [{"name": name, "value": value} for name, value in sorted(settings.agent_extra_env.items())]
    env += build_endpoint_env(model, settings)
    env_from: list[dict[str, Any]] = []
    if settings.agent_env_secret:
        env_from.append({"secretRef": {"name": settings.agent_env_secret}})
    return env, env_from


def build_endpoint_env(model: str | None, settings: OperatorSettings) -> list[dict[str, Any]]:
    """The endpoint map (``UNICORE_OPENAI_ENDPOINTS``: URLs, model names, Secret names, never a key) and, when the
    turns' ``model`` is ``openai:NAME`` and its endpoint has a key Secret, that one key as a ``secretKeyRef`` to the
    Secret in the task's own namespace. ``optional``: a namespace without the Secret gets a pod whose turn fails with
    the provider's one-line error (docs/install.md) instead of a pod that cannot start."""
    endpoints = settings.openai_endpoints
    if not endpoints:
        return []
    env: list[dict[str, Any]] = [{"name": pod_env.OPENAI_ENDPOINTS, "value": endpoints.for_pods().to_json()}]
    provider, _, name = (model or "").partition(":")
    found = endpoints.lookup(name.strip()) if provider.strip().lower() == "openai" else None
    if found is not None:
        index, endpoint = found
        key_env = endpoints.key_env(index)
        if endpoint.api_key_secret is not None and key_env:
            ref = {"name": endpoint.api_key_secret.name, "key": endpoint.api_key_secret.key, "optional": True}
            env.append({"name": key_env, "valueFrom": {"secretKeyRef": ref}})
    return env


def restricted_pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": AGENT_UID,
        "runAsGroup": AGENT_UID,
        "fsGroup": AGENT_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_container_security_context() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


# What a task's turn pods take from its Agent when its own spec does not set it (crds/agent.yaml).
AGENT_DEFAULTS = ("model", "mcp_servers", *SCHEDULING_FIELDS)


def with_agent_defaults(spec: AgentTaskSpec, agent: AgentSpec | None) -> AgentTaskSpec:
    """A task's ``spec`` as its Jobs are built: each of ``AGENT_DEFAULTS`` it leaves unset taken from its Agent's
    spec (``agent``, of the indexed Agent; None, or a task without ``spec.agentRef``: ``spec`` as it is), its tools
    (whether its pods get a workbench: ``workbench_pod.runs_commands``), and the lower of the two turn timeouts."""
    if agent is None or spec.agent_ref is None:
        return spec
    update: dict[str, Any] = {key: copy.deepcopy(getattr(agent, key)) for key in AGENT_DEFAULTS
                              if getattr(spec, key) is None and getattr(agent, key) is not None}
    if spec.tools is None:
        update["tools"] = list(agent.tools if agent.tools is not None else DEFAULT_AGENT_TOOLS)
    timeouts = [t for t in (spec.limits.turn_timeout_seconds, agent.limits.turn_timeout_seconds) if t]
    if timeouts:
        update["limits"] = spec.limits.model_copy(update={"turn_timeout_seconds": min(timeouts)})
    return spec.model_copy(update=update)


def turn_timeout_seconds(spec: AgentTaskSpec, settings: OperatorSettings) -> int:
    return spec.limits.turn_timeout_seconds or settings.default_turn_timeout_seconds


def job_deadline_seconds(spec: AgentTaskSpec, settings: OperatorSettings) -> int:
    """The Job's activeDeadlineSeconds: the turn timeout plus the bounded wait for scheduling (the watchdog's
    ``UNICORE_PENDING_TIMEOUT_SECONDS``). It runs from the Job's start, so waiting for a GPU must not eat the turn's
    time; the turn timeout itself is the pod's activeDeadlineSeconds, which runs from the pod's start."""
    return turn_timeout_seconds(spec, settings) + math.ceil(settings.pending_timeout_seconds)


def workspace_folder(task: dict[str, Any], spec: AgentTaskSpec) -> str:
    """The task tree's folder on the workspace claim: the root task's name as its root label spells it.

    Children carry the root label the spawner set (``label_value`` of the root's name), so the root itself uses
    ``label_value`` of its own name too: one folder per tree, also for root names above 63 characters.
    """
    return names.label_value(root_name(task, spec))


def build_workspace_volume(task: dict[str, Any], spec: AgentTaskSpec, settings: OperatorSettings
                           ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, volumeMount) of /workspace: the tree's folder on ``settings.workspace_claim``, else an emptyDir."""
    mount: dict[str, Any] = {"name": "workspace", "mountPath": WORKSPACE_PATH}
    if not settings.workspace_claim:
        return {"name": "workspace", "emptyDir": {}}, mount
    mount["subPath"] = workspace_folder(task, spec)
    return {"name": "workspace", "persistentVolumeClaim": {"claimName": settings.workspace_claim}}, mount


def build_turn_job_spec(task: dict[str, Any], turn: int, settings: OperatorSettings, attempt: int = 0,
                        mcp_env: list[dict[str, Any]] | None = None,
                        spec: AgentTaskSpec | None = None) -> dict[str, Any]:
    """The Job that runs turn ``turn`` (attempt ``attempt``) of AgentTask ``task`` (a dict of the object);
    ``mcp_env``: the MCP servers' variables (``mcp_servers.build_mcp_env``); ``spec``: the spec its Jobs are built
    from (``with_agent_defaults``; None: the task's own)."""
    meta = task["metadata"]
    spec = task_spec_of(task) if spec is None else spec
    namespace = meta["namespace"]
    tid = names.task_id(namespace, meta["name"])
    name = turn_job_name(meta["name"], turn, attempt, namespace=namespace)

    labels = task_labels(task, spec)
    labels[names.TURN_LABEL] = str(turn)
    labels[names.ATTEMPT_LABEL] = str(attempt)
    if spec.queue_name:
        labels[names.KUEUE_QUEUE_LABEL] = spec.queue_name
    annotations = {names.TASK_ID_ANNOTATION: tid}

    env, env_from = build_env(task, settings, spec.model)
    env += mcp_env or []
    workspace_volume, workspace_mount = build_workspace_volume(task, spec, settings)
    container: dict[str, Any] = {
        "name": TURN_CONTAINER,
        "image": settings.agent_image,
        "imagePullPolicy": settings.agent_image_pull_policy,
        "command": ["unicore-turn", tid],
        "env": env,
        "resources": build_resources(spec, settings),
        "securityContext": restricted_container_security_context(),
        # a failed turn's last log line (its one-line error) becomes the container's termination message, which
        # the status and the TurnFailed Event show (``watchdog.views.container_end``)
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            workspace_mount,
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    if env_from:
        container["envFrom"] = env_from

    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": settings.agent_service_account,
        "automountServiceAccountToken": True,
        "securityContext": restricted_pod_security_context(),
        "terminationGracePeriodSeconds": 30,
        # The turn timeout counts from the pod's start (the kubelet's StartTime), not from the Job's creation: a
        # pod that waited for a GPU still gets its whole turn. The watchdog enforces it too (deadline_exceeded).
        "activeDeadlineSeconds": turn_timeout_seconds(spec, settings),
        "containers": [container],
        "volumes": [workspace_volume, {"name": "tmp", "emptyDir": {}}],
    }
    if runs_commands(spec):
        add_workbench(pod_spec, container, spec, settings, workspace_mount, restricted_container_security_context())
    tolerations = build_tolerations(spec, settings)
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.priority_class_name:
        pod_spec["priorityClassName"] = spec.priority_class_name
    if spec.runtime_class_name:
        pod_spec["runtimeClassName"] = spec.runtime_class_name

    job_spec: dict[str, Any] = {
        "backoffLimit": 0,
        "activeDeadlineSeconds": job_deadline_seconds(spec, settings),
        "ttlSecondsAfterFinished": settings.job_ttl_seconds,
        "template": {
            "metadata": {"labels": dict(labels), "annotations": dict(annotations)},
            "spec": pod_spec,
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(task)],
        },
        "spec": job_spec,
    }
