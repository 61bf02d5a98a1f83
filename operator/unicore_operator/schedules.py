"""AgentSchedules (issue 31, docs/schedules.md): a Kopf timer per AgentSchedule (``handlers/schedules.py``) calls
``check`` every ``SCHEDULE_CHECK_SECONDS``; ``unicore.schedules.decide`` says what is due (CronJob's semantics) and
this module does it:

- start a run: create its AgentTask (``build_scheduled_task``: the template's spec and metadata, the schedule's label
  and scheduled-time annotation, owned by the schedule; its deterministic name makes a second create a 409, so an
  operator restarted at the minute boundary starts each run once), then record the time in
  ``status.lastScheduleTime``;
- skip a run past ``startingDeadlineSeconds`` (a Warning Event), note missed runs (an Event), wait while Forbid holds
  one (an Event, once per run), delete the active tasks first under Replace;
- keep the history limits (delete the oldest Idle and Failed runs) and the status (active tasks, next run, last
  error: a schedule or time zone the cron parser refuses).
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterable, Mapping
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from unicore.api.contract import (
    API_VERSION,
    KIND,
    SCHEDULE_KIND,
    SCHEDULE_LABEL,
    SCHEDULED_AT_ANNOTATION,
)
from unicore.api.spec import ScheduleSpec, readable
from unicore.cron import Cron, CronError, zone
from unicore.faults import fault_point
from unicore.schedules import Decision, Run, beyond_history, decide, run_name, schedule_label

from unicore_operator import events, metrics
from unicore_operator.context import OperatorContext
from unicore_operator.kube import agenttask_path
from unicore_operator.log import logger
from unicore_operator.watchdog.views import parse_time

SCHEDULE_CHECK_SECONDS = 2.0
ACTIVE_SHOWN = 100  # status.active lists at most this many

_waiting_noted: dict[tuple[str, str], datetime.datetime] = {}  # schedule -> the run whose wait an Event announced


def _stamp(at: datetime.datetime) -> str:
    return at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def owner(schedule: Mapping[str, Any]) -> dict[str, Any]:
    meta = schedule["metadata"]
    return {"apiVersion": API_VERSION, "kind": SCHEDULE_KIND, "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": False}


def build_scheduled_task(schedule: Mapping[str, Any], spec: ScheduleSpec, at: datetime.datetime) -> dict[str, Any]:
    """The AgentTask of ``schedule``'s run at ``at``: the template's spec, its labels and annotations plus the
    schedule's label (``unicore.dev/schedule``) and when it was due (``unicore.dev/scheduled-at``)."""
    meta = schedule["metadata"]
    labels = {**spec.task_template.metadata.labels, SCHEDULE_LABEL: schedule_label(meta["name"])}
    annotations = {**spec.task_template.metadata.annotations, SCHEDULED_AT_ANNOTATION: _stamp(at)}
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": run_name(meta["name"], at), "namespace": meta["namespace"], "labels": labels,
                         "annotations": annotations, "ownerReferences": [owner(schedule)]},
            "spec": dict(spec.task_template.spec)}


def runs_of(tasks: Mapping[Any, Iterable[Mapping[str, Any]]] | None, namespace: str, schedule: str) -> list[Run]:
    """The AgentTasks of ``namespace`` that ``schedule`` started (its label), from the AgentTask index."""
    label = schedule_label(schedule)
    found: list[Run] = []
    for (task_namespace, _), bodies in (tasks or {}).items():
        if task_namespace != namespace:
            continue
        for body in bodies:
            meta = body.get("metadata") or {}
            if (meta.get("labels") or {}).get(SCHEDULE_LABEL) != label or meta.get("deletionTimestamp"):
                continue
            at = parse_time((meta.get("annotations") or {}).get(SCHEDULED_AT_ANNOTATION)) or parse_time(
                meta.get("creationTimestamp")) or 0.0
            phase = str((body.get("status") or {}).get("phase") or "")
            found.append(Run(str(meta.get("name")), phase, datetime.datetime.fromtimestamp(at, datetime.UTC)))
    return found


def _since(body: Mapping[str, Any]) -> datetime.datetime:
    status, meta = body.get("status") or {}, body.get("metadata") or {}
    stamp = parse_time(status.get("lastScheduleTime")) or parse_time(meta.get("creationTimestamp")) or 0.0
    return datetime.datetime.fromtimestamp(stamp, datetime.UTC)


async def check(ctx: OperatorContext, body: dict[str, Any], patch_status: dict[str, Any],
                now: datetime.datetime | None = None) -> None:
    """One check of AgentSchedule ``body`` at ``now``; what its status becomes goes into ``patch_status``."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    spec = readable(ScheduleSpec, body.get("spec")) if body.get("spec") else None
    now = now or datetime.datetime.now(datetime.UTC)
    runs = runs_of(ctx.agenttasks, namespace, name)
    active = sorted(run.name for run in runs if run.active)
    try:
        if spec is None:
            raise CronError("spec.schedule and spec.taskTemplate are required")
        decision = decide(spec, Cron.parse(spec.schedule), zone(spec.time_zone), now=now, since=_since(body),
                          active=active, name=name, started={run.name for run in runs})
    except CronError as exc:
        if (body.get("status") or {}).get("lastError") != str(exc):
            events.post(ctx, body, events.WARNING, "InvalidSchedule", str(exc))
            logger.warning("AgentSchedule %s/%s: %s", namespace, name, exc)
        patch_status.update(lastError=str(exc)[:1024], nextScheduleTime=None)
        return
    started = await _act(ctx, body, spec, decision, active)
    if started:
        active = sorted({*active, started} - set(decision.replace))
    doomed = beyond_history(runs, successful=spec.successful_tasks_history_limit,
                            failed=spec.failed_tasks_history_limit)
    for task in doomed:
        await asyncio.to_thread(ctx.kube.core.delete, agenttask_path(namespace, task))
        logger.info("AgentSchedule %s/%s: deleted %s (beyond its history limits)", namespace, name, task)
    idle = [run for run in runs if run.phase == "Idle"]
    patch_status.update(active=active[:ACTIVE_SHOWN], activeCount=len(active), lastError="",
                        nextScheduleTime=_stamp(decision.next_time) if decision.next_time else None,
                        observedGeneration=meta.get("generation"))
    if idle:
        patch_status["lastSuccessfulTime"] = _stamp(max(run.at for run in idle))
    if decision.action in ("start", "replace", "skip") and decision.at is not None:
        patch_status["lastScheduleTime"] = _stamp(decision.at)
        if started:
            patch_status["lastStartedTask"] = started


async def _act(ctx: OperatorContext, body: dict[str, Any], spec: ScheduleSpec, decision: Decision,
               active: list[str]) -> str | None:
    """Carry ``decision`` out (``active``: the schedule's active tasks); the task started, if any."""
    meta = body["metadata"]
    namespace, name, at = meta["namespace"], meta["name"], decision.at
    key = (namespace, name)
    if at is None or decision.action == "none":
        return None
    metrics.schedule_run("missed", decision.missed)
    if decision.missed:
        events.post(ctx, body, events.WARNING, "MissedSchedule",
                    f"{decision.missed} earlier run(s) before {_stamp(at)} were missed and are skipped")
    if decision.action == "skip":
        metrics.schedule_run("skipped")
        events.post(ctx, body, events.WARNING, "MissedSchedule",
                    f"the run of {_stamp(at)} is skipped: not started within startingDeadlineSeconds="
                    f"{spec.starting_deadline_seconds}")
        return None
    if decision.action == "wait":
        if _waiting_noted.get(key) != at:
            _waiting_noted[key] = at
            events.post(ctx, body, events.NORMAL, "Waiting",
                        f"the run of {_stamp(at)} waits: concurrencyPolicy Forbid and still active: "
                        f"{', '.join(active)}")
        return None
    for task in decision.replace:
        await asyncio.to_thread(ctx.kube.core.delete, agenttask_path(namespace, task))
        metrics.schedule_run("replaced")
        events.post(ctx, body, events.NORMAL, "Replaced", f"deleted {task} (concurrencyPolicy Replace)")
    new_task = build_scheduled_task(body, spec, at)
    try:
        created = await asyncio.to_thread(ctx.kube.core.create_quietly, agenttask_path(namespace), new_task)
    except ApiException as exc:  # refused (admission, a quota): the run is not started; the next check tries again
        metrics.schedule_run("failed")
        message = f"could not create AgentTask {new_task['metadata']['name']}: {exc.status} {exc.reason}"
        events.post(ctx, body, events.WARNING, "FailedCreate", message)
        raise kopf.TemporaryError(message, delay=10) from None
    task_name = str(new_task["metadata"]["name"])
    fault_point("after scheduled task created")  # the crash tests' kill point (unicore.faults.OPERATOR_STEPS)
    if created:
        metrics.schedule_run("started")
        events.post(ctx, body, events.NORMAL, "Started", f"started AgentTask {task_name} for the run of {_stamp(at)}")
        logger.info("AgentSchedule %s/%s started %s", namespace, name, task_name)
    _waiting_noted.pop(key, None)
    return task_name


def forget(namespace: str, name: str) -> None:
    _waiting_noted.pop((namespace, name), None)


__all__ = ["SCHEDULE_CHECK_SECONDS", "build_scheduled_task", "check", "forget", "owner",
           "runs_of"]
