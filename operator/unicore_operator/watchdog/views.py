"""Small, immutable views of turn Jobs and pods (built once per watch event, not per scan) and of AgentTasks.

The operator's Kopf indexes (:mod:`unicore_operator.indexes`) hold a :class:`JobView` per turn Job and a
:class:`PodView` per turn pod; the watchdog reads those same values, and derives an :class:`AgentTaskView` from
the AgentTask index's compact body when that body changes (``adapter.AgentTaskViews``). ``job_view`` is the one parser
of a Job's fields (labels, annotations, conditions, deadlines) for the reconciler and the watchdog alike. Every
converter here is pure: body (a mapping shaped like the Kubernetes object) in, view out. (The task record in Redis
has its own view, ``unicore.store.task_views.TaskView``; this one is the Kubernetes object's.)
"""

from __future__ import annotations

import datetime
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from unicore.api import contract
from unicore.api.spec import task_spec_of
from unicore.store.heartbeats import RedisTaskState as RedisTaskState  # what Redis says of a turn
from unicore.terminal import printable

TASK_LABEL = contract.TASK_LABEL
TURN_LABEL = contract.TURN_LABEL
TASK_ID_ANNOTATION = contract.TASK_ID_ANNOTATION
JOB_NAME_LABEL = "job-name"
CONTROLLER_UID_LABEL = "controller-uid"

# Container waiting reasons that mean "this pod will not start by itself".
STUCK_WAITING_REASONS = frozenset(
    {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError",
     "CreateContainerError", "ErrImageNeverPull", "RunContainerError"}
)


TERMINATION_LINE_MAX = 300  # characters of a failed container's last log line kept in status and Events


@dataclass(frozen=True, slots=True)
class AgentTaskView:
    """An AgentTask object (metadata, spec.suspend, status) as the watchdog needs it."""

    namespace: str
    name: str
    phase: str = ""
    active_job: str = ""
    suspend: bool = False
    failed_attempts: int = 0
    root: str = ""

    @property
    def task_id(self) -> str:
        return contract.task_id(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class JobView:
    """A turn Job (label app.kubernetes.io/managed-by=unicore-operator)."""

    namespace: str
    name: str
    task_id: str
    uid: str = ""
    created_at: float = 0.0
    start_time: float | None = None
    active_deadline_seconds: int | None = None
    finished: bool = False  # has a Complete or Failed condition
    deleting: bool = False  # deletionTimestamp set
    suspended: bool = False  # spec.suspend (e.g. held by Kueue): not stuck, just queued
    # The Job controller's Suspended condition: its status ("True" / "False", "" = none yet) and lastTransitionTime
    # (when the controller saw the Job suspended, or resumed it: it then resets the Job's startTime).
    suspend_condition: str = ""
    suspend_changed_at: float | None = None
    queue: str = ""  # label kueue.x-k8s.io/queue-name (spec.queueName): the LocalQueue that admits it
    turn: int = 0  # label unicore.dev/turn
    attempt: int = 0  # label unicore.dev/attempt
    outcome: str = "running"  # "running" | "succeeded" | "failed" (``job_outcome``)
    reason: str = ""  # "<reason>: <message>" of a Failed condition
    ready: int = 0  # status.ready

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def queued(self) -> bool:
        """Held suspended (by Kueue, or anyone outside the operator), or released but not started yet by the Job
        controller (its Suspended condition still True): no pod can exist, so nothing of it is stuck."""
        return self.suspended or self.suspend_condition == "True"

    @property
    def queued_since(self) -> float:
        """When the Job was last held: the Suspended=True condition's time, else (not written yet) its creation."""
        if self.suspend_condition == "True" and self.suspend_changed_at:
            return self.suspend_changed_at
        return self.created_at

    @property
    def waiting_since(self) -> float:
        """Since when the Job may have made a pod: its creation, or its release (Suspended=False) when later."""
        if self.suspend_condition == "False" and self.suspend_changed_at:
            return max(self.created_at, self.suspend_changed_at)
        return self.created_at


@dataclass(frozen=True, slots=True)
class PodView:
    """A turn Job's pod."""

    namespace: str
    name: str
    job_name: str
    phase: str = "Pending"
    created_at: float = 0.0
    start_time: float | None = None
    deleting: bool = False
    unschedulable_reason: str = ""  # PodScheduled=False reason (e.g. Unschedulable)
    unschedulable_message: str = ""  # the scheduler's message ("0/2 nodes are available: ...")
    waiting_reason: str = ""  # a container's waiting reason (ImagePullBackOff, ...)
    waiting_message: str = ""
    turn: int = 0  # label unicore.dev/turn (the Job's pod template carries it)
    active_deadline_seconds: int | None = None  # the turn timeout, counted from the pod's start (start_time)
    ended: str = ""  # how a container of it ended when it failed (``container_end``), e.g. OOMKilled
    workbench_failed: str = ""  # how its workbench (the run_command sidecar) last failed: its one line, else ""
    assigned_at: float | None = None  # a warm pod's: when it was given its turn (the turn started then, not with it)
    scheduled_at: float | None = None  # when it was bound to a node (PodScheduled=True)
    started_at: float | None = None  # when its turn container started (running or terminated startedAt)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def job_key(self) -> str:
        return f"{self.namespace}/{self.job_name}"

    @property
    def terminated(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


def parse_time(value: Any) -> float | None:
    """Kubernetes RFC 3339 timestamp (or datetime) -> unix seconds; None when absent or unreadable."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime.datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
        return stamp.timestamp()
    try:
        text = str(value).replace("Z", "+00:00")
        stamp = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.UTC)
    return stamp.timestamp()


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return body.get("metadata") or {}


def agent_task_view(body: Mapping[str, Any]) -> AgentTaskView:
    meta, status = _meta(body), body.get("status") or {}
    labels = meta.get("labels") or {}
    return AgentTaskView(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        phase=str(status.get("phase") or ""),
        active_job=str(status.get("activeJob") or ""),
        suspend=task_spec_of(body).suspend,
        failed_attempts=int(status.get("failedAttempts") or 0),
        root=str(labels.get(contract.ROOT_LABEL) or meta.get("name") or ""),
    )


def _task_id_of(meta: Mapping[str, Any]) -> str:
    annotations = meta.get("annotations") or {}
    if annotations.get(TASK_ID_ANNOTATION):
        return str(annotations[TASK_ID_ANNOTATION])
    labels = meta.get("labels") or {}
    return contract.task_id(str(meta.get("namespace") or ""), str(labels.get(TASK_LABEL) or ""))


def job_outcome(job_status: Mapping[str, Any] | None) -> tuple[str, str]:
    """("running" | "succeeded" | "failed", reason) from a Job's status conditions (pure)."""
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


def suspend_condition(job_status: Mapping[str, Any] | None) -> tuple[str, float | None]:
    """(status, lastTransitionTime) of a Job's Suspended condition; ("", None) when it has none (pure)."""
    for cond in (job_status or {}).get("conditions") or []:
        if cond.get("type") == "Suspended":
            return str(cond.get("status") or ""), parse_time(cond.get("lastTransitionTime"))
    return "", None


def job_view(body: Mapping[str, Any]) -> JobView:
    """The one parser of a turn Job (the operator's Job index, its 409 and end paths, and the watchdog use it)."""
    meta, spec, status = _meta(body), body.get("spec") or {}, body.get("status") or {}
    labels = meta.get("labels") or {}
    outcome, reason = job_outcome(status)
    held, held_changed_at = suspend_condition(status)
    deadline = spec.get("activeDeadlineSeconds")
    return JobView(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        task_id=_task_id_of(meta),
        uid=str(meta.get("uid") or ""),
        created_at=parse_time(meta.get("creationTimestamp")) or 0.0,
        start_time=parse_time(status.get("startTime")),
        active_deadline_seconds=int(deadline) if deadline is not None else None,
        finished=outcome != "running",
        deleting=bool(meta.get("deletionTimestamp")),
        suspended=bool(spec.get("suspend")),
        suspend_condition=held,
        suspend_changed_at=held_changed_at,
        queue=str(labels.get(contract.KUEUE_QUEUE_LABEL) or ""),
        turn=_int(labels.get(TURN_LABEL)),
        attempt=_int(labels.get(contract.ATTEMPT_LABEL)),
        outcome=outcome,
        reason=reason,
        ready=_int(status.get("ready")),
    )


def last_line(message: object, limit: int = TERMINATION_LINE_MAX) -> str:
    """The last non-blank line of a container's termination message (the turn's one-line error: the Job's
    ``terminationMessagePolicy: FallbackToLogsOnError`` makes it the tail of the log), control characters escaped,
    at most ``limit`` characters (pure)."""
    lines = [line.strip() for line in str(message or "").splitlines() if line.strip()]
    if not lines:
        return ""
    line = printable(lines[-1], multiline=False)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def container_end(cstatus: Mapping[str, Any]) -> str:
    """How a container ended, when it failed (terminated with a non-zero exit code): "container turn: OOMKilled
    (exit code 137)", "container turn: Error (exit code 137: killed by SIGKILL)", "container turn: Error (exit code
    1): unicore-turn: ns/t: <why>" (its termination message's last line); "" otherwise (pure)."""
    terminated = (cstatus.get("state") or {}).get("terminated") or {}
    code = _int(terminated.get("exitCode"))
    if not terminated or code == 0:
        return ""
    reason = str(terminated.get("reason") or "Terminated")
    how = f"exit code {code}"
    if code > 128 and reason != "OOMKilled":  # 128 + n: killed by signal n (an OOM kill is a SIGKILL)
        try:
            how += f": killed by {signal.Signals(code - 128).name}"
        except ValueError:
            pass
    said = last_line(terminated.get("message"))
    return f"container {cstatus.get('name') or '?'}: {reason} ({how})" + (f": {said}" if said else "")


WORKBENCH_CONTAINER = "workbench"  # unicore_operator.workbench_pod.WORKBENCH_CONTAINER


def workbench_failure(statuses: list[Mapping[str, Any]]) -> str:
    """How a turn pod's workbench (a native sidecar: the kubelet restarts it) failed, from its current or last state:
    "container workbench: Error (exit code 3): workbench image ... cannot run /bin/sh as uid 65532" (pure)."""
    for cstatus in statuses:
        if cstatus.get("name") != WORKBENCH_CONTAINER:
            continue
        for state in (cstatus.get("state") or {}, cstatus.get("lastState") or {}):
            ended = container_end({"name": WORKBENCH_CONTAINER, "state": state})
            if ended:
                return ended
    return ""


def pod_view(body: Mapping[str, Any]) -> PodView:
    meta, status = _meta(body), body.get("status") or {}
    deadline = (body.get("spec") or {}).get("activeDeadlineSeconds")
    labels = meta.get("labels") or {}
    job_name = str(labels.get(JOB_NAME_LABEL) or labels.get(f"batch.kubernetes.io/{JOB_NAME_LABEL}") or "")
    if not job_name:
        for owner in meta.get("ownerReferences") or []:
            if owner.get("kind") == "Job":
                job_name = str(owner.get("name") or "")
    unsched_reason = unsched_message = ""
    scheduled_at: float | None = None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            unsched_reason = str(cond.get("reason") or "")
            unsched_message = str(cond.get("message") or "")
        elif cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            scheduled_at = parse_time(cond.get("lastTransitionTime"))
    started_at: float | None = None
    for cstatus in status.get("containerStatuses") or []:  # the turn container (the workbench is an init container)
        state = cstatus.get("state") or {}
        stamp = (state.get("running") or state.get("terminated") or {}).get("startedAt")
        started_at = started_at or parse_time(stamp)
    waiting_reason = waiting_message = ended = ""
    workbench = workbench_failure(list(status.get("initContainerStatuses") or []))
    for cstatus in list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or []):
        ended = ended or container_end(cstatus)
        waiting = (cstatus.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            waiting_reason = str(waiting.get("reason"))
            waiting_message = str(waiting.get("message") or "")
            if waiting_reason in STUCK_WAITING_REASONS:
                break
    return PodView(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        job_name=job_name,
        phase=str(status.get("phase") or "Pending"),
        created_at=parse_time(meta.get("creationTimestamp")) or 0.0,
        start_time=parse_time(status.get("startTime")),
        deleting=bool(meta.get("deletionTimestamp")),
        unschedulable_reason=unsched_reason,
        unschedulable_message=unsched_message,
        waiting_reason=waiting_reason,
        waiting_message=waiting_message,
        turn=_int(labels.get(TURN_LABEL)),
        active_deadline_seconds=int(deadline) if deadline is not None else None,
        ended=ended,
        workbench_failed=workbench,
        assigned_at=parse_time((meta.get("annotations") or {}).get(contract.ASSIGNED_AT_ANNOTATION)),
        scheduled_at=scheduled_at,
        started_at=started_at,
    )
