"""Ended turns: each turn Job's outcome recorded once, with its Event; the lease of a turn whose pod has terminated
broken at once instead of after its TTL.

- A turn attempt (one Job) is recorded once in the operator's accounting (``RedisState.account_job_end``), by
  whoever sees its end first: the Job's status (here) or the watchdog's reap (``watchdog/reaper.py``). Every Job
  that ends posts one Event on its AgentTask: TurnEnded, TurnFailed, or TurnJobDeleted (deleted before it ended).
- A turn pod that reached Succeeded/Failed, or was deleted, runs no turn any more: if the task's lease is still
  held by a process of that pod (holder ``<pod name>:<pid>``), the lease is deleted (compare-and-delete in one Lua
  script), so the next turn starts within seconds. Fencing makes this safe: a process that somehow outlived its pod
  finds its token gone and writes nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any

from unicore_operator import events, metrics, names, turn_traces
from unicore_operator.context import CreateFailure, OperatorContext
from unicore_operator.indexes import TaskKey, first, job_task_key, job_view
from unicore_operator.log import logger
from unicore_operator.phases import retry_delay
from unicore_operator.watchdog.views import PodView

TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})


def ended_turn_pod(body: Mapping[str, Any], event_type: str | None) -> tuple[TaskKey, str] | None:
    """(task key, pod name) when this watch event shows a turn pod that runs no process any more: its phase is
    Succeeded/Failed, or the pod object is gone (DELETED). None otherwise (pure)."""
    meta = body.get("metadata") or {}
    phase = (body.get("status") or {}).get("phase")
    if event_type != "DELETED" and phase not in TERMINAL_POD_PHASES:
        return None
    task_id = str((meta.get("annotations") or {}).get(names.TASK_ID_ANNOTATION) or "")
    if "/" not in task_id or not meta.get("name"):
        return None
    namespace, name = task_id.split("/", 1)
    return (namespace, name), str(meta["name"])


def pod_job(body: Mapping[str, Any]) -> tuple[TaskKey, str] | None:
    """(task key, Job name) of a turn pod (its task-id annotation and job-name label) (pure)."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    job = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
    task_id = str((meta.get("annotations") or {}).get(names.TASK_ID_ANNOTATION) or "")
    if not job or "/" not in task_id:
        return None
    namespace, name = task_id.split("/", 1)
    return (namespace, name), str(job)


def pod_moves_phase(pod: PodView, status: Mapping[str, Any]) -> bool:
    """Does this turn pod change what its task's status shows (pure)? A pod waiting for resources
    (PodScheduled=False) on a task whose Ready reason is not that wait's, or a running pod on a task still shown as
    Pending (it waited)."""
    if pod.deleting:
        return False
    if pod.phase == "Pending" and pod.unschedulable_reason:
        ready: Mapping[str, Any] = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
        return bool(ready.get("reason") != pod.unschedulable_reason)
    return pod.phase == "Running" and status.get("phase") == "Pending"


def job_end_event(job: str, turn: int, outcome: str, failure: str, recorded: int, failures: int,
                  allowed: int) -> tuple[str, str, str] | None:
    """(type, reason, message) of the Event for Job ``job`` of turn ``turn`` (its ``unicore.dev/turn`` label: the
    number users see, as in TurnStarted and ``status.lastTurn.number``) that ended with ``outcome`` (succeeded,
    failed, deleted = deleted before it ended), given what recording it returned (``account_job_end``: the failure
    count, -2 = the watchdog counted this attempt already, -1 = this Job's end was handled before: no Event)."""
    if recorded == -1:
        return None
    which = f"turn {turn}: Job {job}" if turn else f"turn Job {job}"
    if outcome == "succeeded":
        return events.NORMAL, events.TURN_ENDED, f"{which} finished"
    if outcome == "failed":
        counted = "counted when the watchdog reaped it" if recorded == -2 else "failure"
        return (events.WARNING, events.TURN_FAILED,
                f"{which} failed ({failure or 'unknown'}); {counted} {failures} of {allowed} allowed in a row")
    return events.WARNING, events.TURN_JOB_DELETED, f"{which} was deleted before it finished"


def container_ends(pods: Iterable[PodView] | None, job: str) -> str:
    """How the failed containers of Job ``job``'s pods ended ("container turn: OOMKilled (exit code 137)"), from the
    pod index; "" when no pod of it says (pure)."""
    ends = sorted({pod.ended for pod in pods or () if pod.job_name == job and pod.ended})
    return "; ".join(ends)


def existing_job_state(job: Mapping[str, Any] | None) -> str:
    """What a turn Job that answered 409 AlreadyExists to a create is: "running", "ended" (Complete/Failed: its end
    must be recorded, and the next attempt gets the next name), "deleting", or "gone" (deleted since) (pure)."""
    if job is None:
        return "gone"
    if (job.get("metadata") or {}).get("deletionTimestamp"):
        return "deleting"
    return "running" if job_view(job).outcome == "running" else "ended"


async def record_job_end(ctx: OperatorContext, job: Mapping[str, Any], deleted: bool) -> str | None:
    """Record the end of turn Job ``job`` once and post its Event; the outcome recorded (succeeded, failed,
    deleted), or None while the Job runs. Takes the task's lock. Raises when Redis cannot be reached."""
    key = job_task_key(job)
    if key is None:
        return None
    summary = job_view(job)
    outcome, failure = summary.outcome, summary.reason
    if outcome == "running" and not deleted:
        return None
    outcome = outcome if outcome != "running" else "deleted"
    if outcome == "failed":  # the Job says only that it failed; its pod says how (OOMKilled, killed, exit code)
        ended = container_ends(ctx.turnpods.get(key) if ctx.turnpods is not None else None, summary.name)
        failure = f"{failure}; {ended}" if ended else failure
    async with ctx.locks[key]:
        await record_end_locked(ctx, key, summary.name, summary.turn, outcome, failure, job)
    return outcome


async def record_end_locked(ctx: OperatorContext, key: TaskKey, job: str, turn: int, outcome: str,
                            failure: str, job_body: Mapping[str, Any] | None = None) -> int:
    """Record (once) that turn Job ``job`` ended with ``outcome``, post its Event; the caller holds the task's lock.
    Returns what ``account_job_end`` returned (-1: recorded before, or the task is not in Redis)."""
    tid = names.task_id(*key)
    snap = await ctx.redis.snapshot(tid)
    if not snap.exists:
        return -1
    delay = retry_delay(snap.failed_attempts + 1, ctx.settings.turn_retry_backoff_seconds)
    recorded = int(await asyncio.to_thread(ctx.redis.account_job_end, tid, job, turn, outcome, failure, delay))
    if recorded != -1 and outcome == "failed":
        metrics.job_failed(failure or "unknown")
    if recorded != -1 and job_body is not None and snap.view is not None:  # once per Job: its wait and pod start
        turn_traces.emit_start_spans(job_body, turn_traces.the_pod(ctx.turnpods.get(key) if ctx.turnpods else None,
                                                                    job), snap.view.trace_parent, tid, turn)
    failures = recorded if recorded >= 0 else snap.failed_attempts
    event = job_end_event(job, turn, outcome, failure, recorded, failures, ctx.settings.max_turn_retries + 1)
    body = first(ctx.agenttasks.get(key)) if ctx.agenttasks is not None else None
    if event is not None and body is not None:
        events.post(ctx, dict(body), *event)
    return recorded


async def give_up_pod_creation(ctx: OperatorContext, key: TaskKey, failure: CreateFailure, turn: int) -> float | None:
    """A turn Job that cannot create its pod (``failure``): the seconds left of its retry budget
    (``UNICORE_POD_CREATE_RETRY_SECONDS`` from the first FailedCreate), or None when the budget is spent and the
    Job was deleted and recorded as a failed attempt (with the Event's message). Caller holds the task's lock."""
    left = failure.since + ctx.settings.pod_create_retry_seconds - time.time()
    if left > 0 or not turn:  # turn 0: the Job is not in the index yet (it carries the turn label)
        return max(left, 1.0)
    await asyncio.to_thread(ctx.kube.delete_job, key[0], failure.job, "Background")
    await record_end_locked(ctx, key, failure.job, turn, "failed", failure.message)
    ctx.create_failures.pop(key, None)
    logger.warning("turn Job %s/%s could not create its pod for %.0fs: counted as a failed attempt (%s)", key[0],
                   failure.job, time.time() - failure.since, failure.message)
    return None


async def break_dead_lease(ctx: OperatorContext, pod: Mapping[str, Any], event_type: str | None) -> TaskKey | None:
    """If ``pod`` is a turn pod that ended and its process still holds the task's lease, break the lease; the task's
    key when it was broken (reconcile it: its next turn may start now)."""
    found = ended_turn_pod(pod, event_type)
    if found is None or not ctx.watches(found[0][0]):
        return None
    key, pod_name = found
    if not await asyncio.to_thread(ctx.redis.break_lease, names.task_id(*key), pod_name):
        return None
    logger.info("turn pod %s/%s ended holding the lease of %s: lease broken", key[0], pod_name, names.task_id(*key))
    return key
