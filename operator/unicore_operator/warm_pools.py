"""Warm pools (issue 30): each Agent with ``spec.warmPool.size`` keeps that many warm turn pods of its template
waiting in its namespace, and a turn of one of its tasks takes a waiting one instead of starting a pod.

- ``keep_pool`` (a Kopf timer on every Agent, ``WARM_POOL_CHECK_SECONDS``): creates the missing warm Jobs
  (``warm_pool.build_warm_job_spec``), deletes idle ones of an old template (the Agent or the operator's settings
  changed) or beyond the size, and ended ones nobody assigned; and finishes an assignment an operator crash left
  half done (the fence names a task, the Job does not yet).
- ``take_turn`` (from ``reconcile``, under the task's lock, instead of creating the turn Job): when the task's cold Job
  would have its pool's template, a running warm pod whose record says it waits is given the turn (``store.warm_pods
  .assign``: one pod per turn, one turn per pod), then its Job and pod get the cold Job's labels and annotations
  (``warm_pool.assignment_patch``) and the pod the turn's own deadline, so every path that follows a task's turn Job
  (its end, the watchdog, the status) follows this one. A turn that a warm pod took already (a repeat, or an operator
  restarted between the assignment and the labels) is not given a cold Job as well.
- a warm pod deleted: what Redis keeps of it goes (``forget``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from unicore.api.spec import WarmPoolSpec, agent_spec_of, task_spec_of
from unicore.faults import fault_point
from unicore.store import warm_pods
from unicore.store.warm_pods import Assignment

from unicore_operator import metrics, names
from unicore_operator.context import OperatorContext
from unicore_operator.indexes import TaskKey
from unicore_operator.job_builder import build_turn_job_spec, with_agent_defaults
from unicore_operator.kube import job_path, pod_path
from unicore_operator.log import logger
from unicore_operator.mcp_servers import turn_mcp_env
from unicore_operator.warm_pool import (
    AGENTLESS_POOL,
    WarmJob,
    WarmPod,
    agentless_template_task,
    assignment_patch,
    build_warm_job_spec,
    pod_template_hash,
    template_task,
    workspace_folder_of,
)

WARM_POOL_CHECK_SECONDS = 2.0
DEFAULT_MAX_WAIT_SECONDS = 1800
PENDING_SECONDS = 30.0  # a warm Job this process created counts toward its pool this long, or until the index has it


@dataclass
class PoolState:
    """What this process created for one pool that the index may not show yet: Job name -> when."""

    pending: dict[str, float] = field(default_factory=dict)
    checked: float | None = None  # when the pool was last checked (monotonic): its idle pod-seconds count from then
    problem: str = ""  # why the pool cannot grow, as last logged (logged again only when it changes)
    silent: dict[str, float] = field(default_factory=dict)  # running idle pod -> since when (monotonic) it has had
    # no record in Redis (``store.warm_pods``: a waiting pod renews it every few seconds)


_pools: dict[TaskKey, PoolState] = {}


def idle_pod_seconds(state: PoolState, idle: int, now: float) -> float:
    """The pod-seconds ``idle`` warm pods idled since the pool's last check (0 at its first), and mark this one."""
    spent = idle * (now - state.checked) if state.checked is not None else 0.0
    state.checked = now
    return max(0.0, spent)


def pool_spec(agent: dict[str, Any] | None) -> WarmPoolSpec | None:
    """The Agent's warm pool, when it asks for one (size above 0) and is not being deleted."""
    if agent is None or (agent.get("metadata") or {}).get("deletionTimestamp"):
        return None
    spec = agent_spec_of(agent).warm_pool
    return spec if spec is not None and spec.size > 0 else None


def agent_owner(agent: dict[str, Any]) -> dict[str, Any]:
    """The owner reference of a pool's warm Jobs: their Agent (deleting it deletes them)."""
    meta = agent["metadata"]
    return {"apiVersion": names.API_VERSION, "kind": names.AGENT_KIND, "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": False}


def template_job(ctx: OperatorContext, agent: dict[str, Any]) -> dict[str, Any]:
    """The cold turn Job of the pool's template task (``warm_pool.template_task``)."""
    body = template_task(agent)
    spec = with_agent_defaults(task_spec_of(body), agent_spec_of(agent))
    mcp_env = turn_mcp_env(ctx.mcpservers, agent["metadata"]["namespace"], spec)
    return build_turn_job_spec(body, 1, ctx.settings, mcp_env=mcp_env, spec=spec)


@dataclass(frozen=True)
class WantedPool:
    """What a pool should be: its size, its pods' longest wait, the turn Job its warm Jobs are built from, and their
    owner (an Agent; None for the pool of tasks without one)."""

    size: int
    max_wait_seconds: int
    template: dict[str, Any]
    owner: dict[str, Any] | None


def agent_pool(ctx: OperatorContext, agent: dict[str, Any] | None) -> WantedPool | None:
    """The pool Agent ``agent`` asks for (``spec.warmPool``), None when none."""
    spec = pool_spec(agent)
    if spec is None or agent is None:
        return None
    return WantedPool(spec.size, spec.max_wait_seconds or DEFAULT_MAX_WAIT_SECONDS, template_job(ctx, agent),
                      agent_owner(agent))


def agentless_pool(ctx: OperatorContext, namespace: str) -> WantedPool | None:
    """The pool of ``namespace``'s tasks without an Agent (``UNICORE_WARM_POOLS``), None when none."""
    size = ctx.settings.warm_pools.get(namespace, 0)
    if size <= 0 or not ctx.watches(namespace):
        return None
    template = build_turn_job_spec(agentless_template_task(namespace), 1, ctx.settings)
    return WantedPool(size, ctx.settings.warm_pool_max_wait_seconds, template, None)


def jobs_of(ctx: OperatorContext, key: TaskKey) -> list[WarmJob]:
    return list(ctx.warmjobs.get(key) or ()) if ctx.warmjobs is not None else []


def pods_of(ctx: OperatorContext, key: TaskKey) -> list[WarmPod]:
    return list(ctx.warmpods.get(key) or ()) if ctx.warmpods is not None else []


def _patch(ctx: OperatorContext, namespace: str, job: str, pod: str, patch: dict[str, Any],
           deadline: int | None) -> None:
    ctx.kube.core.merge_patch(job_path(namespace, job), patch)
    pod_patch: dict[str, Any] = dict(patch)
    if deadline is not None:
        pod_patch["spec"] = {"activeDeadlineSeconds": deadline}
    ctx.kube.core.merge_patch(pod_path(namespace, pod), pod_patch)


async def keep_pool(ctx: OperatorContext, namespace: str, name: str, wanted: WantedPool | None,
                    prepare: Callable[[], Awaitable[str | None]] | None = None) -> None:
    """Bring pool ``name`` of ``namespace`` (an Agent's, or ``AGENTLESS_POOL``) to ``wanted`` (None: no pool; its
    Jobs go) (see the module doc). ``prepare``: what the namespace needs before a warm pod can start there (its agent
    RBAC and Redis identity), answering why not when it cannot."""
    key = (namespace, name)
    await _finish_assignments(ctx, key)
    jobs = jobs_of(ctx, key)
    if wanted is None and not jobs:
        if _pools.pop(key, None) is not None:
            metrics.warm_pool_gone(namespace, name)
        return
    state = _pools.setdefault(key, PoolState())
    now = time.monotonic()
    seen = {job.name for job in jobs}
    state.pending = {job: at for job, at in state.pending.items() if job not in seen and now - at < PENDING_SECONDS}
    wanted_hash = pod_template_hash(wanted.template) if wanted is not None else ""
    idle = [job for job in jobs if job.idle]
    current = [job for job in idle if job.template == wanted_hash]
    size = wanted.size if wanted is not None else 0
    metrics.warm_pool_checked(namespace, name, len(current[:size]), idle_pod_seconds(state, len(idle), now))
    doomed = {job.name: (job, "template") for job in idle if job.template != wanted_hash}
    doomed.update((job.name, (job, "surplus")) for job in current[size:] if job.name not in doomed)
    silent = await _silent_jobs(ctx, key, state, now)
    doomed.update((job.name, (job, "silent")) for job in idle if job.name in silent and job.name not in doomed)
    for job in jobs:
        if job.finished and not job.assigned and not job.deleting and not await _ran_a_turn(ctx, key, job):
            doomed[job.name] = (job, "ended")
    for job, reason in doomed.values():
        await asyncio.to_thread(ctx.kube.delete_job, namespace, job.name, "Background", job.uid)
        metrics.warm_pod_replaced(reason)
        if reason == "silent":
            logger.warning("warm pod of Job %s/%s has had no record in Redis for %.0f s (it never connected, or "
                           "hangs): replaced", namespace, job.name, silent[job.name])
    current = [job for job in current if job.name not in doomed]
    missing = size - len(current[:size]) - len(state.pending)
    if wanted is None or missing <= 0:
        return
    problem = (await prepare() if prepare is not None else None) or ""
    if problem != state.problem:
        state.problem = problem
        if problem:
            logger.warning("warm pool %s/%s cannot grow: %s", namespace, name, problem)
    if problem:
        return
    warm = build_warm_job_spec(wanted.template, name, wanted.owner, max_wait_seconds=wanted.max_wait_seconds)
    for _ in range(missing):
        created = await asyncio.to_thread(ctx.kube.core.create, job_path(namespace), warm)
        job_name = str((created.get("metadata") or {}).get("name") or "")
        state.pending[job_name] = time.monotonic()
        metrics.warm_pod_created()
        logger.info("created warm turn Job %s/%s for pool %s", namespace, job_name, name)


async def keep_agentless_pools(ctx: OperatorContext,
                               prepare: Callable[[str], Awaitable[str | None]] | None = None) -> None:
    """One check of the pools of tasks without an Agent: those ``UNICORE_WARM_POOLS`` asks for, and those with Jobs
    left (the setting changed: they go)."""
    namespaces = {namespace for namespace, size in ctx.settings.warm_pools.items() if size > 0}
    namespaces |= {namespace for namespace, pool in (ctx.warmjobs or {}) if pool == AGENTLESS_POOL}
    for namespace in sorted(namespaces):
        ready = (lambda ns=namespace: prepare(ns)) if prepare is not None else None
        await keep_pool(ctx, namespace, AGENTLESS_POOL, agentless_pool(ctx, namespace), prepare=ready)


async def _silent_jobs(ctx: OperatorContext, key: TaskKey, state: PoolState, now: float) -> dict[str, float]:
    """The warm Jobs of the pool whose running, unassigned pod has had no record in Redis for longer than the
    heartbeat timeout (it never connected, or it hangs: a waiting pod renews its record every few seconds), with
    how long; the fence's word wins (a pod given a turn before an operator restart is not silent)."""
    idle = [pod for pod in pods_of(ctx, key) if pod.running and not pod.assigned and not pod.deleting]
    alive = await asyncio.to_thread(warm_pods.waiting, ctx.redis.sync, key[0], [pod.name for pod in idle])
    state.silent = {name: since for name, since in state.silent.items()
                    if name in {pod.name for pod in idle} and name not in alive}
    found: dict[str, float] = {}
    for pod in idle:
        if pod.name in alive:
            continue
        since = state.silent.setdefault(pod.name, now)
        if now - since > ctx.settings.heartbeat_timeout_seconds and await asyncio.to_thread(
                warm_pods.assignment_of, ctx.redis.sync, key[0], pod.name) is None:
            found[pod.job] = now - since
    return found


async def _finish_assignments(ctx: OperatorContext, key: TaskKey) -> None:
    """Label the Jobs and pods of the pool whose pod the fence says was assigned a turn but which carry no task yet
    (the operator stopped between the assignment and the labels)."""
    for pod in pods_of(ctx, key):
        if pod.assigned or pod.deleting:
            continue
        held = await asyncio.to_thread(warm_pods.assignment_of, ctx.redis.sync, key[0], pod.name)
        if held is None:
            continue
        turn_job = _turn_job_of(ctx, held)
        if turn_job is None:
            continue
        patch = assignment_patch(turn_job, held.at or time.time())
        await asyncio.to_thread(_patch, ctx, key[0], pod.job, pod.name, patch, None)
        logger.info("labelled warm pod %s/%s, assigned %s before a restart", key[0], pod.name, held.task_id)


async def _ran_a_turn(ctx: OperatorContext, key: TaskKey, job: WarmJob) -> bool:
    """Whether a pod of warm Job ``job`` was given a turn (the fence says so), though the Job has no task yet."""
    for pod in pods_of(ctx, key):
        if pod.job != job.name:
            continue
        if await asyncio.to_thread(warm_pods.assignment_of, ctx.redis.sync, key[0], pod.name) is not None:
            return True
    return False


def _turn_job_of(ctx: OperatorContext, held: Assignment) -> dict[str, Any] | None:
    """The cold turn Job of assignment ``held`` as the builder makes it (for its labels), from the index."""
    namespace, _, name = held.task_id.partition("/")
    body = ctx.indexed_task(namespace, name)
    if body is None:
        return None
    job = build_turn_job_spec(body, held.turn, ctx.settings, held.attempt)
    return job if job["metadata"]["name"] == held.job else None


async def take_turn(ctx: OperatorContext, key: TaskKey, body: dict[str, Any], job: dict[str, Any],
                    turn: int, attempt: int) -> str | None:
    """Give the turn of cold Job ``job`` (turn ``turn``, attempt ``attempt`` of task ``key``) to a waiting warm pod
    of its Agent's pool; the warm Job's name, or None: no pool, no waiting pod of the same template (create the
    cold Job). A turn already taken by a warm pod answers that pod's Job."""
    ref = task_spec_of(body).agent_ref
    if ctx.warmpods is None:
        return None
    namespace = key[0]
    pool = ref.name if ref is not None else AGENTLESS_POOL
    pods = pods_of(ctx, (namespace, pool))
    has_pool = (pool_spec(ctx.indexed_agent(namespace, pool)) is not None if ref is not None
                else ctx.settings.warm_pools.get(namespace, 0) > 0)
    if not pods and not has_pool:
        return None
    job_name = job["metadata"]["name"]
    taken = await asyncio.to_thread(warm_pods.holder, ctx.redis.sync, namespace, job_name)
    if taken is not None:
        held = next((pod for pod in pods if pod.name == taken), None)
        if held is not None and not held.assigned:
            given = await asyncio.to_thread(warm_pods.assignment_of, ctx.redis.sync, namespace, held.name)
            patch = assignment_patch(job, (given.at if given is not None else 0.0) or time.time())
            await asyncio.to_thread(_patch, ctx, namespace, held.job, held.name, patch, None)
        return held.job if held is not None else None
    template = pod_template_hash(job)
    candidates = sorted((pod for pod in pods if pod.running and not pod.assigned and not pod.deleting
                         and pod.template == template), key=lambda pod: pod.created_at)
    waiting = await asyncio.to_thread(warm_pods.waiting, ctx.redis.sync, namespace,
                                      [pod.name for pod in candidates]) if candidates else {}
    assignment = Assignment(names.task_id(*key), job_name, turn=turn, attempt=attempt,
                            workspace=workspace_folder_of(job), at=time.time())
    for pod in candidates:
        if pod.name not in waiting:
            continue
        result = await asyncio.to_thread(warm_pods.assign, ctx.redis.sync, namespace, pod.name, assignment)
        if not result.assigned:
            continue
        fault_point("after warm assign")  # the crash tests' kill point (unicore.faults.OPERATOR_STEPS)
        deadline = _turn_deadline(pod, job)
        patch = assignment_patch(job, assignment.at)
        await asyncio.to_thread(_patch, ctx, namespace, pod.job, pod.name, patch, deadline)
        metrics.warm_turn("assigned")
        return pod.job
    metrics.warm_turn("missed")
    return None


def _turn_deadline(pod: WarmPod, job: dict[str, Any]) -> int | None:
    """The pod's new activeDeadlineSeconds: the time it waited plus the turn's own (the cold pod's), so the turn
    gets exactly its timeout from now on (a pod's deadline may only go down; the warm one covers the longest
    wait)."""
    turn_timeout = job["spec"]["template"]["spec"].get("activeDeadlineSeconds")
    if turn_timeout is None or pod.start_time is None:
        return None
    return math.ceil(max(0.0, time.time() - pod.start_time)) + int(turn_timeout)


async def forget_pod(ctx: OperatorContext, namespace: str, pod: str) -> None:
    await asyncio.to_thread(warm_pods.forget, ctx.redis.sync, namespace, pod)


__all__ = ["WARM_POOL_CHECK_SECONDS", "WantedPool", "agent_pool", "agentless_pool", "forget_pod",
           "keep_agentless_pools", "keep_pool", "pool_spec", "take_turn", "template_job"]
