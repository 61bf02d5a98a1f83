"""Reconcile requests of the watch handlers: one pending request per task, run by a fixed number of workers.

A watch event (an AgentTask's child changed, a turn Job or pod changed, a FailedCreate Event, a delayed re-check)
asks for its task to be reconciled and returns. Kopf then lets go of the event's body at once, as it does for an
operator whose handlers do nothing; the reconcile reads the task, its Jobs and pods from the indexes when a worker
takes it, so it sees the newest state whatever event asked for it. Requests for a task that is already waiting
are one reconcile (the first request's reason names it); a request that arrives while the task is being reconciled
waits for the next round, so no change goes unseen.

Without the queue every event awaited its reconcile inside Kopf's handler, and a burst (an operator starting with
thousands of Jobs and pods in its watches) held thousands of bodies and coroutines at once: the operator's memory
stayed at that peak after the burst (the allocator keeps the arenas it filled). The workers bound that to their
number, and when a burst of at least ``BURST`` reconciles is over (no request waiting or running), ``after_burst``
runs: the operator gives the memory the burst freed back to the system (``memory.release_free_memory``). The paths
that need a reconcile's answer or ordering keep calling ``reconcile_task`` directly: the create
and suspend handlers, the activation stream (it acknowledges after the reconcile) and the periodic resync.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from unicore_operator.indexes import TaskKey
from unicore_operator.log import logger

Reconcile = Callable[[TaskKey, str], Awaitable[Any]]
BURST = 100  # reconciles since the queue was last idle that make a burst


class ReconcileQueue:
    """Tasks waiting for a reconcile, each once, in the order first asked for."""

    def __init__(self) -> None:
        self.pending: dict[TaskKey, str] = {}  # task -> the reason of its first waiting request
        self._keys: asyncio.Queue[TaskKey] = asyncio.Queue()
        self._running = 0
        self._done_since_idle = 0
        self._after_burst: Callable[[], object] | None = None

    def request(self, key: TaskKey, reason: str) -> None:
        """Ask for ``key`` to be reconciled (no-op while it already waits)."""
        if key in self.pending:
            return
        self.pending[key] = reason
        self._keys.put_nowait(key)

    def start(self, reconcile: Reconcile, workers: int,
              after_burst: Callable[[], object] | None = None) -> list[asyncio.Task[None]]:
        """Start ``workers`` workers calling ``reconcile(key, reason)``, and ``after_burst()`` when the queue goes
        idle after at least ``BURST`` reconciles; the caller cancels the workers at shutdown."""
        self._after_burst = after_burst
        loop = asyncio.get_running_loop()
        return [loop.create_task(self._work(reconcile), name=f"unicore-reconcile-{i}") for i in range(workers)]

    async def join(self) -> None:
        """Until every request made so far has been reconciled."""
        await self._keys.join()

    async def _work(self, reconcile: Reconcile) -> None:
        while True:
            key = await self._keys.get()
            self._running += 1
            try:
                await reconcile(key, self.pending.pop(key))
            except asyncio.CancelledError:
                raise
            except Exception:  # reconcile_task logs its own failures; the worker must outlive any other
                logger.exception("reconcile worker: reconciling %s/%s failed", *key)
            finally:
                self._running -= 1
                self._done_since_idle += 1
                self._keys.task_done()
            if self._running == 0 and self._keys.empty() and self._done_since_idle >= BURST:
                self._done_since_idle = 0
                if self._after_burst is not None:
                    self._after_burst()
