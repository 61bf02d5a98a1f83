"""The task's lease, held by one turn: acquired before the turn writes anything, renewed by a heartbeat thread
while the turn makes progress, released when it ends. Every write of the turn is fenced by it, so once a newer turn
owns the task (the lease expired and was taken), this one stops at its next safe point without another write."""

from __future__ import annotations

import threading
from collections.abc import Callable

import redis

from unicore.errors import LeaseLost
from unicore.log import get_logger
from unicore.store.records import Lease
from unicore.store.tasks import TaskStore
from unicore.turn.signals import Heartbeat

log = get_logger("turn")


class TurnLease:
    """The lease of ``task_id`` for this turn (``holder`` names the holder, ``ttl_ms`` its time to live). A failed
    heartbeat sets ``cancel``; a lost lease also sets ``lost``."""

    def __init__(self, store: TaskStore, task_id: str, *, holder: str | None, ttl_ms: int,
                 cancel: threading.Event) -> None:
        self.store = store
        self.task_id = task_id
        self.holder = holder
        self.ttl_ms = ttl_ms
        self.cancel = cancel
        self.lost = threading.Event()
        self.current: Lease | None = None  # None before it is acquired, and once it is not ours any more
        self._heartbeat: Heartbeat | None = None

    @property
    def held(self) -> Lease:
        """The lease, which the turn holds (it is a bug to ask before acquiring it)."""
        assert self.current is not None
        return self.current

    def acquire(self) -> Lease:
        """Take the lease (LeaseBusy: another live turn holds it)."""
        self.current = self.store.acquire_lease(self.task_id, holder=self.holder, ttl_ms=self.ttl_ms)
        return self.current

    def start_heartbeat(self, healthy: Callable[[], bool]) -> None:
        """Renew the lease every third of its time to live, while ``healthy`` (the turn makes progress)."""
        self._heartbeat = Heartbeat(self._renew, self.ttl_ms / 3000, self._on_heartbeat_failure, healthy=healthy)
        self._heartbeat.start()

    def stop_heartbeat(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()

    def _renew(self) -> None:
        self.store.renew_lease(self.current, ttl_ms=self.ttl_ms)  # type: ignore[arg-type]

    def _on_heartbeat_failure(self, exc: BaseException) -> None:
        log.error("task %s: heartbeat failed (%s); stopping at the next safe point", self.task_id, exc)
        if isinstance(exc, LeaseLost):
            self.lost.set()
        self.cancel.set()

    def confirm_after_stall(self) -> None:
        """A step that overran the stall limit returned: renew the lease (LeaseLost if the watchdog reaped the turn
        meanwhile and a newer turn owns the task)."""
        if self.current is not None:
            log.warning("task %s: a stalled step returned; checking the lease", self.task_id)
            self.store.renew_lease(self.current, ttl_ms=self.ttl_ms)

    def give_up(self) -> None:
        """The lease is not ours any more: never write with it, never release it."""
        self.current = None

    def release(self) -> bool:
        """Release the lease if the turn still holds it; True when it did (or tried: a Redis error is logged, and
        the lease then expires on its own)."""
        if self.current is None:
            return False
        try:
            self.store.release_lease(self.current)
        except redis.RedisError as exc:
            log.error("task %s: could not release the lease: %s", self.task_id, exc)
        return True
