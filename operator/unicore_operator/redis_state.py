"""The operator's Redis clients and its calls into ``unicore.store`` (the owner of the Redis layout).

``RedisState`` holds the operator's two clients (``aio``: redis.asyncio, ``sync``: decoded responses, used from
worker threads) and delegates every read and write to ``unicore.store.operator_state``: one pipelined snapshot of a
task per reconcile, the accounting of ended turn Jobs in the operator's per-task records, the scan/expiry/deletion of
a deleted task's keys.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis
import redis.asyncio as aioredis
from unicore.store import operator_state
from unicore.store.client import build_async_client, build_client
from unicore.store.operator_state import OperatorRecords, TaskSnapshot

__all__ = ["RedisState", "TaskSnapshot"]


class RedisState:
    """Async reads of task state, accounting of turn Jobs, and helpers around the runtime's TaskStore."""

    def __init__(self, url: str) -> None:
        self.url = url
        # The runtime's builder: the same retries through connection blips, timeouts and health checks.
        self.aio: aioredis.Redis = build_async_client(url)
        self.sync: redis.Redis = build_client(url, decode_responses=True)
        self.records = OperatorRecords(self.sync)

    async def close(self) -> None:
        await self.aio.aclose()  # type: ignore[attr-defined]  # redis>=5.0.1 has aclose(); types-redis 4.6 lacks it
        self.sync.close()

    async def snapshot(self, task_id: str, ended_jobs: Sequence[str] = ()) -> TaskSnapshot:
        """The task's state in one round trip (``operator_state.read_snapshot``)."""
        return await operator_state.read_snapshot(self.aio, task_id, ended_jobs)

    def account_job_end(self, task_id: str, job_name: str, turn: int, outcome: str, reason: str = "",
                        retry_delay: float = 0.0, source: str = "job") -> int:
        """Record that turn attempt ``job_name`` ended, once (``OperatorRecords.account_job_end``)."""
        return self.records.account_job_end(task_id, job_name, turn, outcome, reason, retry_delay, source)

    def break_lease(self, task_id: str, pod_name: str) -> bool:
        """Delete the task's lease if its holder is a process of pod ``pod_name`` (which has terminated)."""
        return self.records.break_lease(task_id, pod_name)

    def reset_failures(self, task_id: str) -> None:
        self.records.reset_failures(task_id)

    def set_failures(self, task_id: str, failed: int, last_failure: str) -> None:
        self.records.set_failures(task_id, failed, last_failure)

    def task_keys(self, task_id: str) -> list[str]:
        """Every key of the task (one slot's worth of SCAN)."""
        return self.records.task_keys(task_id)

    async def expire_task_keys(self, task_id: str, keys: Sequence[str], seconds: int) -> None:
        await operator_state.expire_task_keys(self.aio, task_id, keys, seconds)

    async def delete_keys(self, keys: Sequence[str]) -> None:
        await operator_state.delete_keys(self.aio, keys)
