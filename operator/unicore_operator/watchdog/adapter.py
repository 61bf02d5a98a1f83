"""Kopf wiring of the watchdog: three indexes of small views, and a background loop inside the operator process.

Why inside the operator: the watch caches it needs (AgentTasks, turn Jobs, their pods) are already there (one watch
per kind, shared by every index), it shares the operator's per-task locks with the reconciler, and it shares the
failure accounting, so a reap and a failed turn are counted by one counter. The composition root
(``unicore_operator.composition``) imports this module (which registers the indexes and a startup handler that
captures them) and adds ``start_watchdog`` to the start-up hooks: it starts the loop with the operator's context.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import kopf
from unicore import contract

from unicore_operator.metrics import observe_watchdog_scan
from unicore_operator.settings import OperatorSettings
from unicore_operator.watchdog.log import logger
from unicore_operator.watchdog.reaper import Reaper
from unicore_operator.watchdog.redis_state import read_states
from unicore_operator.watchdog.scan import ReapAction, Thresholds, plan_redis_reads, scan
from unicore_operator.watchdog.snapshot import build_snapshot, with_redis
from unicore_operator.watchdog.views import job_view, pod_view, task_view

MANAGED = {contract.MANAGED_BY_LABEL: contract.MANAGED_BY}

_indexes: dict[str, Any] = {}


@kopf.index(contract.GROUP, contract.VERSION, contract.PLURAL)
def watchdog_task_index(*, body: kopf.Body, namespace: str | None, name: str, **_: Any) -> dict[str, Any]:
    return {contract.task_id(namespace or "", name): task_view(body)}


@kopf.index("batch", "v1", "jobs", labels=MANAGED)
def watchdog_job_index(*, body: kopf.Body, namespace: str | None, name: str, **_: Any) -> dict[str, Any]:
    return {f"{namespace}/{name}": job_view(body)}


@kopf.index("", "v1", "pods", labels=MANAGED)
def watchdog_pod_index(*, body: kopf.Body, namespace: str | None, name: str, **_: Any) -> dict[str, Any]:
    return {f"{namespace}/{name}": pod_view(body)}


# kopf passes each index as a keyword argument named after its function; its ActivityFn protocol can only take them
# through **kwargs (and is not public, so there is nothing to cast to).
@kopf.on.startup()  # type: ignore[arg-type]
async def capture_watchdog_indexes(watchdog_task_index: kopf.Index, watchdog_job_index: kopf.Index,
                                   watchdog_pod_index: kopf.Index, **_: Any) -> None:
    _indexes.update(tasks=watchdog_task_index, jobs=watchdog_job_index, pods=watchdog_pod_index)


def thresholds_from(settings: OperatorSettings) -> Thresholds:
    grace = settings.watchdog_grace_seconds
    return Thresholds(
        heartbeat_timeout=settings.heartbeat_timeout_seconds, pending_timeout=settings.pending_timeout_seconds,
        max_reaps=settings.max_reaps, deadline_grace=grace, absence_grace=grace,
    )


class Watchdog:
    """One scan = snapshot of the indexes + the Redis reads the caches call for + pure scan; then the reaper acts."""

    def __init__(self, ctx: Any, indexes: dict[str, Any], thresholds: Thresholds) -> None:
        self.ctx = ctx
        self.indexes = indexes
        self.thresholds = thresholds
        self.reaper = Reaper(ctx, max_reaps=thresholds.max_reaps)

    async def scan_once(self) -> list[ReapAction]:
        started = time.perf_counter()
        now = time.time()
        snapshot = build_snapshot(self.indexes["tasks"], self.indexes["jobs"], self.indexes["pods"], {})
        plan = plan_redis_reads(snapshot, now, self.thresholds)
        read = await asyncio.to_thread(read_states, self.ctx.redis.sync, plan, now, self.thresholds)
        if read.forgotten:
            logger.info("dropped %d stale heartbeat entries of tasks that no longer run", read.forgotten)
        actions = scan(with_redis(snapshot, read.states, read.beating), now, self.thresholds)
        observe_watchdog_scan(time.perf_counter() - started)
        return actions

    async def run_once(self) -> int:
        reaped = 0
        for action in await self.scan_once():
            try:
                reaped += await self.reaper.reap(action)
            except Exception:
                logger.exception("reaping %s (%s) failed; the next scan retries", action.task_id, action.reason.value)
        self.reaper.forget_older_than(max(60.0, 4 * self.ctx.settings.watchdog_interval_seconds))
        return reaped

    async def run_forever(self) -> None:
        interval = self.ctx.settings.watchdog_interval_seconds
        await self.ctx.ready.wait()
        logger.info("watchdog running every %.0fs (heartbeat %.0fs, pending %.0fs, max reaps %d)", interval,
                    self.thresholds.heartbeat_timeout, self.thresholds.pending_timeout, self.thresholds.max_reaps)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.run_once()
            except Exception:
                logger.exception("watchdog scan failed; retrying in %.0fs", interval)


async def _wait_for_indexes() -> dict[str, Any]:
    while len(_indexes) < 3:
        await asyncio.sleep(0.1)  # the capture handler runs among the other startup handlers
    return _indexes


async def start_watchdog(ctx: Any) -> None:
    """Startup hook: start the watchdog loop as one of the operator's background tasks."""

    async def run() -> None:
        indexes = await _wait_for_indexes()
        ctx.watchdog = Watchdog(ctx, indexes, thresholds_from(ctx.settings))
        await ctx.watchdog.run_forever()

    ctx.background.append(asyncio.get_running_loop().create_task(run(), name="unicore-watchdog"))

