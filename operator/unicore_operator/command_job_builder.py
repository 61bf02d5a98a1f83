"""Pure construction of a task's command Job (``submit_job``, issue 29; ``unicore.store.command_jobs``).

The command runs as its own Job in the task's namespace, owned by the AgentTask (deleting the task deletes it), with
the task's labels and its number (``unicore.dev/command-job``; turn Jobs have no such label, so the turn Job index
and handlers never see it), in the task's Kueue queue (``spec.queueName``: created not suspended, as turn Jobs are:
Kueue's webhook suspends it at creation and Kueue releases it when its queue admits it; docs/operator.md),
with the tree's workspace at ``/workspace`` (the claim's subPath, as turn pods have it), the GPUs it asked for and the
workbench's image, variables and resources. Like the workbench it gets nothing of UniCore: no ServiceAccount token,
none of the runtime's variables. Same request, same Job, same name: a repeated create answers 409 and does nothing.
"""

from __future__ import annotations

import copy
from typing import Any

from unicore.api.schema import Limits
from unicore.api.spec import AgentTaskSpec
from unicore.store.command_jobs import JobRequest, job_name

from unicore_operator import names
from unicore_operator.job_builder import (
    build_workspace_volume,
    owner_reference,
    restricted_container_security_context,
    restricted_pod_security_context,
    task_labels,
)
from unicore_operator.settings import OperatorSettings
from unicore_operator.workbench_pod import workbench_env, workbench_image, workbench_resources

JOB_CONTAINER = "job"
DEFAULT_MAX_JOB_GPUS: int = Limits.model_fields["max_job_gpus"].default


def command_job_name(task_name: str, n: int, *, namespace: str) -> str:
    """``<task>-j<n>``, at most ``names.JOB_NAME_MAX`` characters (a long task name cut, with a hash of the task id)."""
    name = job_name(task_name, n)
    if len(name) <= names.JOB_NAME_MAX:
        return name
    suffix = f"-j{n}"
    digest = names.short_hash(names.task_id(namespace, task_name))
    head = task_name[: names.JOB_NAME_MAX - len(suffix) - len(digest) - 1].rstrip("-.")
    return f"{head}-{digest}{suffix}"


def max_job_gpus(spec: AgentTaskSpec, agent_limit: int | None) -> int:
    """The GPUs one command Job of the task may ask for, from the API server's objects (never from Redis, which the
    task's turns can write): the lower of the task's and its Agent's ``limits.maxJobGPUs``, else the default."""
    set_limits = [limit for limit in (spec.limits.max_job_gpus, agent_limit) if limit is not None]
    return min(set_limits) if set_limits else DEFAULT_MAX_JOB_GPUS


def build_command_job_spec(task: dict[str, Any], spec: AgentTaskSpec, request: JobRequest,
                           settings: OperatorSettings) -> dict[str, Any]:
    """The Job of ``task``'s command Job ``request`` (``spec``: the task's spec over its Agent's,
    ``job_builder.with_agent_defaults``)."""
    meta = task["metadata"]
    namespace = meta["namespace"]
    name = command_job_name(meta["name"], request.n, namespace=namespace)
    labels = task_labels(task, spec)
    labels[names.COMMAND_JOB_LABEL] = str(request.n)
    if spec.queue_name:
        labels[names.KUEUE_QUEUE_LABEL] = spec.queue_name
    annotations = {names.TASK_ID_ANNOTATION: names.task_id(namespace, meta["name"])}
    volume, mount = build_workspace_volume(task, spec, settings)
    own = spec.workbench
    resources = workbench_resources(spec, {})
    if request.gpus > 0:  # what the job asked for (within its limit) wins over spec.workbench's
        resources["limits"] = {**(resources.get("limits") or {}), settings.gpu_resource: str(request.gpus)}
    container: dict[str, Any] = {
        "name": JOB_CONTAINER,
        "image": request.image or workbench_image(spec, settings),
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", request.command],
        "workingDir": mount["mountPath"],
        "env": workbench_env(spec),
        "resources": resources,
        "securityContext": restricted_container_security_context(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [mount, {"name": "tmp", "mountPath": "/tmp"}],
    }
    if own is not None and own.env_from:
        container["envFrom"] = copy.deepcopy(own.env_from)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": restricted_pod_security_context(),
        "terminationGracePeriodSeconds": 30,
        "containers": [container],
        "volumes": [volume, {"name": "tmp", "emptyDir": {}}],
    }
    if request.gpus > 0 and settings.gpu_toleration and spec.tolerations is None:
        pod_spec["tolerations"] = [{"key": settings.gpu_resource, "operator": "Exists", "effect": "NoSchedule"}]
    elif spec.tolerations is not None:
        pod_spec["tolerations"] = copy.deepcopy(spec.tolerations)
    for field, key in (("node_selector", "nodeSelector"), ("priority_class_name", "priorityClassName"),
                       ("runtime_class_name", "runtimeClassName")):
        value = getattr(spec, field)
        if value:
            pod_spec[key] = copy.deepcopy(value)
    job_spec: dict[str, Any] = {
        "backoffLimit": 0,
        "activeDeadlineSeconds": request.timeout_seconds,
        "ttlSecondsAfterFinished": max(settings.job_ttl_seconds, 3600),  # its log is read when it ends
        "template": {"metadata": {"labels": dict(labels), "annotations": dict(annotations)}, "spec": pod_spec},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations,
                     "ownerReferences": [owner_reference(task)]},
        "spec": job_spec,
    }


__all__ = ["JOB_CONTAINER", "build_command_job_spec", "command_job_name", "max_job_gpus"]
