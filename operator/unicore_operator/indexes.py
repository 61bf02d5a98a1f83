"""Kopf in-memory indexes of AgentTasks and turn Jobs: the activation path, the status refresh, the resync and the
watchdog read these instead of calling the API server (one watch per resource kind feeds them).

``agenttask_index``  (namespace, name)        -> compact AgentTask (metadata, spec, status)
``children_index``   (namespace, parent name) -> {"name", "phase"} of each child
``turnjob_index``    (namespace, task name)   -> JobSummary dict of each turn Job of the task
``turnpod_index``    (namespace, task name)   -> PodView of each turn pod of the task (scheduling state)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from unicore_operator import names
from unicore_operator.watchdog.views import PodView, pod_view

JOB_SELECTOR = {names.MANAGED_BY_LABEL: names.MANAGED_BY}

TaskKey = tuple[str, str]


def job_outcome(job_status: Mapping[str, Any] | None) -> tuple[str, str]:
    """("running" | "succeeded" | "failed", reason) from a Job's status (pure)."""
    status = job_status or {}
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Complete":
            return "succeeded", ""
        if cond.get("type") == "Failed":
            reason = cond.get("reason") or "Failed"
            message = cond.get("message") or ""
            return "failed", f"{reason}: {message}" if message else reason
    return "running", ""


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
            "creationTimestamp": meta.get("creationTimestamp"),
            "deletionTimestamp": meta.get("deletionTimestamp"),
        },
        "spec": dict(body.get("spec") or {}),
        "status": dict(body.get("status") or {}),
    }


def job_summary(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata", {})
    labels = meta.get("labels") or {}
    outcome, reason = job_outcome(body.get("status"))
    status = body.get("status") or {}
    return {
        "name": meta.get("name"),
        "turn": int(labels.get(names.TURN_LABEL, 0) or 0),
        "attempt": int(labels.get(names.ATTEMPT_LABEL, 0) or 0),
        "outcome": outcome,
        "reason": reason,
        "deleting": bool(meta.get("deletionTimestamp")),
        "suspended": bool((body.get("spec") or {}).get("suspend")),
        "ready": int(status.get("ready") or 0),
        "startTime": status.get("startTime"),
        "completionTime": status.get("completionTime"),
        "created": meta.get("creationTimestamp"),
    }


def job_task_key(body: Mapping[str, Any]) -> TaskKey | None:
    meta = body.get("metadata", {})
    task_id = (meta.get("annotations") or {}).get(names.TASK_ID_ANNOTATION)
    if not task_id or "/" not in task_id:
        return None
    namespace, name = task_id.split("/", 1)
    return namespace, name


@kopf.index(names.GROUP, names.VERSION, names.PLURAL)
def agenttask_index(*, body: kopf.Body, namespace: str | None, name: str,
                    **_: Any) -> dict[TaskKey, dict[str, Any]] | None:
    if namespace is None:  # AgentTasks are namespaced; kopf's signature allows None for cluster-scoped kinds
        return None
    return {(namespace, name): compact_task(body)}


@kopf.index(names.GROUP, names.VERSION, names.PLURAL)
def children_index(*, spec: kopf.Spec, status: kopf.Status, namespace: str | None, name: str,
                   **_: Any) -> dict[TaskKey, dict[str, str]] | None:
    parent = (spec.get("parentRef") or {}).get("name")
    if not parent or namespace is None:  # AgentTasks are namespaced: namespace is None only in kopf's signature
        return None
    return {(namespace, parent): {"name": name, "phase": str(status.get("phase") or "Pending")}}


@kopf.index("batch", "v1", "jobs", labels=JOB_SELECTOR)
def turnjob_index(body: kopf.Body, **_: Any) -> dict[TaskKey, dict[str, Any]] | None:
    task_key = job_task_key(body)
    if task_key is None:
        return None
    return {task_key: job_summary(body)}


@kopf.index("", "v1", "pods", labels=JOB_SELECTOR)
def turnpod_index(body: kopf.Body, **_: Any) -> dict[TaskKey, PodView] | None:
    task_key = job_task_key(body)  # the pod template carries the task-id annotation
    if task_key is None:
        return None
    return {task_key: pod_view(body)}


def first(values: Iterable[Any] | None) -> Any:
    for value in values or ():
        return value
    return None


def active_job(jobs: Iterable[Mapping[str, Any]] | None) -> dict[str, Any] | None:
    """The task's running turn Job (one at most, by construction), ignoring Jobs being deleted."""
    for job in jobs or ():
        if job.get("outcome") == "running" and not job.get("deleting"):
            return dict(job)
    return None
