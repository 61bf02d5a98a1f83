"""Agents: the operator stores what each Agent says in Redis for its tasks' turns, and keeps its status.

- create, update (a spec change) and resume (operator start): the Agent's definition (``agent_checks.agent_definition``)
  is written to Redis (``unicore.store.agents``, id ``<namespace>/<name>``); turns read it at their start, so a change
  counts from each task's next turn. A definition the runtime cannot use (CEL let it through, e.g. an unknown model
  provider) is not stored: ``status.lastError`` says why and the tasks keep the last good one.
- delete (a finalizer): the definition is removed, so the next turn of a task that still names it fails with a
  one-line last error (``AgentNotFound``).
- ``status.tasks``: the AgentTasks of its namespace with ``spec.agentRef`` naming it, counted from the AgentTask index
  when one is created or deleted (``request_status``: one count per Agent per ``COUNT_DELAY_SECONDS``), and after
  every store; ``status.observedGeneration`` the generation last stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import kopf
from unicore.api.spec import SpecInvalid, task_spec_of
from unicore.store.agents import delete_agent, write_agent

from unicore_operator import names
from unicore_operator.agent_checks import agent_definition
from unicore_operator.context import OperatorContext
from unicore_operator.log import logger

COUNT_DELAY_SECONDS = 0.5  # AgentTask creations and deletions within this time are counted once
MAX_ERROR = 1024

__all__ = ["count_tasks", "request_status"]


def _ctx(memo: kopf.Memo) -> OperatorContext:
    ctx: OperatorContext | None = memo.get("ctx")
    if ctx is None:
        raise kopf.TemporaryError("operator is still starting", delay=1)
    return ctx


def count_tasks(tasks: Mapping[Any, Any] | None, namespace: str, agent: str) -> int:
    """AgentTasks of ``namespace`` (compact bodies in the AgentTask index) whose spec.agentRef names ``agent``, not
    being deleted."""
    count = 0
    for (task_namespace, _), bodies in (tasks or {}).items():
        if task_namespace != namespace:
            continue
        for body in bodies:
            ref = task_spec_of(body).agent_ref
            if ref is not None and ref.name == agent and not (body.get("metadata") or {}).get("deletionTimestamp"):
                count += 1
    return count


async def _write_status(ctx: OperatorContext, namespace: str, name: str, **fields: Any) -> None:
    status = {"tasks": count_tasks(ctx.agenttasks, namespace, name), **fields}
    body = ctx.indexed_agent(namespace, name)
    if body is not None and all((body.get("status") or {}).get(k) == v for k, v in status.items()):
        return
    await asyncio.to_thread(ctx.kube.patch_agent_status, namespace, name, status)


_pending: dict[tuple[str, str], asyncio.TimerHandle] = {}


def request_status(ctx: OperatorContext, namespace: str, agent: str) -> None:
    """Count ``agent``'s tasks again soon (an AgentTask naming it was created or deleted)."""
    key = (namespace, agent)
    if key in _pending or ctx.indexed_agent(namespace, agent) is None:
        return
    loop = asyncio.get_running_loop()

    def fire() -> None:
        _pending.pop(key, None)
        task = loop.create_task(_write_status(ctx, namespace, agent), name=f"unicore-agent-status-{agent}")
        task.add_done_callback(_log_failure)

    _pending[key] = loop.call_later(COUNT_DELAY_SECONDS, fire)


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("could not write an Agent's status: %s", task.exception())


async def _store(body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo) -> None:
    if namespace is None:
        raise kopf.PermanentError("Agent objects are namespaced")
    ctx = _ctx(memo)
    generation = body.get("metadata", {}).get("generation")
    try:
        definition = agent_definition(body)
    except SpecInvalid as exc:
        logger.warning("Agent %s/%s is not stored: %s", namespace, name, exc)
        await _write_status(ctx, namespace, name, lastError=str(exc)[:MAX_ERROR], observedGeneration=generation)
        return
    changed = await asyncio.to_thread(write_agent, ctx.redis.sync, names.task_id(namespace, name), definition)
    if changed:
        logger.info("stored Agent %s/%s", namespace, name)
    await _write_status(ctx, namespace, name, lastError="", observedGeneration=generation)


@kopf.on.create(names.GROUP, names.VERSION, names.AGENT_PLURAL, id="store-agent")
async def agent_created(*, body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    await _store(body, namespace, name, memo)


@kopf.on.update(names.GROUP, names.VERSION, names.AGENT_PLURAL, id="restore-agent", field="spec")
async def agent_updated(*, body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    await _store(body, namespace, name, memo)


@kopf.on.resume(names.GROUP, names.VERSION, names.AGENT_PLURAL, id="resume-agent")
async def agent_resumed(*, body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    await _store(body, namespace, name, memo)


@kopf.on.delete(names.GROUP, names.VERSION, names.AGENT_PLURAL, id="remove-agent")
async def agent_deleted(*, namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    """Finalizer: the definition leaves Redis; the tasks that name it fail at their next turn."""
    if namespace is None:
        return
    ctx = _ctx(memo)
    await asyncio.to_thread(delete_agent, ctx.redis.sync, names.task_id(namespace, name))
    logger.info("removed Agent %s/%s", namespace, name)
