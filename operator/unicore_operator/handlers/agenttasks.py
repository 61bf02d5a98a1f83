"""AgentTask lifecycle: create (initialise Redis, queue the prompt, activate), suspend/resume, delete (finalizer),
and child changes that the parent's status reflects."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
from unicore.agents import AgentNotFound
from unicore.api.schema import InboxMessage
from unicore.api.spec import AgentTaskSpec, SpecInvalid, parse_spec, prompt_message, readable
from unicore.errors import MessageTooLarge, TaskNotFound
from unicore.store import conversations
from unicore.store.agents import read_agent
from unicore.store.task_views import TaskView
from unicore.store.tasks import TaskStore
from unicore.traces import anchors

from unicore_operator import agent_rbac, events, names, redis_identities
from unicore_operator.admission import agent_refusal, vet_new_child
from unicore_operator.context import OperatorContext
from unicore_operator.handlers import agents as agent_handlers
from unicore_operator.indexes import active_job, compact_task
from unicore_operator.log import logger
from unicore_operator.parent_view import create_record
from unicore_operator.reconcile import _post, jobs_of, reconcile_task

PARENT_WAIT_RETRIES = 30


def _ctx(memo: kopf.Memo) -> OperatorContext:
    ctx: OperatorContext | None = memo.get("ctx")
    if ctx is None:
        raise kopf.TemporaryError("operator is still starting", delay=1)
    return ctx


def _namespaced(namespace: str | None) -> str:
    if namespace is None:  # the CRD is namespaced; kopf's handler protocol allows None for cluster-scoped kinds
        raise kopf.PermanentError("AgentTask objects are namespaced")
    return namespace


@kopf.on.create(names.GROUP, names.VERSION, names.PLURAL, id="initialise", retries=PARENT_WAIT_RETRIES + 5)
async def initialise(*, body: kopf.Body, spec: kopf.Spec, namespace: str | None, name: str, uid: str,
                     memo: kopf.Memo, retry: int, **_: Any) -> None:
    """Create the task in Redis (never overwriting a conversation), queue spec.prompt once, reconcile."""
    namespace = _namespaced(namespace)
    ctx = _ctx(memo)
    task = compact_task(body)
    try:
        parsed = parse_spec(dict(spec))
        prompt = checked_prompt(ctx.store, uid, namespace, parsed)
    except SpecInvalid as exc:
        logger.warning("AgentTask %s/%s is invalid: %s", namespace, name, exc)
        _post(ctx, task, events.WARNING, events.INVALID_SPEC, str(exc))
        await asyncio.to_thread(ctx.kube.patch_status, namespace, name,
                                {"phase": "Failed", "message": str(exc)})
        return
    await agent_rbac.provision_for(ctx, memo, task)  # the namespace's agent ServiceAccount, before any Job
    await redis_identities.provision_for(ctx, task)  # the namespace's own Redis user and Secret, before any Job
    tid = names.task_id(namespace, name)
    parent: TaskView | None = None
    if parsed.agent_ref is not None:  # docs/agents.md: it runs as an Agent of its namespace, narrowing it
        failure = await agent_not_ready(ctx, namespace, name, parsed, retry)
        if failure is not None:
            logger.warning("AgentTask %s/%s refused: %s", namespace, name, failure)
            _post(ctx, task, events.WARNING, events.INVALID_SPEC, failure)
            await asyncio.to_thread(ctx.kube.patch_status, namespace, name, {"phase": "Failed", "message": failure})
            return
    if parsed.parent_ref is not None:
        parent_id = names.task_id(namespace, parsed.parent_ref.name)
        snap = await ctx.redis.snapshot(parent_id)
        if not snap.exists:
            if retry >= PARENT_WAIT_RETRIES:
                failure = f"parent task {parent_id} does not exist"
                await asyncio.to_thread(ctx.kube.patch_status, namespace, name, {"phase": "Failed", "message": failure})
                _post(ctx, task, events.WARNING, events.INVALID_SPEC, failure)
                return
            raise kopf.TemporaryError(f"parent {parent_id} is not initialised yet", delay=2)
        # Its settings and tree come from the AgentTask chain, not the parent's record, which the namespace's turn
        # pods may write (parent_view).
        vetted = await vet_new_child(ctx, namespace, name, body, parsed)
        if vetted.refusal is not None:  # it widens its parent, or its tree is full: it never runs (docs/install.md)
            refused = vetted.refusal
            logger.warning("AgentTask %s/%s refused: %s", namespace, name, refused)
            _post(ctx, task, events.WARNING, events.CHILD_REFUSED, refused)
            await asyncio.to_thread(ctx.kube.patch_status, namespace, name, {"phase": "Failed", "message": refused})
            return
        parent = vetted.parent
    # where its turns hang in the tree's trace: its spawn call (a child's annotation), else a new ``task`` span
    trace_parent = anchors.for_new_task(tid, name, parent=parent.id if parent is not None else None,
                                        given=(body.get("metadata", {}).get("annotations") or {}).get(
                                            names.TRACEPARENT_ANNOTATION))
    try:
        created = await asyncio.to_thread(create_record, ctx.store, namespace, name, parsed, parent, trace_parent)
    except AgentNotFound as exc:  # deleted a moment ago: the next try fails it (agent_not_ready)
        raise kopf.TemporaryError(str(exc), delay=2) from exc
    if parsed.agent_ref is not None:
        agent_handlers.request_status(ctx, namespace, parsed.agent_ref.name)
    for conversation in parsed.conversations or ():  # before its prompt: its first answer is posted there
        try:
            await asyncio.to_thread(conversations.join, ctx.store, f"{namespace}/{conversation}", "task", tid)
        except conversations.ConversationError as exc:
            _post(ctx, task, events.WARNING, events.INVALID_SPEC, f"spec.conversations: {exc}")
    if prompt is not None:
        try:
            await asyncio.to_thread(ctx.store.queue_message, tid, prompt)
        except TaskNotFound as exc:
            raise kopf.TemporaryError(str(exc), delay=1) from exc
    if parsed.parent_ref is not None:
        parent_body = ctx.indexed_task(namespace, parsed.parent_ref.name)  # no API read per created child
        if parent_body is not None:
            _post(ctx, parent_body, events.NORMAL, events.CHILD_SPAWNED, f"child task {name} created")
    logger.info("initialised %s (%s)", tid, "new conversation" if created else "existing conversation kept")
    await reconcile_task(ctx, namespace, name, "created")


def checked_prompt(store: TaskStore, uid: str, namespace: str, parsed: AgentTaskSpec) -> InboxMessage | None:
    """spec.prompt as the inbox message it becomes; SpecInvalid when it is over the runtime's message cap (the CRD's
    maxLength counts characters, the cap the stored message's bytes), so the task is Failed saying so before
    anything is stored, instead of looking Ready and never running."""
    message = prompt_message(uid, namespace, parsed)
    if message is not None:
        try:
            store.check_message(message)
        except MessageTooLarge as exc:
            raise SpecInvalid(f"spec.prompt cannot be queued: {exc} (the cap counts the UTF-8 bytes of the stored "
                              "message, JSON escapes included; the CRD's maxLength counts characters): shorten it "
                              "and send the rest with `kubectl agenttask send`") from None
    return message


async def agent_not_ready(ctx: OperatorContext, namespace: str, name: str, parsed: AgentTaskSpec,
                          retry: int) -> str | None:
    """Why a task with spec.agentRef cannot be created (None: it can): a root widens its Agent (a child's Agent is
    checked with its parent, ``vet_new_child``), or the Agent's definition is not stored (a moment after both were
    applied: retried until PARENT_WAIT_RETRIES)."""
    assert parsed.agent_ref is not None
    if parsed.parent_ref is None:
        refused = await agent_refusal(ctx, namespace, name, parsed, None)
        if refused is not None:
            return refused
    agent_id = names.task_id(namespace, parsed.agent_ref.name)
    if await asyncio.to_thread(read_agent, ctx.redis.sync, agent_id) is not None:
        return None
    if retry >= PARENT_WAIT_RETRIES:
        return (f"Agent {agent_id} is not stored for its tasks (see its status.lastError: "
                f"kubectl get agent {parsed.agent_ref.name} -o yaml)")
    raise kopf.TemporaryError(f"Agent {agent_id} is not stored yet", delay=2)


@kopf.on.field(names.GROUP, names.VERSION, names.PLURAL, field="spec.suspend", id="suspend")
async def suspend_changed(*, old: Any, new: Any, body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo,
                          **_: Any) -> None:
    namespace = _namespaced(namespace)
    ctx = _ctx(memo)
    key = (namespace, name)
    task = compact_task(body)
    tid = names.task_id(namespace, name)
    if new:
        async with ctx.locks[key]:
            running = active_job(jobs_of(ctx, key))
            doomed = {job for job in (running.name if running else None, ctx.inflight_jobs.pop(key, None)) if job}
            for job_name in doomed:
                # Background propagation: the Job goes at once, the pod gets SIGTERM and stops gracefully.
                await asyncio.to_thread(ctx.kube.delete_job, namespace, job_name, "Background")
        _post(ctx, task, events.NORMAL, events.SUSPENDED,
              f"suspended; stopped turn Job {', '.join(sorted(doomed))}" if doomed else "suspended")
    elif old:
        await asyncio.to_thread(ctx.redis.reset_failures, tid)
        _post(ctx, task, events.NORMAL, events.RESUMED, "resumed")
    await reconcile_task(ctx, namespace, name, "suspend" if new else "resume")


@kopf.on.delete(names.GROUP, names.VERSION, names.PLURAL, id="cleanup")
async def cleanup_task(*, namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    """Finalizer: remove (or expire) the task's Redis keys. Children and Jobs go by ownerReference GC."""
    namespace = _namespaced(namespace)
    ctx = _ctx(memo)
    key = (namespace, name)
    tid = names.task_id(namespace, name)
    handle = ctx.rechecks.pop(key, None)
    if handle is not None:
        handle.cancel()
    ctx.inflight_jobs.pop(key, None)
    ctx.written_status.pop(key, None)
    retention = ctx.settings.redis_retention_seconds
    if retention > 0:
        keys = await asyncio.to_thread(ctx.redis.task_keys, tid)
        if keys:
            await ctx.redis.expire_task_keys(tid, keys, retention)
        logger.info("task %s deleted; its Redis keys expire in %ds", tid, retention)
        return
    await asyncio.to_thread(ctx.store.delete_task, tid)
    leftovers = await asyncio.to_thread(ctx.redis.task_keys, tid)
    if leftovers:
        await ctx.redis.delete_keys(leftovers)
    logger.info("task %s deleted with its Redis keys", tid)


@kopf.on.event(names.GROUP, names.VERSION, names.PLURAL)
async def agenttask_event(*, event: kopf.RawEvent, body: kopf.Body, spec: kopf.Spec, status: kopf.Status,
                          namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    """A child changed: its parent's status (children, Waiting/Idle) follows. A spec edit: observedGeneration."""
    ctx: OperatorContext | None = memo.get("ctx")
    if ctx is None or namespace is None or not ctx.watches(namespace):
        return
    own = readable(AgentTaskSpec, spec)
    agent = own.agent_ref.name if own.agent_ref is not None else ""
    if agent and (event.get("type") in (None, "ADDED", "DELETED") or body.get("metadata", {}).get("deletionTimestamp")):
        agent_handlers.request_status(ctx, namespace, agent)  # its Agent's status.tasks
    parent = own.parent_ref.name if own.parent_ref is not None else ""
    if parent and ctx.indexed_task(namespace, parent) is not None:
        # Handlers run once the indexes are filled: a parent missing from the index is no AgentTask (yet); its
        # own create handler reconciles it with its children. No API read for it on every event of every child.
        ctx.reconciles.request((namespace, parent), f"child:{name}")
    generation = body.get("metadata", {}).get("generation")
    if event.get("type") == "MODIFIED" and status.get("phase") and status.get("observedGeneration") != generation:
        ctx.reconciles.request((namespace, name), "spec-changed")
