"""The watchdog's decision: a PURE function from a snapshot of the operator's caches to a list of reap actions.

``scan(snapshot, now, thresholds)`` does no I/O and reads no clock; the adapter builds the snapshot from Kopf
indexes plus the Redis read that ``plan_redis_reads`` calls for, and the reaper carries the actions out. One walk
over jobs, pods and tasks: O(tasks + jobs + pods), at most one action per task (the most specific reason wins) and
one per orphan Job.

Reasons, in the order they are checked:
- ``orphan_job``: a turn Job whose AgentTask is not in the cache (older than ``absence_grace``);
- ``deadline_exceeded``: a turn pod Running past its own ``activeDeadlineSeconds`` (the turn timeout, counted from
  the pod's start, so a wait for scheduling does not count) + ``deadline_grace``, or a Job past its
  ``activeDeadlineSeconds`` (turn timeout + the bounded wait for scheduling) + ``deadline_grace``, not finished;
- ``workbench_failed``: the workbench of the Job's pod (the run_command sidecar) exited with an error, e.g. an image
  that cannot run as the non-root user: its one line is the message, at once (the kubelet would only restart it);
- ``pending_timeout``: the Job's pod Pending longer than ``pending_timeout`` (or no pod at all that long); the
  scheduler's / kubelet's reason is copied into the message;
- ``admission_timeout``: a turn Job held suspended (Kueue keeps ``spec.suspend`` true until its queue admits it)
  longer than ``admission_timeout`` (0 = no limit). A held Job has no pod: it is queued, not stuck, so the Pending,
  heartbeat and deadline rules never apply to it, and the no-pod clock restarts when the Job is released;
- ``heartbeat_stale``: the Job's pod Running but the task's heartbeat (or, before the first beat, the pod start)
  older than ``heartbeat_timeout``: the turn process hangs. A turn that has released its lease (Redis no longer
  says ``running``) stops beating on purpose: its pod is judged by the release time instead (a process that
  lingers that long after its turn ended still blocks the task's next Job);
- ``lease_holder_gone``: a Redis lease whose holder pod is not in the cache (or has terminated) while the task has
  no live Job;
- ``running_without_job``: Redis says ``running``, no lease, no live Job.

One failure per turn attempt: every action names the attempt it reaps (``attempt``: the turn Job's name; for the
two Job-less reasons the Job whose pod held the lease, see :func:`turn_attempt`). The reaper records the failure
under that name in the operator's accounting, where the Job's own outcome is recorded too, so whoever notices a
dead turn first (Job status, watchdog) counts it, and the other finds it counted. A reap of an attempt whose Job
already shows its end does not predict another failure in ``attempts``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from unicore_operator.watchdog.attempts import Attempt, turn_attempt
from unicore_operator.watchdog.views import AgentTaskView, JobView, PodView, RedisTaskState

MAX_MESSAGE = 900  # status.message stays small


# Not StrEnum: that would change str()/format() of a member (callers use .value, but keep the semantics as they are).
class ReapReason(str, Enum):  # noqa: UP042
    ORPHAN_JOB = "orphan_job"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    PENDING_TIMEOUT = "pending_timeout"
    WORKBENCH_FAILED = "workbench_failed"
    ADMISSION_TIMEOUT = "admission_timeout"
    HEARTBEAT_STALE = "heartbeat_stale"
    LEASE_HOLDER_GONE = "lease_holder_gone"
    RUNNING_WITHOUT_JOB = "running_without_job"


@dataclass(frozen=True, slots=True)
class Thresholds:
    heartbeat_timeout: float = 120.0
    pending_timeout: float = 300.0
    max_reaps: int = 3
    deadline_grace: float = 30.0  # the Job controller gets this long to kill a Job past its deadline
    absence_grace: float = 30.0  # an object missing from a cache must be missing at least this long
    admission_timeout: float = 0.0  # a Job held suspended by its queue longer than this is reaped; 0 = never


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The watchdog's inputs. ``tasks`` by task id (``ns/name``), ``redis`` by task id."""

    tasks: Mapping[str, AgentTaskView]
    jobs: Sequence[JobView]
    pods: Sequence[PodView]
    redis: Mapping[str, RedisTaskState] = field(default_factory=dict)
    # Tasks whose ``uc:heartbeats`` entry is newer than ``now - heartbeat_timeout`` (checked in Redis without
    # reading their state): their turn is beating, so the heartbeat rule cannot fire for them.
    beating: frozenset[str] = frozenset()


# Task phases (from the operator's cache) under which Redis may hold a turn of a task that has no live Job: the
# watchdog reads those tasks' state even when their heartbeat is fresh (see ``plan_redis_reads``).
PHASES_TO_READ = frozenset({"Running", "Pending", "Suspended", ""})


@dataclass(frozen=True, slots=True)
class RedisPlan:
    """What the scan needs from Redis, decided from the caches alone (see ``plan_redis_reads``)."""

    read: frozenset[str] = frozenset()  # tasks whose full state (status, heartbeat, lease) is needed anyway
    beat_check: frozenset[str] = frozenset()  # tasks whose state is needed only if their heartbeat is stale/missing


@dataclass(frozen=True, slots=True)
class ReapAction:
    """One thing to reap, and everything the reaper needs to do it without looking anything up."""

    reason: ReapReason
    task_id: str
    namespace: str
    message: str
    job: str = ""  # Job name to delete (propagation Background); "" = none
    job_uid: str = ""  # precondition for the delete: never delete a newer Job of the same name
    turn: int = 0  # the reaped attempt's turn number (0 when unknown)
    attempt: str = ""  # the turn attempt (its Job's name) counted as failed; "" = unknown (keyed by the lease token)
    pod: str = ""
    lease_token: str = ""  # release the lease only if it still holds this token
    reset_status: bool = False  # Redis status running -> idle
    task_exists: bool = True  # False for orphan Jobs: nothing to record on a task
    activate: bool = True  # queue the interruption note and activate the task
    fail_task: bool = False  # predicted from the cache: this reap is the UNICORE_MAX_REAPS-th in a row (the reaper
    # decides on the recorded count: an attempt already counted is not a new failure)
    attempts: int = 0  # status.failedAttempts after this reap


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def _age(now: float, since: float | None) -> float:
    return now - since if since else 0.0


def pending_cause(pod: PodView | None) -> str:
    """The scheduler's or kubelet's reason a pod is still Pending, as a short human string."""
    if pod is None:
        return "no pod was created for the Job"
    if pod.waiting_reason:
        return f"{pod.waiting_reason}: {pod.waiting_message}".rstrip(": ")
    if pod.unschedulable_reason:
        reason = "FailedScheduling" if pod.unschedulable_reason == "Unschedulable" else pod.unschedulable_reason
        return f"{reason}: {pod.unschedulable_message}".rstrip(": ")
    return "not scheduled yet (no reason reported)"


def _task_action(
    reason: ReapReason, task: AgentTaskView, message: str, thresholds: Thresholds, *,
    job: JobView | None = None, pod: PodView | None = None, state: RedisTaskState | None = None,
    reset_status: bool = False, attempt: Attempt | None = None,
) -> ReapAction:
    if attempt is None and job is not None:
        attempt = Attempt(job.name, job.turn)
    counted = attempt is not None and attempt.ended  # the Job path records this attempt's end
    attempts = task.failed_attempts + (0 if counted else 1)
    fail = not counted and attempts >= thresholds.max_reaps
    if fail:
        message = f"{message} (reaped {attempts} times in a row; giving up)"
    return ReapAction(
        reason=reason, task_id=task.task_id, namespace=task.namespace, message=_clip(message),
        job=job.name if job else "", job_uid=job.uid if job else "", turn=attempt.turn if attempt else 0,
        attempt=attempt.job if attempt else "", pod=pod.name if pod else "",
        lease_token=state.lease_token if state else "", reset_status=reset_status,
        activate=not task.suspend, fail_task=fail, attempts=attempts,
    )


def _overdue(job: JobView, now: float) -> float | None:
    """Seconds the Job runs past its activeDeadlineSeconds (negative before), None without a deadline/start."""
    if job.start_time and job.active_deadline_seconds is not None:
        return _age(now, job.start_time) - job.active_deadline_seconds
    return None


def _pod_started(pod: PodView) -> float:
    """When the pod's turn started: its start, or for a warm pod the moment it was given the turn (it waited, alive
    but turnless, since its start)."""
    return pod.assigned_at or pod.start_time or pod.created_at


def _pod_overdue(pod: PodView, now: float) -> float | None:
    """Seconds a Running pod runs past its own activeDeadlineSeconds (the turn timeout, from the pod's start)."""
    if pod.phase != "Running" or pod.active_deadline_seconds is None or not pod.start_time:
        return None
    return _age(now, pod.start_time) - pod.active_deadline_seconds


def _admission_due(job: JobView, now: float, t: Thresholds) -> bool:
    return t.admission_timeout > 0 and _age(now, job.queued_since) > t.admission_timeout


def _admission_action(job: JobView, task: AgentTaskView, now: float, t: Thresholds,
                      state: RedisTaskState | None) -> ReapAction | None:
    """A queued Job (see ``JobView.queued``) is reaped only when held longer than the admission timeout."""
    if not _admission_due(job, now, t):
        return None
    by = f"LocalQueue {job.queue}" if job.queue else "whatever suspended it (no queue label)"
    return _task_action(
        ReapReason.ADMISSION_TIMEOUT, task,
        f"turn Job {job.name} was held suspended for {_age(now, job.queued_since):.0f}s without being admitted by "
        f"{by} (admission timeout {t.admission_timeout:.0f}s)",
        t, job=job, state=state, reset_status=True,
    )


def _job_action(job: JobView, task: AgentTaskView, pods: list[PodView], now: float, t: Thresholds,
                state: RedisTaskState | None, beating: bool = False) -> ReapAction | None:
    overdue = _overdue(job, now)
    if overdue is not None:
        if overdue > t.deadline_grace:
            return _task_action(
                ReapReason.DEADLINE_EXCEEDED, task,
                f"turn Job {job.name} still running {overdue:.0f}s past its "
                f"activeDeadlineSeconds={job.active_deadline_seconds}",
                t, job=job, pod=pods[0] if pods else None, state=state, reset_status=True,
            )
    live = [p for p in pods if not p.deleting and not p.terminated]
    for pod in live:
        if pod.workbench_failed:
            return _task_action(
                ReapReason.WORKBENCH_FAILED, task,
                f"turn pod {pod.name}: the workbench failed: {pod.workbench_failed}",
                t, job=job, pod=pod, state=state, reset_status=True,
            )
    pending = [p for p in live if p.phase == "Pending"]
    running = [p for p in live if p.phase == "Running"]
    for pod in running:
        late = _pod_overdue(pod, now)
        if late is not None and late > t.deadline_grace:
            return _task_action(
                ReapReason.DEADLINE_EXCEEDED, task,
                f"turn pod {pod.name} still running {late:.0f}s past its turn timeout "
                f"(activeDeadlineSeconds={pod.active_deadline_seconds} from the pod's start)",
                t, job=job, pod=pod, state=state, reset_status=True,
            )
    if not live and not pods and _age(now, job.waiting_since) > t.pending_timeout:
        return _task_action(
            ReapReason.PENDING_TIMEOUT, task,
            f"turn Job {job.name} has had no pod for {_age(now, job.waiting_since):.0f}s: {pending_cause(None)}",
            t, job=job, state=state, reset_status=True,
        )
    for pod in pending:
        waited = _age(now, pod.created_at)
        if waited > t.pending_timeout:
            return _task_action(
                ReapReason.PENDING_TIMEOUT, task,
                f"turn pod {pod.name} Pending for {waited:.0f}s: {pending_cause(pod)}",
                t, job=job, pod=pod, state=state, reset_status=True,
            )
    if beating:
        return None  # a heartbeat newer than the threshold: no running pod is silent long enough
    released_at = state.released_at if state and state.status != "running" else None
    for pod in running:
        started = _pod_started(pod)
        if released_at is not None and released_at >= started:  # this pod's turn ended; the process is exiting
            lingering = now - released_at
            if lingering > t.heartbeat_timeout:
                return _task_action(
                    ReapReason.HEARTBEAT_STALE, task,
                    f"turn pod {pod.name} hangs: still running {lingering:.0f}s after its turn released the lease "
                    f"(threshold {t.heartbeat_timeout:.0f}s)",
                    t, job=job, pod=pod, state=state, reset_status=True,
                )
            continue
        beat = state.heartbeat_at if state and state.heartbeat_at else 0.0
        last_sign_of_life = max(beat, started)
        silent = now - last_sign_of_life
        if silent > t.heartbeat_timeout:
            what = "no heartbeat since the pod started" if beat < started else "last heartbeat"
            return _task_action(
                ReapReason.HEARTBEAT_STALE, task,
                f"turn pod {pod.name} hangs: {what} {silent:.0f}s ago "
                f"(threshold {t.heartbeat_timeout:.0f}s)",
                t, job=job, pod=pod, state=state, reset_status=True,
            )
    return None


def scan(snapshot: Snapshot, now: float, thresholds: Thresholds) -> list[ReapAction]:
    """Everything stuck in ``snapshot`` at time ``now``; pure, deterministic, one pass over each collection."""
    t = thresholds
    actions: list[ReapAction] = []
    acted: set[str] = set()
    tasks = snapshot.tasks
    redis_states = snapshot.redis

    pods_by_job: dict[str, list[PodView]] = {}
    pod_names: dict[str, PodView] = {}
    for pod in snapshot.pods:
        pods_by_job.setdefault(pod.job_key, []).append(pod)
        pod_names[pod.key] = pod
    jobs_by_key = {job.key: job for job in snapshot.jobs}

    live_job_tasks: set[str] = set()
    for job in snapshot.jobs:
        if job.deleting:
            continue
        task = tasks.get(job.task_id)
        if task is None:
            if _age(now, job.created_at) > t.absence_grace:
                actions.append(ReapAction(
                    reason=ReapReason.ORPHAN_JOB, task_id=job.task_id, namespace=job.namespace,
                    message=f"turn Job {job.name} belongs to AgentTask {job.task_id}, which no longer exists",
                    job=job.name, job_uid=job.uid, task_exists=False, activate=False,
                ))
            continue
        if job.finished:
            continue
        live_job_tasks.add(job.task_id)
        if job.task_id in acted:
            continue
        if job.queued:
            action = _admission_action(job, task, now, t, redis_states.get(job.task_id))
        else:
            action = _job_action(job, task, pods_by_job.get(job.key, []), now, t, redis_states.get(job.task_id),
                                 job.task_id in snapshot.beating)
        if action is not None:
            actions.append(action)
            acted.add(job.task_id)

    for task_id, state in redis_states.items():
        if task_id in acted or task_id in live_job_tasks:
            continue
        task = tasks.get(task_id)
        if task is None:
            continue  # not an AgentTask of ours (local mode, or deleted: the finalizer cleans Redis)
        if state.leased:
            holder_pod = state.lease_holder.split(":", 1)[0]
            holder = pod_names.get(f"{task.namespace}/{holder_pod}")
            if (holder is None or holder.terminated) and _age(now, state.lease_acquired_at) > t.absence_grace:
                where = "is gone" if holder is None else f"has {holder.phase.lower()}"
                actions.append(_task_action(
                    ReapReason.LEASE_HOLDER_GONE, task,
                    f"lease of {task_id} is held by {state.lease_holder}, whose pod {where} (no live turn Job)",
                    t, state=state, reset_status=True,
                    attempt=turn_attempt(state.lease_holder, task_id, pod_names, jobs_by_key),
                ))
                acted.add(task_id)
            continue
        if state.status == "running" and _age(now, state.updated_at) > t.absence_grace:
            actions.append(_task_action(
                ReapReason.RUNNING_WITHOUT_JOB, task,
                f"{task_id} is marked running in Redis but has no lease and no live turn Job",
                t, state=state, reset_status=True,
                attempt=turn_attempt(state.turn_holder, task_id, pod_names, jobs_by_key),
            ))
            acted.add(task_id)
    return actions


def plan_redis_reads(snapshot: Snapshot, now: float, thresholds: Thresholds) -> RedisPlan:
    """Which tasks' Redis state :func:`scan` needs at ``now``, from the caches alone (``snapshot.redis`` unused).

    - ``read``: a live Job past its deadline, Pending too long or held past the admission timeout (the reap needs
      the lease token), and tasks without
      a live Job whose cached phase is in ``PHASES_TO_READ`` (a turn that outlived its Job: ``lease_holder_gone`` /
      ``running_without_job``);
    - ``beat_check``: a live Job with a Running pod started more than ``heartbeat_timeout`` ago: only these can be
      ``heartbeat_stale``, and only if their ``uc:heartbeats`` entry is older than that or missing.
    Every other task's state cannot change the scan's result, except through a stale ``uc:heartbeats`` entry,
    which the adapter reads too. Same walk as :func:`scan`, O(jobs + pods + tasks), no I/O.
    """
    t = thresholds
    tasks = snapshot.tasks
    pods_by_job: dict[str, list[PodView]] = {}
    for pod in snapshot.pods:
        pods_by_job.setdefault(pod.job_key, []).append(pod)
    read: set[str] = set()
    beat_check: set[str] = set()
    live_job_tasks: set[str] = set()
    for job in snapshot.jobs:
        task_id = job.task_id
        if job.deleting or job.finished or task_id not in tasks:
            continue
        live_job_tasks.add(task_id)
        if job.queued:
            if _admission_due(job, now, t):
                read.add(task_id)
            continue
        overdue = _overdue(job, now)
        if overdue is not None and overdue > t.deadline_grace:
            read.add(task_id)
            continue
        pods = pods_by_job.get(job.key)
        if not pods:
            if _age(now, job.waiting_since) > t.pending_timeout:
                read.add(task_id)
            continue
        silent_pod = False
        for pod in pods:  # the conditions of _job_action, without building its messages
            if pod.deleting or pod.terminated:
                continue
            if pod.workbench_failed:
                read.add(task_id)
                break
            if pod.phase == "Pending" and _age(now, pod.created_at) > t.pending_timeout:
                read.add(task_id)
                break
            late = _pod_overdue(pod, now)
            if late is not None and late > t.deadline_grace:
                read.add(task_id)
                break
            if pod.phase == "Running" and now - _pod_started(pod) > t.heartbeat_timeout:
                silent_pod = True
        else:
            if silent_pod:
                beat_check.add(task_id)
    for task_id, task in tasks.items():
        if task.phase in PHASES_TO_READ and task_id not in live_job_tasks:
            read.add(task_id)
    return RedisPlan(read=frozenset(read), beat_check=frozenset(beat_check - read))
