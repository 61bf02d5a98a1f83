"""Warm pools (``unicore_operator.warm_pools``): a timer per Agent keeps its pool topped up; a warm pod's deletion
drops what Redis keeps of it."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from unicore_operator import agent_rbac, names, redis_identities
from unicore_operator.context import OperatorContext
from unicore_operator.indexes import WARM_SELECTOR
from unicore_operator.log import logger
from unicore_operator.warm_pools import (
    WARM_POOL_CHECK_SECONDS,
    agent_pool,
    forget_pod,
    keep_agentless_pools,
    keep_pool,
)


def _ctx(memo: kopf.Memo) -> OperatorContext | None:
    ctx: OperatorContext | None = memo.get("ctx")
    return ctx if ctx is not None and ctx.ready.is_set() else None


async def namespace_ready(ctx: OperatorContext, provisioner: agent_rbac.AgentRbacProvisioner,
                          namespace: str) -> str | None:
    """The namespace's agent ServiceAccount and RBAC and its own Redis user and Secret, as its first AgentTask's
    creation makes them (a warm pod may come before any task): None when they are in place, else why not."""
    try:
        problem: str | None = await provisioner.ensure(namespace)
        if problem is None and ctx.settings.redis_identities:
            identities = ctx.redis_identities
            problem = "Redis identities are still starting" if identities is None else await identities.ensure(
                namespace)
    except (agent_rbac.TransientFailure, redis_identities.TransientFailure) as exc:
        problem = str(exc)
    return problem


def _provisioner(memo: kopf.Memo, ctx: OperatorContext) -> agent_rbac.AgentRbacProvisioner:
    provisioner: agent_rbac.AgentRbacProvisioner | None = memo.get(agent_rbac.MEMO_KEY)
    if provisioner is None:
        provisioner = memo[agent_rbac.MEMO_KEY] = agent_rbac.AgentRbacProvisioner(ctx.kube.core, ctx.settings)
    return provisioner


@kopf.timer(names.GROUP, names.VERSION, names.AGENT_PLURAL, interval=WARM_POOL_CHECK_SECONDS, id="warm-pool")
async def keep_warm_pool(*, namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    ctx = _ctx(memo)
    if ctx is None or namespace is None or not ctx.watches(namespace):
        return  # not started yet: the next tick
    provisioner = _provisioner(memo, ctx)
    await keep_pool(ctx, namespace, name, agent_pool(ctx, ctx.indexed_agent(namespace, name)),
                    prepare=lambda: namespace_ready(ctx, provisioner, namespace))


async def _agentless_pools_forever(ctx: OperatorContext) -> None:
    provisioner = agent_rbac.AgentRbacProvisioner(ctx.kube.core, ctx.settings)
    while True:
        try:
            await keep_agentless_pools(ctx, prepare=lambda namespace: namespace_ready(ctx, provisioner, namespace))
        except Exception:  # noqa: BLE001 - an API or Redis error: logged, and the next check tries again
            logger.exception("checking the warm pools of tasks without an Agent failed")
        await asyncio.sleep(WARM_POOL_CHECK_SECONDS)


async def start_agentless_pools(ctx: OperatorContext) -> None:
    """Startup hook: the pools of tasks without an Agent (``UNICORE_WARM_POOLS``), checked every
    ``WARM_POOL_CHECK_SECONDS``; always on, so that a pool the setting dropped is emptied."""
    ctx.background.append(asyncio.get_running_loop().create_task(_agentless_pools_forever(ctx),
                                                                 name="unicore-warm-pools"))


@kopf.on.event("", "v1", "pods", labels=WARM_SELECTOR)
async def warm_pod_event(*, type: str | None, namespace: str | None, name: str, memo: kopf.Memo,
                         **_: Any) -> None:
    ctx = _ctx(memo)
    if type == "DELETED" and ctx is not None and namespace is not None and ctx.watches(namespace):
        await forget_pod(ctx, namespace, name)
