"""The watchdog's loop inside the operator process, scanning the operator's own Kopf indexes.

Why inside the operator: the watch caches it needs (AgentTasks, turn Jobs, their pods) are already there: it scans
the operator's indexes (``unicore_operator.indexes``: the JobView and PodView values as they are, AgentTaskViews derived
from the compact AgentTasks, see ``AgentTaskViews``) and registers none of its own; it shares the operator's per-task
locks with the reconciler, and it shares the failure accounting, so a reap and a failed turn are counted by one
counter. The composition root (``unicore_operator.composition``) adds ``start_watchdog`` to the start-up hooks: it
starts the loop with the operator's context, whose ``agenttasks``/``turnjobs``/``turnpods`` are those indexes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any

from unicore.api import contract

from unicore_operator.indexes import first
from unicore_operator.metrics import observe_watchdog_scan
from unicore_operator.settings import OperatorSettings
from unicore_operator.watchdog.log import logger
from unicore_operator.watchdog.reaper import Reaper
from unicore_operator.watchdog.redis_state import read_states
from unicore_operator.watchdog.scan import ReapAction, Thresholds, plan_redis_reads, scan
from unicore_operator.watchdog.snapshot import build_snapshot, with_redis
from unicore_operator.watchdog.views import AgentTaskView, agent_task_view


class AgentTaskViews:
    """The watchdog's ``AgentTaskView``s, derived from the operator's AgentTask index (compact bodies keyed by
    (namespace, name)). Kopf replaces an object's index value on every watch event, so a view is rebuilt only when
    its compact body is a new object: a scan parses the tasks that changed since the last scan, not every task."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], tuple[Any, AgentTaskView]] = {}

    def __call__(self, index: Mapping[tuple[str, str], Iterable[Any]]) -> dict[str, tuple[AgentTaskView]]:
        cache: dict[tuple[str, str], tuple[Any, AgentTaskView]] = {}
        out: dict[str, tuple[AgentTaskView]] = {}
        for key, store in index.items():
            body = first(store)
            if body is None:
                continue
            cached = self._cache.get(key)
            view = cached[1] if cached is not None and cached[0] is body else agent_task_view(body)
            cache[key] = (body, view)
            out[contract.task_id(*key)] = (view,)
        self._cache = cache
        return out


def thresholds_from(settings: OperatorSettings) -> Thresholds:
    grace = settings.watchdog_grace_seconds
    return Thresholds(
        heartbeat_timeout=settings.heartbeat_timeout_seconds, pending_timeout=settings.pending_timeout_seconds,
        max_reaps=settings.max_reaps, deadline_grace=grace, absence_grace=grace,
        admission_timeout=settings.admission_timeout_seconds,
    )


class Watchdog:
    """One scan = snapshot of the indexes + the Redis reads the caches call for + pure scan; then the reaper acts."""

    def __init__(self, ctx: Any, thresholds: Thresholds) -> None:
        self.ctx = ctx  # its agenttasks / turnjobs / turnpods are the operator's indexes (``indexes.py``)
        self.agent_task_views = AgentTaskViews()
        self.thresholds = thresholds
        self.reaper = Reaper(ctx, max_reaps=thresholds.max_reaps)

    async def scan_once(self) -> list[ReapAction]:
        started = time.perf_counter()
        now = time.time()
        snapshot = build_snapshot(self.agent_task_views(self.ctx.agenttasks or {}), self.ctx.turnjobs or {},
                                  self.ctx.turnpods or {}, {})
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
        admission = self.thresholds.admission_timeout
        logger.info("watchdog running every %.0fs (heartbeat %.0fs, pending %.0fs, admission %s, max reaps %d)",
                    interval, self.thresholds.heartbeat_timeout, self.thresholds.pending_timeout,
                    f"{admission:.0f}s" if admission else "no limit", self.thresholds.max_reaps)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.run_once()
            except Exception:
                logger.exception("watchdog scan failed; retrying in %.0fs", interval)


async def start_watchdog(ctx: Any) -> None:
    """Startup hook: start the watchdog loop as one of the operator's background tasks."""

    ctx.watchdog = Watchdog(ctx, thresholds_from(ctx.settings))
    ctx.background.append(asyncio.get_running_loop().create_task(ctx.watchdog.run_forever(), name="unicore-watchdog"))

