"""The operator's Kopf in-memory indexes of AgentTasks, turn Jobs and turn pods: the activation path, the status
refresh, the resync and the watchdog all read these instead of calling the API server (one watch per resource kind
feeds them). They are the only indexes the operator registers; each holds a small value per object, never a body.

``agenttask_index``  (namespace, name)        -> compact AgentTask (metadata, spec, status)
``turnjob_index``    (namespace, task name)   -> JobView of each turn Job of the task (``views.job_view``)
``turnpod_index``    (namespace, task name)   -> PodView of each turn pod of the task (``views.pod_view``)
``mcpserver_index``  (namespace, name)        -> spec of each MCPServer (``mcp_servers``: what turn pods get)
``agent_index``      (namespace, name)        -> compact Agent (metadata, spec, status): admission of its tasks,
                                                 their Jobs' scheduling defaults (``job_builder``), its status

The index functions are coroutines (pure and quick, they await nothing): Kopf runs a plain function in its thread
pool, a hop to a worker thread and back for every watch event of every AgentTask, turn Job and turn pod.

One index per object kind: a task's children are the ids in its Redis children set (read with its snapshot), each
looked up in ``agenttask_index`` for its phase (``reconcile.children_of``); no reverse map of ``parentRef``.

The watchdog scans these same indexes (``watchdog.adapter``): the Job and pod views as they are, the AgentTasks as
``AgentTaskView``s it derives from the compact bodies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from unicore_operator import mcp_servers, names
from unicore_operator.warm_pool import WarmJob, WarmPod, warm_job_view, warm_pod_view
from unicore_operator.watchdog.views import JobView, PodView, job_outcome, job_view, pod_view

__all__ = ["COMMAND_JOB_SELECTOR", "JOB_SELECTOR", "WARM_SELECTOR", "TaskKey", "commandjob_index", "warmjob_index",
           "warmpod_index",
           "active_job", "agent_index", "agenttask_index", "compact_agent", "compact_task",
           "first",
           "job_outcome", "job_task_key", "job_view", "mcpserver_index", "trigger_index", "turnjob_index",
           "turnpod_index"]

# Turn Jobs and their pods: the operator's Jobs without a command Job number (a task's command Jobs, submit_job, have
# their own index: COMMAND_JOB_SELECTOR).
JOB_SELECTOR: dict[str, Any] = {names.MANAGED_BY_LABEL: names.MANAGED_BY, names.COMMAND_JOB_LABEL: kopf.ABSENT}
COMMAND_JOB_SELECTOR: dict[str, Any] = {names.MANAGED_BY_LABEL: names.MANAGED_BY,
                                        names.COMMAND_JOB_LABEL: kopf.PRESENT}

# Warm turn Jobs and their pods (issue 30), by pool; an assigned one is in the turn Job and pod indexes too.
WARM_SELECTOR: dict[str, Any] = {names.MANAGED_BY_LABEL: names.MANAGED_BY, names.WARM_POOL_LABEL: kopf.PRESENT}

TaskKey = tuple[str, str]

# The annotations of an AgentTask the index keeps (the rest, e.g. kubectl's last-applied configuration, may be large)
INDEXED_ANNOTATIONS = frozenset({names.SCHEDULED_AT_ANNOTATION, names.EVENT_ID_ANNOTATION,
                                 names.A2A_CALLER_ANNOTATION})


def compact_task(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata", {})
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "generation": meta.get("generation"),
            "labels": dict(meta.get("labels") or {}),
            "annotations": {key: value for key, value in (meta.get("annotations") or {}).items()
                            if key in INDEXED_ANNOTATIONS},
            "creationTimestamp": meta.get("creationTimestamp"),
            "deletionTimestamp": meta.get("deletionTimestamp"),
        },
        "spec": dict(body.get("spec") or {}),
        "status": dict(body.get("status") or {}),
    }


def job_task_key(body: Mapping[str, Any]) -> TaskKey | None:
    meta = body.get("metadata", {})
    task_id = (meta.get("annotations") or {}).get(names.TASK_ID_ANNOTATION)
    if not task_id or "/" not in task_id:
        return None
    namespace, name = task_id.split("/", 1)
    return namespace, name


@kopf.index(names.GROUP, names.VERSION, names.PLURAL)
async def agenttask_index(*, body: kopf.Body, namespace: str | None, name: str,
                    **_: Any) -> dict[TaskKey, dict[str, Any]] | None:
    if namespace is None:  # AgentTasks are namespaced; kopf's signature allows None for cluster-scoped kinds
        return None
    return {(namespace, name): compact_task(body)}


@kopf.index("batch", "v1", "jobs", labels=JOB_SELECTOR)
async def turnjob_index(body: kopf.Body, **_: Any) -> dict[TaskKey, JobView] | None:
    task_key = job_task_key(body)
    if task_key is None:
        return None
    return {task_key: job_view(body)}


@kopf.index("batch", "v1", "jobs", labels=COMMAND_JOB_SELECTOR)
async def commandjob_index(body: kopf.Body, **_: Any) -> dict[TaskKey, tuple[int, JobView]] | None:
    """A task's command Jobs: (their number, the Job's view)."""
    task_key = job_task_key(body)
    labels = (body.get("metadata") or {}).get("labels") or {}
    try:
        number = int(labels.get(names.COMMAND_JOB_LABEL) or "")
    except ValueError:
        return None
    if task_key is None:
        return None
    return {task_key: (number, job_view(body))}


@kopf.index("", "v1", "pods", labels=JOB_SELECTOR)
async def turnpod_index(body: kopf.Body, **_: Any) -> dict[TaskKey, PodView] | None:
    task_key = job_task_key(body)  # the pod template carries the task-id annotation
    if task_key is None:
        return None
    return {task_key: pod_view(body)}


@kopf.index("batch", "v1", "jobs", labels=WARM_SELECTOR)
async def warmjob_index(body: kopf.Body, **_: Any) -> dict[TaskKey, WarmJob] | None:
    view = warm_job_view(body)
    return {(view.namespace, view.pool): view} if view.namespace and view.pool else None


@kopf.index("", "v1", "pods", labels=WARM_SELECTOR)
async def warmpod_index(body: kopf.Body, **_: Any) -> dict[TaskKey, WarmPod] | None:
    view = warm_pod_view(body)
    return {(view.namespace, view.pool): view} if view.namespace and view.pool else None


@kopf.index(names.GROUP, names.VERSION, names.TRIGGER_PLURAL)
async def trigger_index(*, body: kopf.Body, namespace: str | None, name: str,
                        **_: Any) -> dict[TaskKey, dict[str, Any]] | None:
    """AgentTriggers: what the trigger endpoint needs of one (its metadata for the tasks' owner, its spec)."""
    if namespace is None:
        return None
    meta = body.get("metadata") or {}
    return {(namespace, name): {"apiVersion": names.API_VERSION, "kind": names.TRIGGER_KIND,
                                "metadata": {"name": name, "namespace": namespace, "uid": meta.get("uid")},
                                "spec": dict(body.get("spec") or {})}}


@kopf.index(names.GROUP, names.VERSION, mcp_servers.PLURAL)
async def mcpserver_index(*, spec: kopf.Spec, namespace: str | None, name: str,
                          **_: Any) -> dict[TaskKey, dict[str, Any]] | None:
    if namespace is None:
        return None
    return {(namespace, name): dict(spec)}


def compact_agent(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata", {})
    return {
        "metadata": {key: meta.get(key) for key in ("name", "namespace", "uid", "generation", "deletionTimestamp")},
        "spec": dict(body.get("spec") or {}),
        "status": dict(body.get("status") or {}),
    }


@kopf.index(names.GROUP, names.VERSION, names.AGENT_PLURAL)
async def agent_index(*, body: kopf.Body, namespace: str | None, name: str,
                      **_: Any) -> dict[TaskKey, dict[str, Any]] | None:
    if namespace is None:
        return None
    return {(namespace, name): compact_agent(body)}


def first(values: Iterable[Any] | None) -> Any:
    for value in values or ():
        return value
    return None


def active_job(jobs: Iterable[JobView] | None) -> JobView | None:
    """The task's running turn Job (one at most, by construction), ignoring Jobs being deleted."""
    for job in jobs or ():
        if job.outcome == "running" and not job.deleting:
            return job
    return None
