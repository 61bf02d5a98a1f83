"""Operator startup and cleanup: settings, Kopf tuning, Redis, the Kubernetes client, background loops."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf
from unicore.kube_config import load_api_client
from unicore.store.tasks import TaskStore
from unicore.traces import setup as traces

from unicore_operator import activation, http_server, job_events, kopf_login, names
from unicore_operator.context import OperatorContext
from unicore_operator.kopf_storage import LeanDiffBaseStorage, LeanProgressStorage
from unicore_operator.kube import KubeClients
from unicore_operator.log import logger
from unicore_operator.memory import release_free_memory
from unicore_operator.reconcile import reconcile_task
from unicore_operator.redis_state import RedisState
from unicore_operator.settings import OperatorSettings, load_settings

# Optional startup hooks of later modules (watchdog, metrics): ``async def hook(ctx) -> None``.
StartupHook = Any
startup_hooks: list[StartupHook] = []
# Workers of the watch handlers' reconcile requests (reconcile_queue.py); the resync has its own bound.
RECONCILE_WORKERS = 16


def tune_kopf(settings: kopf.OperatorSettings, op: OperatorSettings) -> None:
    settings.persistence.finalizer = names.FINALIZER
    # Kopf's annotation storages, without its deep copies of every watched object (see kopf_storage).
    settings.persistence.progress_storage = LeanProgressStorage(prefix=names.ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = LeanDiffBaseStorage(
        prefix=names.ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING  # our own Events are posted explicitly (kube.post_event)
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.watching.reconnect_backoff = 1.0
    settings.peering.standalone = True
    settings.execution.max_workers = 16
    # Namespaced (UNICORE_NAMESPACES names every namespace exactly): serve exactly those, without Kopf's cluster
    # scanning. Its namespace observer would list namespaces at cluster scope, which a namespaced operator may not
    # (the chart grants no such right): Kopf retried the 403 for about a minute, serving nothing meanwhile, before it
    # fell back to these very names. CRDs are then discovered once at start-up instead of watched.
    settings.scanning.disabled = bool(op.namespaces) and not any(set("*?!,") & set(ns) for ns in op.namespaces)


@kopf.on.login()
async def login(memo: kopf.Memo, **_: Any) -> kopf.AiohttpSession:
    """Kopf's API session: the operator's credentials over a bounded connection pool (kopf_login.py)."""
    session = kopf_login.login(load_settings().namespaces)
    memo.setdefault("kopf_sessions", []).append(session.aiohttp_session)  # closed at cleanup
    return session


# kopf passes its indexes to startup handlers as keyword arguments named after them, which its ActivityFn
# protocol cannot declare (and kopf does not export it to cast to): hence the one targeted ignore.
@kopf.on.startup()  # type: ignore[arg-type]
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, agenttask_index: kopf.Index,
                  turnjob_index: kopf.Index, turnpod_index: kopf.Index, mcpserver_index: kopf.Index,
                  agent_index: kopf.Index, commandjob_index: kopf.Index, warmjob_index: kopf.Index,
                  warmpod_index: kopf.Index, trigger_index: kopf.Index, **_: Any) -> None:
    op = load_settings()
    tune_kopf(settings, op)
    traces.start("unicore-operator")  # OTEL_* configure an exporter: root task spans, pod starts (unicore.traces)
    state = RedisState(op.redis_url)
    try:
        await state.aio.ping()
    except Exception as exc:
        await state.close()
        raise kopf.TemporaryError(f"Redis at REDIS_URL is not reachable: {exc}", delay=2) from exc
    kube = KubeClients(load_api_client())
    ctx = OperatorContext(settings=op, redis=state, kube=kube, store=TaskStore(state.sync),
                          agenttasks=agenttask_index, turnjobs=turnjob_index, turnpods=turnpod_index,
                          mcpservers=mcpserver_index, agents=agent_index, commandjobs=commandjob_index,
                          warmjobs=warmjob_index, warmpods=warmpod_index, triggers=trigger_index)
    memo["ctx"] = ctx
    loop = asyncio.get_running_loop()
    ctx.background.extend(ctx.reconciles.start(lambda key, reason: reconcile_task(ctx, *key, reason),
                                               RECONCILE_WORKERS, after_burst=release_free_memory))
    ctx.background.append(loop.create_task(activation.consume_activations(ctx), name="unicore-activations"))
    ctx.background.append(loop.create_task(activation.resync_loop(ctx), name="unicore-resync"))
    memo["failed_create_watch"] = job_events.FailedCreateWatch(ctx, loop).start()
    for hook in startup_hooks:
        await hook(ctx)
    if op.http_port:
        memo["http_runner"] = await http_server.start(ctx, op.http_port)
    ctx.ready.set()
    logger.info("operator started (namespaces: %s)", ", ".join(op.namespaces) or "all")


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    ctx: OperatorContext | None = memo.get("ctx")
    runner = memo.get("http_runner")
    if runner is not None:
        await runner.cleanup()
    for session in memo.get("kopf_sessions", ()):
        await session.close()
    events_watch = memo.get("failed_create_watch")
    if events_watch is not None:
        events_watch.stop()
    if ctx is None:
        return
    for handle in ctx.rechecks.values():
        handle.cancel()
    for task in list(ctx.background):
        task.cancel()
    await asyncio.gather(*ctx.background, return_exceptions=True)
    ctx.job_executor.shutdown(wait=False, cancel_futures=True)
    await ctx.redis.close()
    await asyncio.to_thread(traces.stop)
