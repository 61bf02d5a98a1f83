"""The operator's asyncio Redis client holds at most ``max_connections`` connections, whatever the burst.

redis.asyncio's own pool opened one connection per concurrent command: an operator starting with 4,000 new
AgentTasks ran 4,000 snapshots at once, held 4,000 connections and grew to 2 GB. Against a real redis-server: a
burst of concurrent commands, each held on the server for a moment (``BLPOP`` with a short timeout), all answered,
and the server never saw more clients than the bound (plus the one that counts).
"""

from __future__ import annotations

import asyncio

import redis
from unicore.store.client import ASYNC_MAX_CONNECTIONS, build_async_client

BURST = 200  # concurrent commands, several times the bound


def test_a_burst_of_commands_shares_a_bounded_pool(redis_url: str) -> None:
    assert ASYNC_MAX_CONNECTIONS < BURST
    observer = redis.Redis.from_url(redis_url)
    baseline = int(observer.info("clients")["connected_clients"])
    peak = 0

    async def burst() -> list[object]:
        nonlocal peak
        client = build_async_client(redis_url)  # the operator's: the default bound
        try:
            async def watch() -> None:
                nonlocal peak
                while True:
                    peak = max(peak, int(observer.info("clients")["connected_clients"]) - baseline)
                    await asyncio.sleep(0.01)

            watcher = asyncio.create_task(watch())
            # each command holds its connection on the server for 50 ms (BLPOP on an empty list)
            answers = await asyncio.gather(*(client.blpop([f"empty:{i}"], timeout=0.05) for i in range(BURST)))
            watcher.cancel()
            return list(answers)
        finally:
            await client.aclose()  # type: ignore[attr-defined]  # types-redis 4.6 lacks aclose()

    answers = asyncio.run(burst())
    observer.close()
    assert answers == [None] * BURST
    assert 1 <= peak <= ASYNC_MAX_CONNECTIONS
