"""A task's command Jobs (``submit_job``, issue 29) on the operator's side: one step of each task's reconcile.

For each request still outstanding (``unicore.store.command_jobs``): the task suspended (or stopped) -> delete its
Job and deliver "cancelled"; not created yet -> check it against the task's
GPU limit as the API server has it (never Redis's copy) and create the Job (``command_job_builder``; a 409 is the
same Job) and note it created; created -> when the Job ended (its index, or one API read when the index has no Job:
it may lag a create, or the Job was deleted), read how its pod ended and the end of its log and deliver the result
to the task (``command_jobs.deliver_result``: once, whatever repeats). Every trigger ends here: the Job's events
(``handlers.command_jobs``), the task's own, the periodic resync, so an operator killed at any point delivers each
result once after its restart.
"""

from __future__ import annotations

import asyncio
from typing import Any

from unicore.api.spec import agent_spec_of, task_spec_of
from unicore.store import command_jobs
from unicore.store.command_jobs import JobOutcome, JobRequest
from unicore.store.operator_state import TaskSnapshot

from unicore_operator import events, metrics, names
from unicore_operator.command_job_builder import build_command_job_spec, command_job_name, max_job_gpus
from unicore_operator.context import OperatorContext
from unicore_operator.indexes import TaskKey
from unicore_operator.log import logger
from unicore_operator.watchdog.views import JobView, container_end, job_view, parse_time

LOG_TAIL_BYTES = 4096


def indexed_jobs(ctx: OperatorContext, key: TaskKey) -> dict[int, JobView]:
    found = ctx.commandjobs.get(key) if ctx.commandjobs is not None else None
    return {number: view for number, view in found or ()}


async def step(ctx: OperatorContext, key: TaskKey, body: dict[str, Any], snap: TaskSnapshot,
               spec: Any) -> bool:
    """Create and collect the task's command Jobs; True when a result was delivered (the task has new work)."""
    outstanding = command_jobs.outstanding(list(snap.command_jobs))
    if not outstanding:
        return False
    namespace, name = key
    own = task_spec_of(body)
    agent = ctx.indexed_agent(namespace, own.agent_ref.name) if own.agent_ref is not None else None
    limit = max_job_gpus(own, agent_spec_of(agent).limits.max_job_gpus if agent is not None else None)
    jobs = indexed_jobs(ctx, key)
    delivered = False
    for state in outstanding:
        request = state.request
        job_name = command_job_name(name, request.n, namespace=namespace)
        if own.suspend:  # suspend and stop cancel the task's jobs (a Job not made yet is not made)
            if state.created is not None:
                await asyncio.to_thread(ctx.kube.delete_job, namespace, job_name)
            outcome = JobOutcome("cancelled", reason="the task was suspended or stopped")
            delivered |= await _deliver(ctx, body, key, job_name, request, outcome)
            continue
        if state.created is None:
            if request.gpus > limit:
                outcome = JobOutcome("refused", reason=f"it asked for {request.gpus} GPUs; the task's limit "
                                                       f"(limits.maxJobGPUs) is {limit}")
                delivered |= await _deliver(ctx, body, key, job_name, request, outcome)
                continue
            await _create(ctx, key, body, spec, request, job_name)
            continue
        view = jobs.get(request.n)
        if view is None:
            live = await asyncio.to_thread(ctx.kube.get_job, namespace, job_name)
            if live is None:
                outcome = JobOutcome("failed", reason="the Job was deleted before it ended")
                delivered |= await _deliver(ctx, body, key, job_name, request, outcome)
                continue
            view = job_view(live)
        if view.outcome == "running":
            continue
        outcome = await asyncio.to_thread(_outcome_of, ctx, namespace, job_name, view)
        delivered |= await _deliver(ctx, body, key, job_name, request, outcome)
    return delivered


async def _create(ctx: OperatorContext, key: TaskKey, body: dict[str, Any], spec: Any, request: JobRequest,
                  job_name: str) -> None:
    job = build_command_job_spec(body, spec, request, ctx.settings)
    loop = asyncio.get_running_loop()
    created = await loop.run_in_executor(ctx.job_executor, ctx.kube.create_job, job)
    await asyncio.to_thread(command_jobs.mark_created, ctx.store, names.task_id(*key), request.n, "created")
    if created:
        logger.info("created command Job %s/%s (%r, %d GPU(s))", key[0], job_name, request.command[:80], request.gpus)
        events.post(ctx, body, events.NORMAL, events.JOB_SUBMITTED,
                    f"command Job {job_name} created ({request.gpus} GPU(s)): {request.command[:200]}")


def _outcome_of(ctx: OperatorContext, namespace: str, job_name: str, view: JobView) -> JobOutcome:
    """How the ended Job's pod ended and the end of its log (one list of its pods, one log read)."""
    pods = ctx.kube.core.list(f"/api/v1/namespaces/{namespace}/pods", f"job-name={job_name}")
    exit_code: int | None = None
    reason = "" if view.outcome == "succeeded" else (view.reason or "failed")
    log_tail = ""
    started = finished = None
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or "")):
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (status.get("state") or {}).get("terminated") or {}
            if terminated:
                exit_code = terminated.get("exitCode")
                started = parse_time(terminated.get("startedAt"))
                finished = parse_time(terminated.get("finishedAt"))
                end = container_end(status)
                if end and view.outcome != "succeeded":
                    reason = f"{reason}; {end}" if reason else end
        log_tail = ctx.kube.core.read_log(namespace, str(pod["metadata"]["name"]), LOG_TAIL_BYTES) or log_tail
    duration = finished - started if started is not None and finished is not None else None
    queued = started - view.created_at if started is not None and view.created_at else None
    return JobOutcome("succeeded" if view.outcome == "succeeded" else "failed", exit_code=exit_code, reason=reason,
                      duration_seconds=duration, log_tail=log_tail, queued_seconds=queued)


async def _deliver(ctx: OperatorContext, body: dict[str, Any], key: TaskKey, job_name: str, request: JobRequest,
                   outcome: JobOutcome) -> bool:
    queued = await asyncio.to_thread(command_jobs.deliver_result, ctx.store, names.task_id(*key), job_name, request,
                                     outcome)
    if queued:
        metrics.command_job_ended(outcome.state, request.gpus, outcome.duration_seconds, outcome.queued_seconds)
        kind = events.NORMAL if outcome.state == "succeeded" else events.WARNING
        code = f", exit code {outcome.exit_code}" if outcome.exit_code is not None else ""
        events.post(ctx, body, kind, events.JOB_ENDED, f"command Job {job_name} {outcome.state}{code}"
                    + (f": {outcome.reason}" if outcome.reason else ""))
    return queued


STATUS_JOBS = 10  # the newest command Jobs a task's status lists


def status_of(ctx: OperatorContext, key: TaskKey, snap: TaskSnapshot) -> list[dict[str, Any]]:
    """``status.jobs``: the task's newest command Jobs, each with its state (Requested, Queued: held by its queue,
    Running, or how it ended), its GPUs, its command (clipped) and, once ended, its exit code."""
    if not snap.command_jobs:
        return []
    views = indexed_jobs(ctx, key)
    entries = []
    for state in list(snap.command_jobs)[-STATUS_JOBS:]:
        view = views.get(state.request.n)
        entry = command_jobs.shown(key[1], state, queued=view is not None and view.queued)
        entry["name"] = command_job_name(key[1], state.request.n, namespace=key[0])  # as the Job is named
        entries.append(entry)
    return entries


__all__ = ["indexed_jobs", "status_of", "step"]
