"""Reconcile one AgentTask: read its state once, start its next turn Job if it should run, mirror its status.

Every path ends here: the activation stream, Job events, child changes, the create handler and the periodic resync.
A per-task asyncio lock serialises the work of one task; deterministic Job names make a repeat harmless.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

from unicore.api import contract
from unicore.api.spec import AgentTaskSpec, SpecInvalid, agent_spec_of, parse_spec, task_spec_of
from unicore.store.operator_state import TaskSnapshot
from unicore.traces.links import trace_status
from unicore.turn.reports import deliver_report, post_to_conversations, report_failure

from unicore_operator import approval_waits as approvals
from unicore_operator import command_jobs, events, metrics, names, warm_pools
from unicore_operator.context import OperatorContext, WrittenStatus
from unicore_operator.indexes import TaskKey, active_job, first, job_task_key, job_view
from unicore_operator.job_builder import build_turn_job_spec, with_agent_defaults
from unicore_operator.log import logger
from unicore_operator.mcp_servers import turn_mcp_env
from unicore_operator.phases import (
    HUMAN_PHASES,
    Phase,
    TaskObservation,
    build_status,
    decide_phase,
    delivers_owed_report,
    origin_of,
    ready_reason,
    scheduling_wait,
    status_changed,
    wants_turn_job,
)
from unicore_operator.turn_ends import existing_job_state, give_up_pod_creation, record_end_locked, record_job_end
from unicore_operator.watchdog.views import JobView, PodView

LEASE_RECHECK_SECONDS = 2.0
JOB_GONE_RECHECK_SECONDS = 1.0  # a Job of the wanted name is being deleted: try again after this long
_spec_errors: dict[tuple[str, int], str | None] = {}
_post = events.post  # the name the handlers import


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def spec_error(body: dict[str, Any]) -> str | None:
    """The reason the spec cannot run, or None (cached per uid and generation)."""
    meta = body["metadata"]
    cache_key = (str(meta.get("uid")), int(meta.get("generation") or 0))
    if cache_key not in _spec_errors:
        try:
            parse_spec(body.get("spec") or {})
            _spec_errors[cache_key] = None
        except SpecInvalid as exc:
            _spec_errors[cache_key] = str(exc)
    return _spec_errors[cache_key]


async def task_body(ctx: OperatorContext, key: TaskKey) -> dict[str, Any] | None:
    """The AgentTask from the index; from the API only when the index has not seen it yet."""
    body = first(ctx.agenttasks.get(key)) if ctx.agenttasks is not None else None
    if body is not None:
        return dict(body)
    fetched = await asyncio.to_thread(ctx.kube.get_agenttask, *key)
    if fetched is None:
        return None
    from unicore_operator.indexes import compact_task

    return compact_task(fetched)


def children_of(ctx: OperatorContext, key: TaskKey, snap: TaskSnapshot) -> list[dict[str, str]]:
    """The task's children (its Redis children set, read with the snapshot) by name, each with its phase from the
    AgentTask index ("Pending" until its status has one). A child whose AgentTask the index does not hold (deleted,
    or not created yet by the spawner that reserved it) is left out, and so is one whose ``spec.parentRef`` names
    another parent."""
    children: list[dict[str, str]] = []
    parent_id = names.task_id(*key)
    for child_id in snap.children:
        child_key = contract.split_task_id(child_id)
        body = first(ctx.agenttasks.get(child_key)) if child_key is not None and ctx.agenttasks is not None else None
        if child_key is None or body is None or spec_parent(body) != parent_id:
            continue  # not a child of this task as the API server has it (the children set is tenant-writable)
        children.append({"name": child_key[1], "phase": str((body.get("status") or {}).get("phase") or "Pending")})
    return sorted(children, key=lambda c: c["name"])


def jobs_of(ctx: OperatorContext, key: TaskKey) -> list[JobView]:
    return list(ctx.turnjobs.get(key) or ()) if ctx.turnjobs is not None else []


def pods_of(ctx: OperatorContext, key: TaskKey, job: str) -> list[PodView]:
    """The cached pods of the task's turn Job ``job``."""
    pods = ctx.turnpods.get(key) if ctx.turnpods is not None else None
    return [pod for pod in pods or () if pod.job_name == job]


def observe(ctx: OperatorContext, body: dict[str, Any], snap: TaskSnapshot, active: str | None,
            children: list[dict[str, str]], waiting: tuple[str, str] | None = None) -> TaskObservation:
    human = approvals.human_wait(snap)
    return TaskObservation(
        suspended=task_spec_of(body).suspend,
        invalid_reason=spec_error(body),
        failed_attempts=snap.failed_attempts,
        max_retries=ctx.settings.max_turn_retries,
        last_failure=snap.last_failure or None,
        active_job=active,
        lease_held=snap.lease_held,
        pending_messages=snap.runnable_pending,
        held_messages=snap.pending - snap.runnable_pending,
        human=human,
        unfinished_turn=snap.unfinished_turn(),
        children_phases={c["name"]: c["phase"] for c in children},
        job_waiting=waiting,
        owes_report=snap.owes_report,
        jobs_outstanding=snap.jobs_outstanding,
    )


def spec_parent(body: dict[str, Any]) -> str:
    """The task id of the task's parent as the API server has it (``spec.parentRef``, always in the task's own
    namespace: the webhook and ``lineage`` see to it); "" for a root. The operator sends reports only there, never
    to the ``parent`` of the task's Redis record, which the namespace's Redis user can write."""
    ref = task_spec_of(body).parent_ref
    return names.task_id(body["metadata"]["namespace"], ref.name) if ref is not None and ref.name else ""


def job_spec_of(ctx: OperatorContext, namespace: str, body: dict[str, Any]) -> AgentTaskSpec:
    """The spec task ``body``'s turn Jobs are built from: its own, over its indexed Agent's (docs/agents.md)."""
    spec = task_spec_of(body)
    agent = ctx.indexed_agent(namespace, spec.agent_ref.name) if spec.agent_ref is not None else None
    return with_agent_defaults(spec, agent_spec_of(agent) if agent is not None else None)


def tree_path(ctx: OperatorContext, body: dict[str, Any]) -> str:
    meta = body["metadata"]
    ref = task_spec_of(body).parent_ref
    parent = ref.name if ref is not None else ""
    if not parent:
        return str(meta["name"])
    parent_body = first(ctx.agenttasks.get((meta["namespace"], parent))) if ctx.agenttasks is not None else None
    parent_path = ((parent_body or {}).get("status") or {}).get("treePath") or parent
    return f"{parent_path}/{meta['name']}"


def schedule_recheck(ctx: OperatorContext, key: TaskKey, delay: float, reason: str) -> None:
    """Reconcile ``key`` again after ``delay`` seconds (one pending re-check per task; never a sleep)."""
    loop = asyncio.get_running_loop()
    old = ctx.rechecks.pop(key, None)
    if old is not None:
        old.cancel()

    def fire() -> None:
        ctx.rechecks.pop(key, None)
        ctx.reconciles.request(key, reason)

    ctx.rechecks[key] = loop.call_later(max(0.05, delay), fire)


async def reconcile_task(ctx: OperatorContext, namespace: str, name: str, reason: str) -> str | None:
    """Start the next turn Job if the task should run; refresh its status. Returns the Job created, if any."""
    if not ctx.watches(namespace):
        return None
    key = (namespace, name)
    async with ctx.locks[key]:
        try:
            return await _reconcile_locked(ctx, key, reason)
        except Exception:
            logger.exception("reconciling %s/%s (%s) failed; the resync retries", namespace, name, reason)
            return None


async def _reconcile_locked(ctx: OperatorContext, key: TaskKey, reason: str) -> str | None:
    body = await task_body(ctx, key)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None
    tid = names.task_id(*key)
    jobs = jobs_of(ctx, key)
    running = active_job(jobs)
    inflight = ctx.inflight_jobs.get(key)
    if inflight and any(job.name == inflight for job in jobs):
        ctx.inflight_jobs.pop(key, None)  # the watch caught up
        inflight = None
    waiting: tuple[str, str] | None = None
    failure = ctx.create_failures.get(key)
    if failure is not None and failure.job != ((running.name if running else None) or inflight):
        ctx.create_failures.pop(key, None)  # that Job ended or is gone: its outcome speaks for it
    elif failure is not None:
        left = await give_up_pod_creation(ctx, key, failure, running.turn if running else 0)
        if left is None:  # the attempt was recorded as failed and its Job deleted
            running, inflight = None, None
            ctx.inflight_jobs.pop(key, None)
        else:
            waiting = ("FailedCreate", failure.message)
            schedule_recheck(ctx, key, left, "failed-create-budget")
    if waiting is None and running is not None:
        waiting = scheduling_wait(running.queued, pods_of(ctx, key, running.name), running.queue)
    snap = await ctx.redis.snapshot(tid, [job.name for job in jobs if job.outcome != "running"])
    if not snap.exists:
        return None  # not initialised yet: the create handler reconciles when it is
    if snap.unrecorded_jobs:  # ended while their event could not be recorded (Redis down): record them now
        by_name = {job.name: job for job in jobs}
        for name in snap.unrecorded_jobs:
            ended = by_name[name]
            await record_end_locked(ctx, key, name, ended.turn, ended.outcome, ended.reason)
        snap = await ctx.redis.snapshot(tid)
    active_name = (running.name if running else None) or inflight
    if delivers_owed_report(observe(ctx, body, snap, active_name, [], waiting)):
        # The turn ended but its pod died before the report reached the parent: deliver it (same id, once).
        await asyncio.to_thread(deliver_report, ctx.store, tid, spec_parent(body))
        snap.report_delivered()
    if snap.conversations:  # its posts and ended turns' answers to them (a turn pod may not write them; a running
        # turn's post_message activates it)
        await asyncio.to_thread(post_to_conversations, ctx.store, tid)
    if snap.waiting_for == "approval" and not snap.lease_held and await _expire_overdue(ctx, key, body, snap):
        snap = await ctx.redis.snapshot(tid)  # the denial queued the task's wake-up
    if snap.jobs_outstanding and await command_jobs.step(ctx, key, body, snap, job_spec_of(ctx, key[0], body)):
        snap = await ctx.redis.snapshot(tid)  # a command Job's result was queued: the task has work
    children = children_of(ctx, key, snap)
    obs = observe(ctx, body, snap, active_name, children, waiting)
    created: str | None = None
    if wants_turn_job(obs):
        wait = snap.retry_at - time.time() if snap.failed_attempts else 0.0
        if wait > 0:
            schedule_recheck(ctx, key, wait, "retry")
        else:
            job_spec = job_spec_of(ctx, key[0], body)
            job = build_turn_job_spec(body, snap.next_turn(), ctx.settings, snap.next_attempt(),
                                      mcp_env=turn_mcp_env(ctx.mcpservers, key[0], job_spec), spec=job_spec)
            job_name = job["metadata"]["name"]
            warm = await warm_pools.take_turn(ctx, key, body, job, snap.next_turn(), snap.next_attempt())
            loop = asyncio.get_running_loop()
            if warm is not None:  # a warm pod of its Agent's pool runs the turn (warm_pools): no cold Job
                ctx.inflight_jobs[key] = warm
                created = warm
                logger.info("turn %d of %s runs in warm Job %s/%s (%s)", snap.next_turn(), tid, key[0], warm, reason)
                _post(ctx, body, events.NORMAL, events.TURN_STARTED,
                      f"turn {snap.next_turn()} started in warm Job {warm} ({reason})")
                obs = observe(ctx, body, snap, warm, children)
            elif await loop.run_in_executor(ctx.job_executor, ctx.kube.create_job, job):
                ctx.inflight_jobs[key] = job_name
                created = job_name
                metrics.job_created()
                logger.info("created turn Job %s/%s for %s (%s)", key[0], job_name, tid, reason)
                _post(ctx, body, events.NORMAL, events.TURN_STARTED,
                      f"turn {snap.next_turn()} started as Job {job_name} ({reason})")
                obs = observe(ctx, body, snap, job_name, children)
            elif await _job_exists_and_runs(ctx, key, job_name):
                ctx.inflight_jobs[key] = job_name
                obs = observe(ctx, body, snap, job_name, children)
    elif snap.lease_held and not running and not inflight:
        schedule_recheck(ctx, key, LEASE_RECHECK_SECONDS, "lease")
    await _mirror_status(ctx, body, snap, obs, children)
    return created


async def _expire_overdue(ctx: OperatorContext, key: TaskKey, body: dict[str, Any], snap: TaskSnapshot) -> bool:
    """Deny the task's approvals that waited past its timeout (True when some were), and re-check when the next
    pending one is due (see ``approvals``)."""
    timeout = approvals.timeout_seconds(task_spec_of(body), snap.record, ctx.settings.approval_timeout_seconds)
    due = approvals.overdue_at(snap.pending_calls, timeout)
    denied: list[str] = []
    if due is not None and due <= time.time():
        denied = await asyncio.to_thread(approvals.expire, ctx.redis.sync, names.task_id(*key), timeout)
        due = approvals.overdue_at([call for call in snap.pending_calls if call.call_id not in denied], timeout)
    if due is not None:  # the next one not due yet
        schedule_recheck(ctx, key, due - time.time(), "approval-timeout")
    if denied:
        metrics.approval_decided("expired", len(denied))
        logger.info("denied %d overdue approval(s) of %s/%s: %s", len(denied), *key, ", ".join(denied))
        _post(ctx, body, events.WARNING, approvals.APPROVAL_EXPIRED,
              f"denied tool call(s) {', '.join(denied)}: no decision within {timeout:g}s")
    return bool(denied)


async def _job_exists_and_runs(ctx: OperatorContext, key: TaskKey, job_name: str) -> bool:
    """The create of ``job_name`` answered 409. True when that Job runs (a duplicate activation: nothing to do);
    else record its end if it ended (so the next attempt gets the next name) and reconcile again shortly."""
    existing = await asyncio.to_thread(ctx.kube.get_job, key[0], job_name)
    state = existing_job_state(existing)
    if state == "running":
        return True
    if state == "ended" and existing is not None:
        ended = job_view(existing)
        await record_end_locked(ctx, key, job_name, ended.turn, ended.outcome, ended.reason)
    logger.info("turn Job %s/%s exists but is %s; reconciling again", key[0], job_name, state)
    schedule_recheck(ctx, key, JOB_GONE_RECHECK_SECONDS if state != "ended" else 0.05, f"job-{state}")
    return False


def merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``target`` after a JSON merge patch (RFC 7386) with ``patch`` (pure)."""
    merged = dict(target)
    for name, value in patch.items():
        if value is None:
            merged.pop(name, None)
        elif isinstance(value, dict) and isinstance(merged.get(name), dict):
            merged[name] = merge_patch(merged[name], value)
        else:
            merged[name] = value
    return merged


def known_status(ctx: OperatorContext, key: TaskKey, body: dict[str, Any]) -> dict[str, Any]:
    """The task's status as the API server has it: the index's, or, while the index still shows the status that a
    patch of ours replaced (the patch's watch event is on its way), what that patch made of it. A Job's events
    arrive within milliseconds of the status patch its creation caused: compared with the index alone, each of
    their reconciles patched the same status again (and each patch was one more AgentTask event to process)."""
    indexed: dict[str, Any] = body.get("status") or {}
    written = ctx.written_status.get(key)
    if written is not None and written.uid == body["metadata"].get("uid") and written.over == indexed:
        return written.status
    ctx.written_status.pop(key, None)  # the index caught up (or someone else wrote): it speaks for itself
    return indexed


async def _mirror_status(ctx: OperatorContext, body: dict[str, Any], snap: TaskSnapshot, obs: TaskObservation,
                         children: list[dict[str, str]]) -> None:
    phase, message = decide_phase(obs)
    meta = body["metadata"]
    key = (meta["namespace"], meta["name"])
    previous = known_status(ctx, key, body)
    depth = snap.depth if snap.depth is not None else tree_path(ctx, body).count("/")
    status = build_status(
        phase=phase, message=message, record=snap.view, last_turn=snap.last_turn, active_job=obs.active_job,
        children=children, depth=depth, tree_path=tree_path(ctx, body), failed_attempts=snap.failed_attempts,
        generation=meta.get("generation"), previous=previous, now=_now(), reason=ready_reason(obs), human=obs.human,
        jobs=command_jobs.status_of(ctx, key, snap), origin=origin_of(body),
        trace=trace_status(snap.view.trace_id, ctx.settings.trace_url) if snap.view is not None else None,
    )
    changed = status_changed(previous, status)
    if phase is Phase.FAILED and snap.parent and changed:
        # Before the status: a crash in between repeats this, and the message id makes the repeat harmless. A
        # status already showing this failure (same turns) was written after its report: nothing to report again.
        await asyncio.to_thread(report_failure, ctx.store, names.task_id(meta["namespace"], meta["name"]), message,
                                spec_parent(body))
    if changed:
        await asyncio.to_thread(ctx.kube.patch_status, meta["namespace"], meta["name"], status)
        ctx.written_status[key] = WrittenStatus(str(meta.get("uid")), body.get("status") or {},
                                                merge_patch(previous, status))
        if phase in HUMAN_PHASES and _started_waiting(previous, status):
            _post(ctx, body, events.NORMAL, str(phase), message)
        if phase is Phase.FAILED and previous.get("phase") != Phase.FAILED:
            _post(ctx, body, events.WARNING, events.RETRIES_EXHAUSTED if snap.failed_attempts else events.INVALID_SPEC,
                  message)


def _started_waiting(previous: dict[str, Any], status: dict[str, Any]) -> bool:
    """The task waits for a person now and did not before, or for another call."""
    if previous.get("phase") != status["phase"]:
        return True
    return bool((previous.get("waitingFor") or {}).get("callId") != (status.get("waitingFor") or {}).get("callId"))


async def job_changed(ctx: OperatorContext, job: dict[str, Any], event_type: str | None) -> None:
    """A turn Job was added, changed or deleted: record its end once (with its Event), then reconcile its task.
    A change of nothing the reconcile reads of a Job (its start time, ready and pod counts: most of a running
    Job's events) is not reconciled again."""
    key = job_task_key(job)
    if key is None or not ctx.watches(key[0]):
        return
    view = job_view(job)
    name = view.name
    if ctx.inflight_jobs.get(key) == name:
        ctx.inflight_jobs.pop(key, None)
    seen_as, state = (view.namespace, name, view.uid), (view.outcome, view.deleting, view.queued)
    deleted = event_type == "DELETED"
    if deleted:
        ctx.job_states.pop(seen_as, None)
    elif ctx.job_states.get(seen_as) == state:
        return
    try:
        outcome = await record_job_end(ctx, job, deleted)
    except Exception as exc:  # Redis unreachable: the Job stays in the index, and reconcile records its end later
        logger.warning("could not record the end of turn Job %s/%s (%s); a later reconcile records it", key[0], name,
                       exc)
        outcome = "unrecorded"
    if not deleted and outcome != "unrecorded":
        ctx.job_states[seen_as] = state
    ctx.reconciles.request(key, f"job-{outcome or 'running'}")
