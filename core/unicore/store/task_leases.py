"""A task's lease in ``TaskStore``: the one turn process that may write the task's conversation holds it, with a
fencing token every turn write checks (``turn_writes``); it heartbeats by renewing, and the task sits in
``uc:heartbeats`` (what the watchdog reads) while it is held."""

from __future__ import annotations

import os
import socket

import redis
from redis.cluster import RedisCluster

from unicore.api import pod_env
from unicore.errors import LeaseBusy, LeaseLost, TaskNotFound
from unicore.store import changes, lua
from unicore.store.keys import HEARTBEATS_INDEX
from unicore.store.records import Lease
from unicore.store.task_store_base import TaskStoreBase, write_time

DEFAULT_LEASE_TTL_MS = 30_000


def _holder_id() -> str:
    """``<pod name>:<pid>``: the watchdog matches the part before ':' against turn pods (the Job sets
    UNICORE_POD_NAME from the downward API; outside Kubernetes the host name stands in)."""
    return f"{os.environ.get(pod_env.POD_NAME) or socket.gethostname()}:{os.getpid()}"


class TaskLeases(TaskStoreBase):
    """Taking, renewing, releasing and breaking a task's lease."""

    def acquire_lease(
        self, task_id: str, *, holder: str | None = None, ttl_ms: int = DEFAULT_LEASE_TTL_MS
    ) -> Lease:
        """Take the task's lease with a new fencing token; LeaseBusy if a live holder has it."""
        keys = self.keys(task_id)
        who = holder or _holder_id()
        now = write_time()
        token, current = self._acquire(
            keys=[keys.lease, keys.fence, keys.task, keys.heartbeat], args=[who, ttl_ms, now]
        )
        token = int(token)
        if token < 0:
            raise TaskNotFound(f"no task {task_id!r}")
        if token == 0:
            raise LeaseBusy(f"task {task_id} is already running a turn (lease held by {current})")
        # The first heartbeat: the global index the watchdog reads (only after the lease is ours, so a refused
        # acquire never freshens the entry of a turn that holds the lease and may be hung); the task runs now.
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(HEARTBEATS_INDEX, {task_id: float(now)})
        changes.execute_with_changes(pipe, [(task_id, "turn_started")])
        return Lease(task_id=task_id, token=token, holder=who)

    def renew_lease(self, lease: Lease, *, ttl_ms: int = DEFAULT_LEASE_TTL_MS) -> None:
        """Heartbeat: extend the lease, write ``uc:{T}:heartbeat`` and ``ZADD uc:heartbeats <now> <task id>``, in
        one pipeline (one round trip). LeaseLost if the lease is gone.

        The ZADD is a separate command, not part of the fenced script: ``uc:heartbeats`` is one global key, and on
        Redis Cluster a script may only touch keys of one slot (the task's hash tag). So a refused renew still
        freshens the entry; harmless, because the turn then stops (LeaseLost) and the watchdog reads the task's own
        keys before it acts, and drops entries whose task no longer runs once they are stale.
        """
        keys = self.keys(lease.task_id)
        now = write_time()
        pipe = self.redis.pipeline(transaction=False)
        if isinstance(self.redis, RedisCluster):  # a cluster pipeline runs no scripts: the script goes alone, first
            self._fenced(self._renew, [keys.lease, keys.heartbeat], [lease.token, ttl_ms, now])
        else:
            self._renew(keys=[keys.lease, keys.heartbeat], args=[lease.token, ttl_ms, now], client=pipe)
        pipe.zadd(HEARTBEATS_INDEX, {lease.task_id: float(now)})
        try:
            pipe.execute()
        except redis.ResponseError as exc:
            if lua.LEASE_LOST in str(exc):
                raise LeaseLost(f"lease of {keys.lease} lost: write refused") from None
            raise

    def release_lease(self, lease: Lease) -> bool:
        """Drop the lease and mark the task idle; False if the lease was no longer ours (nothing written).
        Once released, the task leaves ``uc:heartbeats`` (a failed release leaves the new holder's entry alone)."""
        keys = self.keys(lease.task_id)
        released = bool(self._release(keys=[keys.lease, keys.task], args=[lease.token, write_time()]))
        if released:
            self._left_running(lease.task_id)
        return released

    def _left_running(self, task_id: str) -> None:
        """A released or broken lease: the task leaves ``uc:heartbeats`` and its row is idle (``store.changes``)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(HEARTBEATS_INDEX, task_id)
        changes.execute_with_changes(pipe, [(task_id, "turn_ended")])

    def break_lease(self, task_id: str, holder: str, *, exact: bool = True) -> bool:
        """Delete the task's lease if ``holder`` (exact, or a prefix such as ``<pod name>:``) holds it: its process is
        known to be dead, so the next turn need not wait for the lease to expire (fencing keeps a zombie harmless)."""
        keys = self.keys(task_id)
        broken = bool(
            self.redis.eval(lua.BREAK_LEASE, 2, keys.lease, keys.task, holder, write_time(), "1" if exact else "0")
        )
        if broken:
            self._left_running(task_id)
        return broken

    def lease_holder(self, task_id: str) -> str | None:
        """The live holder, or None if no turn holds the lease."""
        return self.redis.hget(self.keys(task_id).lease, "holder")

    def heartbeat_at(self, task_id: str) -> float | None:
        raw = self.redis.get(self.keys(task_id).heartbeat)
        return float(raw) if raw else None


__all__ = ["DEFAULT_LEASE_TTL_MS", "TaskLeases"]
