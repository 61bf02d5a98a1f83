"""Turn Job and turn pod events -> outcome accounting, broken leases of dead turns, AgentTask status, next turn."""

from __future__ import annotations

from typing import Any

import kopf

from unicore_operator.context import OperatorContext
from unicore_operator.indexes import JOB_SELECTOR
from unicore_operator.log import logger
from unicore_operator.reconcile import job_changed
from unicore_operator.turn_ends import break_dead_lease, ended_turn_pod, pod_job, pod_moves_phase
from unicore_operator.watchdog.views import pod_view


@kopf.on.event("batch", "v1", "jobs", labels=JOB_SELECTOR)
async def turn_job_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    ctx: OperatorContext | None = memo.get("ctx")
    if ctx is None:
        return
    await job_changed(ctx, dict(body), event.get("type"))


@kopf.on.event("", "v1", "pods", labels=JOB_SELECTOR)
async def turn_pod_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A turn pod changed. It exists: a FailedCreate of its Job is over. It waits for resources, or started after
    waiting: the task's status follows. It ended (Succeeded/Failed/deleted) while its process held the task's lease:
    break the lease now (not after its TTL) and reconcile, so the task's next turn starts within seconds."""
    ctx: OperatorContext | None = memo.get("ctx")
    if ctx is None:
        return
    created = pod_job(dict(body))
    if created is not None and ctx.watches(created[0][0]):
        (namespace, name), job = created
        failure = ctx.create_failures.get((namespace, name))
        task = ctx.indexed_task(namespace, name)
        if failure is not None and failure.job == job:
            ctx.create_failures.pop((namespace, name), None)  # the Job could create its pod after all
            ctx.reconciles.request((namespace, name), "turn-pod-created")
        elif task is not None and pod_moves_phase(pod_view(body), task.get("status") or {}):
            ctx.reconciles.request((namespace, name), "turn-pod-scheduling")
    uid, event_type = str(body.get("metadata", {}).get("uid") or ""), event.get("type")
    if uid in ctx.ended_pods:  # its end was seen and its lease checked: no process of it can hold the lease since
        if event_type == "DELETED":
            ctx.ended_pods.discard(uid)
        return
    try:
        key = await break_dead_lease(ctx, dict(body), event_type)
    except Exception as exc:  # Redis unreachable: the lease expires on its TTL, the watchdog covers the rest
        logger.warning("could not break the lease of ended turn pod %s: %s", body.get("metadata", {}).get("name"), exc)
        return
    if uid and event_type != "DELETED" and ended_turn_pod(body, event_type) is not None:
        ctx.ended_pods.add(uid)
    if key is not None:
        ctx.reconciles.request(key, "turn-pod-ended")
