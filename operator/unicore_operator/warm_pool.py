"""Pure construction of warm turn Jobs (issue 30): turn pods started before their task is known.

A pool belongs to an Agent of a namespace. Its pods are built from a turn Job of a *template task* of that Agent (a
task with only ``agentRef``: everything the Agent says, nothing a task adds), so a warm pod is a cold turn pod but
for what is per task: the task id (the turn container's command and ``UNICORE_TASK_ID``), the task's labels and
annotations. ``pod_template_hash`` hashes the rest; a task's turn may take a warm pod only when its own cold Job has
the same hash, so a task whose spec changes the pod (image, resources, GPUs, placement, tools, workspace folder) never
runs in a pod of another template: it takes the cold path.

The warm Job's turn container runs ``unicore-turn --warm`` (``unicore.turn.warm``) and the pod's deadline covers its
longest wait plus a turn. Nothing here talks to the API or Redis.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from unicore.api import pod_env

from unicore_operator import names
from unicore_operator.job_builder import TURN_CONTAINER
from unicore_operator.watchdog.views import job_outcome, parse_time, pod_view

WORKSPACE_VOLUME = "workspace"  # job_builder.build_workspace_volume's volume

WARM_NAME_INFIX = "-warm-"
TEMPLATE_HASH_LENGTH = 16


# The pool of a namespace's tasks without an Agent (the operator's UNICORE_WARM_POOLS): a label value no Agent can be
# named (an underscore), so it never meets an Agent's pool
AGENTLESS_POOL = "no_agent"


def agentless_template_task(namespace: str) -> dict[str, Any]:
    """The template task of ``namespace``'s pool of tasks without an Agent: a task with nothing but a prompt."""
    return {"metadata": {"name": "warm-template", "namespace": namespace, "uid": "", "labels": {}},
            "spec": {"prompt": "(warm pool template)"}}


def template_task(agent: dict[str, Any]) -> dict[str, Any]:
    """The template task of ``agent``'s pool (an Agent object): named after the Agent, with only ``agentRef``."""
    meta = agent["metadata"]
    return {"metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid", ""),
                         "labels": {}},
            "spec": {"agentRef": {"name": meta["name"]}, "prompt": "(warm pool template)"}}


def _turn_container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod_spec["containers"] if c["name"] == TURN_CONTAINER)


def _workspace_mount(container: dict[str, Any]) -> dict[str, Any] | None:
    return next((m for m in container.get("volumeMounts", []) if m.get("name") == WORKSPACE_VOLUME), None)


def shared_workspace(pod: dict[str, Any]) -> bool:
    """Whether a warm pod built from ``pod`` may mount the workspace claim whole and serve any tree: only the turn
    container mounts it (UniCore's own file tools then keep to the tree's folder). A pod with a workbench runs the
    agent's code next to the workspace: it keeps its tree's folder (``subPath``), so its tasks take the cold path."""
    mounting = [c for c in (*pod.get("initContainers", []), *pod["containers"]) if _workspace_mount(c) is not None]
    return [c["name"] for c in mounting] == [TURN_CONTAINER]


def workspace_folder_of(job: dict[str, Any]) -> str:
    """The tree's folder of the workspace claim that turn Job ``job`` mounts (its ``subPath``), "" when none."""
    mount = _workspace_mount(_turn_container(job["spec"]["template"]["spec"]))
    return str((mount or {}).get("subPath") or "")


def pod_template(job: dict[str, Any]) -> dict[str, Any]:
    """What makes the pod of turn Job ``job``, without what is per task (see the module doc): its pod spec without
    the turn container's command and task id (nor its tree's folder of the workspace claim, when the warm pod can
    mount the claim whole: ``shared_workspace``), and its Kueue queue."""
    pod = copy.deepcopy(job["spec"]["template"]["spec"])
    turn = _turn_container(pod)
    turn.pop("command", None)
    turn["env"] = [item for item in turn.get("env", []) if item["name"] != pod_env.TASK_ID]
    if shared_workspace(pod):
        (_workspace_mount(turn) or {}).pop("subPath", None)
    queue = (job["metadata"].get("labels") or {}).get(names.KUEUE_QUEUE_LABEL)
    return {"pod": pod, "queue": queue}


def pod_template_hash(job: dict[str, Any]) -> str:
    """The hash of ``pod_template(job)``: equal for two turn Jobs exactly when their pods would be the same."""
    canonical = json.dumps(pod_template(job), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:TEMPLATE_HASH_LENGTH]


def warm_job_prefix(pool: str) -> str:
    """The ``generateName`` of the pool's warm Jobs (the API server adds 5 characters)."""
    head = pool.replace("_", "-")[: names.JOB_NAME_MAX - len(WARM_NAME_INFIX) - 5].rstrip("-.")
    return f"{head}{WARM_NAME_INFIX}"


def build_warm_job_spec(template_job: dict[str, Any], pool: str, owner: dict[str, Any] | None, *,
                        max_wait_seconds: int) -> dict[str, Any]:
    """A warm Job of ``pool`` from ``template_job`` (the turn Job of the pool's template task, ``job_builder``),
    owned by ``owner`` (an owner reference: the Agent; None: no owner). Its pod is the template's but the turn
    container waits for an assignment (``unicore-turn --warm`` with the pool, template hash and longest wait) and has
    no task id; it is labelled with the pool and the hash, not with any task (the operator adds the task's labels
    when it assigns one). Its deadlines cover the longest wait plus the template's own (a turn)."""
    template_hash = pod_template_hash(template_job)
    job = copy.deepcopy(template_job)
    meta = job["metadata"]
    labels = {names.MANAGED_BY_LABEL: names.MANAGED_BY, names.WARM_POOL_LABEL: names.label_value(pool),
              names.WARM_TEMPLATE_LABEL: template_hash}
    queue = (meta.get("labels") or {}).get(names.KUEUE_QUEUE_LABEL)
    if queue:
        labels[names.KUEUE_QUEUE_LABEL] = queue
    job["metadata"] = {"generateName": warm_job_prefix(pool), "namespace": meta["namespace"], "labels": labels,
                       **({"ownerReferences": [owner]} if owner is not None else {})}
    spec = job["spec"]
    spec["activeDeadlineSeconds"] = int(spec.get("activeDeadlineSeconds") or 0) + max_wait_seconds
    template = spec["template"]
    template["metadata"] = {"labels": dict(labels)}
    pod = template["spec"]
    pod["activeDeadlineSeconds"] = int(pod.get("activeDeadlineSeconds") or 0) + max_wait_seconds
    turn = _turn_container(pod)
    if shared_workspace(pod):  # the claim whole: the assignment names the tree's folder (``workspace_folder_of``)
        (_workspace_mount(turn) or {}).pop("subPath", None)
    turn["command"] = ["unicore-turn", "--warm"]
    turn["env"] = [item for item in turn.get("env", []) if item["name"] != pod_env.TASK_ID] + [
        {"name": pod_env.WARM_POOL, "value": pool},
        {"name": pod_env.WARM_TEMPLATE, "value": template_hash},
        {"name": pod_env.WARM_MAX_WAIT_SECONDS, "value": str(max_wait_seconds)},
    ]
    return job


@dataclass(frozen=True)
class WarmJob:
    """A warm Job of a pool (label ``unicore.dev/warm-pool``); ``assigned``: it has a task (its task-id annotation,
    added when the operator gave its pod a turn)."""

    namespace: str
    name: str
    pool: str
    template: str
    uid: str = ""
    finished: bool = False
    deleting: bool = False
    assigned: bool = False

    @property
    def idle(self) -> bool:
        """Counts toward its pool's size: not assigned, not ended, not being deleted."""
        return not (self.assigned or self.finished or self.deleting)


@dataclass(frozen=True)
class WarmPod:
    """The pod of a warm Job; ``running``: its containers run (the turn container is up and may be waiting)."""

    namespace: str
    name: str
    job: str
    pool: str
    template: str
    running: bool = False
    deleting: bool = False
    assigned: bool = False
    created_at: float = 0.0
    start_time: float | None = None


def _labels(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return (body.get("metadata") or {}).get("labels") or {}


def _assigned(body: Mapping[str, Any]) -> bool:
    return bool(((body.get("metadata") or {}).get("annotations") or {}).get(names.TASK_ID_ANNOTATION))


def warm_job_view(body: Mapping[str, Any]) -> WarmJob:
    meta, labels = body.get("metadata") or {}, _labels(body)
    outcome, _ = job_outcome(body.get("status"))
    return WarmJob(namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
                   pool=str(labels.get(names.WARM_POOL_LABEL) or ""),
                   template=str(labels.get(names.WARM_TEMPLATE_LABEL) or ""), uid=str(meta.get("uid") or ""),
                   finished=outcome != "running", deleting=bool(meta.get("deletionTimestamp")),
                   assigned=_assigned(body))


def warm_pod_view(body: Mapping[str, Any]) -> WarmPod:
    meta, labels, pod = body.get("metadata") or {}, _labels(body), pod_view(body)
    return WarmPod(namespace=pod.namespace, name=pod.name, job=pod.job_name,
                   pool=str(labels.get(names.WARM_POOL_LABEL) or ""),
                   template=str(labels.get(names.WARM_TEMPLATE_LABEL) or ""), running=pod.phase == "Running",
                   deleting=pod.deleting, assigned=_assigned(body),
                   created_at=parse_time(meta.get("creationTimestamp")) or 0.0, start_time=pod.start_time)


def assignment_patch(turn_job: Mapping[str, Any], assigned_at: float) -> dict[str, Any]:
    """The metadata a warm Job and its pod get when their pod takes turn Job ``turn_job``'s turn at ``assigned_at``
    (unix time): that Job's labels (the task's, turn, attempt) and annotations (the task id), so the operator's Job
    and pod paths and the watchdog see it as the turn's Job from then on, and when the turn started (the watchdog
    counts a silent turn from then, not from the pod's start: ``names.ASSIGNED_AT_ANNOTATION``)."""
    meta = turn_job["metadata"]
    stamp = datetime.datetime.fromtimestamp(assigned_at, datetime.UTC).isoformat(timespec="milliseconds")
    annotations = {**dict(meta.get("annotations") or {}), names.ASSIGNED_AT_ANNOTATION: stamp}
    return {"metadata": {"labels": dict(meta.get("labels") or {}), "annotations": annotations}}


__all__ = ["AGENTLESS_POOL", "WARM_NAME_INFIX", "WarmJob", "WarmPod", "agentless_template_task", "assignment_patch",
           "build_warm_job_spec", "pod_template", "pod_template_hash", "shared_workspace", "template_task",
           "warm_job_prefix", "warm_job_view", "warm_pod_view", "workspace_folder_of"]
